"""What this machine has, found without TensorFlow: its accelerator, a mounted Google Drive
(stdlib only: the notebooks' runtime check uses it before anything is installed)."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from pathlib import Path

# What a TPU VM has: these variables (Colab's, Cloud TPU's) and accelerator device files.
TPU_VARIABLES = ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "COLAB_TPU_ADDR", "TPU_WORKER_ID")
TPU_DEVICE_FILES = ("/dev/accel[0-9]*", "/dev/vfio/[0-9]*")


def tpu_signals(environ: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The TPU variables set and the TPU device files present."""
    environ = os.environ if environ is None else environ
    variables = {k: environ[k] for k in TPU_VARIABLES if environ.get(k)}
    files = sorted(f for pattern in TPU_DEVICE_FILES for f in glob.glob(pattern))
    return variables, files


def tpu_present(environ: Mapping[str, str] | None = None) -> bool:
    """A TPU on this VM, by its variables or device files."""
    return any(tpu_signals(environ))


def drive_mounted(root: Path) -> bool:
    """Google Drive mounted at `root` (Colab's /content/drive): a mount point holding MyDrive, not
    a folder that any `mkdir -p` makes (drive.mount then refuses: "Mountpoint must not already
    contain files")."""
    return os.path.ismount(root) and (root / "MyDrive").is_dir()
