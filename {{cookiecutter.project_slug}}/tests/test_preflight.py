"""The preflight: one line per finding; an unmounted Drive and a missing accelerator stop the run,
a storage or memory shortfall only warns."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import tensorflow as tf
from conftest import PARAMS, TINY, sets

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.core import storage as storages
from {{ cookiecutter.module_name }}.training import preflight
from {{ cookiecutter.module_name }}.training.preflight import PreflightError
from {{ cookiecutter.module_name }}.training.strategy import StrategyInfo

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

CPU = StrategyInfo(name="_DefaultDistributionStrategy", replicas=1, device="CPU", is_chief=True)
GPU = StrategyInfo(name="MirroredStrategy", replicas=2, device="GPU", is_chief=True)


@pytest.fixture
def fake_drive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """/content/drive stand-in: the root exists, MyDrive (the mount) does not; not a mount point
    (`storage.drive_mounted` patched says it is)."""
    root = tmp_path / "content" / "drive"
    root.mkdir(parents=True)
    monkeypatch.setattr(storages, "DRIVE_ROOT", root)
    monkeypatch.setattr(storages, "COLAB_DRIVE", root / "MyDrive")
    return root


def test_unmounted_drive_stops_a_mounted_one_does_not(
    fake_drive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_drive = fake_drive / "MyDrive" / "project"
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(on_drive))
    with pytest.raises(ConfigError, match=r"^PROJECT_STORAGE_DIR: .* not mounted"):
        storages.storage_root(tmp_path)
    (fake_drive / "MyDrive").mkdir()  # what a `mkdir -p` makes: still not mounted
    with pytest.raises(ConfigError, match=r"^PROJECT_STORAGE_DIR: .* not mounted"):
        storages.storage_root(tmp_path)
    monkeypatch.setattr(storages, "drive_mounted", lambda root: True)
    assert storages.storage_root(tmp_path) == on_drive
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "local"))  # not on Drive: fine
    monkeypatch.setattr(storages, "drive_mounted", lambda root: False)
    assert storages.storage_root(tmp_path) == tmp_path / "local"


def test_prepare_into_a_drive_folder_that_is_not_mounted_is_one_line_and_writes_nothing(
    tiny_project: Path, fake_drive: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A MyDrive folder on the VM's disk (a `mkdir -p` made it; no Drive mounted): `prepare`
    stops with train's line, before writing anything there or in the project."""
    (fake_drive / "MyDrive").mkdir()
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(fake_drive / "MyDrive" / "project"))
    before = sorted(tiny_project.rglob("*"))
    code = main(["prepare", "--params", str(tiny_project / "params.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: PROJECT_STORAGE_DIR:"), err
    assert "is not mounted" in err[0]
    assert not any((fake_drive / "MyDrive").iterdir())
    assert sorted(tiny_project.rglob("*")) == before


def test_train_on_an_unmounted_drive_is_one_line_and_writes_nothing(
    tiny_project: Path, fake_drive: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    storage = fake_drive / "MyDrive" / "project"
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(storage))
    code = main(["train", *sets(TINY), "--params", str(tiny_project / "params.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: PROJECT_STORAGE_DIR:"), err
    assert not (fake_drive / "MyDrive").exists()


def test_no_accelerator_stops_only_when_required() -> None:
    required = load_params(PARAMS, ["distribute.require_accelerator=true"])
    with pytest.raises(PreflightError, match=r"^distribute.require_accelerator: no GPU or TPU"):
        preflight.check_accelerator(required, CPU)
    assert "GPU" in preflight.check_accelerator(required, GPU)
    assert "CPU" in preflight.check_accelerator(load_params(PARAMS), CPU)


def test_train_without_an_accelerator_when_required_is_one_line(tiny_project: Path, capsys) -> None:
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU: the run would start")
    args = ["train", *sets([*TINY, "distribute.require_accelerator=true"])]
    code = main([*args, "--params", str(tiny_project / "params.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "distribute.require_accelerator" in err[0], err


def test_a_runs_checkpoint_size_estimate_counts_all_it_saves(
    tiny_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's estimate counts what its checkpoint saves: the model, the optimizer's slots and
    the best weights (a copy of the model's); meta.json's few KiB are left out."""
    estimates, finding = [], preflight.space_finding

    def spy(folder: Path, checkpoint_bytes: int, keep: int) -> str:
        estimates.append(checkpoint_bytes)
        return finding(folder, checkpoint_bytes, keep)

    monkeypatch.setattr(preflight, "space_finding", spy)
    overrides = [*TINY, "train.epochs=1", "model.hidden_units=[256]", "run_name=size"]
    assert main(["train", *sets(overrides), "--params", str(tiny_project / "params.yaml")]) == 0
    step = sorted((tmp_path / "storage" / "checkpoints" / "size").glob("step-*"))[-1]
    written = sum(f.stat().st_size for f in step.glob("ckpt.*"))
    assert 0.9 < written / estimates[0] < 1.1, (written, estimates)


def test_space_and_memory_findings_are_one_line_warnings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok = preflight.space_finding(tmp_path / "run", checkpoint_bytes=1 << 20, keep=3)
    assert ok.startswith("Preflight: ") and "\n" not in ok
    short = preflight.space_finding(tmp_path / "run", checkpoint_bytes=1 << 60, keep=3)
    assert short.startswith("WARNING: preflight: ") and "keep_checkpoints" in short
    memory = SimpleNamespace(available=1 << 30)
    monkeypatch.setattr(preflight.psutil, "virtual_memory", lambda: memory)
    assert preflight.memory_finding(1 << 20).startswith("Preflight: ")
    low = preflight.memory_finding(1 << 31)
    assert low.startswith("WARNING: preflight: ") and "\n" not in low
