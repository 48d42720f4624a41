"""Your optimizer and its learning-rate schedule, from `train.*` params.

THE CONTRACT. The trainer calls

    build_optimizer(cfg, total_steps, replicas, phase_change_step) -> keras optimizer

once, inside `strategy.scope()`, with the `train:` section of params.yaml, the run's optimizer
steps, the number of replicas and the step where fine-tuning starts (0: none); and, in each
replica's step, `clip_gradients(gradients, clip_norm, loss_scale) -> gradients`. Change the
optimizer or the schedule here (the built-ins: adam, adamw, sgd; constant, cosine); a new choice
of `train.optimizer` or `train.schedule` also needs its name in config.py.
`scaled_learning_rate(cfg, replicas) -> float` is the peak rate on `replicas` replicas
(`train.lr_scaling`): the optimizer's, and the one the plan's line, the run record and the run's
fingerprint state, so a new rule goes there.

The schedule is a function of the optimizer's own step counter (`optimizer.iterations`), which a
checkpoint saves: a resumed run continues at exactly the same learning rate, also across the
fine-tune phase change (`train.fine_tune`), where the rate drops by `learning_rate_factor`.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .config import TrainConfig


def build_optimizer(
    cfg: TrainConfig, total_steps: int, replicas: int = 1, phase_change_step: int = 0
) -> keras.optimizers.Optimizer:
    """`train.optimizer` with `train.schedule` and `weight_decay`. Under mixed precision the
    trainer wraps it in `keras.optimizers.LossScaleOptimizer` (float16). `train.clip_norm` is not
    set here: the optimizer would clip each replica's share of the gradient, not the sum; the
    step calls `clip_gradients` instead."""
    peak = scaled_learning_rate(cfg, replicas)
    rate = learning_rate_schedule(cfg, peak, total_steps, phase_change_step)
    common: dict[str, Any] = {"learning_rate": rate, "weight_decay": cfg.weight_decay or None}
    if cfg.optimizer == "sgd":
        optimizer = keras.optimizers.SGD(momentum=cfg.momentum, **common)
    elif cfg.optimizer == "adamw":
        optimizer = keras.optimizers.AdamW(**{**common, "weight_decay": cfg.weight_decay})
    else:
        optimizer = keras.optimizers.Adam(**common)
    if cfg.weight_decay:  # decay the weights, not the biases and normalisation scales/offsets
        optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


def scaled_learning_rate(cfg: TrainConfig, replicas: int) -> float:
    """The peak learning rate on `replicas` replicas: `train.learning_rate`, times the replicas
    when `train.lr_scaling` is linear (their global batch is that many times larger)."""
    return cfg.learning_rate * (replicas if cfg.lr_scaling == "linear" else 1)


def clip_gradients(gradients: list[Any], clip_norm: float, loss_scale: Any = 1.0) -> list[Any]:
    """Gradients clipped to the global norm `clip_norm` (0 = as they are), in a replica step.

    Keras's own `global_clipnorm` clips each replica's share before the replicas' gradients are
    summed, so two replicas clip differently from one device. Here the replicas first sum their
    gradients, clip the sum, and hand the optimizer 1/N of it each: the optimizer's own sum then
    gives exactly the clipped global gradient (one more all-reduce per step, only when clipping).
    `loss_scale`: a LossScaleOptimizer's current scale, as the gradients are still scaled.
    """
    if not clip_norm:
        return gradients
    context = tf.distribute.get_replica_context()
    replicas = context.num_replicas_in_sync if context is not None else 1
    if replicas > 1:
        gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
    clipped, _ = tf.clip_by_global_norm(gradients, clip_norm * tf.cast(loss_scale, tf.float32))
    return [g / replicas for g in clipped] if replicas > 1 else clipped


def learning_rate_schedule(
    cfg: TrainConfig, peak: float, total_steps: int, phase_change_step: int = 0
) -> float | keras.optimizers.schedules.LearningRateSchedule:
    """A constant rate, or a cosine decay after a linear warm-up; then the fine-tune factor."""
    rate: float | keras.optimizers.schedules.LearningRateSchedule = peak
    if cfg.schedule == "cosine":
        warmup = min(cfg.warmup_steps, max(total_steps - 1, 0))
        rate = keras.optimizers.schedules.CosineDecay(
            initial_learning_rate=0.0 if warmup else peak,
            decay_steps=max(total_steps - warmup, 1),
            warmup_target=peak if warmup else None,
            warmup_steps=warmup,
        )
    if phase_change_step > 0:
        rate = PhasedSchedule(rate, cfg.fine_tune.learning_rate_factor, phase_change_step)
    return rate


@keras.saving.register_keras_serializable(package="{{ cookiecutter.module_name }}")
class PhasedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`base` until `boundary_step`, then `base x factor` (the fine-tune phase)."""

    def __init__(self, base: Any, factor: float, boundary_step: int) -> None:
        self.base = base
        self.factor = factor
        self.boundary_step = boundary_step

    def __call__(self, step: Any) -> Any:
        base = self.base(step) if callable(self.base) else self.base
        base = keras.ops.cast(base, "float32")
        after = keras.ops.greater_equal(step, self.boundary_step)
        return keras.ops.where(after, base * self.factor, base)

    def get_config(self) -> dict[str, Any]:
        # Keras serializes a `base` schedule in the config itself; only loading needs a hand.
        return {"base": self.base, "factor": self.factor, "boundary_step": self.boundary_step}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PhasedSchedule:
        return cls(**{**config, "base": keras.saving.deserialize_keras_object(config["base"])})
