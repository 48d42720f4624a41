"""Each tracker answer bakes a project that logs to that tracker for real, in its own lock.

The project baked with tracking=mlflow (or wandb) gets an environment from its own
requirements.txt, and its tests/test_tracking.py logs a run: an MLflow run in the local store
under results/mlruns, or an offline W&B run. Only the chosen tracker is pinned and in the code.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import project_env

# The test of each tracker that must run (and pass) in the baked project.
TRACKER_TESTS = {
    "mlflow": [
        "test_mlflow_run_is_logged_to_the_local_store",
        "test_mlflow_tracking_uri_wins",
        "test_the_readmes_mlflow_ui_lists_the_run",
    ],
    "wandb": ["test_wandb_offline_run_is_logged_without_a_key", "test_wandb_key_comes_from"],
}


@pytest.mark.parametrize("tracker", sorted(TRACKER_TESTS))
def test_baked_tracker_logs_a_real_run(tracker: str, tmp_path: Path) -> None:
    project = project_env.bake(tmp_path, tracking=tracker)
    other = ({"mlflow", "wandb"} - {tracker}).pop()
    pins = (project / "requirements.txt").read_text().splitlines()
    assert any(line.startswith(f"{tracker}==") for line in pins)
    assert not any(line.startswith(f"{other}==") for line in pins)
    assert f"import {other}" not in (project / "src" / "colab_project" / "training" / "tracking.py").read_text()

    if tracker == "mlflow":  # the `mlflow ui` the README and the docs give is the one the test runs
        pages = ("README.md", "docs/reproducibility.md", "src/colab_project/training/tracking.py",
                 "tests/test_tracking.py")  # fmt: skip
        commands = {page: re.findall(r"mlflow ui [^`\"]+", (project / page).read_text()) for page in pages}
        assert len({command for found in commands.values() for command in found}) == 1, commands
        assert all(commands.values()), commands

    python = project_env.project_python(project)
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"}
    for name in ("MLFLOW_TRACKING_URI", "WANDB_API_KEY", "WANDB_MODE", "PROJECT_STORAGE_DIR"):
        env.pop(name, None)
    run = subprocess.run(
        [str(python), "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_tracking.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    for name in TRACKER_TESTS[tracker]:
        assert any(name in line and "PASSED" in line for line in run.stdout.splitlines()), name
