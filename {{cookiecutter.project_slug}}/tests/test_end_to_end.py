"""Each registered task, yours included, end to end from the command line on a small CSV:
`prepare`, `train`, `evaluate`, `predict` (`main` of `python -m {{ cookiecutter.module_name }}`,
in this process), as a user runs them after changing a task or the data.

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

    for command, args in (("train", ("--fresh",)), ("evaluate", ())):
        code, printed = run(command, project, *sets, args=args)
        assert code == 0, f"{command}: exit {code}\n{printed}"
    results = project / "results"
    for metrics in ("train.json", "evaluate.json"):
        values = json.loads((results / "metrics" / metrics).read_text()).values()
        assert any(isinstance(v, int | float) for v in values), metrics

    table, output = inputs.tables[target], tmp_path / "predictions.csv"
    code, printed = run("predict", project, args=(str(table), "--output", str(output)))
    assert code == 0, f"predict: exit {code}\n{printed}"
    with output.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(table.read_text().splitlines()) - 1  # one per data row
    assert list(rows[0])[:2] == ["id", "prediction"], rows[0]
