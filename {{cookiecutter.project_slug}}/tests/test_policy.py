"""Early stopping agreed across replicas, the best model, and the profiler window (in-process)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import keras
import numpy as np
import pytest
from conftest import TINY, tensorboard_values

from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.core.storage import results_root, storage_root
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.evaluation.evaluate import evaluate
from {{ cookiecutter.module_name }}.evaluation.report import (
    evaluation_summary,
    load_history,
    plot_training_curves,
)
from {{ cookiecutter.module_name }}.training.checkpoints import list_checkpoints
from {{ cookiecutter.module_name }}.training.policy import checkpoint_due, mode_for
from {{ cookiecutter.module_name }}.training.run_record import list_runs, runs_table
from {{ cookiecutter.module_name }}.training.saved_model import load_for_users
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

PER_EPOCH = 1438 // 32  # TINY on one replica


def test_early_stopping_stops_all_replicas_at_one_step_and_remembers_it(
    tiny_project: Path, capsys, bars
) -> None:
    # A learning rate of 1e-9 moves no prediction: val_accuracy stays put, and patience 1
    # stops after the second epoch.
    base = [
        *TINY,
        "train.epochs=4",
        "train.learning_rate=1e-9",
        "train.early_stopping_patience=1",
        "train.monitor=val_accuracy",
        "distribute.strategy=mirrored",
        "run_name=early",
    ]
    params = load_params(tiny_project / "params.yaml", base)
    result = train(params, tiny_project)
    out = capsys.readouterr().out
    assert result.status == "completed" and result.exit_code == 0
    metrics = result.metrics
    per_epoch = 1438 // (32 * result.facts["replicas"])
    assert result.step == 2 * per_epoch < 4 * per_epoch, out  # of train.epochs=4
    assert metrics["stopped_early"] == 1 and metrics["best_step"] == per_epoch
    assert "Early stopping: val_accuracy has not improved for 1 epochs" in out
    assert {"val_loss", "val_accuracy", "val_auc", "val_f1"} <= set(metrics)
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(metrics["history"][-1])
    # TensorBoard: the loss and accuracy of every chunk, validation per epoch (docs/training.md).
    values = tensorboard_values(results_root(tiny_project) / "tensorboard" / "early")
    scalars = {  # the float scalars, not the params text
        tag: [float(a) for a in arrays]
        for tag, arrays in values.items()
        if all(a.shape == () and a.dtype.kind == "f" for a in arrays)
    }
    assert {"train/loss", "train/accuracy", "perf/examples_per_sec", "val/accuracy"} <= set(scalars)
    assert all(0.0 <= a <= 1.0 for a in scalars["train/accuracy"]), scalars["train/accuracy"]
    # The checkpoint remembers the verdict: the same command trains no further.
    storage = Path(os.environ["PROJECT_STORAGE_DIR"])
    newest = list_checkpoints(storage / "checkpoints" / "early")[-1][1]
    state = json.loads((newest / "meta.json").read_text())["state"]["early"]
    assert state["best_step"] == per_epoch and state["epochs_without_improvement"] == 1
    again = train(params, tiny_project)
    out = capsys.readouterr().out
    assert again.step == result.step and "already complete" in out
    # Its checkpoint ends epoch 2: not "epoch 3, batch 0", an epoch that never runs.
    assert f"at step {result.step} (the end of epoch 2) in " in out, out
    # Both bars end at the run's step (Colab's widget stays red if closed short of its total).
    assert [(bar.leave, bar.n, bar.total) for bar in bars] == [(True, result.step, result.step)] * 2


def test_a_misspelt_monitor_is_refused_before_the_first_step(tiny_project: Path) -> None:
    params = load_params(
        tiny_project / "params.yaml", [*TINY, "train.monitor=val_acc", "run_name=t"]
    )
    with pytest.raises(ConfigError, match=r"^train\.monitor: 'val_acc' is not a validation metric"):
        train(params, tiny_project)
    assert not list_checkpoints(Path(os.environ["PROJECT_STORAGE_DIR"]) / "checkpoints" / "t")


def test_profile_trace_and_a_model_that_stands_alone(tiny_project: Path, capsys) -> None:
    params = load_params(
        tiny_project / "params.yaml",
        [*TINY, "train.epochs=1", "train.profile_steps=[5,10]", "run_name=prof"],
    )
    assert train(params, tiny_project).status == "completed"
    out = capsys.readouterr().out
    traces = list(tiny_project.parent.rglob("*.xplane.pb"))
    assert traces and all("prof" in str(t) for t in traces), out
    # results/models: raw pixels in, class probabilities out, class names beside it.
    model, sidecar = load_for_users(tiny_project / "results" / "models")
    assert sidecar["task"] == "classification" and len(sidecar["names"]) == 10
    pixels = np.random.default_rng(0).uniform(0, 255, (4, *sidecar["input_shape"]))
    probabilities = np.asarray(model(pixels.astype("float32")))
    assert probabilities.shape == (4, 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)


def chunk_ends(epochs: int, per_chunk: int) -> list[tuple[int, int]]:
    """(step, n) at each chunk end, chunks cut from each epoch's start as the trainer cuts them."""
    ends = []
    for epoch in range(epochs):
        start = epoch * PER_EPOCH
        ends += [(min(s + per_chunk, PER_EPOCH) + start, min(per_chunk, PER_EPOCH - s))
                 for s in range(0, PER_EPOCH, per_chunk)]  # fmt: skip
    return ends


def test_checkpoints_fall_on_steps_every_worker_shares() -> None:
    # Chunks of 5 steps, every 10 steps: the first chunk end at or after each multiple of 10
    # from the epoch's start, and the epoch end; a function of the step alone, so every worker
    # saves at the same step.
    assert PER_EPOCH == 44
    due = [s for s, n in chunk_ends(2, 5) if checkpoint_due(s, n, 10, PER_EPOCH)]
    assert due == [10, 20, 30, 40, 44, 54, 64, 74, 84, 88]
    # Epochs shorter than `every`: a save at each epoch end only, not one a few steps later.
    assert [s for s, n in chunk_ends(3, 5) if checkpoint_due(s, n, 50, PER_EPOCH)] == [44, 88, 132]


def test_every_keras_metric_is_watched_in_its_own_direction() -> None:
    """train.monitor on a `task.metrics` entry: early stopping, the best model and a sweep's
    direction go the way Keras says the metric improves (`_direction`, what its callbacks read
    in mode "auto"); counts of false results go down too."""
    wrong = []
    for name in dir(keras.metrics):
        kind = getattr(keras.metrics, name)
        if not isinstance(kind, type) or not issubclass(kind, keras.metrics.Metric):
            continue
        try:
            metric = kind()
        except TypeError:  # needs arguments (num_classes, ...): not a `task.metrics` name
            continue
        direction = getattr(metric, "_direction", None)
        if metric.name in ("false_negatives", "false_positives"):
            direction = "down"
        if direction and mode_for(f"val_{metric.name}") != {"up": "max", "down": "min"}[direction]:
            wrong.append(f"val_{metric.name} ({direction})")
    assert not wrong, wrong


def test_a_run_whose_loss_goes_nan_stops_at_that_epoch_and_says_why(
    tiny_project: Path, capsys
) -> None:
    """A diverged run (a learning rate far too high) stops at the first epoch end whose val_loss
    is not a number, says why and what to lower, and stays stopped: the same command trains no
    further (a GPU's quota is not spent on NaN)."""
    base = [*TINY, "train.epochs=4", "train.learning_rate=1e30", "train.optimizer=sgd"]
    params = load_params(tiny_project / "params.yaml", [*base, "run_name=nan"])
    result = train(params, tiny_project)
    out = capsys.readouterr().out
    assert result.status == "completed" and result.step == PER_EPOCH, out  # of 4 epochs
    assert result.metrics["stopped_early"] == 1
    assert "Stopped early: val_loss is nan at epoch 1: training diverged" in out
    assert "(example: --set train.learning_rate=1e+29)" in out
    again = train(params, tiny_project)
    assert again.step == PER_EPOCH and "already complete" in capsys.readouterr().out


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant}: not JSON (jq and JavaScript refuse it)")


def test_a_diverged_run_writes_standard_json_and_every_reader_copes(tiny_project: Path) -> None:
    """The NaN of a diverged run is null in train.json, evaluate.json, the run record and its
    checkpoint's meta.json; the model card, the runs table and the notebooks' views read them
    (the resume that reads meta.json: the test above)."""
    overrides = [*TINY, "train.epochs=1", "train.learning_rate=1e30", "train.optimizer=sgd"]
    params = load_params(tiny_project / "params.yaml", overrides)
    prepare(params, tiny_project)
    assert train(params, tiny_project).metrics["stopped_early"] == 1
    evaluate(params, tiny_project)
    results = results_root(tiny_project)
    (record,) = results.glob("runs/*/manifest.json")
    saved = list_checkpoints(storage_root(tiny_project) / "checkpoints" / params.run_name)
    metas = [folder / "meta.json" for _, folder in saved]
    for path in (results / "metrics/train.json", results / "metrics/evaluate.json", record, *metas):
        json.loads(path.read_text(), parse_constant=_refuse)
    assert json.loads(metas[-1].read_text())["state"]["history"][0]["val_loss"] is None
    train_json = json.loads((results / "metrics/train.json").read_text())
    assert train_json["val_loss"] is None and train_json["history"][0]["val_loss"] is None
    assert "val_loss nan" in (results / "reports/model_card.md").read_text()
    header, _, row = (line.split("|") for line in runs_table(list_runs(tiny_project)).splitlines())
    assert dict(zip(map(str.strip, header), map(str.strip, row), strict=True))["val_loss"] == "-"
    plot_training_curves(load_history(tiny_project))
    assert evaluation_summary(tiny_project, "classification").startswith("Test split")
