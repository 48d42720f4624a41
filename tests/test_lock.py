"""The generated locks pin every package, install on Python 3.11-3.13 and agree with Colab (but for
tools/lock.py's OVERRIDES)."""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path

import jinja2
import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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
