"""Where each training step's batch comes from, inside the chunk function (loop.py).

`feed.args(step)` is the chunk function's argument from global step `step`; `feed.next_batch(args,
i)`, traced inside it, is its i-th step. `Streamed` reads `pipeline.train_dataset`; `Resident`
gathers small tabular data from a copy on every replica's device (a per-step iterator's `next()`
cost a small model a third of its step). Both give a step the same examples, whatever the replicas
or workers, and read nothing ahead of the steps, so a resumed run continues exactly.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from .pipeline import Prepared, epoch_permutation, read_in_memory, train_dataset


class ResidentArgs(NamedTuple):
    """The chunk function's argument on the resident path (tensors: one trace for every chunk)."""

    x: Any  # the training inputs, one copy per replica (PerReplica; a tensor with one replica)
    y: Any  # the targets, likewise
    order: Any  # the epoch's example indices, [steps per epoch, global batch], on the host
    start: Any  # the chunk's first step within the epoch (int32 scalar)


def make_feed(
    strategy: Any,
    data: Prepared,
    global_batch: int,
    seed: int,
    start_step: int,
    epochs: int,
    augment: list[str],
) -> Streamed | Resident:
    """The resident feed when the training split is held in memory, else the streamed one."""
    if resident_bytes(strategy, data):
        return Resident(strategy, data, global_batch, seed)
    datasets = strategy.distribute_datasets_from_function(
        lambda ctx: train_dataset(ctx, data, global_batch, seed, start_step, epochs, augment)
    )
    return Streamed(iter(datasets))


def resident_bytes(strategy: Any, data: Prepared) -> int:
    """Bytes of every replica's copy of the training split on the resident path, else 0 (TPU)."""
    if type(strategy).__name__.startswith("TPUStrategy"):
        return 0
    return data.in_memory_bytes(copies=len(_devices(strategy)))


class Streamed(NamedTuple):
    """Steps from one distributed iterator for the whole run (creating one costs 0.5 s)."""

    iterator: Any

    def args(self, step: int) -> Any:
        return self.iterator

    @staticmethod
    def next_batch(iterator: Any, i: Any) -> Any:
        return next(iterator)


class Resident:
    """Steps gathered from the training split held on every replica's device."""

    def __init__(self, strategy: Any, data: Prepared, global_batch: int, seed: int) -> None:
        self.strategy, self.seed, self.global_batch = strategy, seed, global_batch
        self.count = data.count("train")
        self.per_epoch = self.count // global_batch
        self.per_replica = global_batch // strategy.num_replicas_in_sync
        self.devices = _devices(strategy)
        with tf.device("/CPU:0"):
            x, y = read_in_memory(data)
        self.x, self.y = on_replicas(strategy, x), on_replicas(strategy, y)
        self._epoch, self._order = -1, None

    def args(self, step: int) -> ResidentArgs:
        epoch, start = divmod(step, self.per_epoch)
        if epoch != self._epoch:  # once per epoch, on the host's CPU
            with tf.device("/CPU:0"):
                order = epoch_permutation(self.seed, epoch, self.count, self.global_batch)
            self._epoch, self._order = epoch, order
        return ResidentArgs(self.x, self.y, self._order, tf.constant(start, tf.int32))

    def next_batch(self, args: ResidentArgs, i: Any) -> Any:
        """Step `i` of the chunk: each replica's slice of the global batch, from its own copy."""
        rows = args.order[args.start + tf.cast(i, tf.int32)]
        xs, ys = (self.strategy.experimental_local_results(v) for v in (args.x, args.y))
        size = self.per_replica

        def gather(ctx: Any) -> tuple[Any, Any]:
            replica = ctx.replica_id_in_sync_group  # across workers: slices match train_dataset
            local = replica % len(self.devices)
            with tf.device(self.devices[local]):
                mine = rows[replica * size : (replica + 1) * size]
                return tf.gather(xs[local], mine), tf.gather(ys[local], mine)

        return self.strategy.experimental_distribute_values_from_function(gather)


def on_replicas(strategy: Any, host: Any) -> Any:
    """One copy of the tensor `host` on each of this worker's replica devices (PerReplica)."""
    devices = _devices(strategy)

    def copy(ctx: Any) -> Any:
        with tf.device(devices[ctx.replica_id_in_sync_group % len(devices)]):
            return tf.identity(host)

    return strategy.experimental_distribute_values_from_function(copy)


def _devices(strategy: Any) -> list[str | None]:
    """This worker's replica devices ([None] under the default strategy: no placement)."""
    try:
        return list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy has no device list
        return [None]
