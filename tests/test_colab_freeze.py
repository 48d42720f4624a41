"""The lock holds against all of Colab, not just its overlap with the lock.

Installing the lock on Colab must change none of Colab's preinstalled packages (but the documented
OVERRIDES of tools/lock.py) and break none of their requirements. tools/lock.py only constrains the
lock's own packages to Colab's versions; here the lock is resolved together with the WHOLE freeze of
Colab's GPU runtime (requirements/colab-constraints.txt, ~700 packages), every package of both as an
exact requirement: uv reads each one's metadata from PyPI (`uv pip compile`: nothing is built or
installed) and finds a conflict wherever a Colab package's requirement excludes a version the lock
pins, e.g. if a Colab package needed tensorflow-metadata newer than the override's 1.17.3.

One resolution covers every answer: scripts/refresh_lock.py resolves all options together first,
so each package has one version in every answer's lock (asserted below), and the union of all
answers' locks and the dev lock is one consistent set of pins. If that set resolves together with the
whole freeze, so does any subset of it (the same versions satisfy the subset's requirements), so each
answer's lock does too: one uv run instead of fifteen.

What PyPI cannot tell, and how it is handled:
- source-only packages in the freeze (GDAL, rpy2, ...): their requirements are given to uv as
  `dependency-metadata` (tests/colab_sdists.toml), so nothing is built;
- builds from other indexes, named by a local version (`torch==2.11.0+cu128`): PyPI's release of
  the same version is another build with other requirements (CUDA 13 wheels), so they take part at
  their public version with their requirements left out (no package of the lock depends on them);
- NOT_ON_PYPI: packages that Colab installs from Debian, with no such release on PyPI.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "{{cookiecutter.project_slug}}"
OPTIONS = {"dvc_remote": ["drive", "gcs", "gdrive", "local", "none"], "tracking": ["tensorboard", "mlflow", "wandb"]}
COMBOS = [dict(zip(OPTIONS, values)) for values in itertools.product(*OPTIONS.values())]
SDIST_METADATA = Path(__file__).with_name("colab_sdists.toml")
# Colab's VMs: Ubuntu 22.04 (glibc 2.35) on x86_64 (reference: colab-os-info-gpu.txt).
PLATFORM = "x86_64-manylinux_2_35"
# Colab's packages that are not on PyPI at their frozen version: {name: why}.
NOT_ON_PYPI = {"python-apt": "Debian's python3-apt (frozen as 0.0.0)"}


def load_lock_tool():
    spec = importlib.util.spec_from_file_location("lock_tool", PROJECT / "tools" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK = load_lock_tool()


def environment(python: str) -> dict[str, str]:
    """Colab's marker environment (Linux x86_64) for this Python."""
    return {"python_version": python, "python_full_version": python + ".0", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
            "os_name": "posix", "platform_python_implementation": "CPython"}


def lock_pins(text: str, python: str) -> dict[str, str]:
    """{package: version} that pip installs from this lock on that Python."""
    pins = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            if not req.marker or req.marker.evaluate(environment(python)):
                pins[canonicalize_name(req.name)] = str(req.specifier).removeprefix("==")
    return pins


def every_lock_pin(python: str) -> dict[str, str]:
    """The pins of every answer's requirements.txt and of requirements-dev.txt, as one set."""
    texts = [jinja2.Template((PROJECT / "requirements.txt").read_text()).render(cookiecutter=answers)
             for answers in COMBOS]
    texts.append((PROJECT / "requirements-dev.txt").read_text())
    union: dict[str, str] = {}
    for text in texts:
        for name, version in lock_pins(text, python).items():
            assert union.setdefault(name, version) == version, (
                f"{name} has two versions across the answers' locks ({union[name]}, {version}): "
                "one resolution no longer covers them all")
    return union


def colab_requirements(freeze: Path, lock: dict[str, str]) -> tuple[list[str], list[str], dict]:
    """(requirement lines, dependency-metadata entries, the pins that differ from Colab's)."""
    lines, entries, differs = [], [], {}
    colab = {}
    for line in freeze.read_text().splitlines():
        pin = LOCK.PIN.match(line.strip())
        if pin and canonicalize_name(pin[1]) not in NOT_ON_PYPI:
            colab[canonicalize_name(pin[1])] = pin[2]
    for name, version in colab.items():
        if name in lock and lock[name] != version:
            differs[name] = (version, lock[name])
            version = lock[name]  # what installing the lock leaves on Colab
        public, _, local = version.partition("+")
        if local:  # a build from another index: PyPI's release of that version is another build
            entries.append(f'[[dependency-metadata]]\nname = "{name}"\nversion = "{public}"\nrequires-dist = []\n')
        lines.append(f"{name}=={public}")
    lines += [f"{name}=={version}" for name, version in lock.items() if name not in colab]
    return sorted(lines), entries, differs


def resolve(lines: list[str], entries: list[str], python: str, folder: Path) -> subprocess.CompletedProcess:
    """uv pip compile of these exact requirements for Colab (Linux x86_64, that Python)."""
    (folder / "colab.in").write_text("\n".join(lines) + "\n")
    (folder / "uv.toml").write_text(SDIST_METADATA.read_text() + "\n" + "\n".join(entries))
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    command = [uv, "pip", "compile", str(folder / "colab.in"), "--config-file", str(folder / "uv.toml"),
               "--python-version", python, "--python-platform", PLATFORM,
               "--no-header", "--no-annotate", "--quiet", "-o", str(folder / "colab.txt")]
    return subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"}, timeout=900)


def test_the_lock_resolves_with_the_whole_colab_freeze(tmp_path: Path) -> None:
    freeze = LOCK.COLAB_CONSTRAINTS
    python = LOCK.freeze_python(freeze)
    lock = every_lock_pin(python)
    lines, entries, differs = colab_requirements(freeze, lock)
    # The lock replaces Colab's version only where OVERRIDES says so.
    assert {name: new for name, (_, new) in differs.items()} == LOCK.OVERRIDES, differs

    started = time.monotonic()
    run = resolve(lines, entries, python, tmp_path)
    took = time.monotonic() - started
    assert run.returncode == 0, (
        f"the lock (with OVERRIDES {LOCK.OVERRIDES}) and Colab's whole freeze do not resolve together "
        f"on Python {python}:\n{run.stderr}")
    wanted = {canonicalize_name(line.split("==")[0]): line.split("==")[1] for line in lines}
    got = {canonicalize_name(n): v for n, v in LOCK.read_pins(tmp_path / "colab.txt").items()}
    changed = {n: (v, got.get(n)) for n, v in wanted.items() if got.get(n) != v}
    assert changed == {}, f"resolved to other versions than pinned: {changed}"
    # Nothing new: every requirement of Colab's packages and the lock's is in one or the other.
    assert set(got) - set(wanted) == set(), f"required but in neither the lock nor Colab: {set(got) - set(wanted)}"
    print(f"{len(lines)} packages ({len(lock)} of the lock, {len(differs)} overridden) resolved "
          f"with Colab's freeze in {took:.1f} s")


def test_the_check_finds_a_conflict_with_another_colab_package(tmp_path: Path) -> None:
    """The same resolution with one pin that Colab's tensorflow 2.20.0 excludes (it needs
    tensorboard ~= 2.20.0): the check has teeth."""
    freeze = LOCK.COLAB_CONSTRAINTS
    python = LOCK.freeze_python(freeze)
    lock = {**every_lock_pin(python), "tensorboard": "2.19.0"}
    lines, entries, differs = colab_requirements(freeze, lock)
    assert differs["tensorboard"] == ("2.20.0", "2.19.0")
    run = resolve(lines, entries, python, tmp_path)
    assert run.returncode != 0
    assert "tensorboard" in run.stderr and "tensorflow" in run.stderr, run.stderr


if __name__ == "__main__":  # a report: python tests/test_colab_freeze.py
    sys.exit(pytest.main([__file__, "-q", "-s"]))
