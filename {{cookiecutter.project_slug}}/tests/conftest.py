"""Shared test setup: isolation from your own runs, and the training core's fixtures.

`make test` runs where you work, after `dvc repro`, `make train` or a sweep: no test may read
your data, results, DVC cache, storage root or environment. So this file removes, for every test
and every process a test starts, the variables that point at them (PROJECT_STORAGE_DIR,
PROJECT_RESULTS_DIR, TF_CONFIG, MLFLOW_*, WANDB_*, ...; a test that needs one sets its own), keeps
DVC from reading your global configuration, and `copy_checkout` copies this project's code and
configuration as a fresh clone has them, none of its outputs.

Your params.yaml is yours to change, and `sweep --best` writes the best trial's settings into it:
the tests read `PARAMS`, a copy of it with the values they assert on (`TEST_VALUES`) set back, so
they check the code whatever run name, learning rate or epochs you chose.

TensorFlow can split the CPU into logical devices only before it initialises, so this file does
it once, at collection, for every in-process test: two logical CPUs let MirroredStrategy run with
two replicas on any machine. Tests that need a fresh TensorFlow (SIGKILL, SIGTERM, two workers)
start `python -m <module>` in a subprocess; each one costs a TensorFlow import (5-15 s).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

# Variables that point a run at your own places, accounts or cluster (names and prefixes): gone
# before anything reads them.
USERS_VARIABLES = (
    "PROJECT_",  # PROJECT_STORAGE_DIR, PROJECT_RESULTS_DIR, PROJECT_GCS_MOUNT, ...
    "TF_CONFIG",
    "CLOUD_ML_",
    "CLUSTER_SPEC",
    "MLFLOW_",
    "WANDB_",
    "SWEEP_STORAGE_PASSWORD",
    # libpq's defaults (a sweep's database)
    *("PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGPASSFILE", "PGSERVICE"),
    "DVC_",
    "COLAB_RELEASE_TAG",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
)
for _name in [n for n in os.environ if n.startswith(USERS_VARIABLES)]:
    del os.environ[_name]
# A shell starts a background job (`make test-all &`, nohup) with SIGINT ignored; the tests of a
# clean stop on SIGINT need Python's own handler.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# TensorFlow's C++ log stays as quiet as the package's __init__ keeps it for every command (no
# `failed call to cuInit` without a GPU), unless you set the level (docs/troubleshooting.md);
# here before TensorFlow's import, for this process and the commands the tests start.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from {{ cookiecutter.module_name }}.config import load_params  # noqa: E402
from {{ cookiecutter.module_name }}.training.sweep_results import write_params  # noqa: E402

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]
SRC = PROJECT / "src"
_cpu = tf.config.list_physical_devices("CPU")[0]
# RuntimeError: already initialised by another conftest or plugin; keep what exists.
with contextlib.suppress(RuntimeError):
    tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

# What `sweep --best` writes into params.yaml (the run's name, its epochs and the default
# sweep.space's keys) at the template's values, which the tests assert on.
TEST_VALUES = {
    "run_name": "baseline",
    "train.epochs": 20,
    "train.learning_rate": 0.001,
    "train.optimizer": "adam",
    "model.dropout": 0.1,
}


def _params_for_tests() -> Path:
    """Your params.yaml with TEST_VALUES set (comments and layout kept), in a folder of its own."""
    folder = Path(tempfile.mkdtemp(prefix="params-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    shutil.copy(PROJECT / "params.yaml", folder / "params.yaml")
    sets = [f"{key}={value}" for key, value in TEST_VALUES.items()]
    write_params(folder / "params.yaml", load_params(folder / "params.yaml", sets))
    return folder / "params.yaml"


PARAMS = _params_for_tests()

# Small and fast: 1438 training digits, 32 per replica -> 44 steps per epoch on one replica.
TINY = [
    "train.epochs=2",
    "train.batch_size=32",
    "train.checkpoint_every_steps=10",
    "train.steps_per_execution=5",
    "train.keep_checkpoints=3",
    "model.hidden_units=[16]",
]


# What a checkout makes by running (at its top level: outputs, the storage root's folders when it
# is the project, environments) and keeps for itself (.git, DVC's cache): never copied.
OUTPUTS = (
    *(".git", ".venv", "venv", "results", "data", "wandb", "mlruns", "checkpoints", "cache"),
    *("sweeps", "dvc_plots", "dvc.lock", ".dvc/cache", ".dvc/tmp", ".dvc/config.local"),
)
CACHES = ("__pycache__", "*.egg-info", ".ipynb_checkpoints", ".pytest_cache", ".ruff_cache")


@pytest.fixture(autouse=True, scope="session")
def _no_global_dvc_config(tmp_path_factory: pytest.TempPathFactory) -> None:
    """DVC reads no configuration or cache of yours (~/.config/dvc, /etc/xdg/dvc)."""
    empty = tmp_path_factory.mktemp("dvc-config")
    for name in ("DVC_GLOBAL_CONFIG_DIR", "DVC_SYSTEM_CONFIG_DIR", "DVC_SITE_CACHE_DIR"):
        os.environ[name] = str(empty)
    os.environ["DVC_NO_ANALYTICS"] = "1"


def tensorboard_values(folder: Path) -> dict[str, list]:
    """Every value the TensorBoard event files in `folder` hold, as arrays, by tag, in order."""
    values: dict[str, list] = {}
    for file in sorted(folder.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(file)):
            for value in event.summary.value:
                values.setdefault(value.tag, []).append(tf.make_ndarray(value.tensor))
    return values


def checkout_files(project: Path = PROJECT) -> list[Path]:
    """A project's files as a fresh clone has them (relative paths): git's tracked and new files
    (what .gitignore ignores left out) when it is a git work tree, else every file; never OUTPUTS
    or CACHES."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=project, capture_output=True, text=True, check=True,
        )  # fmt: skip
        files = [Path(name) for name in sorted(set(listed.stdout.split("\0"))) if name]
    except (OSError, subprocess.CalledProcessError):  # no git, or not a git work tree
        files = [p.relative_to(project) for p in project.rglob("*") if not p.is_dir()]

    def wanted(path: Path) -> bool:
        if any(path == Path(out) or Path(out) in path.parents for out in OUTPUTS):
            return False
        return not any(fnmatch(part, pattern) for part in path.parts[:-1] for pattern in CACHES)

    return [p for p in files if wanted(p) and (project / p).is_file()]


def copy_checkout(dest: Path, project: Path = PROJECT) -> Path:
    """This project's code and configuration in `dest`, as a fresh clone has them: no data,
    results, checkpoints, DVC cache, local DVC config or environments (src/<module>/data stays);
    this project's params.yaml is the tests' (PARAMS)."""
    for path in checkout_files(project):
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(project / path, dest / path, follow_symlinks=False)
    if project == PROJECT and (dest / "params.yaml").is_file():
        shutil.copy(PARAMS, dest / "params.yaml")
    return dest


@pytest.fixture
def tiny_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder with the tests' params.yaml (PARAMS) and its own storage root."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PARAMS, project / "params.yaml")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    return project


def fill(folder: Path) -> None:
    """Fill the disk `folder` is on to its last byte (a small tmpfs: `small_storage`)."""
    with open(folder / "filler", "wb") as filler, pytest.raises(OSError):
        while True:
            filler.write(b"\0" * 65536)
            filler.flush()


def drop(folder: Path, code: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file call under `folder` fails with `code` as on a Google Drive whose mount dropped
    (ENOTCONN, EIO, ESTALE): the path is right, nothing under it answers."""

    def dropped(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(path, str | os.PathLike) and os.fspath(path).startswith(str(folder)):
                raise OSError(code, os.strerror(code), os.fspath(path))
            return real(path, *args, **kwargs)

        return call

    for name in ("stat", "lstat", "scandir", "open", "statvfs"):
        monkeypatch.setattr(os, name, dropped(getattr(os, name)))
    monkeypatch.setattr("builtins.open", dropped(open))


@pytest.fixture
def small_storage(tmp_path: Path) -> Iterator[tuple[Path, bool]]:
    """A 6 MiB tmpfs (True), or a plain folder where mounting is refused (False)."""
    root = tmp_path / "storage"
    root.mkdir()
    mounted = (
        shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(root)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield root, mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The trainer's progress bars, a terminal's (they count steps), kept to see how each ended:
    Colab's widget turns a bar closed short of its total red."""
    # Imported here: the trainer (Keras) only for the tests that train.
    from {{ cookiecutter.module_name }}.core import progress
    from {{ cookiecutter.module_name }}.training import trainer

    kept = []

    def kept_bar(*args: Any, **kwargs: Any) -> Any:
        kept.append(progress.progress_bar(*args, **kwargs))
        return kept[-1]

    monkeypatch.setattr(progress, "bar_kind", lambda: "text")
    monkeypatch.setattr(trainer, "progress_bar", kept_bar)
    return kept


def cli_env(storage: Path, **extra: str) -> dict[str, str]:
    """Environment for `python -m <module>` in a subprocess: this checkout's src first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PROJECT_STORAGE_DIR"] = str(storage)
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
