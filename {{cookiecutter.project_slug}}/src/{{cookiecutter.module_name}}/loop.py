"""Your training step: the replica train step, the chunk of n steps in one `tf.function`, and the
validation pass.

THE CONTRACT. The trainer builds `StepParts` (model, optimizer, task, metrics, the sums variable)
inside `strategy.scope()` and calls

    make_chunk_function(parts, cfg, next_batch) -> run_chunk(feed, n) -> [loss sum, metric sum]
    Validator(model, task).run(batches) -> {"val_loss": ..., "val_<metric>": ...}

`run_chunk` runs n steps in one `tf.function`; each replica's `train_step(x, y)` computes the
task's loss on its batch (averaged over the GLOBAL batch, so replicas add up), applies the
gradients and adds to the sums. Edit `train_step` to change what one step does (a regulariser,
gradient accumulation); keep every op in TensorFlow or Keras (it runs in a graph, per replica).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from .config import TrainConfig
from .optim import clip_gradients
from .task import Task


@dataclass
class StepParts:
    """What a train step works on (built by the trainer inside `strategy.scope()`)."""

    strategy: Any
    model: Any
    optimizer: Any
    task: Task
    metrics: list[Any]  # task.make_metrics(training=True) (task.metrics), in strategy.scope()
    # An ON_READ SUM variable [loss, train metric]: the chunk's sums, added up across replicas.
    sums: Any
    step_var: Any
    global_batch: int


def make_chunk_function(parts: StepParts, cfg: TrainConfig, next_batch: Any) -> Any:
    """`run_chunk`'s sums: the loss per step, `task.train_metric` per example. `next_batch(feed,
    i)` (data/feed.py) gives step i's batch, one per replica: `next()` on a distributed iterator,
    or small data gathered on each replica's device. Build it again after the trainable
    variables change (the fine-tune phase change): a trace captures the variables it updates."""
    model, optimizer, task = parts.model, parts.optimizer, parts.task
    scale_loss = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def gradients(x: tf.Tensor, y: tf.Tensor) -> tuple[Any, Any, list[Any]]:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            # Divide by the GLOBAL batch: the replicas' gradients are summed across replicas.
            loss = tf.nn.compute_average_loss(
                task.loss(y, logits), global_batch_size=parts.global_batch
            )
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            scaled = optimizer.scale_loss(loss) if scale_loss else loss
        return loss, logits, tape.gradient(scaled, model.trainable_variables)

    if cfg.xla:
        # Compile the forward and backward pass; the optimizer update stays outside XLA because
        # under a distribution strategy it synchronises replicas.
        gradients = tf.function(gradients, jit_compile=True)

    def train_step(x: tf.Tensor, y: tf.Tensor) -> None:
        loss, logits, grads = gradients(x, y)
        scale = optimizer.dynamic_scale if scale_loss else 1.0
        grads = clip_gradients(grads, cfg.clip_norm, scale)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        logits = tf.cast(logits, tf.float32)
        # One update of one variable per step: per-step state updates are what a small model's
        # step time is made of.
        parts.sums.assign_add(tf.stack([loss, tf.reduce_sum(task.train_metric(y, logits))]))
        if parts.metrics:
            task.update_metrics(parts.metrics, y, logits)

    @tf.function
    def run_chunk(feed: Any, n: tf.Tensor) -> tf.Tensor:
        # `n` steps per call: the Python round trip is paid once per chunk, not once per step.
        parts.sums.assign(tf.zeros([2]))
        for i in tf.range(n):
            parts.strategy.run(train_step, args=next_batch(feed, i))
        parts.step_var.assign_add(n)
        return parts.sums.read_value()  # summed over replicas

    return run_chunk


def metric_values(metrics: list[Any], prefix: str = "") -> dict[str, float]:
    """{prefix + name: value} of keras metrics (their results, aggregated across replicas)."""
    return {f"{prefix}{m.name}": float(m.result()) for m in metrics}


class Validator:
    """The validation split through the model: mean loss and `task.make_metrics()`.

    Every worker runs the whole split with the same weights, so all workers get the same numbers
    (what the lockstep rule needs for early stopping). Metrics are built once, reset per pass."""

    def __init__(self, model: Any, task: Task) -> None:
        self.loss = keras.metrics.Mean(name="loss")
        self.metrics = task.make_metrics()

        @tf.function(reduce_retracing=True)
        def update(x: tf.Tensor, y: tf.Tensor) -> None:
            logits = tf.cast(model(x, training=False), tf.float32)
            self.loss.update_state(task.loss(y, logits))
            task.update_metrics(self.metrics, y, logits)

        self._update = update

    def run(self, batches: Iterable[tuple[Any, Any]]) -> dict[str, float]:
        """{val_loss, val_<metric>...} over (inputs, targets) batches of the validation split."""
        for metric in (self.loss, *self.metrics):
            metric.reset_state()
        for x, y in batches:
            self._update(x, y)
        return metric_values([self.loss, *self.metrics], "val_")
