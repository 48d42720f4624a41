"""Seeding: every generator, and two runs with one seed give the same weights."""

from __future__ import annotations

import random
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import MODULE, PARAMS, TINY, cli_env

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.training import seeding
from {{ cookiecutter.module_name }}.training.run_record import list_runs
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), float(tf.random.uniform([]))  # noqa: NPY002


def test_same_seed_same_draws() -> None:
    seeding.seed_everything(7, deterministic=False)
    first = _draws()
    seeding.seed_everything(7, deterministic=False)
    assert _draws() == first
    seeding.seed_everything(8, deterministic=False)
    assert _draws() != first


def test_torch_is_seeded_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    fake = types.ModuleType("torch")
    fake.manual_seed = calls.append
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(seeding.importlib.util, "find_spec", lambda name: object())
    assert "torch" in seeding.seed_everything(3, deterministic=False)
    assert calls == [3]


def _weights(project: Path, *overrides: str) -> list[np.ndarray]:
    import keras

    params = load_params(project / "params.yaml", [*TINY, "train.epochs=1", *overrides])
    train(params, project, fresh=True)
    return keras.models.load_model(project / "results/models/model.keras").get_weights()


def test_two_runs_same_seed_same_weights(tiny_project: Path) -> None:
    first = _weights(tiny_project, "seed=5", "run_name=a")
    again = _weights(tiny_project, "seed=5", "run_name=b")
    other = _weights(tiny_project, "seed=6", "run_name=c")
    assert all(np.array_equal(x, y) for x, y in zip(first, again, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(first, other, strict=True))


def test_deterministic_ops_stay_on_in_the_process_and_the_run_says_so(
    tiny_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # TensorFlow has no public call that turns op determinism off: a later run in the same
    # process (a notebook's kernel) with `repro.deterministic: false` still runs deterministic
    # ops, so its line and its record say so.
    _weights(tiny_project, "repro.deterministic=true", "run_name=det-on")
    capsys.readouterr()
    _weights(tiny_project, "repro.deterministic=false", "run_name=det-off")
    assert "deterministic ops on (turned on earlier in this process" in capsys.readouterr().out
    (record,) = [run for run in list_runs(tiny_project) if run["params"]["run_name"] == "det-off"]
    assert record["params"]["repro"]["deterministic"] is True


USER_FIRST = f"""
import sys
import tensorflow as tf
tf.config.experimental.enable_op_determinism()  # the user's own cell (or model.py), first
from {MODULE}.config import load_params
from {MODULE}.training.seeding import as_run, seed_everything
params = load_params(sys.argv[1], ["repro.deterministic=false"])
seed_everything(params.seed, params.repro.deterministic)
params, words = as_run(params)
print(params.repro.deterministic, words)
"""


def test_determinism_the_user_turned_on_is_what_the_run_says(tmp_path: Path) -> None:
    """A user who turns op determinism on themselves, then trains with `repro.deterministic:
    false`: no error, and the run's line and record say its ops are deterministic, as they are.
    A process of its own: determinism cannot be turned off in this one."""
    done = subprocess.run(
        [sys.executable, "-c", USER_FIRST, str(PARAMS)],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True on (turned on earlier in this process"), done.stdout
