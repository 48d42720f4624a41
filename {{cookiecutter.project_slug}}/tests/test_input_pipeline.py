"""The tf.data input pipeline: the order of an epoch is a pure function of (seed, epoch), a step's
examples do not depend on the number of replicas, a resume starts at the very next example, and
augmentation is deterministic. Small shards made here; one process (no TensorFlow restarts)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import PARAMS

from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.data.feed import Resident, make_feed
from {{ cookiecutter.module_name }}.data.pipeline import (
    Prepared,
    augmenter,
    epoch_windows,
    eval_dataset,
    load_prepared,
    train_dataset,
)
from {{ cookiecutter.module_name }}.data.prepare import write_processed
from {{ cookiecutter.module_name }}.sources import Source
from {{ cookiecutter.module_name }}.training.trainer import validation_batches

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

N = 2500  # three shards (about 870 / 870 / 760) at SHARD_BYTES below, over two shuffle windows


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    """N 4x4x1 images whose first pixel is the example's id (id % 250), in several shards."""
    import {{ cookiecutter.module_name }}.data.prepare as prepare

    folder = tmp_path_factory.mktemp("shards")
    ids = np.arange(N)
    pixels = np.zeros((N, 4, 4, 1), np.uint8)
    pixels[:, 0, 0, 0] = ids % 250
    pixels[:, 1, 1, 0] = ids // 250
    labels = (ids % 5).astype(np.int64)
    source = Source("image", "classification", labels, list("abcde"), pixels.__getitem__, str)
    source.input_shape = (4, 4, 1)
    idx = {"train": ids, "validation": ids[:10], "test": ids[:10]}
    original = prepare.SHARD_BYTES
    prepare.SHARD_BYTES = 110 * 1000  # about 870 tiny examples (126 bytes with framing) each
    try:
        write_processed(source, idx, folder, load_params(PARAMS))
    finally:
        prepare.SHARD_BYTES = original
    return load_prepared(folder)


def example_ids(batch: tf.Tensor) -> list[int]:
    x = batch.numpy()
    return (x[:, 0, 0, 0] + 250 * x[:, 1, 1, 0]).astype(int).tolist()


def steps(
    data: Prepared, replicas: int, start: int = 0, count: int = 20, augment=()
) -> list[list[int]]:
    """The example ids of each global step, replicas' batches put back together."""
    per_replica = 48 // replicas
    ctx = tf.distribute.InputContext(num_replicas_in_sync=replicas)
    ds = train_dataset(ctx, data, 48, seed=3, start_step=start, epochs=3, augment=list(augment))
    batches = [example_ids(x) for x, _ in ds.take(count * replicas)]
    assert all(len(b) == per_replica for b in batches)
    return [sum(batches[i : i + replicas], []) for i in range(0, len(batches), replicas)]


def test_shards_and_epoch_order_is_a_pure_function_of_seed_and_epoch(shards: Prepared) -> None:
    assert len(shards.shards("train")) == 3
    first = [r.numpy() for _, r in epoch_windows(shards.shards("train"), 3, 1).unbatch().take(5)]
    again = [r.numpy() for _, r in epoch_windows(shards.shards("train"), 3, 1).unbatch().take(5)]
    assert first == again
    positions = [int(p) for p, _ in epoch_windows(shards.shards("train"), 3, 1).unbatch()]
    assert positions == list(range(N))  # positions number the epoch

    def ids(seed: int, epoch: int) -> list[int]:
        schema = {"x": tf.io.FixedLenFeature([], tf.string)}
        ds = epoch_windows(shards.shards("train"), seed, epoch).unbatch()
        ds = ds.map(lambda p, r: tf.io.parse_single_example(r, schema)["x"])
        return [hash(v) for v in ds.as_numpy_iterator()]

    a, b, c = ids(3, 1), ids(3, 2), ids(4, 1)
    assert a == ids(3, 1) and len(set(a)) == N  # the same order, every example once
    assert a != b and a != c and sorted(a) == sorted(b) == sorted(c)


def test_a_steps_examples_do_not_depend_on_replicas_and_resume_is_exact(
    shards: Prepared,
) -> None:
    one = steps(shards, replicas=1, count=60)  # 52 steps per epoch: crosses an epoch
    two = steps(shards, replicas=2, count=60)
    assert one == two
    assert len(set(sum(one[:52], []))) == 52 * 48  # no example twice within an epoch
    assert steps(shards, replicas=1, start=37, count=23) == one[37:]  # mid-epoch resume
    assert steps(shards, replicas=2, start=52, count=8) == one[52:]  # from an epoch start


def test_every_validation_pass_is_the_whole_split_in_its_order(shards: Prepared) -> None:
    """One iterator serves the run's validation passes: each pass is the split, once, in order."""
    written = [example_ids(x) for x, _ in eval_dataset(shards, "validation", 4)]
    assert [len(b) for b in written] == [4, 4, 2] and sorted(sum(written, [])) == list(range(10))
    passes = validation_batches(shards, 4)
    for _ in range(3):
        assert [example_ids(x) for x, _ in passes] == written


def test_augmentation_is_deterministic_per_example_and_varies(shards: Prepared) -> None:
    image = tf.reshape(tf.range(64 * 48, dtype=tf.float32) % 255, [64, 48, 1])
    augment = augmenter(["flip", "rotation", "zoom", "contrast"])
    key = tf.constant([3, 7], tf.int64)
    out = augment(image, key)
    assert out.shape == image.shape
    assert np.array_equal(out.numpy(), augment(image, key).numpy())
    assert not np.array_equal(out.numpy(), augment(image, tf.constant([3, 8], tf.int64)).numpy())
    assert float(tf.reduce_min(out)) >= 0.0 and float(tf.reduce_max(out)) <= 255.0
    assert np.array_equal(augmenter([])(image, key).numpy(), image.numpy())  # [] = off
    # An augmentation's own arguments: a stronger rotation, vertical flips too.
    stronger = augmenter([{"rotation": {"factor": 0.4}}])(image, key)
    assert not np.array_equal(stronger.numpy(), augmenter(["rotation"])(image, key).numpy())
    flips = {augmenter([{"flip": {"vertical": True}}])(image, tf.constant([k, 1], tf.int64))
             .numpy()[0, 0, 0] for k in range(12)}  # fmt: skip
    assert len(flips) == 4  # each corner comes to the top left
    with pytest.raises(ConfigError) as refused:
        augmenter([{"rotation": {"angle": 30}}])
    assert str(refused.value) == (
        "data.augment.rotation.angle: augmentation 'rotation' has no argument 'angle' (its "
        'arguments: factor) (example: --set "data.augment=[{rotation: {factor: 0.1}}]")'
    )
    # In the pipeline: the same batches on every run, and a resumed run gets the same pixels.
    full = train_dataset(
        tf.distribute.InputContext(), shards, 48, 3, 0, 2, ["flip", "rotation", "contrast"]
    )
    resumed = train_dataset(
        tf.distribute.InputContext(), shards, 48, 3, 5, 2, ["flip", "rotation", "contrast"]
    )
    a = [x.numpy() for x, _ in full.take(7)]
    b = [x.numpy() for x, _ in resumed.take(2)]
    assert np.array_equal(a[5], b[0]) and np.array_equal(a[6], b[1])
    plain = [
        x.numpy()
        for x, _ in train_dataset(tf.distribute.InputContext(), shards, 48, 3, 0, 2, []).take(1)
    ]
    assert not np.array_equal(a[0], plain[0])


@pytest.fixture(scope="module")
def vectors(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    """N 3-feature vectors whose first feature is the example's id: small enough for memory."""
    folder = tmp_path_factory.mktemp("vectors")
    ids = np.arange(N)
    x = np.stack([ids, ids % 7, ids % 3], axis=1).astype(np.float32)
    labels = (ids % 5).astype(np.int32)
    source = Source(
        "vector", "classification", labels, list("abcde"), x.__getitem__, str, input_shape=(3,)
    )
    idx = {"train": ids, "validation": ids[:10], "test": ids[:10]}
    write_processed(source, idx, folder, load_params(PARAMS))
    return load_prepared(folder)


def vector_steps(
    vectors: Prepared, replicas: int, start: int = 0, count: int = 60, seed: int = 3
) -> list[list[int]]:
    """The example ids of each global step of `train_dataset` (replicas' batches joined)."""
    ctx = tf.distribute.InputContext(num_replicas_in_sync=replicas)
    ds = train_dataset(ctx, vectors, 48, seed, start_step=start, epochs=3, augment=[])
    batches = [x[:, 0].numpy().astype(int).tolist() for x, _ in ds.take(count * replicas)]
    assert all(len(b) == 48 // replicas for b in batches)
    return [sum(batches[i : i + replicas], []) for i in range(0, len(batches), replicas)]


def test_small_tabular_data_is_held_in_memory_with_the_same_guarantees(vectors: Prepared) -> None:
    assert vectors.in_memory_bytes() == 4 * 3 * N
    assert vectors.in_memory_bytes(copies=2) == 2 * 4 * 3 * N  # one copy per replica

    one = vector_steps(vectors, replicas=1)  # 52 steps per epoch: crosses an epoch
    assert vector_steps(vectors, replicas=2) == one == vector_steps(vectors, replicas=1)
    assert len(set(sum(one[:52], []))) == 52 * 48  # no example twice within an epoch
    assert one[:8] != one[52:60] and one != vector_steps(vectors, 1, seed=4)  # per epoch
    assert vector_steps(vectors, replicas=1, start=37, count=23) == one[37:]  # mid-epoch resume
    assert vector_steps(vectors, replicas=2, start=52, count=8) == one[52:]  # from an epoch start
    # Targets travel with their inputs.
    for x, y in train_dataset(tf.distribute.InputContext(), vectors, 48, 3, 0, 1, []).take(2):
        assert np.array_equal(y.numpy(), x[:, 0].numpy().astype(int) % 5)


def test_an_unknown_augmentation_is_a_one_line_error_listing_the_registered_ones() -> None:
    with pytest.raises(ConfigError) as info:
        augmenter(["flip", "flap"])
    assert str(info.value) == (
        "data.augment: 'flap' is not registered (registered: contrast, flip, rotation, zoom; "
        "example: --set data.augment=[contrast])"
    )


def test_resident_feed_gives_each_replica_its_slice_on_its_own_device(vectors: Prepared) -> None:
    """The small-data feed (no per-step iterator) under 1 and 2 logical-CPU replicas: the same
    examples per step as `train_dataset`, each replica's batch gathered on its own device from
    its own copy, and a chunk that starts mid-epoch continues exactly."""
    reference = vector_steps(vectors, replicas=1)
    mirrored = tf.distribute.MirroredStrategy(["/CPU:0", "/CPU:1"])
    for strategy in (tf.distribute.get_strategy(), mirrored):
        feed = make_feed(strategy, vectors, 48, 3, start_step=0, epochs=3, augment=[])
        assert isinstance(feed, Resident)

        @tf.function
        def chunk(args, n, feed=feed, strategy=strategy):
            # Each step's per-replica (x, y), stacked: what the chunk function's steps train on.
            xs = tf.TensorArray(tf.float32, size=n)
            ys = tf.TensorArray(tf.int32, size=n)
            for i in tf.range(n):
                x, y = strategy.run(lambda x, y: (x, y), args=feed.next_batch(args, i))
                local_x = strategy.experimental_local_results(x)
                local_y = strategy.experimental_local_results(y)
                xs = xs.write(i, tf.concat([v[:, 0] for v in local_x], 0))
                ys = ys.write(i, tf.concat(local_y, 0))
            return xs.stack(), ys.stack()

        got: list[list[int]] = []
        for start, n in ((0, 20), (20, 17), (37, 15), (52, 8)):  # no chunk crosses an epoch end
            x, y = chunk(feed.args(start), tf.constant(n))
            ids = x.numpy().astype(int)
            assert np.array_equal(y.numpy(), ids % 5)  # targets travel with their inputs
            got += ids.tolist()
        assert got == reference, strategy
        resumed = make_feed(strategy, vectors, 48, 3, start_step=41, epochs=3, augment=[])
        x, _ = chunk(resumed.args(41), tf.constant(11))
        assert x.numpy().astype(int).tolist() == reference[41:52]  # a resumed run's chunk
    args = feed.args(0)
    assert [v.device for v in args.x.values] == list(mirrored.extended.worker_devices)
    batch = mirrored.run(lambda x, y: x, args=feed.next_batch(args, 0))
    assert [v.device for v in batch.values] == list(mirrored.extended.worker_devices)
