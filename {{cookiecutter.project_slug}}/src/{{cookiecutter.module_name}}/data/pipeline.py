"""The tf.data input pipeline: shard order -> read -> shuffle -> decode -> augment -> batch.

Exact resume: the order of an epoch is a pure function of (seed, epoch), made of stateless
shuffles (no buffer state for a checkpoint to hold), cut into GLOBAL batches, and a resumed run
`skip`s its done steps while they are still serialized. Every worker builds the same global order
and keeps its slice of each batch, so a step's examples do not depend on the number of workers or
replicas. More in docs/data.md ("The input pipeline").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from ..config import ModelConfig
from ..registry import bound, entry
from ..spec import DataSpec, load_spec
from ..tasks.base import for_spec
from .images import decode_stored
from .text import make_vectorizer, token_ids

X, Y, ID = "x", "y", "id"  # the input, the target, where the example came from
SHUFFLE_WINDOW = 1024  # records shuffled together (serialized: about 1024 x the record size)
CYCLE_LENGTH = 4  # shards read at once
IN_MEMORY_BYTES = 512 * 2**20  # vector training splits up to this size (all copies) in memory


@dataclass(frozen=True)
class Prepared:
    """The processed data: its spec and the folder of its shards."""

    spec: DataSpec
    folder: Path
    vectorize: Any = None  # text: strings -> token ids (`for_model`); None: the strings as they are

    def shards(self, split: str) -> list[str]:
        """The shard files of `split`, in their written order."""
        return [str(self.folder / name) for name in self.spec.extra["shards"][split]]

    def count(self, split: str) -> int:
        return int(self.spec.counts[split])

    def split_bytes(self, split: str) -> int:
        """The decoded (float32) inputs of `split`."""
        return 4 * self.count(split) * int(np.prod(self.spec.input_shape))

    def in_memory_bytes(self, copies: int = 1) -> int:
        """`copies` of the training split when they fit in `IN_MEMORY_BYTES` (vectors), else 0."""
        if self.spec.kind != "vector":
            return 0
        size = copies * self.split_bytes("train")
        return size if size <= IN_MEMORY_BYTES else 0


def load_prepared(processed_dir: Path) -> Prepared:
    """The spec and shards that `prepare` wrote into `processed_dir`."""
    return Prepared(load_spec(processed_dir), Path(processed_dir))


def for_model(data: Prepared, cfg: ModelConfig) -> Prepared:
    """`data` as the model `cfg` takes it: text with its vectoriser, so batches hold token ids."""
    if data.spec.kind != "text":
        return data
    return replace(data, vectorize=make_vectorizer(data.spec, data.folder, cfg))


def serialize(x: bytes | np.ndarray, y: int | float | np.ndarray, example_id: str = "") -> bytes:
    """One example as `tf.train.Example` bytes (a class as int64, other targets as floats)."""
    if isinstance(x, bytes):
        feature_x = tf.train.Feature(bytes_list=tf.train.BytesList(value=[x]))
    else:
        feature_x = tf.train.Feature(float_list=tf.train.FloatList(value=x.tolist()))
    if isinstance(y, int | np.integer):
        feature_y = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)]))
    else:
        values = np.asarray(y, dtype=np.float32).reshape(-1).tolist()
        feature_y = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    feature_id = tf.train.Feature(bytes_list=tf.train.BytesList(value=[example_id.encode()]))
    feature = {X: feature_x, Y: feature_y, ID: feature_id}
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString()


def augmenter(entries: list[Any]) -> Any:
    """The augmentations of `data.augment` as one function `(image, key) -> image`."""
    steps = [
        bound("augmentation", name, args, f"data.augment.{name}")
        for name, args in map(entry, entries)
    ]

    def augment(image: Any, key: Any) -> Any:
        for i, step in enumerate(steps):
            image = step(image, tf.random.experimental.stateless_fold_in(key, i))
        return image

    return augment


def decoder(spec: DataSpec, vectorize: Any = None):
    """Serialized records -> (inputs, targets): images a record at a time, else a batch."""
    task = for_spec(spec)
    y_dtype = tf.int64 if task.target_dtype == "int64" else tf.float32
    x_feature = (
        tf.io.FixedLenFeature(list(spec.input_shape), tf.float32)
        if spec.kind == "vector"
        else tf.io.FixedLenFeature([], tf.string)
    )
    schema = {X: x_feature, Y: tf.io.FixedLenFeature(list(task.target_shape()), y_dtype)}
    parse = tf.io.parse_single_example if spec.kind == "image" else tf.io.parse_example

    def decode(records: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        ex = parse(records, schema)
        x, y = ex[X], ex[Y]
        if spec.kind == "image":
            x = decode_stored(x, list(spec.input_shape))
        elif vectorize is not None:
            x = token_ids(vectorize(x))
        return x, tf.cast(y, tf.int32) if y.dtype == tf.int64 else y

    return decode


def epoch_windows(shards: list[str], seed: int, epoch: Any) -> Any:
    """(positions in the epoch, records) in shuffled windows: a pure function of (seed, epoch).
    Windows all the way: tf.data's cost per element is paid per window, not per record."""
    epoch = tf.cast(epoch, tf.int64)
    key = tf.stack([tf.constant(seed, tf.int64), epoch])
    order = tf.random.experimental.stateless_shuffle(tf.range(len(shards)), seed=key)
    files = tf.data.Dataset.from_tensor_slices(tf.gather(tf.constant(shards), order))
    # A sequential interleave: deterministic by construction, and on local disk (where the
    # shards live) faster than the parallel one, whose cost per record was measured at 10x.
    # TFRecordDataset's default read buffer: a 4 MB one cost 240 MB more peak RSS in `train`.
    records = files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(CYCLE_LENGTH, len(shards)),
        block_length=1,
    )

    def shuffle_window(i: tf.Tensor, window: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        wkey = tf.random.experimental.stateless_fold_in(key, i)
        positions = i * SHUFFLE_WINDOW + tf.range(tf.size(window, out_type=tf.int64))
        return positions, tf.random.experimental.stateless_shuffle(window, seed=wkey)

    return records.batch(SHUFFLE_WINDOW).enumerate().map(shuffle_window)


def train_dataset(
    ctx: Any,
    data: Prepared,
    global_batch: int,
    seed: int,
    start_step: int,
    epochs: int,
    augment: list[Any],
) -> Any:
    """This worker's batches of every training step from `start_step` on, one replica's each:
    the same global batches on every worker, each keeping its slice (`ctx`)."""
    per_epoch = data.count("train") // global_batch
    first_epoch, first_step = divmod(start_step, per_epoch)  # a resumed run skips the done steps
    per_worker = global_batch // ctx.num_input_pipelines
    start = ctx.input_pipeline_id * per_worker
    mine = slice(start, start + per_worker)  # this worker's slice of every global batch
    per_replica = ctx.get_per_replica_batch_size(global_batch)
    if data.in_memory_bytes():
        x, y = read_in_memory(data)

        def permuted_steps(epoch: tf.Tensor) -> tf.data.Dataset:
            steps = epoch_permutation(seed, epoch, data.count("train"), global_batch)
            skip = tf.where(epoch == first_epoch, first_step, 0)
            return tf.data.Dataset.from_tensor_slices(
                tf.reshape(steps[skip:, mine], [-1, per_replica])
            )

        ds = tf.data.Dataset.range(first_epoch, epochs).flat_map(permuted_steps)
        return ds.map(lambda i: (tf.gather(x, i), tf.gather(y, i))).prefetch(tf.data.AUTOTUNE)
    shards = data.shards("train")
    decode = decoder(data.spec, data.vectorize)
    augment_image = augmenter(augment) if augment and data.spec.kind == "image" else None

    def epoch_steps(epoch: tf.Tensor) -> tf.data.Dataset:
        # A resumed epoch skips its done steps before any decoding; this worker keeps its slice.
        skip = tf.where(epoch == first_epoch, tf.constant(first_step, tf.int64), 0)
        ds = epoch_windows(shards, seed, epoch).rebatch(global_batch, drop_remainder=True)
        ds = ds.take(per_epoch).skip(skip)
        return ds.map(lambda pos, rec: (tf.fill([per_worker], epoch), pos[mine], rec[mine]))

    def load(epoch: tf.Tensor, pos: tf.Tensor, record: tf.Tensor):
        x, y = decode(record)
        if augment_image is not None:
            x = augment_image(x, tf.stack([tf.constant(seed, tf.int64), epoch * 2**32 + pos]))
        return x, y

    ds = tf.data.Dataset.range(first_epoch, epochs).flat_map(epoch_steps)
    if data.spec.kind == "image":  # decode (and augment) example by example, in parallel
        ds = ds.unbatch().map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        ds = ds.batch(per_replica, drop_remainder=True)
    else:  # vectors and text: parse (and vectorise) a whole batch at once
        ds = ds.rebatch(per_replica, drop_remainder=True).map(
            lambda epoch, pos, records: decode(records),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    return ds.prefetch(tf.data.AUTOTUNE)


def read_in_memory(data: Prepared, split: str = "train") -> tuple[Any, Any]:
    """A whole split as two tensors (inputs, targets), in its written order."""
    batches = list(eval_dataset(data, split, 4096))
    return tf.concat([x for x, _ in batches], 0), tf.concat([y for _, y in batches], 0)


def epoch_permutation(seed: int, epoch: Any, count: int, global_batch: int) -> Any:
    """An in-memory epoch's example indices, [steps, global_batch]. Run it on the CPU: stateless
    random ops may give other numbers on other device types."""
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])
    order = tf.random.experimental.stateless_shuffle(tf.range(count), seed=key)
    steps = count // global_batch
    return tf.reshape(order[: steps * global_batch], [steps, global_batch])


def eval_dataset(data: Prepared, split: str, batch: int) -> Any:
    """Every example of `split`, in its written order, in batches (the last one smaller)."""
    decode = decoder(data.spec, data.vectorize)
    ds = tf.data.TFRecordDataset(data.shards(split))
    if data.spec.kind == "image":
        ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).batch(batch)
    else:
        ds = ds.batch(batch).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


class Passes:
    """Whole passes over `eval_dataset`'s batches from one iterator for the run: ending a tf.data
    iterator joins its threads (0.3 s a pass). Read each pass to its end."""

    def __init__(self, batches: Any, per_pass: int) -> None:
        self._iterator = iter(batches.repeat())
        self.per_pass = per_pass

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self._iterator, self.per_pass)


def string_feature(shards: list[str], name: str) -> Any:
    """The string feature `name` (X: texts, ID) of every record of `shards`, in batches."""
    schema = {name: tf.io.FixedLenFeature([], tf.string)}
    ds = tf.data.TFRecordDataset(shards).batch(1024)
    return ds.map(lambda records: tf.io.parse_example(records, schema)[name])


def example_ids(data: Prepared, split: str) -> list[str]:
    """The id of every example of `split`, in its written order (`eval_dataset`'s order)."""
    ids = string_feature(data.shards(split), ID).as_numpy_iterator()
    return [v.decode() for batch in ids for v in batch]


def read_split(processed_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Inputs, targets and names of one split as arrays: for notebooks and small data."""
    data = load_prepared(processed_dir)
    x, y = (tensor.numpy() for tensor in read_in_memory(data, split))
    if data.spec.kind == "text":
        x = np.array([text.decode("utf-8") for text in x], dtype=object)
    return x, y, list(data.spec.names)
