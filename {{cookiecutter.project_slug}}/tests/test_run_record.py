"""Every training run writes results/runs/<run_id>/manifest.json holding each field."""

from __future__ import annotations

import errno
import json
import os
import shlex
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import PARAMS, copy_checkout

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.core.environment import collect_environment
from {{ cookiecutter.module_name }}.core.files import file_sha256
from {{ cookiecutter.module_name }}.training import run_record
from {{ cookiecutter.module_name }}.training.checkpoints import ResultsWriteError
from {{ cookiecutter.module_name }}.training.run_record import (
    build_record,
    find_run,
    list_runs,
    new_run_id,
    runs_table,
    write_run_record,
)
from {{ cookiecutter.module_name }}.training.trainer import TrainResult

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]
# Fields every manifest has.
FIELDS = (
    "run_id", "kind", "run_name", "status", "params", "seed", "environment", "git", "data",
    "class_weight", "checkpoints", "metrics", "facts", "artifacts", "timing", "tracking",
    "command", "reproduce",
)  # fmt: skip
FACTS = (
    "run_name status data_hash run_fingerprint weights_sha256 strategy device precision monitor "
    "replicas workers global_batch learning_rate resumes started_at_step"
)


def copy_project(tmp_path: Path) -> Path:
    """This project's code and config in a fresh folder: runs write there, not here."""
    target = tmp_path / "project"
    copy_checkout(target)
    return target


def run_module(project: Path, *args: str, storage: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "PROJECT_STORAGE_DIR": str(storage)}
    for name in ("PROJECT_RESULTS_DIR", "TF_CONFIG", "CLUSTER_SPEC", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    env["WANDB_MODE"] = "offline"
    return subprocess.run(
        [sys.executable, "-m", MODULE, *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_record_has_every_field_and_is_written_atomically(tmp_path):
    model = tmp_path / "results" / "models" / "model.keras"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"weights")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "manifest.json").write_text('{"files": []}')
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)  # noqa: UP017
    params = {"seed": 11, "run_name": "unit", "train": {"epochs": 1}}
    run_id = new_run_id("unit", started)
    record = build_record(
        tmp_path,
        run_id=run_id,
        params=params,
        status="completed",
        metrics={"val_accuracy": 0.9},
        artifacts=[model, tmp_path / "missing.json"],
        checkpoints=tmp_path / "storage" / "checkpoints" / "unit",
        started_at=started,
        finished_at=started + timedelta(seconds=90),
        environment=collect_environment(tmp_path, devices=False),
    )
    path = write_run_record(tmp_path, record)

    assert path == tmp_path / "results" / "runs" / run_id / "manifest.json"
    assert run_id.startswith("20260102T030405Z-unit-")
    saved = json.loads(path.read_text())
    assert set(FIELDS) <= set(saved)
    assert saved["seed"] == 11
    assert saved["params"] == params
    assert saved["timing"]["duration_s"] == 90.0
    assert saved["data"]["manifest"]["sha256"] == file_sha256(tmp_path / "data" / "manifest.json")
    assert saved["artifacts"][0] == {
        "path": "results/models/model.keras",
        "bytes": 7,
        "sha256": file_sha256(model),
    }
    assert saved["artifacts"][1]["exists"] is False
    assert saved["environment"]["packages"]["pyyaml"]
    assert "params.yaml" in " ".join(saved["reproduce"])
    assert saved["reproduce"][1].startswith("dvc pull prepare  # the data version")
    assert yaml.safe_load((path.parent / "params.yaml").read_text()) == params
    assert not list(path.parent.glob(".*"))  # no temp files left behind
    assert list_runs(tmp_path) == [saved] and run_id in runs_table([saved])
    assert find_run(tmp_path / "results", "models/model.keras") == saved  # the same reader


@pytest.mark.slow
def test_a_training_run_writes_a_complete_manifest(tmp_path):
    project = copy_project(tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    storage = tmp_path / "storage"
    run = run_module(project, "prepare", storage=storage)
    assert run.returncode == 0, run.stdout + run.stderr
    tiny = ["--set=train.epochs=1", "--set=run_name=recorded", "--set=model.hidden_units=[8]"]
    run = run_module(project, "train", *tiny, storage=storage)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    (manifest,) = (project / "results" / "runs").glob("*/manifest.json")
    record = json.loads(manifest.read_text())
    missing = [field for field in FIELDS if field not in record]
    assert not missing, f"manifest lacks {missing}"
    assert record["run_name"] == "recorded"
    assert record["status"] == "completed"
    assert record["params"]["train"]["epochs"] == 1
    assert record["params"]["model"]["hidden_units"] == [8]
    assert record["seed"] == record["params"]["seed"]
    assert record["environment"]["tensorflow"]["version"]
    assert "commit" in record["git"] and "dirty" in record["git"]
    data_manifest = project / "data" / "manifest.json"
    assert record["data"]["manifest"]["sha256"] == file_sha256(data_manifest)
    assert record["checkpoints"] == str(storage / "checkpoints" / "recorded")
    assert 0.0 <= record["metrics"]["val_accuracy"] <= 1.0
    assert record["metrics"]["history"], "per-epoch metrics missing"
    artifacts = {a["path"]: a for a in record["artifacts"]}
    model = artifacts["results/models/model.keras"]
    assert model["sha256"] == file_sha256(project / "results" / "models" / "model.keras")
    assert record["timing"]["duration_s"] > 0
    assert "tensorboard" in record["tracking"]
    assert "Run record:" in run.stdout
    # The run's facts and every number are here; train.json holds the numbers DVC compares
    # (the loss and the headline metrics on validation) and the curve.
    assert set(record["facts"]) == set(FACTS.split())
    assert record["facts"]["run_name"] == "recorded" and len(record["facts"]["data_hash"]) == 64
    assert find_run(project / "results") == record
    train_json = json.loads((project / "results" / "metrics" / "train.json").read_text())
    assert set(train_json) == {"val_loss", "val_accuracy", "val_f1", "history"}
    assert train_json.items() <= record["metrics"].items()
    assert {"steps", "best_step", "examples_per_sec", "val_auc"} <= set(record["metrics"])
    scalars = {k: v for k, v in train_json.items() if k != "history"}
    assert all(type(v) in (int, float) for v in scalars.values()), scalars
    assert "val_loss" in scalars and not [k for k in scalars if k.startswith("train_val_")]
    assert not {"run_name", "status", "deterministic", "class_weight"} & set(scalars)


def test_a_torn_run_record_is_skipped_with_a_warning(tmp_path, capsys):
    """Drive can lose a VM's last writes: an empty or cut manifest.json in a runs folder (the
    storage's, which a new VM reads) is passed over, said in one line; the others still count."""
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)  # noqa: UP017
    metrics = tmp_path / "results" / "metrics" / "train.json"
    metrics.parent.mkdir(parents=True)
    metrics.write_text('{"val_loss": 0.5}\n')
    record = build_record(
        tmp_path,
        run_id=new_run_id("good", started),
        params={"seed": 1, "run_name": "good"},
        status="completed",
        metrics={},
        artifacts=[metrics],
        checkpoints=tmp_path / "checkpoints" / "good",
        started_at=started,
        finished_at=started,
        environment=collect_environment(tmp_path, devices=False),
    )
    write_run_record(tmp_path, record)
    torn = tmp_path / "results" / "runs" / "20270101T000000Z-cut-0000" / "manifest.json"
    torn.parent.mkdir()
    torn.write_text('{"run_id": "20270101T000000Z-cut-0000", "arti')  # newer, cut short
    capsys.readouterr()

    assert [r["run_id"] for r in list_runs(tmp_path)] == [record["run_id"]]
    assert find_run(tmp_path / "results")["run_id"] == record["run_id"]
    said = capsys.readouterr().out.strip().splitlines()
    assert said and all(line.startswith("WARNING:") and str(torn) in line for line in said)


def test_reproduce_commands_quote_a_results_folder_with_spaces(tmp_path, monkeypatch):
    """$PROJECT_RESULTS_DIR in "My Drive/Colab Notebooks": the commands still paste into a shell."""
    results = tmp_path / "Colab Notebooks" / "results"
    monkeypatch.setenv("PROJECT_RESULTS_DIR", str(results))
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)  # noqa: UP017
    run_id = new_run_id("spaced", started)
    record = build_record(
        tmp_path / "project",
        run_id=run_id,
        params={"seed": 1, "run_name": "spaced"},
        status="completed",
        metrics={},
        artifacts=[],
        checkpoints=tmp_path / "checkpoints" / "spaced",
        started_at=started,
        finished_at=started,
        environment={"git": {"commit": "abc123"}, "data": {"manifest": None, "dvc": None}},
    )
    (copy,) = [shlex.split(line) for line in record["reproduce"] if line.startswith("cp ")]
    # no data manifest: the bundled digits, which no `dvc pull` brings back
    assert record["reproduce"][1].startswith("# no data/manifest.json at that commit")
    assert copy == ["cp", str(results / "runs" / run_id / "params.yaml"), "params.yaml"]


def test_a_run_record_on_a_full_disk_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    """The model and train.json are written, then the disk is full: one line naming the record
    and how to write it (the same train command), as for the results themselves."""

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.delenv("PROJECT_RESULTS_DIR", raising=False)
    monkeypatch.setattr(run_record, "atomic_write", full)
    params = load_params(PARAMS, ["run_name=full"])
    results = tmp_path / "results"
    paths = SimpleNamespace(
        model_file=results / "models" / "model.keras",
        metrics_file=results / "metrics" / "train.json",
        checkpoints=tmp_path / "checkpoints" / "full",
    )
    result = TrainResult("completed", 10, metrics={"val_loss": 0.5})
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)  # noqa: UP017
    with pytest.raises(ResultsWriteError) as err:
        run_record.record_run(params, tmp_path, paths, result, started)
    text = str(err.value)
    assert "\n" not in text and "No space left on device" in text, text
    assert str(results / "runs") in text and "the same train command" in text
    # Full after params.yaml: no folder of a record is left without its manifest.
    monkeypatch.undo()
    monkeypatch.delenv("PROJECT_RESULTS_DIR", raising=False)
    monkeypatch.setattr(run_record, "save_json", full)
    with pytest.raises(ResultsWriteError):
        run_record.record_run(params, tmp_path, paths, result, started)
    assert list((results / "runs").iterdir()) == []


def test_the_runs_table_of_a_vm_without_runs_is_empty_not_an_error():
    """Notebook 03 on a new VM (its model restored from Drive, no run records here) ends with
    the table of this VM's runs: its header only."""
    table = runs_table([]).splitlines()
    assert len(table) == 2 and table[0].startswith("| run ") and "val_loss" in table[0]
