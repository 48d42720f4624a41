"""Strategy choice (faked hardware) and a real two-replica MirroredStrategy training."""

from __future__ import annotations

import dataclasses
import json
import re
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import PARAMS, TINY

from {{ cookiecutter.module_name }}.config import ConfigError, DistributeConfig, load_params
from {{ cookiecutter.module_name }}.training import strategy as strat
from {{ cookiecutter.module_name }}.training.strategy import (
    Hardware,
    StrategyError,
    choose_plan,
)
from {{ cookiecutter.module_name }}.training.trainer import make_plan, train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

TF_CONFIG = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}


def cfg(**kw) -> DistributeConfig:
    return dataclasses.replace(load_params(PARAMS).distribute, **kw)


@pytest.mark.parametrize(
    ("hw", "config", "kind", "gpus", "logical"),
    [
        (Hardware(gpus=1, tpu=True), cfg(), "tpu", (), 0),
        (Hardware(gpus=2, tf_config=TF_CONFIG), cfg(), "multiworker", (), 0),
        (Hardware(gpus=2), cfg(), "mirrored", (), 0),
        (Hardware(gpus=4), cfg(gpus=[1, 3]), "mirrored", (1, 3), 0),
        (Hardware(gpus=1), cfg(logical_cpus=2), "mirrored", (), 0),  # GPUs win over CPUs
        (Hardware(), cfg(logical_cpus=2), "mirrored", (), 2),
        (Hardware(), cfg(logical_cpus=1), "default", (), 0),
        (Hardware(), cfg(), "default", (), 0),
        (Hardware(), cfg(strategy="mirrored"), "mirrored", (), 0),  # one CPU device
        (Hardware(gpus=2), cfg(strategy="default"), "default", (), 0),
        (Hardware(), cfg(strategy="multiworker"), "multiworker", (), 0),
        (Hardware(tpu=True), cfg(strategy="mirrored", logical_cpus=3), "mirrored", (), 3),
    ],
)
def test_choice_rules(hw: Hardware, config: DistributeConfig, kind: str, gpus, logical) -> None:
    plan = choose_plan(hw, config)
    assert (plan.kind, plan.gpus, plan.logical_cpus) == (kind, gpus, logical)


def test_choice_errors_name_the_key() -> None:
    with pytest.raises(StrategyError, match=r"^distribute.strategy: tpu, but no TPU"):
        choose_plan(Hardware(gpus=1), cfg(strategy="tpu"))
    with pytest.raises(StrategyError, match=r"^distribute.gpus: GPU 2 does not exist"):
        choose_plan(Hardware(gpus=2), cfg(gpus=[0, 2]))


def test_logical_cpus_ignored_with_gpus_says_so() -> None:
    plan = choose_plan(Hardware(gpus=1), cfg(logical_cpus=2))
    assert any("logical_cpus is ignored" in note for note in plan.notes)


def test_gpus_asked_for_on_a_machine_without_one_says_so() -> None:
    # They saw distribute.gpus=[3] give "MirroredStrategy on CPU" without a word.
    plan = choose_plan(Hardware(), cfg(strategy="mirrored", gpus=[3]))
    assert plan.kind == "mirrored" and plan.gpus == ()
    assert plan.notes == ("distribute.gpus [3] is ignored: no GPU found",)


def test_mixed_precision_policy_per_device() -> None:
    assert strat.mixed_precision_policy("GPU", True) == ("mixed_float16", None)
    assert strat.mixed_precision_policy("TPU", True) == ("mixed_bfloat16", None)
    policy, notice = strat.mixed_precision_policy("CPU", True)
    assert policy == "float32" and "ignored on CPU" in notice
    assert strat.mixed_precision_policy("GPU", False) == ("float32", None)


def test_tpu_found_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """One detection for the strategy and the environment record: the same signals."""
    from {{ cookiecutter.module_name }}.core import environment, hardware

    for key in hardware.TPU_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(hardware.glob, "glob", lambda pattern: [])
    assert strat.tpu_present() is False and environment.tpu_info({}) is None
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-1")
    assert strat.tpu_present() is True
    assert environment.accelerator([], {}) == "TPU: v5litepod-1"


def test_tpu_without_tpu_tensorflow_falls_back_with_a_message(capsys) -> None:
    """What Colab's TPU runtime gives today: a TPU, but no TensorFlow that can drive it."""
    s, info = strat.make_strategy(cfg(logical_cpus=2), hw=Hardware(tpu=True))
    out = capsys.readouterr().out
    assert "A TPU was found but this TensorFlow cannot use it" in out
    assert "tensorflow-tpu" in out
    assert info.replicas == 2 and info.name == "MirroredStrategy"
    with pytest.raises(StrategyError, match="tensorflow-tpu"):
        strat.make_strategy(cfg(strategy="tpu"), hw=Hardware(tpu=True))


def _fake_mwms(task_type: str | None, task_id: int, cluster: dict):
    """An object shaped like MultiWorkerMirroredStrategy for the chief rules."""
    resolver = types.SimpleNamespace(
        task_type=task_type,
        task_id=task_id,
        cluster_spec=lambda: types.SimpleNamespace(as_dict=lambda: cluster),
    )
    fake_cls = type("MultiWorkerMirroredStrategy", (), {})
    obj = fake_cls()
    obj.cluster_resolver = resolver
    return obj


def test_chief_rules() -> None:
    workers = {"worker": ["a:1", "b:2"]}
    with_chief = {"chief": ["c:0"], "worker": ["a:1"]}
    assert strat.cluster_role(_fake_mwms("worker", 0, workers)) == (True, 2)
    assert strat.cluster_role(_fake_mwms("worker", 1, workers)) == (False, 2)
    assert strat.cluster_role(_fake_mwms("chief", 0, with_chief)) == (True, 2)
    assert strat.cluster_role(_fake_mwms("worker", 0, with_chief)) == (False, 2)
    assert strat.cluster_role(object()) == (True, 1)  # any single-worker strategy


def test_real_two_replica_mirrored_training(tiny_project: Path, capsys) -> None:
    """MirroredStrategy over two logical CPU devices trains, with the global batch = 2 x 32."""
    params = load_params(
        tiny_project / "params.yaml", [*TINY, "distribute.logical_cpus=2", "run_name=two"]
    )
    result = train(params, tiny_project)
    out = capsys.readouterr().out
    assert "MirroredStrategy on CPU: 2 replicas" in out
    assert "Global batch 64 = 32 per replica x 2 replicas" in out
    assert result.status == "completed"
    metrics = result.metrics  # every number of the run (train.json: those DVC compares)
    facts = result.facts  # the run record's: how the run was split
    assert facts["replicas"] == 2 and facts["global_batch"] == 64
    assert metrics["steps"] == 2 * (1438 // 64)
    assert facts["learning_rate"] == pytest.approx(2 * params.train.learning_rate)  # linear rule
    assert metrics["val_accuracy"] > 0.2  # above chance (0.1) after 44 steps
    assert (tiny_project / "results/models/model.keras").is_file()
    assert np.isfinite(metrics["train_loss"])
    events = list((tiny_project / "results/tensorboard/two").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_xla_and_float16_loss_scaling_paths_train(tiny_project: Path, monkeypatch) -> None:
    """XLA-compiled gradients, and the float16 policy with loss scaling (used on GPUs; forced
    here on the CPU), both train and checkpoint."""
    monkeypatch.setattr(
        "{{ cookiecutter.module_name }}.training.trainer.mixed_precision_policy",
        lambda device, enabled: ("mixed_float16", None),
    )
    params = load_params(
        tiny_project / "params.yaml",
        [*TINY, "train.epochs=1", "train.xla=true", "train.mixed_precision=true", "run_name=x"],
    )
    try:
        result = train(params, tiny_project)
    finally:
        import keras

        keras.mixed_precision.set_global_policy("float32")
    assert result.status == "completed" and result.facts["precision"] == "mixed_float16"
    assert np.isfinite(result.metrics["val_loss"])


def test_a_tf_config_that_is_not_json_is_one_line_with_an_example(monkeypatch) -> None:
    monkeypatch.setenv("TF_CONFIG", "{cluster: {worker: [a:1]}")  # YAML-ish, not JSON
    with pytest.raises(StrategyError) as err:
        strat.detect_hardware()
    text = str(err.value)
    assert text.startswith("TF_CONFIG: not valid JSON") and "\n" not in text
    example = json.loads(text.split("(example: TF_CONFIG=")[1].removesuffix(")").strip("'"))
    assert example["task"]["type"] == "worker"


@pytest.mark.parametrize(
    "task",
    [{"type": "worker", "index": 3}, {"type": "cheif", "index": 0}, None],
    ids=["index-past-the-cluster", "misspelt-type", "no-task"],
)
def test_a_tf_config_that_tensorflow_refuses_is_one_line(monkeypatch, task) -> None:
    config = {"cluster": {"worker": ["127.0.0.1:23460"]}, **({"task": task} if task else {})}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    with pytest.raises(StrategyError) as err:
        strat.make_strategy(cfg(strategy="multiworker"))
    text = str(err.value)
    assert text.startswith("TF_CONFIG: ") and "(example: TF_CONFIG=" in text and "\n" not in text


@pytest.mark.parametrize(("examples", "replicas"), [(10, 1), (10, 2), (100, 8), (1, 2)])
def test_a_batch_larger_than_the_data_is_refused_with_one_that_fits(
    examples: int, replicas: int
) -> None:
    params = load_params(PARAMS, ["train.batch_size=64"])
    info = strat.StrategyInfo("MirroredStrategy", replicas, "CPU", True)
    data = types.SimpleNamespace(count=lambda split: examples)
    with pytest.raises(ConfigError) as err:
        make_plan(params, info, data)
    text = str(err.value)
    assert "\n" not in text and "example: --set " in text
    fits = re.search(r"example: --set train.batch_size=(\d+)\)", text)
    if examples >= replicas:
        assert fits and 1 <= int(fits.group(1)) * replicas <= examples, text
    else:  # not one example per replica: no batch size helps
        assert not fits and "distribute.strategy=default" in text, text
