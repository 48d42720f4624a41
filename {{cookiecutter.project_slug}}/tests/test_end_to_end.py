"""`prepare`, `train`, `evaluate`, `predict` from the command line (`main` of
`python -m {{ cookiecutter.module_name }}`, in this process), as a user runs them after changing
a task or the data: each registered task, yours included, on a small CSV, and classification on
images and on texts.

A built-in task gets the labels it is made for (classes, `|`-joined labels, numbers); a task of
yours (`@register("task", ...)`) is tried on each CSV of tests/examples.py in turn and runs on
the first one it prepares. One task: `pytest tests/test_end_to_end.py -k <name>`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from examples import TARGETS, TINY, Inputs, new_project, run

from {{ cookiecutter.module_name }} import registry

LABELS = {"classification": "classes", "multilabel": "labels", "regression": "values"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    return Inputs(tmp_path_factory.mktemp("inputs") / "inputs")


@pytest.mark.parametrize("name", registry.names("task"))
def test_each_task_prepares_trains_evaluates_and_predicts(
    name: str, tmp_path: Path, inputs: Inputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    tried = []
    for target in [LABELS[name]] if name in LABELS else TARGETS:
        project = new_project(tmp_path / target)
        sets = [*TINY, *inputs.table(target), f"task.type={name}", "model.architecture=mlp"]
        code, printed = run("prepare", project, *sets)
        if code == 0:
            break
        tried.append(f"{target}: exit {code}: {printed.strip()[-1000:]}")
    else:
        pytest.fail(f"task.type {name} prepared none of the example CSVs:\n" + "\n".join(tried))

    train_evaluate_predict(project, sets, inputs.tables[target], tmp_path / "predictions.csv")


@pytest.mark.parametrize("kind", ["images", "text"])
def test_images_and_texts_train_evaluate_and_predict(
    kind: str, tmp_path: Path, inputs: Inputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    project = new_project(tmp_path / kind)
    data = inputs.by_kind()[kind]
    sets = [*TINY, *data, "model.architecture=" + ("cnn" if kind == "images" else "text")]
    code, printed = run("prepare", project, *sets)
    assert code == 0, f"prepare: exit {code}\n{printed}"
    folder = inputs.images if kind == "images" else inputs.texts
    train_evaluate_predict(project, sets, folder, tmp_path / "predictions.csv")


def train_evaluate_predict(project: Path, sets: list[str], data: Path, output: Path) -> None:
    """`train`, `evaluate` (both write their metrics), then `predict` on `data` (a CSV: a row of
    predictions per data row; a folder: one per file)."""
    for command, args in (("train", ("--fresh",)), ("evaluate", ())):
        code, printed = run(command, project, *sets, args=args)
        assert code == 0, f"{command}: exit {code}\n{printed}"
        if command == "train":  # its last line says each figure once (train.monitor: val_loss)
            done = next(line for line in printed.splitlines() if line.startswith("Done:"))
            assert done.count("val_loss") == 1, done
    for metrics in ("train.json", "evaluate.json"):
        values = json.loads((project / "results/metrics" / metrics).read_text()).values()
        assert any(isinstance(v, int | float) for v in values), metrics

    code, printed = run("predict", project, args=(str(data), "--output", str(output)))
    assert code == 0, f"predict: exit {code}\n{printed}"
    with output.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if data.is_dir():
        assert len(rows) == sum(1 for p in data.rglob("*") if p.is_file())
    else:
        assert len(rows) == len(data.read_text().splitlines()) - 1  # one per data row
    assert list(rows[0])[:2] == ["id", "prediction"], rows[0]
