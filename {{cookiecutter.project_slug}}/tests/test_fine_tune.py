"""Fine-tuning in two phases, stopped (budget, SIGKILL) before the phase change and resumed:
bit-identical to an uninterrupted run."""

from __future__ import annotations

import re
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import PARAMS, cli, cli_env, sets

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.training.checkpoints import list_checkpoints
from {{ cookiecutter.module_name }}.training.policy import EXIT_BUDGET
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

SETTINGS = [
    "data.source=images",
    "data.image_size=[32,32]",
    "data.image_channels=3",
    "model.architecture=backbone",
    "model.backbone=MobileNetV3Small",
    "model.weights=null",
    "train.epochs=2",
    "train.batch_size=8",
    "train.steps_per_execution=2",
    "train.checkpoint_every_steps=2",
    "train.fine_tune.frozen_epochs=1",
    "train.fine_tune.unfreeze_layers=6",
    "train.optimizer=sgd",
    "train.clip_norm=1.0",
]


def _images(folder: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for label, shade in (("dark", 60), ("light", 190)):
        (folder / label).mkdir(parents=True)
        for i in range(20):
            pixels = np.clip(rng.normal(shade, 40, (36, 36, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / label / f"{i}.png")


def _prepared(tmp_path: Path, extra: list[str]) -> tuple[Path, list[str]]:
    """A project with 40 prepared 32x32 RGB images (24 for training: 3 steps per epoch)."""
    _images(tmp_path / "pets")
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PARAMS, project / "params.yaml")
    base = [*SETTINGS, f"data.path={tmp_path / 'pets'}", *extra]
    prepare(load_params(project / "params.yaml", base), project)
    return project, base


def test_phase_change_resumes_bit_identical(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    project, base = _prepared(tmp_path, [])

    def run(*extra: str):  # noqa: ANN202 - a TrainResult
        return train(load_params(project / "params.yaml", [*base, *extra]), project)

    reference = run("run_name=ref")
    out = capsys.readouterr().out
    assert reference.status == "completed", out
    assert "backbone frozen for 1 epochs" in out and "fine-tuning the backbone's top" in out
    boundary = reference.step // 2
    # 3 ms of budget: stopped after the first chunk, in the frozen phase.
    stopped = run("run_name=ft", "train.time_budget_minutes=0.00005")
    assert stopped.exit_code == EXIT_BUDGET and 0 < stopped.step < boundary
    resumed = run("run_name=ft")
    out = capsys.readouterr().out
    assert f"from its checkpoint at step {stopped.step}" in out
    assert resumed.facts["weights_sha256"] == reference.facts["weights_sha256"]


@pytest.mark.slow
def test_sigkill_before_the_phase_change_then_resume_is_bit_identical(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    # Frozen for 2 epochs of 3 steps: the phase changes at step 6 of 9.
    project, base = _prepared(tmp_path, ["train.epochs=3", "train.fine_tune.frozen_epochs=2"])
    reference = train(load_params(project / "params.yaml", [*base, "run_name=ref"]), project)
    assert reference.status == "completed" and reference.step == 9

    storage = tmp_path / "killed-storage"
    env = cli_env(storage)
    args = ["train", *sets([*base, "run_name=kill"])]
    proc = cli(args, project, env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if list_checkpoints(storage / "checkpoints" / "kill"):  # the first, at step 2
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == -signal.SIGKILL, out

    resumed = cli(args, project, env)
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, out
    match = re.search(r"from its checkpoint at step (\d+)", out)
    assert match and 2 <= int(match.group(1)) < 6, out  # resumed before the phase change
    assert "fine-tuning the backbone's top layers" in out
    assert f"final weights sha256 {reference.facts['weights_sha256']}" in out
