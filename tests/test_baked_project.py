"""Install the default project from its own lock and run what it ships: its tests and its linters."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def run_in(
    project: Path, python: Path, *command: str, timeout: int = 1800, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run a command in the project with its environment's tools first on PATH."""
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}", **(extra_env or {})}
    env.pop("PROJECT_STORAGE_DIR", None)
    for name in [n for n in env if n.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))]:
        env.pop(name)  # this worker's own: the project's pytest is a session of its own
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)


def test_generated_test_suite_passes(default_project: Path, project_python: Path) -> None:
    """`make test`, as the project's README says, in the project as baked (no data, results or
    runs yet); every test (`make test-all`) runs in a used project: test_used_project.py."""
    env = {"PYTEST_ADDOPTS": "-q -p no:cacheprovider"}
    run = run_in(default_project, project_python, "make", "test", f"PYTHON={project_python}", extra_env=env)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert " passed" in run.stdout


def test_generated_code_is_lint_clean(default_project: Path, project_python: Path) -> None:
    for command in (["ruff", "check", "."], ["ruff", "format", "--check", "."]):
        run = run_in(default_project, project_python, *command)
        assert run.returncode == 0, run.stdout + run.stderr
