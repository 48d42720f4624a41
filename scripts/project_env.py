"""Bake the template and give the baked project an environment with its pinned requirements.

Used by `make demo`, `make bench` and by the template's tests, which run what they bake. The
environment is kept in `.venv-project/` and rebuilt only when the baked lock files change, so a
second `make test` does not reinstall TensorFlow. `use` works in a baked project as its user
does (the pipeline, training, a sweep), for the checks that need a project already used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parent.parent
# One environment per distinct lock (the tracker and DVC plugin answers change it); uv links the
# packages from its cache, so a second environment costs seconds, not another download.
PROJECT_VENVS = ROOT / ".venv-project"
LOCKS = ("requirements.txt", "requirements-dev.txt")
# uv must never try to download an interpreter: only the package registry is reachable here.
UV_ENV = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}


def bake(output_dir: Path, **answers: Any) -> Path:
    """Generate a project with these answers (defaults for the rest); return its folder."""
    config = Path(tempfile.mkdtemp(prefix="cc-config-")) / "config.yaml"
    # A private config: replays and cloned templates stay out of the user's home folder.
    config.write_text(
        f"cookiecutters_dir: {config.parent / 'cookiecutters'}\nreplay_dir: {config.parent / 'replay'}\n"
    )
    return Path(
        cookiecutter(
            str(ROOT), no_input=True, extra_context=answers, output_dir=str(output_dir),
            config_file=str(config),
        )
    )


def uv() -> str:
    """The uv installed beside this interpreter (pinned in requirements-dev.txt)."""
    return str(Path(sys.executable).parent / "uv")


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """One process at a time in the block (the template's tests run on several pytest-xdist workers)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def project_python(project: Path) -> Path:
    """An interpreter with the project's locked requirements and the project installed (editable).

    The same folder with the same pyproject.toml is not installed again: a reinstall would briefly
    take the package away from a test suite that another worker runs in this environment."""
    python = locked_python(project)
    stamp = python.parent.parent / "editable.json"
    pyproject = hashlib.sha256((project / "pyproject.toml").read_bytes()).hexdigest()
    wanted = {"project": str(project), "pyproject": pyproject}
    with exclusive(python.parent.parent / "editable.lock"):
        if stamp.exists() and json.loads(stamp.read_text()) == wanted:
            return python
        subprocess.run([uv(), "pip", "install", "--quiet", "--python", str(python), "--no-deps", "-e", str(project)],
                       check=True, env=UV_ENV)
        stamp.write_text(json.dumps(wanted))
    return python


def locked_python(project: Path) -> Path:
    """An interpreter with the project's locked requirements, shared by every project with the same
    locks; the project itself is not installed (run it with PYTHONPATH=<project>/src)."""
    digest = hashlib.sha256(b"".join((project / name).read_bytes() for name in LOCKS)).hexdigest()
    venv = PROJECT_VENVS / digest[:16]
    python = venv / "bin" / "python"
    stamp = venv / "locks.sha256"
    with exclusive(PROJECT_VENVS / f"{digest[:16]}.lock"):
        if not (python.exists() and stamp.exists() and stamp.read_text() == digest):
            subprocess.run([uv(), "venv", "--quiet", "--clear", "--python", sys.executable, str(venv)],
                           check=True, env=UV_ENV)
            args = [arg for name in LOCKS for arg in ("-r", str(project / name))]
            subprocess.run([uv(), "pip", "install", "--quiet", "--python", str(python), *args],
                           check=True, env=UV_ENV)
            stamp.write_text(digest)
    return python


# What a user does in a new project before running its tests again (README's local start): the
# pipeline with params.yaml as baked, `make train` (resumes the run the pipeline trained), a
# short sweep and its `--best`. The storage root is the project folder, as on a user's machine.
USE = (
    ["dvc", "repro"],
    ["make", "train"],
    ["python", "-m", "{module}", "sweep", "--set", "sweep.n_trials=2", "--set", "train.epochs=2"],
    # --best writes the best trial's settings into params.yaml: the tests then read the user's file
    ["python", "-m", "{module}", "sweep", "--best", "--set", "sweep.n_trials=2", "--set", "train.epochs=2"],
)


def project_command_env(project: Path, python: Path) -> dict[str, str]:
    """The environment a user's shell has in `project`: its interpreter's tools first on PATH, the
    package from the project's own src/ (PYTHONPATH: several projects share one environment), no
    storage or results root of this machine's."""
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(project / "src"), "PYTHON": str(python)}  # fmt: skip
    for name in ("PROJECT_STORAGE_DIR", "PROJECT_RESULTS_DIR", "TF_CONFIG"):
        env.pop(name, None)
    for name in [n for n in env if n.startswith(("PYTEST_", "COV_CORE"))]:
        env.pop(name)  # a pytest worker's own: the project's pytest is a session of its own
    return env


def use(project: Path, python: Path, log: Path | None = None) -> None:
    """Run USE in `project` with `python`'s environment (each command's output into `log`);
    a failing command raises with the end of its output."""
    module = next(p.name for p in (project / "src").iterdir() if (p / "__main__.py").is_file())
    env = project_command_env(project, python)
    log = log or project.parent / "use.log"
    for command in USE:
        command = [part.format(module=module) for part in command]
        with open(log, "a") as out:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            done = subprocess.run(command, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode} in {project}:\n{tail}")
