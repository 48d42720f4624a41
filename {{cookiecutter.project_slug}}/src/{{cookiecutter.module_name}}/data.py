"""The data: load it, split it, and feed it to the replicas in a reproducible order.

Exact resume without saving a `tf.data` iterator: the order of an epoch is a pure function of
(seed, epoch) (a stateless shuffle), so a run that restarts at step s of an epoch rebuilds the
same order and starts at batch s. Nothing is repeated or skipped, and no shuffle buffer has to
go into the checkpoint.
The arrays are held in memory as tensors (the cache), and each batch is one `tf.gather`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Split:
    """Features and integer labels, train and validation."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    num_classes: int

    @property
    def input_dim(self) -> int:
        return int(np.prod(self.x_train.shape[1:]))


def load_digits_split(seed: int, validation_fraction: float) -> Split:
    """scikit-learn's bundled 8x8 digits (no download), scaled to [0, 1], split with `seed`."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    x_train, x_val, y_train, y_val = train_test_split(
        x, y, test_size=validation_fraction, random_state=seed, stratify=y
    )
    return Split(x_train, y_train, x_val, y_val, num_classes=10)


def load_processed(project_dir, name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features, labels and class names of one split written by `prepare`
    (`data/processed/<name>.npz`, name = train / validation / test)."""
    from pathlib import Path

    with np.load(Path(project_dir) / "data" / "processed" / f"{name}.npz") as f:
        return f["x"], f["y"], [str(c) for c in f["classes"]]


def load_processed_split(project_dir) -> Split:
    """The train and validation splits that `prepare` wrote (what `train` reads)."""
    x_train, y_train, classes = load_processed(project_dir, "train")
    x_val, y_val, _ = load_processed(project_dir, "validation")
    return Split(x_train, y_train, x_val, y_val, num_classes=len(classes))


def synthetic_split(num_examples: int, input_dim: int, num_classes: int, seed: int) -> Split:
    """Random features and labels of a given size (for `bench`)."""
    rng = np.random.default_rng(seed)
    x = rng.random((num_examples, input_dim), dtype=np.float32)
    y = rng.integers(0, num_classes, num_examples).astype(np.int32)
    n_val = max(num_examples // 20, 1)
    return Split(x[n_val:], y[n_val:], x[:n_val], y[:n_val], num_classes)


def steps_per_epoch(num_examples: int, global_batch: int) -> int:
    """Full global batches per epoch; the remainder is dropped (every step has the same shape,
    which XLA and TPUs need, and the dropped examples change every epoch)."""
    return num_examples // global_batch


def epoch_order(num_examples: int, seed: int, epoch):
    """The shuffled example order of `epoch`: a stateless function of (seed, epoch), the same
    in every process (a TensorFlow op, so it also runs inside the input pipeline)."""
    import tensorflow as tf

    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.experimental.stateless_shuffle(tf.range(num_examples), seed=key)


def distributed_batches(
    strategy,
    x,
    y,
    global_batch: int,
    seed: int,
    start_step: int,
    epochs: int,
    steps_per_chunk: int,
):
    """A distributed dataset of every remaining step of the run, from global step `start_step`.

    The rows of step k of an epoch are `order[k*gb:(k+1)*gb]`, cut into equal consecutive parts,
    one per replica (worker by worker): the examples of a step depend only on the seed, the epoch
    and the global batch size, not on the number of workers or replicas.

    Each element gives a replica `steps_per_chunk` batches at once, shaped
    `[steps, batch_per_replica, ...]`; chunks are counted from the start of each epoch (the last
    one is shorter) or from `start_step` when resuming. The training function takes one element
    per call instead of one per step: for a small model that is most of the input cost. `x` and
    `y` are tensors on the host CPU. Each worker builds its own pipeline
    (`distribute_datasets_from_function`), so no auto-sharding rewrites the graph, and one
    dataset serves the whole run (creating a distributed iterator costs about half a second).
    """
    import tensorflow as tf

    num_examples = int(x.shape[0])
    per_epoch = steps_per_epoch(num_examples, global_batch)
    first_epoch, first_step = divmod(start_step, per_epoch)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = ctx.get_per_replica_batch_size(global_batch)
        local = ctx.num_replicas_in_sync // ctx.num_input_pipelines
        shape = [per_epoch, ctx.num_input_pipelines, local, per_replica]

        def epoch_chunks(epoch: tf.Tensor) -> tf.data.Dataset:
            order = epoch_order(num_examples, seed, epoch)[: per_epoch * global_batch]
            rows = tf.reshape(order, shape)[:, ctx.input_pipeline_id]  # [steps, local, batch]
            skip = tf.where(epoch == first_epoch, first_step, 0)
            return tf.data.Dataset.from_tensor_slices(rows[skip:]).batch(steps_per_chunk)

        ds = tf.data.Dataset.range(first_epoch, epochs).flat_map(epoch_chunks)
        # [steps, local replicas, batch] -> one [steps, batch] element per local replica, in
        # replica order: that is how a distributed dataset hands elements to a worker's replicas.
        ds = ds.map(lambda r: tf.transpose(r, [1, 0, 2])).unbatch()
        ds = ds.map(lambda i: (tf.gather(x, i), tf.gather(y, i)))
        return ds.prefetch(tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(dataset_fn)
