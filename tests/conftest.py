"""Fixtures that bake the template into temporary folders."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import project_env  # noqa: E402


@pytest.fixture(scope="session")
def default_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project baked with every default answer."""
    return project_env.bake(tmp_path_factory.mktemp("default"))


@pytest.fixture(scope="session")
def project_python(default_project: Path) -> Path:
    """An interpreter with the default project's lock installed and the project itself (editable)."""
    return project_env.project_python(default_project)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bench: runs `make bench` at tiny sizes (minutes)")
