"""Writes that survive a kill (core/files.py): the temporary file a killed write leaves is removed
by a later write into its folder, and nothing else is: not a write in progress, not the user's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

from conftest import PARAMS, cli_env

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.core.files import atomic_write
from {{ cookiecutter.module_name }}.training.checkpoints import write_results
from {{ cookiecutter.module_name }}.training.lease import Lease
from {{ cookiecutter.module_name }}.training.sweep_results import write_params

KILLED_WRITE = """
import os, signal, sys
from {{ cookiecutter.module_name }}.core.files import atomic_write
os.replace = lambda *args: os.kill(os.getpid(), signal.SIGKILL)  # killed before its replace
atomic_write(sys.argv[1], "new")
"""
LIVE = "0123456789abcdef"  # a name as temp_file makes them: another process's write in progress


def aged(*paths: Path) -> None:
    """Make `paths` untouched for an hour: a killed write's, or the user's old files."""
    for path in paths:
        os.utime(path, (time.time() - 3600,) * 2)


def test_a_write_killed_before_its_replace_leaves_a_temp_file_the_next_write_removes(
    tmp_path: Path,
) -> None:
    target = tmp_path / "results" / "metrics.json"
    target.parent.mkdir()
    target.write_text("old")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WRITE, str(target)], env=cli_env(tmp_path)
    )
    assert killed.returncode == -signal.SIGKILL
    (left,) = target.parent.glob(".metrics.json-*.tmp")
    assert target.read_text() == "old" and left.read_text() == "new"
    theirs = [".metrics.json.tmp", "metrics.json-0123456789abcdef.tmp", f".notes-{LIVE}.txt"]
    for name in theirs:
        (target.parent / name).write_text("the user's")
    aged(left, *(target.parent / name for name in theirs))
    (target.parent / f".metrics.json-{LIVE}.tmp").write_text("being written")

    atomic_write(target, "newer")
    assert target.read_text() == "newer"
    kept = sorted(p.name for p in target.parent.iterdir())
    assert kept == sorted(["metrics.json", f".metrics.json-{LIVE}.tmp", *theirs])


def _save_keras(path: str) -> None:
    """A model's save: a .keras file is a zip that holds at least these two."""
    with zipfile.ZipFile(path, "w") as saved:
        saved.writestr("metadata.json", "{}")
        saved.writestr("config.json", "{}")


def test_every_temp_file_writer_removes_what_a_killed_write_left(tmp_path: Path) -> None:
    """Beside params.yaml (the sweep's promotion), the final model (Keras needs its suffix on the
    temporary file too) and a run's lease."""
    params = tmp_path / "params.yaml"
    params.write_text((PARAMS).read_text())
    models, run = tmp_path / "models", tmp_path / "checkpoints" / "r"
    models.mkdir()
    run.mkdir(parents=True)
    left = [
        tmp_path / f".params.yaml-{LIVE}.tmp",
        models / f".model.keras-{LIVE}.tmp.keras",
        run / f".lease.json-{LIVE}.tmp",
    ]
    for path in left:
        path.write_text("cut short")
    aged(*left)

    write_params(params, load_params(params, ["seed=2"]))
    model = SimpleNamespace(save=_save_keras)
    write_results(model, {"loss": 1.0}, models / "model.keras", models / "train.json")
    Lease.acquire(run, "r").release()
    assert "seed: 2" in params.read_text()
    assert zipfile.ZipFile(models / "model.keras").namelist() == ["metadata.json", "config.json"]
    assert not [path for path in left if path.exists()]
