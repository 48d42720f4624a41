"""Fine-tuning in two phases, stopped before the phase change and resumed: bit-identical."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from conftest import PROJECT

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.prepare import prepare
from {{ cookiecutter.module_name }}.trainer import EXIT_BUDGET, train

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


def test_phase_change_resumes_bit_identical(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    _images(tmp_path / "pets")
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PROJECT / "params.yaml", project / "params.yaml")
    base = [*SETTINGS, f"data.path={tmp_path / 'pets'}"]
    prepare(load_params(project / "params.yaml", base), project)

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
    assert resumed.metrics["weights_sha256"] == reference.metrics["weights_sha256"]
