"""Clean stops: time budget, SIGINT (a notebook's interrupt) and SIGTERM, each resumable."""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import keras
import pytest
from conftest import PARAMS, TINY, cli, cli_env, sets

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.registry import _ENTRIES, register
from {{ cookiecutter.module_name }}.training.checkpoints import list_checkpoints
from {{ cookiecutter.module_name }}.training.policy import EXIT_BUDGET
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it


def test_time_budget_stops_with_checkpoint_and_resumes_exactly(
    tiny_project: Path, capsys, bars
) -> None:
    base = [*TINY, "train.epochs=3", "run_name=budget"]
    reference = train(
        load_params(tiny_project / "params.yaml", [*base, "run_name=ref"]), tiny_project
    )
    capsys.readouterr()

    # 3 ms: the budget is over after the first chunk.
    params = load_params(tiny_project / "params.yaml", [*base, "train.time_budget_minutes=0.00005"])
    stopped = train(params, tiny_project, resume_command="python -m pkg train")
    out = capsys.readouterr().out
    assert stopped.status == "stopped" and stopped.exit_code == EXIT_BUDGET
    assert 0 < stopped.step < reference.step  # the reference trained every step
    assert "time budget of" in out and "Continue with: python -m pkg train" in out
    ckpt_dir = Path(os.environ["PROJECT_STORAGE_DIR"]) / "checkpoints" / "budget"
    assert list_checkpoints(ckpt_dir)[-1][0] == stopped.step

    done = train(load_params(tiny_project / "params.yaml", base), tiny_project)
    assert f"from its checkpoint at step {stopped.step}" in capsys.readouterr().out
    assert done.facts["weights_sha256"] == reference.facts["weights_sha256"]
    # A clean stop is no failure: its bar ends at its step, as a complete run's (Colab's widget
    # would stay red if closed short of its total).
    assert [(bar.leave, bar.total - bar.n) for bar in bars] == [(True, 0)] * 3


class Fragile(keras.layers.Layer):
    """A user's layer with a bug that shows only in training."""

    def call(self, x, training=None):  # noqa: ANN001, ANN201
        if training:
            raise ValueError("Fragile: this layer cannot train")
        return x


def fragile(inputs, spec, cfg):  # noqa: ANN001, ANN201
    """A user's architecture whose layer raises in the run's first chunk."""
    return Fragile()(keras.layers.Flatten()(inputs))


def test_a_crash_closes_its_bar_short_of_its_total(tiny_project: Path, bars, monkeypatch) -> None:
    """A run that crashes ends its progress bar on the way out, short of its total: Colab's
    widget turns it red, where a bar left open (a notebook keeps the traceback, and the bar with
    it) would stay at 0/88 as if the run still went on."""
    monkeypatch.setitem(_ENTRIES["architecture"], "test_fragile", None)  # gone after this test
    register("architecture", "test_fragile")(fragile)
    params = load_params(tiny_project / "params.yaml", [*TINY, "model.architecture=test_fragile"])
    with pytest.raises(ValueError, match="Fragile: this layer cannot train"):
        train(params, tiny_project)
    # tqdm's close() disables the bar; a widget's closed short of its total turns 'danger'.
    assert [(bar.disable, bar.n, bar.total) for bar in bars] == [(True, 0, 2 * (1438 // 32))]


def test_sigint_stops_cleanly(tiny_project: Path, capsys) -> None:
    params = load_params(tiny_project / "params.yaml", [*TINY, "train.epochs=30", "run_name=int"])
    ckpt_dir = Path(os.environ["PROJECT_STORAGE_DIR"]) / "checkpoints" / "int"

    def interrupt_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while not list_checkpoints(ckpt_dir) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_after_first_checkpoint, daemon=True).start()
    result = train(params, tiny_project)
    out = capsys.readouterr().out
    assert result.status == "stopped" and result.exit_code == 128 + signal.SIGINT
    assert "Received SIGINT" in out and "Continue with:" in out
    assert list_checkpoints(ckpt_dir)[-1][0] == result.step
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored


@pytest.mark.slow
def test_sigterm_in_a_subprocess(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PARAMS, project)
    storage = tmp_path / "storage"
    args = ["train", "--fresh", *sets([*TINY, "train.epochs=200", "run_name=term"])]
    proc = cli(args, project, cli_env(storage))
    ckpt_dir = storage / "checkpoints" / "term"
    deadline = time.monotonic() + 300
    while not list_checkpoints(ckpt_dir) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "Received SIGTERM" in out
    match = re.search(r"Stopped at step (\d+) of (\d+)", out)
    assert match and int(match.group(1)) < int(match.group(2)), out
    assert list_checkpoints(ckpt_dir)[-1][0] == int(match.group(1))
    resume = re.search(r"Continue with: (.*)", out).group(1)
    assert resume.startswith("python -m {{ cookiecutter.module_name }} train --set")
    assert "--fresh" not in resume  # continuing must not start over
