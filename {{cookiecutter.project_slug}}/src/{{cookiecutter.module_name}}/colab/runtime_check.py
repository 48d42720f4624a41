"""Before anything is installed on Colab: can this runtime run the project as locked?

A lock that differs from the preinstalled packages would replace them and need a restart, so
`check_runtime` stops first. Standard library only: it runs from the checkout before any install."""

from __future__ import annotations

import importlib.metadata
import os
import re
import runpy
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from ..core.hardware import drive_mounted, tpu_present

PROJECT_SLUG = "{{ cookiecutter.project_slug }}"
SNAPSHOT = Path("requirements") / "colab-constraints.txt"  # Colab's GPU runtime, as locked
HEADLINE = ("tensorflow", "keras", "numpy")  # compared with the snapshot, installed or not
TPU_STOP = (
    "Colab's TPU runtimes have no TensorFlow; pick a GPU runtime (Runtime > Change runtime type "
    "> T4 GPU), then run the notebook again."
)
# Past Colab runtimes a notebook can pin (googlecolab/backend-info): Python, tensorflow, numpy.
PINNED_RUNTIMES = {
    "2026.01": ("3.12", "2.19.0", "2.0.2"),
    "2025.10": ("3.12", "2.19.0", "2.0.2"),
    "2025.07": ("3.11", "2.18.0", "2.0.2"),
}
SHOWN = 6  # differences named in the line; the rest are counted


class NotebookStop(Exception):
    """Stops a notebook with its message alone: IPython shows what `_render_traceback_` returns."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


def normalize(name: str) -> str:
    """PEP 503 name: `PyYAML` and `pyyaml` are the same package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def same_version(a: str | None, b: str | None) -> bool:
    """`2.20.0` and `2.20` are the same version; `2.20.0` and `2.20.0rc1` are not."""
    if a is None or b is None:
        return a is b
    trim = lambda v: re.sub(r"(\.0+)+(?=$|\+)", "", v.strip().lower())  # noqa: E731
    return trim(a) == trim(b)


def read_pins(path: Path, python: str | None = None) -> dict[str, str]:
    """`name==version` pins by normalized name; with `python` (X.Y), those whose marker holds."""
    # Preinstalled on Colab; here so that the module needs only the standard library.
    from packaging.requirements import InvalidRequirement, Requirement

    where = {"python_version": ".".join(python.split(".")[:2])} if python else None
    pins = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            req = Requirement(line.split(" #")[0].strip())
        except InvalidRequirement:  # a comment, an option, a blank line
            continue
        pinned = [spec.version for spec in req.specifier if spec.operator == "=="]
        if pinned and (not (where and req.marker) or req.marker.evaluate(where)):
            pins[normalize(req.name)] = pinned[0]
    return pins


def lock_settings(project_dir: Path) -> tuple[dict[str, str], str]:
    """tools/lock.py's OVERRIDES and the Python of the runtime the lock was made for."""
    tool = runpy.run_path(str(Path(project_dir) / "tools" / "lock.py"))  # its globals
    overrides = {normalize(name): version for name, version in tool["OVERRIDES"].items()}
    header = (Path(project_dir) / "requirements.txt").read_text(encoding="utf-8")
    found = re.search(r"^# Colab runtime: Python (3\.\d+)", header, flags=re.M)
    return overrides, found[1] if found else str(tool["freeze_python"](tool["COLAB_CONSTRAINTS"]))


def on_colab_tpu(environ: Mapping[str, str] | None = None) -> bool:
    """A Colab TPU runtime: Colab's variable, a TPU's device files or variables (v5e-1 sets
    COLAB_TPU_1VM=1 and TPU_ACCELERATOR_TYPE=v5e-1; GPU runtimes set COLAB_TPU_1VM empty)."""
    environ = os.environ if environ is None else environ
    tpu = tpu_present(environ) or environ.get("COLAB_TPU_1VM") == "1"
    return "COLAB_RELEASE_TAG" in environ and tpu


def stop_on_tpu(environ: Mapping[str, str] | None = None) -> None:
    """Stop on a Colab TPU runtime: they have had no TensorFlow since 2025-03."""
    if on_colab_tpu(environ):
        raise NotebookStop(TPU_STOP)


def installed_versions() -> dict[str, str]:
    """{normalized name: version} of what this interpreter imports (the first one found)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalize(name), dist.version)
    return found


def differences(
    python: str,
    installed: Mapping[str, str],
    snapshot: Mapping[str, str],
    lock: Mapping[str, str],
    overrides: Mapping[str, str],
    lock_python: str,
) -> list[str]:
    """Python's minor, HEADLINE against the snapshot, other installed packages against the lock
    (but the OVERRIDES): one item per difference."""
    found = []
    if python.split(".")[:2] != lock_python.split(".")[:2]:
        found.append(f"Python {python} (lock: {lock_python})")
    for name in HEADLINE:
        have, want = installed.get(name), snapshot.get(name)
        if not same_version(have, want):
            found.append(f"{name} {have or 'not installed'} (lock: {want or 'not installed'})")
    for name, pin in sorted(lock.items()):
        have = installed.get(name)
        if have is not None and name not in (*HEADLINE, *overrides) and not same_version(have, pin):
            found.append(f"{name} {have} (lock: {pin})")
    return found


def matching_runtimes(lock_python: str, snapshot: Mapping[str, str]) -> list[str]:
    """The pinnable past runtimes whose Python, TensorFlow and NumPy are the lock's."""
    want = (lock_python, snapshot.get("tensorflow"), snapshot.get("numpy"))
    return [version for version, have in PINNED_RUNTIMES.items() if have == want]


def storage_folder(project_dir: Path, environ: Mapping[str, str]) -> Path:
    """storage.py's storage root, without its imports: where the freeze is saved."""
    env = environ.get("PROJECT_STORAGE_DIR", "")
    if env and not env.startswith("gs://"):
        return Path(project_dir) / Path(env).expanduser()
    drive = Path("/content/drive")
    return drive / "MyDrive" / PROJECT_SLUG if drive_mounted(drive) else Path(project_dir)


def save_freeze(folder: Path, environ: Mapping[str, str]) -> Path:
    """This runtime's `pip freeze`, with a header naming the runtime, in `folder`; its path."""
    tag = environ.get("COLAB_RELEASE_TAG", "") or time.strftime("%Y%m%d")
    path = Path(folder) / f"colab-pip-freeze-gpu-{re.sub(r'[^A-Za-z0-9._-]+', '-', tag)}.txt"
    run = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True)
    freeze = run.stdout
    if run.returncode != 0:  # no pip here (a uv environment): the same list from the metadata
        freeze = "".join(f"{n}=={v}\n" for n, v in sorted(installed_versions().items()))
    python = ".".join(map(str, sys.version_info[:3]))
    header = (
        f"# pip freeze of the Colab GPU runtime {tag}, Python {python}, saved "
        f"{time.strftime('%Y-%m-%d')} by the notebooks' runtime check.\n"
        f"# Lock to it: make lock COLAB_FREEZE={path}\n"
        f"# python: {python}\n"  # what tools/lock.py reads
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + freeze, encoding="utf-8")
    return path


def refusal(found: list[str], freeze: str, runtimes: list[str]) -> str:
    """The one line that stops the notebook: the differences, then the ways out."""
    more = len(found) - SHOWN
    named = ", ".join(found[:SHOWN]) + (f" and {more} more" if more > 0 else "")
    pinned = (
        f"; or pick Runtime > Change runtime type > Runtime version {' or '.join(runtimes)} "
        "(its packages match the lock)"
        if runtimes
        else ""
    )
    python = f" (Python stays {found[0].split()[1]})" if found[0].startswith("Python ") else ""
    return (
        f"This Colab runtime is not the one requirements.txt was locked for: {named}; "
        "installing the lock would replace them and need a restart. Ways out: lock to this "
        f"runtime with `make lock COLAB_FREEZE={freeze}` (its pip freeze, saved there), commit "
        f"and push the lock{pinned}; or set allow_reinstall = True in the parameters cell to "
        f"install the lock's versions anyway{python}."
    )


def check_runtime(
    project_dir: Path,
    allow_reinstall: bool = False,
    environ: Mapping[str, str] | None = None,
    installed: Mapping[str, str] | None = None,
    python: str | None = None,
) -> list[str]:
    """On Colab: stop on a TPU runtime, and where this runtime differs from the lock (saving
    its pip freeze) unless `allow_reinstall`. Returns the differences ([] off Colab)."""
    environ = os.environ if environ is None else environ
    if "COLAB_RELEASE_TAG" not in environ:
        return []
    stop_on_tpu(environ)
    project_dir = Path(project_dir)
    python = python or ".".join(map(str, sys.version_info[:3]))
    overrides, lock_python = lock_settings(project_dir)
    snapshot = read_pins(project_dir / SNAPSHOT)
    lock = read_pins(project_dir / "requirements.txt", python)
    installed = installed_versions() if installed is None else installed
    found = differences(python, installed, snapshot, lock, overrides, lock_python)
    if not found:
        return []
    if allow_reinstall:
        print(
            f"NOTE: allow_reinstall: installing the lock's versions over this runtime's "
            f"({', '.join(found)}); restart the session when Colab asks, then run the notebook "
            "again.",
            flush=True,
        )
        return found
    try:
        freeze = str(save_freeze(storage_folder(project_dir, environ), environ))
    except OSError as exc:
        freeze = f"<file> (saving this runtime's pip freeze failed: {exc}; `pip freeze > <file>`)"
    raise NotebookStop(refusal(found, freeze, matching_runtimes(lock_python, snapshot)))
