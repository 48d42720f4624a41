"""Where things live: the storage root for what must outlive a Colab VM, and the results folder.

- Storage root: `$PROJECT_STORAGE_DIR` if set; on Colab the mounted Drive folder
  `/content/drive/MyDrive/<project_slug>`; else the project folder.
- Checkpoints: `<storage>/checkpoints/<run_name>/` (they must survive a disconnect).
- Results (model, metrics, TensorBoard logs): `<project>/results/`, tracked by DVC and git;
  `$PROJECT_RESULTS_DIR` instead when set{% if cookiecutter.vertex_ai %} (a Vertex AI job sets it to its bucket){% endif %}.
- Either variable may be `gs://bucket/prefix`: read through Cloud Storage FUSE (`/gcs/...`);
  a relative path is relative to the project folder, as `data.path` is.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError
from .hardware import drive_mounted

PROJECT_SLUG = "{{ cookiecutter.project_slug }}"
# What train and evaluate write under the results root (the docs and dvc.yaml use these names).
MODEL_FILE = "models/model.keras"  # the model users get (training/saved_model.py)
SIDECAR_FILE = "models/model.json"  # what it needs beside it: task, names, inputs
TRAIN_METRICS = "metrics/train.json"
TEST_METRICS = "metrics/evaluate.json"
EXPORTS = "metrics/export.json"  # one entry per exported file: what the model card lists
DRIVE_ROOT = Path("/content/drive")  # where Colab mounts Google Drive
COLAB_DRIVE = DRIVE_ROOT / "MyDrive"


def on_colab() -> bool:
    """True inside a Google Colab runtime."""
    if "COLAB_RELEASE_TAG" in os.environ:
        return True
    try:
        return importlib.util.find_spec("google.colab") is not None
    except ModuleNotFoundError:  # a `google` namespace package without `colab`
        return False


def local_path(location: str, variable: str, project_dir: Path) -> Path:
    """The folder `$variable` gives: a path, relative to the project folder as `data.path` is
    (every command finds it, whatever folder it runs in), or `gs://bucket/prefix`, read
    through Cloud Storage FUSE at `/gcs/<bucket>`{% if cookiecutter.vertex_ai %} (Vertex AI mounts it in every replica){% endif %},
    where plain file I/O (atomic renames, fsync) works unchanged; `$PROJECT_GCS_MOUNT` moves
    that root."""
    if not location.startswith("gs://"):
        return project_dir / Path(location).expanduser()
    bucket_and_prefix = location[len("gs://") :].strip("/")
    mount = Path(os.environ.get("PROJECT_GCS_MOUNT", "/gcs"))
    if not bucket_and_prefix or not mount.is_dir():
        raise ConfigError(  # one line for the user: the command line prints `error: ...`
            f"{variable}={location}: a gs:// location is read through Cloud Storage FUSE at "
            f"{mount}/<bucket>{% if cookiecutter.vertex_ai %} (Vertex AI mounts it){% endif %}; none is here. Mount the bucket with "
            f"gcsfuse and give its folder (example: {variable}=/mnt/my-bucket/{PROJECT_SLUG})"
        )
    return mount / bucket_and_prefix


def storage_root(project_dir: Path) -> Path:
    """The folder for checkpoints and caches (see the module docstring for the rule); on Colab it
    mounts Drive first (consent is asked once) when it is not mounted yet. A root on Drive's path
    while Drive is not mounted is a ConfigError, before any command writes there: the VM's disk
    under a path that looks like Drive would vanish with the VM."""
    env = os.environ.get("PROJECT_STORAGE_DIR")
    if env:
        root = local_path(env, "PROJECT_STORAGE_DIR", project_dir)
        if root.resolve().is_relative_to(DRIVE_ROOT) and not drive_mounted(DRIVE_ROOT):
            raise ConfigError(
                f"PROJECT_STORAGE_DIR: {root} is on Google Drive, but {COLAB_DRIVE} is not "
                "mounted; mount it first (from google.colab import drive; "
                "drive.mount('/content/drive'))"
            )
        return root
    if not on_colab():
        return project_dir
    why = f"no {COLAB_DRIVE} after mounting"
    if not drive_mounted(DRIVE_ROOT):
        try:  # only in the notebook's own Python: a `!python` subprocess cannot ask for consent
            from google.colab import drive  # type: ignore[import-not-found]

            drive.mount(str(DRIVE_ROOT))
        except Exception as exc:  # refused consent, a subprocess without the kernel, a timeout
            why = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    if drive_mounted(DRIVE_ROOT):
        return COLAB_DRIVE / PROJECT_SLUG
    print(
        f"WARNING: could not mount Google Drive ({why}), so checkpoints go to the VM's disk and "
        "are lost when the runtime disconnects. Mount it in a notebook cell and accept "
        "(from google.colab import drive; drive.mount('/content/drive')), or set "
        "PROJECT_STORAGE_DIR.",
        flush=True,
    )
    return project_dir


def results_root(project_dir: Path) -> Path:
    """`$PROJECT_RESULTS_DIR` if set, else `<project>/results`: set it to a bucket when the
    machine's own disk does not last{% if cookiecutter.vertex_ai %} (a Vertex AI job sets it){% endif %}."""
    env = os.environ.get("PROJECT_RESULTS_DIR")
    return local_path(env, "PROJECT_RESULTS_DIR", project_dir) if env else project_dir / "results"


@dataclass(frozen=True)
class RunPaths:
    """Every path one training run writes."""

    checkpoints: Path  # where this worker saves
    restore_from: Path  # where every worker restores from (the chief's folder: shared storage)
    tensorboard: Path
    model_file: Path
    metrics_file: Path
    scratch: Path | None = None  # a temporary folder to delete at the end (non-chief workers)

    def cleanup(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def run_paths(
    project_dir: Path, run_name: str, is_chief: bool = True, results: Path | None = None
) -> RunPaths:
    """Paths for `run_name`. Only the chief writes the real ones; other workers of a multi-worker
    run get a temporary folder: TensorFlow needs every worker to save (the saves are collective),
    but two workers must never write the same files. `results`: where the model and train.json
    go instead of the results folder (a sweep's trial); TensorBoard logs stay with the others."""
    checkpoints = storage_root(project_dir) / "checkpoints" / run_name
    if not is_chief:
        scratch = Path(tempfile.mkdtemp(prefix=f"{PROJECT_SLUG}-worker-"))
        return RunPaths(
            checkpoints=scratch / "checkpoints",
            restore_from=checkpoints,
            tensorboard=scratch / "tensorboard",
            model_file=scratch / "model.keras",
            metrics_file=scratch / "train.json",
            scratch=scratch,
        )
    root = results_root(project_dir)
    outputs = results or root
    return RunPaths(
        checkpoints=checkpoints,
        restore_from=checkpoints,
        tensorboard=root / "tensorboard" / run_name,
        model_file=outputs / MODEL_FILE,
        metrics_file=outputs / TRAIN_METRICS,
    )
