"""DVC's everyday commands, as the project's README and docs/data.md give them, on a project its
user has worked in (a copy of the `used_project` fixture: `dvc repro`, `make train`, a sweep),
before and after a change of params.yaml: metrics files hold numbers only, few enough that
`dvc metrics show` fits a terminal, none twice; the params diff names the change; the plots render
with their titles."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import project_env
import yaml

MAX_VALUES = 40
TERMINAL = 100  # columns: `dvc metrics show`'s table fits a terminal this wide


def dvc(project: Path, python: Path, *args: str) -> str:
    """`dvc ARGS` in `project` as its user's shell runs it; fails the test with DVC's output."""
    env = project_env.project_command_env(project, python)
    done = subprocess.run(["dvc", *args], cwd=project, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"dvc {' '.join(args)}: exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    print(f"$ dvc {' '.join(args)}\n{done.stdout}")
    return done.stdout


def leaves(tree: Any, key: str = "") -> list[tuple[str, Any]]:
    """Every (dotted key, value) of a metrics file's JSON, as DVC flattens it (lists left out:
    DVC does not show them)."""
    if isinstance(tree, dict):
        return [pair for k, v in tree.items() for pair in leaves(v, f"{key}.{k}" if key else k)]
    return [] if isinstance(tree, list) else [(key, tree)]


def metrics(project: Path, python: Path) -> dict[str, dict[str, Any]]:
    """`dvc metrics show --json` of the workspace: file -> {key: value}."""
    shown = json.loads(dvc(project, python, "metrics", "show", "--json"))
    files = shown[""]["data"]
    return {path: dict(leaves(entry["data"])) for path, entry in files.items()}


def check_numbers_only(by_file: dict[str, dict[str, Any]], params: dict[str, Any]) -> None:
    """Numbers only, at most MAX_VALUES, none twice: not `train_val_*` beside `val_*`, and not a
    setting of params.yaml again (`seed`, `epochs`, `learning_rate`: `dvc params diff` shows those)."""
    values = [(path, key, value) for path, found in by_file.items() for key, value in found.items()]
    words = [(path, key, value) for path, key, value in values
             if isinstance(value, (str, bool)) or value is None]  # fmt: skip
    assert not words, f"a metrics file holds more than numbers: {words}"
    assert len(values) <= MAX_VALUES, f"{len(values)} metrics in `dvc metrics show`: {values}"
    keys = [key for found in by_file.values() for key in found]
    repeats = [key for key in keys if key.startswith("train_val_")]
    assert not repeats and len(keys) == len(set(keys)), f"a metric shown twice: {keys}"
    settings = {key.rsplit(".", 1)[-1] for key, _ in leaves(params)}
    assert not settings & set(keys), f"params.yaml's settings among the metrics: {settings & set(keys)}"


def check_table_fits(project: Path, python: Path) -> None:
    """`dvc metrics show` as the user reads it: no line wider than TERMINAL."""
    table = dvc(project, python, "metrics", "show")
    widest = max(len(line) for line in table.splitlines())
    assert widest <= TERMINAL, f"dvc metrics show is {widest} columns wide:\n{table}"


def check_plots(project: Path, python: Path) -> None:
    """`dvc plots show` renders dvc.yaml's plots, titled: the curves and the kind's own."""
    dvc(project, python, "plots", "show")
    page = (project / "dvc_plots" / "index.html").read_text()
    for title in ("Loss per epoch", "Confusion matrix"):
        assert title in page, f"dvc plots show drew no '{title}'"


def test_metrics_params_and_plots_before_and_after_a_change(
    used_project: tuple[Path, Path], tmp_path: Path
) -> None:
    used, python = used_project
    project = tmp_path / used.name  # a copy: tests never change what the user made
    shutil.copytree(used, project, symlinks=True)
    git = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com"]
    subprocess.run([*git, "add", "-A"], cwd=project, check=True, capture_output=True)
    subprocess.run([*git, "commit", "-q", "--no-verify", "-m", "Trained"], cwd=project, check=True)
    subprocess.run(["git", "branch", "-M", "main"], cwd=project, check=True)

    settings = yaml.safe_load((project / "params.yaml").read_text())
    before = metrics(project, python)
    assert set(before) == {"results/metrics/train.json", "results/metrics/evaluate.json"}
    check_numbers_only(before, settings)
    check_table_fits(project, python)
    assert dvc(project, python, "params", "diff", "main").strip() == ""
    check_plots(project, python)

    params = project / "params.yaml"
    text = params.read_text()
    changed = re.sub(r"(\n  learning_rate: )[0-9.e-]+", r"\g<1>0.002", text, count=1)
    assert changed != text, "params.yaml has no train.learning_rate line"
    params.write_text(changed)
    dvc(project, python, "repro")
    after = metrics(project, python)
    check_numbers_only(after, settings)
    check_table_fits(project, python)

    diff = json.loads(dvc(project, python, "metrics", "diff", "main", "--json"))
    assert diff, "dvc metrics diff main compared nothing"
    for path, found in diff.items():
        for key, entry in found.items():
            assert isinstance(entry.get("new"), (int, float)) and not isinstance(entry["new"], bool), (path, key, entry)
    dvc(project, python, "metrics", "diff", "main")  # printed as the user reads it
    params_diff = dvc(project, python, "params", "diff", "main")
    assert "train.learning_rate" in params_diff and "0.002" in params_diff
    shown = dvc(project, python, "exp", "show", "--no-pager", "--csv")
    header = shown.splitlines()[0].split(",")
    assert "train.learning_rate" in header and "val_loss" in header, header
    check_plots(project, python)
