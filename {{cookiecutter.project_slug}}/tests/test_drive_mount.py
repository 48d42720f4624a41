"""On Colab, the storage root mounts Google Drive when it is not mounted yet (a fake Colab here)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from {{ cookiecutter.module_name }}.core import storage

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it


def fake_colab(monkeypatch: pytest.MonkeyPatch, mount) -> None:
    drive = types.SimpleNamespace(mount=mount)
    colab = types.ModuleType("google.colab")
    colab.drive = drive  # type: ignore[attr-defined]
    try:
        import google  # noqa: F401 - a namespace package (protobuf) to hang `colab` on
    except ImportError:
        monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab.drive", drive)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "test")
    monkeypatch.delenv("PROJECT_STORAGE_DIR", raising=False)


def test_mounts_drive_when_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    my_drive = tmp_path / "drive" / "MyDrive"
    monkeypatch.setattr(storage, "COLAB_DRIVE", my_drive)
    # the fake mount makes MyDrive
    monkeypatch.setattr(storage, "drive_mounted", lambda root: my_drive.is_dir())
    calls = []

    def mount(mountpoint: str) -> None:
        calls.append(mountpoint)
        my_drive.mkdir(parents=True)

    fake_colab(monkeypatch, mount)
    assert storage.storage_root(tmp_path / "project") == my_drive / storage.PROJECT_SLUG
    assert calls == ["/content/drive"]
    storage.storage_root(tmp_path / "project")
    assert len(calls) == 1  # already mounted: not again


def test_refused_mount_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(storage, "COLAB_DRIVE", tmp_path / "drive" / "MyDrive")

    def mount(mountpoint: str) -> None:
        raise ValueError("mount failed: credential propagation was unsuccessful")

    fake_colab(monkeypatch, mount)
    assert storage.storage_root(tmp_path / "project") == tmp_path / "project"
    out = capsys.readouterr().out
    assert "could not mount Google Drive (ValueError: mount failed" in out
    assert "drive.mount('/content/drive')" in out and "WARNING" in out


def test_a_drive_folder_that_is_not_a_mount_is_mounted_not_written_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """/content/drive/MyDrive as a plain folder (a `mkdir -p` made it): Drive is not mounted, so
    it is mounted, not taken for Drive; drive.mount refuses a mount point that holds files."""
    root = tmp_path / "drive"
    (root / "MyDrive").mkdir(parents=True)
    monkeypatch.setattr(storage, "DRIVE_ROOT", root)
    monkeypatch.setattr(storage, "COLAB_DRIVE", root / "MyDrive")
    calls = []

    def mount(mountpoint: str) -> None:
        calls.append(mountpoint)
        raise ValueError("Mountpoint must not already contain files")

    fake_colab(monkeypatch, mount)
    assert storage.storage_root(tmp_path / "project") == tmp_path / "project"
    assert len(calls) == 1
    assert "could not mount Google Drive (ValueError: Mountpoint must" in capsys.readouterr().out


def test_the_runtime_check_takes_no_unmounted_drive_folder_for_drive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rule (core/hardware.py, stdlib only: it runs before anything is installed): a
    MyDrive folder where /content/drive is not a mount point is the VM's disk, so the freeze goes
    to the project."""
    from {{ cookiecutter.module_name }}.colab import runtime_check

    drive, is_dir = Path("/content/drive/MyDrive"), Path.is_dir
    monkeypatch.setattr(Path, "is_dir", lambda path: path == drive or is_dir(path))
    monkeypatch.setattr(runtime_check.os.path, "ismount", lambda path: False)
    assert runtime_check.storage_folder(tmp_path, {}) == tmp_path
    monkeypatch.setattr(runtime_check.os.path, "ismount", lambda path: path == drive.parent)
    assert runtime_check.storage_folder(tmp_path, {}) == drive / storage.PROJECT_SLUG
