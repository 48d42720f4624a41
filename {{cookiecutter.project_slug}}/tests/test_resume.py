"""Exact resume: SIGKILL at a random step, restart, bit-identical weights and train.json's
history; fallback to an intact checkpoint; --fresh; older checkpoints refused."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import time
import tracemalloc
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest
from conftest import PARAMS, TINY, cli, cli_env, sets

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.data.feed import Resident
from {{ cookiecutter.module_name }}.data.prepare import PROCESSED, prepare
from {{ cookiecutter.module_name }}.registry import register
from {{ cookiecutter.module_name }}.spec import load_spec
from {{ cookiecutter.module_name }}.training import checkpoints, trainer
from {{ cookiecutter.module_name }}.training.checkpoints import (
    CheckpointMismatch,
    list_checkpoints,
)
from {{ cookiecutter.module_name }}.training.run_record import find_run, list_runs, runs_dir
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

# 1438 training digits (8x8x1 images) / 8 = 179 steps per epoch, 537 in all; a checkpoint every
# 6 steps, 3 per chunk. Dropout and every augmentation stay on, so the RNG state must be restored
# too and the augmentation must depend on the example, not on how far the pipeline ran ahead.
LONG = [
    "train.epochs=3",
    "train.batch_size=8",
    "train.steps_per_execution=3",
    "train.checkpoint_every_steps=6",
    "train.keep_checkpoints=2",
    "model.hidden_units=[16]",
    "model.dropout=0.2",
    "data.augment=[flip,rotation,zoom,contrast]",
    "repro.deterministic=true",
    "run_name=kill",
]
TRAIN_DIGITS = 1438
STRATEGIES = {
    "default": ["distribute.strategy=default"],
    "two-cpus": ["distribute.strategy=mirrored", "distribute.logical_cpus=2", "train.epochs=2"],
}


def _weights(model_file: Path) -> list[np.ndarray]:
    return keras.models.load_model(model_file).get_weights()


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _history(train_json: Path) -> list[dict[str, float]]:
    """train.json's rows per epoch without `seconds` (a clock reading): every loss and metric."""
    rows = json.loads(train_json.read_text())["history"]
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_sigkill_at_a_random_step_then_resume_is_bit_identical(
    tiny_project: Path, tmp_path: Path, strategy: str
) -> None:
    overrides = [*LONG, *STRATEGIES[strategy]]
    # The uninterrupted reference, in this process.
    ref = train(load_params(tiny_project / "params.yaml", overrides), tiny_project)
    replicas = ref.facts["replicas"]
    epochs = ref.metrics["steps"] // (TRAIN_DIGITS // (8 * replicas))
    total = (3 if strategy == "default" else 2) * (TRAIN_DIGITS // (8 * replicas))
    assert ref.status == "completed" and ref.step == total

    project = tmp_path / "killed"
    project.mkdir()
    shutil.copy(PARAMS, project)
    storage = tmp_path / "killed-storage"
    env = cli_env(storage)
    ckpt_dir = storage / "checkpoints" / "kill"
    target = random.randint(7, total * 2 // 3)  # after at least one checkpoint
    proc = cli(["train", *sets(overrides)], project, env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        steps = [s for s, _ in list_checkpoints(ckpt_dir)]
        if steps and max(steps) >= target:
            time.sleep(random.uniform(0, 0.02))  # land anywhere: mid-chunk or mid-save
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == -signal.SIGKILL, f"not killed (target step {target}):\n{out}"

    resumed = cli(["train", *sets(overrides)], project, env)
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, out
    match = re.search(r"Resuming run 'kill' from its checkpoint at step (\d+)", out)
    assert match, out
    assert 6 <= int(match.group(1)) < total
    assert f"Done: step {total}" in out
    assert _same(
        _weights(project / "results/models/model.keras"),
        _weights(tiny_project / "results/models/model.keras"),
    ), f"weights differ after a kill at step {target}, resume from {match.group(1)}"
    assert f"final weights sha256 {ref.facts['weights_sha256']}" in out
    # train.json's history is the uninterrupted run's, to the bit: the epoch the kill cut short
    # too (its running sums are in the checkpoint), not only its steps after the resume.
    history = _history(project / "results/metrics/train.json")
    assert history == _history(tiny_project / "results/metrics/train.json")
    assert [row["epoch"] for row in history] == list(range(1, epochs + 1))
    # A log, not a terminal: one plain line per epoch, no bar's carriage returns, no warning.
    assert "\r" not in out and "TqdmWarning" not in out
    assert 1 <= len(re.findall(rf"^epoch \d+/{epochs}  step ", out, re.M)) <= epochs


def test_damaged_newest_checkpoint_falls_back_and_still_ends_identical(
    tiny_project: Path, capsys
) -> None:
    params = load_params(tiny_project / "params.yaml", [*TINY, "train.epochs=1", "run_name=fb"])
    train(params, tiny_project)
    reference = _weights(tiny_project / "results/models/model.keras")
    ckpt_dir = Path(os.environ["PROJECT_STORAGE_DIR"]) / "checkpoints" / "fb"
    steps = [s for s, _ in list_checkpoints(ckpt_dir)]
    assert steps == [30, 40, 44]  # every 10 steps and at the epoch end, newest 3 kept
    newest = list_checkpoints(ckpt_dir)[-1][1]
    data = next(newest.glob("ckpt.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    capsys.readouterr()

    result = train(params, tiny_project)
    out = capsys.readouterr().out
    assert "is damaged" in out and "falling back" in out
    assert "from its checkpoint at step 40" in out
    assert result.status == "completed" and result.step == 44
    assert _same(_weights(tiny_project / "results/models/model.keras"), reference)


def _another_save(saved: Path, target: Path) -> None:
    """A .keras file in other bytes than the last save of the same model."""
    shutil.copyfile(saved, target)
    with zipfile.ZipFile(target, "a") as copy:
        copy.comment = b"another save"


def test_the_saved_models_weights_are_streamed_not_held(tmp_path: Path) -> None:
    """Writing the results in fixed bytes (`same_bytes`) copies the weights in chunks: a
    backbone's 100 MB are not held again at the end of a run, on a VM the run has filled."""
    model = keras.Sequential([keras.Input((1000,)), keras.layers.Dense(4000)])  # 16 MB
    model.save(tmp_path / "saved.keras")
    tracemalloc.start()
    checkpoints.same_bytes(tmp_path / "saved.keras", tmp_path / "fixed.keras")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * 2**20, peak  # the copy's chunk (1 MiB), not the weights
    loaded = keras.models.load_model(tmp_path / "fixed.keras")
    assert _same(loaded.get_weights(), model.get_weights())


def test_fresh_starts_over_and_a_finished_run_just_writes_results(
    tiny_project: Path, capsys, monkeypatch
) -> None:
    params = load_params(tiny_project / "params.yaml", [*TINY, "train.epochs=1", "run_name=f"])
    model = tiny_project / "results/models/model.keras"
    first = train(params, tiny_project)
    saved = model.read_bytes()
    capsys.readouterr()
    again = train(params, tiny_project)
    out = capsys.readouterr().out
    assert "already complete" in out and "--fresh" not in out
    assert model.read_bytes() == saved  # as its record names it
    assert again.facts["weights_sha256"] == first.facts["weights_sha256"]
    assert again.metrics["history"] == first.metrics["history"]  # nothing trained again
    # A session that trained no step adds no record (nor tracker run) to the run's own, unless
    # that one is missing (it could not be written, a full disk): then the same command writes it.
    assert [r["status"] for r in list_runs(tiny_project)] == ["completed"]
    # Results not there (`dvc repro` deletes a stage's outputs first) are written again in the
    # bytes its record names: no record either.
    metrics = tiny_project / "results/metrics/train.json"
    for output in (model, model.with_name("model.json"), metrics):
        output.unlink()
    train(params, tiny_project)
    assert model.read_bytes() == saved
    assert [r["status"] for r in list_runs(tiny_project)] == ["completed"]
    # Written in other bytes (a GPU's validation need not be deterministic), they get a record of
    # the session that wrote them; the model card's run is still the session that trained it,
    # not that one (resumes 1, a few seconds).
    model.unlink()
    monkeypatch.setattr(checkpoints, "same_bytes", _another_save)
    train(params, tiny_project)
    trained, rewrote = list_runs(tiny_project)
    assert rewrote["facts"]["started_at_step"] == rewrote["metrics"]["steps"]
    assert find_run(tiny_project / "results", "models/model.keras") == trained
    shutil.rmtree(runs_dir(tiny_project))
    train(params, tiny_project)
    assert [r["status"] for r in list_runs(tiny_project)] == ["completed"]
    capsys.readouterr()
    fresh = train(params, tiny_project, fresh=True)
    out = capsys.readouterr().out
    folder = Path(os.environ["PROJECT_STORAGE_DIR"]) / "checkpoints" / "f"
    assert f"--fresh: deleted 3 checkpoints of run 'f' (steps 30..44) in {folder}" in out
    assert "Starting run 'f' from step 0" in out and "Resuming" not in out
    assert fresh.facts["weights_sha256"] == first.facts["weights_sha256"]  # deterministic
    assert fresh.facts["data_hash"] == first.facts["data_hash"]


def stop_early(project: Path, *overrides: str):
    """A run stopped by a tiny time budget after its first chunk (a checkpoint at step 5)."""
    base = [*TINY, "train.epochs=1", "train.time_budget_minutes=0.0001", *overrides]
    stopped = train(load_params(project / "params.yaml", base), project)
    assert stopped.status == "stopped" and stopped.step == 5
    return base


def test_another_setting_is_refused_by_name_and_the_checkpoints_stay(
    tiny_project: Path, capsys
) -> None:
    base = stop_early(tiny_project, "run_name=m")
    folder = Path(os.environ["PROJECT_STORAGE_DIR"]) / "checkpoints" / "m"
    before = sorted(p.name for p in folder.iterdir())
    for changed, named in (
        ("train.batch_size=16", "global_batch was 32, now 16"),
        ("train.learning_rate=0.003", "train.learning_rate was 0.001, now 0.003"),
        ("model.hidden_units=[32]", "model.hidden_units was [16], now [32]"),
    ):
        params = load_params(tiny_project / "params.yaml", [*base, changed])
        with pytest.raises(CheckpointMismatch) as refused:
            train(params, tiny_project)
        message = str(refused.value)
        assert message.startswith(f"run 'm' was started with other settings or data ({named}); ")
        assert "--set run_name=m-" in message and "--fresh" not in message
        assert sorted(p.name for p in folder.iterdir()) == before, "nothing deleted"
    # What only changes how or when it runs: the same run, resumed.
    how = ["train.checkpoint_every_steps=7", "train.steps_per_execution=3", "train.epochs=2"]
    capsys.readouterr()
    resumed = train(load_params(tiny_project / "params.yaml", [*base, *how]), tiny_project)
    assert "Resuming run 'm' from its checkpoint at step 5" in capsys.readouterr().out
    assert resumed.status == "stopped" and resumed.step > 5


@register("architecture", "test_capped")
def capped(inputs, spec, cfg, cap: float = 6.0):  # noqa: ANN001, ANN201
    """A user's architecture whose argument may be infinite (`.inf`: no cap)."""
    return keras.layers.ReLU(max_value=cap)(keras.layers.Flatten()(inputs))


def test_an_infinite_setting_resumes_and_a_change_from_it_is_named(
    tiny_project: Path, capsys
) -> None:
    """meta.json is standard JSON, which has no infinity: a run of `model.args.cap=.inf` still
    finds its own settings there, and another value is named."""
    capped = ["run_name=inf", "model.architecture=test_capped", "model.args.cap=.inf"]
    base = stop_early(tiny_project, *capped)
    capsys.readouterr()
    resumed = train(load_params(tiny_project / "params.yaml", base), tiny_project)
    assert "Resuming run 'inf' from its checkpoint at step 5" in capsys.readouterr().out
    assert resumed.status == "stopped" and resumed.step > 5
    finite = load_params(tiny_project / "params.yaml", [*base, "model.args.cap=6.0"])
    with pytest.raises(CheckpointMismatch, match=r"\(model.args.cap was Infinity, now 6.0\)"):
        train(finite, tiny_project)


def test_a_run_past_its_epochs_is_refused(tiny_project: Path) -> None:
    base = stop_early(tiny_project, "run_name=past")
    folder = Path(os.environ["PROJECT_STORAGE_DIR"]) / "checkpoints" / "past"
    meta_file = next(folder.glob("step-*/meta.json"))
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "step": 60}))  # as if trained 2 epochs of 44
    with pytest.raises(
        CheckpointMismatch,
        match=r"has trained 60 steps, more than the 44 of "
        r"train.epochs=1: set train.epochs to 2 or more",
    ):
        train(load_params(tiny_project / "params.yaml", base), tiny_project)


def test_another_model_and_an_older_checkpoint_are_refused(tiny_project: Path) -> None:
    """A checkpoint of a cnn with other filters: named by the fingerprint. A checkpoint that an
    older version of the project wrote: refused in one line that names another run_name, and
    kept."""
    old_cnn = ["model.architecture=cnn", "model.filters=[4,8]", "run_name=cnn"]
    base = stop_early(tiny_project, *old_cnn)
    new_cnn = load_params(tiny_project / "params.yaml", [*base, "model.filters=[16,32,64,128]"])
    with pytest.raises(
        CheckpointMismatch, match=r"model.filters was \[4, 8\], now \[16, 32, 64, 128\]"
    ):
        train(new_cnn, tiny_project)
    folder = Path(os.environ["PROJECT_STORAGE_DIR"]) / "checkpoints" / "cnn"
    for meta_file in folder.glob("step-*/meta.json"):  # as an older version wrote them
        meta = json.loads(meta_file.read_text())
        meta_file.write_text(json.dumps({k: v for k, v in meta.items() if k != "format"}))
    before = sorted(p.name for p in folder.rglob("*"))
    with pytest.raises(CheckpointMismatch) as refused:
        train(load_params(tiny_project / "params.yaml", base), tiny_project)
    message = str(refused.value)
    assert message.startswith("run 'cnn' has checkpoints of an older version of this project")
    assert "\n" not in message and "--set run_name=cnn-" in message and "--fresh" not in message
    assert sorted(p.name for p in folder.rglob("*")) == before, "nothing deleted"


def test_small_tabular_data_resumes_bit_identical_under_two_replicas(
    tiny_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small tabular data is held on the replicas' devices (no per-step iterator). A run stopped
    after every chunk and resumed from its checkpoint each time ends bit-identical to a run never
    stopped, under MirroredStrategy over two logical CPUs, dropout on."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    rows = [f"{a:.4f},{b:.4f},{c:.4f},{d:.4f},{'abc'[int(a > 0) + int(b > 0)]}" for a, b, c, d in x]
    table = tiny_project / "table.csv"
    table.write_text("\n".join(["a,b,c,d,label", *rows]) + "\n")
    overrides = [
        "data.source=csv", f"data.path={table}", "data.label=label",
        "distribute.strategy=mirrored", "distribute.logical_cpus=2",
        "train.epochs=2", "train.batch_size=8", "train.steps_per_execution=7",
        "train.checkpoint_every_steps=1000", "model.hidden_units=[16]", "model.dropout=0.2",
        "repro.deterministic=true",
    ]  # fmt: skip
    params = tiny_project / "params.yaml"
    prepare(load_params(params, overrides), tiny_project)
    per_epoch = load_spec(tiny_project / PROCESSED).counts["train"] // 16
    assert 7 < per_epoch < 14
    feeds = []
    make_feed = trainer.make_feed
    monkeypatch.setattr(trainer, "make_feed", lambda *a: feeds.append(make_feed(*a)) or feeds[-1])
    ref = train(load_params(params, [*overrides, "run_name=whole"]), tiny_project)
    assert ref.facts["replicas"] == 2 and ref.step == 2 * per_epoch

    cut = load_params(params, [*overrides, "run_name=cut", "train.time_budget_minutes=1e-6"])
    calls = []
    while not calls or calls[-1].status == "stopped":
        calls.append(train(cut, tiny_project))  # one chunk per call (the budget), then resume
    # (the budget also ends the call that reaches the last step; the next one writes results)
    assert [c.step for c in calls] == [7, per_epoch, per_epoch + 7, 2 * per_epoch, 2 * per_epoch]
    assert calls[-1].facts["weights_sha256"] == ref.facts["weights_sha256"]
    # train.json's history holds every epoch, also those trained before the last resume, and
    # each epoch's training loss covers all its steps (it was stopped in each epoch).
    rows = [{k: v for k, v in h.items() if k != "seconds"} for h in calls[-1].metrics["history"]]
    assert rows == [{k: v for k, v in h.items() if k != "seconds"} for h in ref.metrics["history"]]
    assert len(rows) == 2 and calls[-1].facts["resumes"] == 4
    assert len(feeds) == 1 + len(calls) and all(isinstance(f, Resident) for f in feeds)
