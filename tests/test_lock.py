"""The generated locks pin every package, install on Python 3.11-3.13 and agree with Colab (but for
tools/lock.py's OVERRIDES); tools/lock.py locks to any runtime's freeze."""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "{{cookiecutter.project_slug}}"
PYTHONS = ("3.11", "3.12", "3.13")
COLAB_PYTHON = "3.13"
OPTIONS = {"dvc_remote": ["drive", "gcs", "gdrive", "local", "none"], "tracking": ["tensorboard", "mlflow", "wandb"]}
COMBOS = [dict(zip(OPTIONS, values)) for values in itertools.product(*OPTIONS.values())]
PLUGINS = {"gcs": "dvc-gs", "gdrive": "dvc-gdrive", "mlflow": "mlflow", "wandb": "wandb"}


def lock_overrides() -> dict[str, str]:
    """The Colab pins that tools/lock.py replaces on purpose, read from tools/lock.py itself."""
    spec = importlib.util.spec_from_file_location("lock_tool", PROJECT / "tools" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OVERRIDES


OVERRIDES = lock_overrides()


def render(name: str, answers: dict[str, str]) -> str:
    return jinja2.Template((PROJECT / name).read_text(), keep_trailing_newline=True).render(cookiecutter=answers)


def requirement_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def colab_pins() -> dict[str, str]:
    pins = {}
    for line in requirement_lines((PROJECT / "requirements" / "colab-constraints.txt").read_text()):
        name, version = line.split("==")
        pins[canonicalize_name(name)] = version
    return pins


def pins_for(text: str, python: str) -> dict[str, str]:
    """{package: version} that pip would install from this lock on that Python (Linux)."""
    env = {"python_version": python, "python_full_version": python + ".0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "os_name": "posix", "platform_python_implementation": "CPython"}
    pins: dict[str, str] = {}
    for line in requirement_lines(text):
        req = Requirement(line)
        if req.marker and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        assert name not in pins, f"{name} pinned twice for Python {python}"
        (spec,) = req.specifier
        assert spec.operator == "==", line
        pins[name] = spec.version
    return pins


@pytest.mark.parametrize("answers", COMBOS, ids=lambda a: "-".join(a.values()))
@pytest.mark.parametrize("lock", ["requirements.txt", "requirements-dev.txt"])
def test_every_package_pinned_and_colab_aligned(answers: dict[str, str], lock: str) -> None:
    text = render(lock, answers)
    for line in requirement_lines(text):
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*==[^\s;]+( ; .+)?", line), f"not a pin: {line}"
        Marker(line.split(" ; ")[1]) if " ; " in line else None
    colab = colab_pins()
    source = "requirements.in" if lock == "requirements.txt" else "requirements-dev.in"
    direct = {canonicalize_name(Requirement(line).name) for line in requirement_lines(render(source, answers))}
    for python in PYTHONS:
        pins = pins_for(text, python)
        assert direct <= set(pins), f"unpinned on {python}: {direct - set(pins)}"
        overridden = {n: (pins[n], v) for n, v in OVERRIDES.items() if n in pins and pins[n] != v}
        assert overridden == {}, f"pins on {python} that differ from OVERRIDES: {overridden}"
        if python == COLAB_PYTHON:
            differs = {n: (v, colab[n]) for n, v in pins.items()
                       if n in colab and colab[n] != v and n not in OVERRIDES}
            assert differs == {}, f"pins that differ from Colab's: {differs}"
        else:  # another Python gets Colab's version or, where that does not install, an older one
            newer = {n: (v, colab[n]) for n, v in pins.items()
                     if n in colab and n not in OVERRIDES and Version(v) > Version(colab[n].split("+")[0])}
            assert newer == {}, f"pins on {python} newer than Colab's: {newer}"


@pytest.mark.parametrize("answers", COMBOS, ids=lambda a: "-".join(a.values()))
def test_only_the_chosen_plugins_are_pinned(answers: dict[str, str]) -> None:
    pins = pins_for(render("requirements.txt", answers), COLAB_PYTHON)
    chosen = {PLUGINS.get(answers["dvc_remote"]), PLUGINS.get(answers["tracking"])} - {None}
    for plugin in PLUGINS.values():
        if plugin in chosen:
            assert plugin in pins
        else:
            assert plugin not in pins, f"{plugin} pinned though not chosen"


def test_overrides_are_in_the_lock_and_still_needed() -> None:
    colab = colab_pins()
    for python in PYTHONS:
        pins = pins_for(render("requirements.txt", COMBOS[0]), python)
        for name, version in OVERRIDES.items():
            assert pins.get(name) == version, f"{name} on {python}: OVERRIDES says {version}"
            # Once Colab's own pin is the override's version, the override has done its job.
            assert colab[name] != version, f"{name}: Colab pins {version} now; drop the override"


def test_colab_headline_versions() -> None:
    pins = pins_for(render("requirements.txt", COMBOS[0]), COLAB_PYTHON)
    assert pins["tensorflow"] == "2.20.0" and pins["keras"] == "3.13.2"
    assert pins["numpy"] == "2.1.3" and pins["tensorboard"] == "2.20.0"


# `make lock COLAB_FREEZE=...`: a project locks to any runtime's freeze, of another Python too.
LOCK_TOOL = PROJECT / "tools" / "lock.py"


def load_lock_tool():
    spec = importlib.util.spec_from_file_location("lock_tool", LOCK_TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_lock(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LOCK_TOOL), *args], cwd=folder, capture_output=True, text=True,
                          env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"}, timeout=600)


def test_a_missing_freeze_is_one_line_saying_what_to_give(tmp_path: Path) -> None:
    for given, said in (("", "none given"), ("nope.txt", "no file nope.txt")):  # `COLAB_FREEZE=`: ""
        run = run_lock(tmp_path, "requirements.in", "-o", "requirements.txt", "--freeze", given)
        assert run.returncode == 1 and run.stderr == (
            f"lock: --freeze: {said}; give a Colab runtime's `pip freeze` (make lock COLAB_FREEZE=FILE; "
            "docs/reproducibility.md)\n"
        ), run.stderr


def test_the_freeze_says_its_python(tmp_path: Path) -> None:
    tool = load_lock_tool()
    assert tool.freeze_python(tool.COLAB_CONSTRAINTS) == COLAB_PYTHON
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("# python: 3.12.11\nsix==1.17.0\n")
    assert tool.freeze_python(freeze) == "3.12"
    # A raw `pip freeze` of Colab names some wheels by URL: their cpXY tag tells.
    freeze.write_text("six==1.17.0\ntorch @ https://download.pytorch.org/whl/torch-2.9.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl\n")
    assert tool.freeze_python(freeze) == "3.11"
    freeze.write_text("six==1.17.0\n# Python 3.10 and older are out\n")
    assert tool.freeze_python(freeze) is None


def test_a_freeze_of_unknown_python_is_refused_with_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "requirements.in").write_text("six\n")
    (tmp_path / "freeze.txt").write_text("six==1.17.0\n")
    run = run_lock(tmp_path, "requirements.in", "-o", "requirements.txt", "--freeze", "freeze.txt")
    assert run.returncode != 0 and "COLAB_PYTHON=" in run.stderr and "# python:" in run.stderr, run.stderr
    (tmp_path / "freeze.txt").write_text("# python: 3.12\nsix==1.17.0\n")
    run = run_lock(tmp_path, "requirements.in", "-o", "requirements.txt", "--freeze", "freeze.txt", "--colab-python", "3.13")
    assert run.returncode != 0 and "says Python 3.12, not 3.13" in run.stderr, run.stderr
    assert not (tmp_path / "requirements.txt").exists()


def test_make_lock_passes_the_freeze_and_its_python(default_project: Path) -> None:
    def commands(*args: str) -> list[str]:
        out = subprocess.run(["make", "-n", "lock", *args], cwd=default_project, capture_output=True, text=True, check=True)
        return [line for line in out.stdout.splitlines() if "tools/lock.py" in line]

    default = commands()
    assert len(default) == 2 and all('--freeze "requirements/colab-constraints.txt"' in c for c in default), default
    assert not any("--colab-python" in c for c in default)
    mine = commands("COLAB_FREEZE=/content/drive/MyDrive/p/colab freeze.txt", "COLAB_PYTHON=3.12")
    assert all('--freeze "/content/drive/MyDrive/p/colab freeze.txt" --colab-python 3.12' in c for c in mine), mine


def test_lock_to_a_past_runtime_on_another_python(tmp_path: Path) -> None:
    """A freeze of a Python 3.12 runtime with TensorFlow 2.19 (as Colab's 2026.01 runtime): 3.11
    and 3.12 get the freeze's versions; 3.13, where TensorFlow 2.19 does not install, the newest
    that does. Resolves against PyPI (metadata only)."""
    (tmp_path / "requirements.in").write_text("tensorflow\nsix\n")
    (tmp_path / "runtime-freeze.txt").write_text(
        "# python: 3.12.12\nml-dtypes==0.5.1\nnumpy==2.0.2\nprotobuf==5.29.4\nsix==1.16.0\n"
        "tensorboard==2.19.0\ntensorflow==2.19.0\n")
    # An older lock: its pins are kept where they still resolve (six is not in the freeze).
    (tmp_path / "requirements.txt").write_text("absl-py==2.1.0\n")
    run = run_lock(tmp_path, "requirements.in", "-o", "requirements.txt", "--freeze", "runtime-freeze.txt")
    assert run.returncode == 0, run.stderr
    assert "Python 3.13: the freeze's versions and older ones do not resolve" in run.stdout, run.stdout
    assert "requirements/colab-constraints.txt is now this runtime's snapshot" in run.stdout
    assert "# Copied by `make lock` from runtime-freeze.txt." in (tmp_path / "requirements" / "colab-constraints.txt").read_text()
    text = (tmp_path / "requirements.txt").read_text()
    assert "# Colab runtime: Python 3.12, requirements/colab-constraints.txt (from runtime-freeze.txt)" in text
    for python in ("3.11", "3.12"):
        pins = pins_for(text, python)
        assert pins["tensorflow"] == "2.19.0" and pins["numpy"] == "2.0.2" and pins["six"] == "1.16.0", (python, pins)
        assert pins["absl-py"] == "2.1.0"
    newest = pins_for(text, "3.13")
    assert newest["tensorflow"] != "2.19.0" and newest["numpy"] != "2.0.2", newest
    assert 'tensorflow==2.19.0 ; python_version < "3.13"' in text.splitlines()
