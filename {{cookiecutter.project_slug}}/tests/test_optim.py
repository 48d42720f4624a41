"""optim.py: optimizers and schedules from params, resumed exactly from a checkpoint."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import PARAMS

from {{ cookiecutter.module_name }} import optim
from {{ cookiecutter.module_name }}.config import TrainConfig, load_params
from {{ cookiecutter.module_name }}.optim import (
    build_optimizer,
    clip_gradients,
)
from {{ cookiecutter.module_name }}.training import fingerprint
from {{ cookiecutter.module_name }}.training.strategy import StrategyInfo
from {{ cookiecutter.module_name }}.training.trainer import make_plan

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it


def current_learning_rate(optimizer: keras.optimizers.Optimizer) -> float:
    """The rate the next step uses."""
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def train_cfg(*overrides: str) -> TrainConfig:
    return load_params(PARAMS, list(overrides)).train


def test_optimizers_from_params() -> None:
    sgd = build_optimizer(train_cfg("train.optimizer=sgd", "train.momentum=0.8"), 100)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.momentum == pytest.approx(0.8)
    adamw = build_optimizer(
        train_cfg("train.optimizer=adamw", "train.weight_decay=0.01", "train.clip_norm=1.0"), 100
    )
    assert isinstance(adamw, keras.optimizers.AdamW)
    assert adamw.weight_decay == pytest.approx(0.01)
    adam = build_optimizer(train_cfg(), 100, replicas=4)
    assert isinstance(adam, keras.optimizers.Adam) and adam.global_clipnorm is None
    assert current_learning_rate(adam) == pytest.approx(0.004)  # linear scaling x 4
    unscaled = build_optimizer(train_cfg("train.lr_scaling=none"), 100, replicas=4)
    assert current_learning_rate(unscaled) == pytest.approx(0.001)


def test_a_new_scaling_rule_in_optim_is_the_rate_the_run_states(monkeypatch, capsys) -> None:
    """A user who writes another rule in `scaled_learning_rate` (square-root scaling here) gets
    its rate in the optimizer, the plan (its line and the run record) and the fingerprint alike."""

    def square_root(cfg: TrainConfig, replicas: int) -> float:
        return cfg.learning_rate * replicas**0.5

    # The function's body replaced, as an edit of optim.py would: every import of it sees it.
    monkeypatch.setattr(optim.scaled_learning_rate, "__code__", square_root.__code__)
    params = load_params(PARAMS, ["train.learning_rate=0.01"])
    info = StrategyInfo("MirroredStrategy", 4, "CPU", True)
    plan = make_plan(params, info, types.SimpleNamespace(count=lambda split: 1000))
    assert plan.learning_rate == pytest.approx(0.02)
    line = "learning rate 0.02 = scaled_learning_rate(train.learning_rate 0.01, 4 replicas), adam"
    out = capsys.readouterr().out
    assert line in out and "lr_scaling" not in out  # the rule decides it, not that setting
    stated = fingerprint.of(params, "ab" * 32, info.replicas)["learning_rate_applied"]
    assert stated == pytest.approx(0.02)
    optimizer = build_optimizer(params.train, plan.total, info.replicas)
    assert current_learning_rate(optimizer) == pytest.approx(0.02)


def test_cosine_with_warmup_and_the_fine_tune_factor() -> None:
    cfg = train_cfg("train.schedule=cosine", "train.warmup_steps=10", "train.learning_rate=0.1")
    optimizer = build_optimizer(cfg, total_steps=110, phase_change_step=60)
    schedule = optimizer._learning_rate  # the LearningRateSchedule itself (keras keeps it here)
    rate = {step: float(schedule(step)) for step in (0, 5, 10, 59, 60, 110)}
    assert rate[0] == pytest.approx(0.0)
    assert rate[5] == pytest.approx(0.05)
    assert rate[10] == pytest.approx(0.1)
    assert rate[60] == pytest.approx(0.1 * 0.1 * 0.5, rel=1e-3)  # half-way down, then x factor
    assert rate[59] > 0.04 and rate[110] == pytest.approx(0.0, abs=1e-7)
    schedules = keras.optimizers.schedules
    restored = schedules.deserialize(schedules.serialize(schedule))
    assert float(restored(60)) == pytest.approx(rate[60])


def _model() -> keras.Model:
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    return model


def _step(model: keras.Model, optimizer: keras.optimizers.Optimizer, i: int, clip: float) -> None:
    x = tf.constant(np.random.default_rng(i).normal(size=(8, 4)), tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - 1.0))
    gradients = clip_gradients(tape.gradient(loss, model.trainable_variables), clip)
    optimizer.apply(gradients, model.trainable_variables)


def test_a_checkpointed_optimizer_resumes_to_the_same_rate_and_update(tmp_path: Path) -> None:
    cfg = train_cfg(
        "train.optimizer=adamw", "train.weight_decay=0.01", "train.schedule=cosine",
        "train.warmup_steps=2", "train.clip_norm=0.5",
    )  # fmt: skip
    cfg = dataclasses.replace(cfg, learning_rate=0.05)

    def fresh() -> tuple[keras.Model, keras.optimizers.Optimizer, tf.train.Checkpoint]:
        model = _model()
        optimizer = build_optimizer(cfg, total_steps=8, phase_change_step=4)
        optimizer.build(model.trainable_variables)
        return model, optimizer, tf.train.Checkpoint(optimizer=optimizer, weights=model.weights)

    model, optimizer, checkpoint = fresh()
    for i in range(3):
        _step(model, optimizer, i, cfg.clip_norm)
    path = checkpoint.write(str(tmp_path / "ckpt"))
    for i in range(3, 6):  # across the phase change at step 4
        _step(model, optimizer, i, cfg.clip_norm)
    expected = [w.numpy() for w in model.weights]

    model, optimizer, checkpoint = fresh()
    checkpoint.read(path).assert_consumed()
    assert int(optimizer.iterations) == 3
    assert current_learning_rate(optimizer) == pytest.approx(
        float(build_optimizer(cfg, 8, phase_change_step=4)._learning_rate(3))
    )
    for i in range(3, 6):
        _step(model, optimizer, i, cfg.clip_norm)
    for got, want in zip(model.weights, expected, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("clip", [0.0, 0.1])
def test_two_replicas_clip_and_step_like_one_device(clip: float) -> None:
    """The clipped global gradient, not each replica's share (Keras's global_clipnorm would)."""
    x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32") * 10
    y = np.random.default_rng(1).integers(0, 3, 8)

    def run(strategy: tf.distribute.Strategy) -> list[np.ndarray]:
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
            optimizer = keras.optimizers.SGD(0.1)
            optimizer.build(model.trainable_variables)

        def replica_step(xx: tf.Tensor, yy: tf.Tensor) -> None:
            with tf.GradientTape() as tape:
                logits = model(xx)
                per_example = keras.losses.sparse_categorical_crossentropy(yy, logits, True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=8)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(clip_gradients(gradients, clip), model.trainable_variables)

        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
        for inputs in strategy.experimental_distribute_dataset(data):
            tf.function(lambda b: strategy.run(replica_step, args=b))(inputs)
        return [w.numpy() for w in model.weights]

    one = run(tf.distribute.get_strategy())
    two = run(two_cpus(tf))
    for a, b in zip(one, two, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def two_cpus(tf):
    """MirroredStrategy over the two logical CPUs, reducing without collective ops: TensorFlow
    caches a collective instance's shape per device group for the process, so a second strategy
    with collectives (the trainer's, in a later test) would meet this test's shapes."""
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
