"""Shared test setup for the training core.

TensorFlow can split the CPU into logical devices only before it initialises, so this file does
it once, at collection, for every in-process test: two logical CPUs let MirroredStrategy run with
two replicas on any machine. Tests that need a fresh TensorFlow (SIGKILL, SIGTERM, two workers)
start `python -m <module>` in a subprocess; each one costs a TensorFlow import (5-15 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]
SRC = PROJECT / "src"
_cpu = tf.config.list_physical_devices("CPU")[0]
# RuntimeError: already initialised by another conftest or plugin; keep what exists.
with contextlib.suppress(RuntimeError):
    tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

# Small and fast: 1438 training digits, 32 per replica -> 44 steps per epoch on one replica.
TINY = [
    "train.epochs=2",
    "train.batch_size=32",
    "train.checkpoint_every_steps=10",
    "train.steps_per_execution=5",
    "train.keep_checkpoints=3",
    "model.hidden_units=[16]",
]


# A checkout's own outputs and environments (at its top level), and caches anywhere.
OUTPUTS = (".git", ".venv", "results", "data", "wandb", "checkpoints")
CACHES = shutil.ignore_patterns("__pycache__", "*.egg-info")


def tensorboard_values(folder: Path) -> dict[str, list]:
    """Every value the TensorBoard event files in `folder` hold, as arrays, by tag, in order."""
    values: dict[str, list] = {}
    for file in sorted(folder.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(file)):
            for value in event.summary.value:
                values.setdefault(value.tag, []).append(tf.make_ndarray(value.tensor))
    return values


def copy_checkout(dest: Path) -> Path:
    """This project's files without outputs, environments or caches (src/<module>/data stays)."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = set(OUTPUTS) & set(names) if Path(folder) == PROJECT else set()
        return top | CACHES(folder, names)

    shutil.copytree(PROJECT, dest, ignore=ignore)
    return dest


@pytest.fixture
def tiny_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder with the template's params.yaml and its own storage root."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PROJECT / "params.yaml", project / "params.yaml")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    return project


def cli_env(storage: Path, **extra: str) -> dict[str, str]:
    """Environment for `python -m <module>` in a subprocess: this checkout's src first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PROJECT_STORAGE_DIR"] = str(storage)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def cli(args: list[str], cwd: Path, env: dict[str, str], **kwargs) -> subprocess.Popen:
    """Start `python -m <module> ARGS` in `cwd`; stdout and stderr merged."""
    return subprocess.Popen(
        [sys.executable, "-m", MODULE, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def sets(overrides: list[str]) -> list[str]:
    """["a=1", "b=2"] -> ["--set", "a=1", "--set", "b=2"]."""
    return [part for item in overrides for part in ("--set", item)]


def save_for_users(logits_model, task, spec, models_dir: Path) -> Path:
    """Save `model.keras` and `model.json` as `train` does, for tests that need a saved model."""
    from {{ cookiecutter.module_name }}.training.saved_model import (
        user_sidecar,
        wrap_for_users,
    )

    models_dir.mkdir(parents=True, exist_ok=True)
    wrap_for_users(logits_model, task).save(models_dir / "model.keras")
    (models_dir / "model.json").write_text(json.dumps(user_sidecar(task, spec)))
    return models_dir / "model.keras"


def main_in_fresh_process(
    calls: list[list[str]], cwd: Path, storage: Path
) -> subprocess.CompletedProcess:
    """Run `__main__.main(args)` for each argument list in ONE new Python process (this
    checkout's src first): what a user's fresh shell does, for the price of one TensorFlow start.
    """
    script = (
        f"import sys; from {MODULE}.__main__ import main\n"
        f"sys.exit(max(main(args) for args in {calls!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=cli_env(storage),
        capture_output=True,
        text=True,
        timeout=300,
    )
