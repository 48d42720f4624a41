"""`make test-all` in a project its user has already worked in (`dvc repro`, `make train`, a sweep
and its `--best`, which writes the best trial's run name, epochs and settings into params.yaml: the
`used_project` fixture): every test passes, and leaves everything the user made as it was. How long
`make test` takes there is a figure of `make bench` (user_tests), not an assertion here."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import project_env

# Written by any run of Python or pytest in the project: not the user's.
CACHES = ("__pycache__", ".pytest_cache", ".ruff_cache", ".git")


def files(project: Path) -> dict[str, tuple[int, int]]:
    """Every file of the project but caches: path -> (size, modification time in ns)."""
    found = {}
    for path in project.rglob("*"):
        parts = path.relative_to(project).parts
        if path.is_file() and not set(parts) & set(CACHES):
            found["/".join(parts)] = (path.stat().st_size, path.stat().st_mtime_ns)
    return found


def test_make_test_all_passes_in_a_used_project_and_changes_nothing_there(
    used_project: tuple[Path, Path],
) -> None:
    project, python = used_project
    # What the user made, that a test must not read: the pipeline's data and results in DVC's
    # cache, the trained run's checkpoints on the storage root (the project folder), a sweep.
    assert (project / "results/models/model.keras").is_file()
    assert json.loads((project / "results/metrics/evaluate.json").read_text())
    assert any((project / ".dvc" / "cache").rglob("*")) and (project / "dvc.lock").is_file()
    assert list((project / "checkpoints").glob("baseline*/step-*"))
    assert list((project / "results" / "sweeps").glob("*/trials.csv"))
    before = files(project)

    env = {**project_env.project_command_env(project, python), "PYTEST_ADDOPTS": "-p no:cacheprovider"}
    started = time.monotonic()
    run = subprocess.run(["make", "test-all"], cwd=project, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert re.search(r"\d+ passed", run.stdout), run.stdout[-2000:]
    print(f"make test-all in a used project: {seconds:.0f} s")
    changed = sorted(name for name in before.keys() | files(project).keys()
                     if before.get(name) != files(project).get(name))  # fmt: skip
    assert changed == [], "make test-all changed the user's files"
