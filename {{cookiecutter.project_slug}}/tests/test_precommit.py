"""`pre-commit run --all-files` passes on the project as generated.

A copy of the project's committable files in a new git repository, every file staged, every hook
run: nbstripout, ruff (lint and format, notebooks too), large files, private keys, conflict
markers, YAML/TOML/JSON, end of file and whitespace. All are local hooks running the pinned dev
tools.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

PROJECT = Path(__file__).resolve().parents[1]
# Never copied: git's own folder, environments, caches.
SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache", "wandb"}
# data/* and results/* belong to DVC and the runs: a fresh project has only their .gitkeep.
DVC_DIRS = {PROJECT / "data", PROJECT / "results"}


def _ignore(folder: str, names: list[str]) -> set[str]:
    skipped = {n for n in names if n in SKIP_DIRS or n.endswith(".egg-info")}
    if Path(folder).parent in DVC_DIRS:
        skipped |= {n for n in names if n != ".gitkeep"}
    return skipped


@pytest.mark.slow
def test_pre_commit_passes_on_a_fresh_project(tmp_path):
    repo = tmp_path / "project"
    shutil.copytree(PROJECT, repo, ignore=_ignore)
    bindir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-cache"),
    }
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    run = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--all-files", "--show-diff-on-failure"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert "Passed" in run.stdout and "Failed" not in run.stdout
    for hook in ("nbstripout", "ruff check", "ruff format", "refuse private keys"):
        assert hook in run.stdout

    # A conflict `cruft update` left in a file (git apply -3: no merge under way) is refused.
    readme = repo / "README.md"
    readme.write_text(f"{readme.read_text()}<<<<<<< ours\nmine\n=======\ntheirs\n>>>>>>> theirs\n")
    subprocess.run(["git", "add", "README.md"], cwd=repo, check=True, env=env)
    run = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "check-merge-conflict", "--files", "README.md"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1 and "README.md:" in run.stdout and "Merge conflict" in run.stdout
