"""Fixtures that bake the template into temporary folders."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import project_env  # noqa: E402


@pytest.fixture(scope="session")
def default_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project baked with every default answer, once for all of this run's pytest-xdist workers
    (their base folders share a parent), so they share one editable install of it too."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "default"
    with project_env.exclusive(shared / "default.lock"):
        if not folder.exists():
            partial = shared / "default.partial"
            shutil.rmtree(partial, ignore_errors=True)  # a bake this run started and did not finish
            project_env.bake(partial)
            partial.rename(folder)
    return next(p for p in folder.iterdir() if p.is_dir())


@pytest.fixture(scope="session")
def used_project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(project, python): a default project its user has already worked in (`dvc repro`,
    `make train`, a sweep: scripts/project_env.py USE), with the lock's interpreter (the package
    from the project's src/). Made once for all of this run's pytest-xdist workers; a `done` file
    says it is complete. Tests may run commands there, never change what the user made."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = shared / "used", shared / "used" / "done"
    with project_env.exclusive(shared / "used.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a start this run did not finish
            project = project_env.bake(folder)
            project_env.use(project, project_env.locked_python(project), folder / "use.log")
            done.write_text(project.name)
    project = folder / done.read_text()
    return project, project_env.locked_python(project)


@pytest.fixture(scope="session")
def project_python(default_project: Path) -> Path:
    """An interpreter with the default project's lock installed and the project itself (editable)."""
    return project_env.project_python(default_project)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bench: runs `make bench` at tiny sizes (minutes)")


# `make test` hands whole files to pytest-xdist's workers in this order (--no-loadscope-reorder),
# the first four in turn. The used project's whole suite (`make test-all`, about 14 min after the
# project is made and used) takes one worker, with one quick file queued behind it; the other
# worker runs the benchmark, `make test` in the baked project, the Colab box and the rest meanwhile.
FIRST = ("test_used_project.py", "test_bench.py", "test_lock.py", "test_baked_project.py",
         "test_colab_box.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: the rest as collected
