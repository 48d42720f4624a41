"""Each non-default task end to end on a user's CSV: prepare -> train -> evaluate in-process (its
metrics in train.json and evaluate.json, its plot files), then `predict` in one fresh process.

Classification end to end is tests/test_prepare.py (`test_csv_vectors_train_and_evaluate_...`).
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import PARAMS, PROJECT, main_in_fresh_process

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.evaluation.evaluate import evaluate
from {{ cookiecutter.module_name }}.tasks.base import task_class
from {{ cookiecutter.module_name }}.training.run_record import find_run
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

ROWS = 240  # 20% test: 48 rows
TINY = ["train.epochs=8", "train.batch_size=16", "train.learning_rate=0.02",
        "model.hidden_units=[16]", "model.dropout=0"]  # fmt: skip


def _features(rng: np.random.Generator) -> np.ndarray:
    """Two features around 100 (raw units: the model scales its own inputs)."""
    return 100 + rng.normal(0, 10, size=(ROWS, 2))


def multilabel_rows(rng: np.random.Generator) -> list[str]:
    """Label `hot` when f1 > 100, `wet` when f2 > 100, joined by `|`; none: an empty cell."""
    rows = ["f1,f2,tags"]
    for f1, f2 in _features(rng):
        tags = [name for name, on in (("hot", f1 > 100), ("wet", f2 > 100)) if on]
        rows.append(f"{f1:.2f},{f2:.2f},{'|'.join(tags)}")
    return rows


def price(f1: float, f2: float) -> float:
    """The regression target without noise: around 50, from features around 100."""
    return 50 + 0.5 * (f1 - 100) - 0.3 * (f2 - 100)


def regression_rows(rng: np.random.Generator) -> list[str]:
    """A price around 50 from features around 100: it must train without the user rescaling."""
    rows = ["f1,f2,price"]
    for f1, f2 in _features(rng):
        rows.append(f"{f1:.2f},{f2:.2f},{price(f1, f2) + rng.normal(0, 0.3):.3f}")
    return rows


CASES = {"multilabel": (multilabel_rows, "tags"), "regression": (regression_rows, "price")}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict, dict]]:
    """Each task prepared, trained and evaluated once: (project, train.json, evaluate.json)."""
    root = tmp_path_factory.mktemp("tasks")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROJECT_STORAGE_DIR", str(root / "storage"))
        for task, (make_rows, label) in CASES.items():
            project = root / task
            project.mkdir()
            (project / "params.yaml").write_text((PARAMS).read_text())
            (project / "data.csv").write_text("\n".join(make_rows(np.random.default_rng(0))) + "\n")
            params = load_params(project / "params.yaml", [
                "data.source=csv", f"data.path={project / 'data.csv'}", f"data.label={label}",
                f"task.type={task}", f"run_name={task}", *TINY,
            ])  # fmt: skip
            prepare(params, project)
            assert train(params, project).status == "completed"
            evaluation = evaluate(params, project)
            results = project / "results"
            train_json = json.loads((results / "metrics/train.json").read_text())
            compared = {f"test_{name}" for name in task_class(task).headline}
            assert json.loads((results / "metrics/evaluate.json").read_text()).keys() == compared
            train_json |= find_run(results)["metrics"]  # every validation number of the run
            out[task] = (project, train_json, evaluation)
    return out


def _plot(project: Path, name: str) -> list[list[str]]:
    with (project / "results/plots" / name).open() as handle:
        return list(csv.reader(handle))


def test_multilabel_trains_evaluates_and_plots_per_label(trained) -> None:
    project, train_json, metrics = trained["multilabel"]
    for name in ("binary_accuracy", "auc", "precision", "recall", "f1"):
        assert 0.0 <= train_json[f"val_{name}"] <= 1.0 and f"test_{name}" in metrics
    assert "val_accuracy" not in train_json  # not the classification metrics
    assert metrics["test_examples"] == ROWS // 5
    assert metrics["test_binary_accuracy"] >= 0.85 and metrics["test_auc"] >= 0.9
    evaluate_json = json.loads((project / "results/metrics/evaluate.json").read_text())
    assert set(evaluate_json) == {"test_f1", "test_auc"}  # multilabel's headline
    per_label = _plot(project, "per_label.csv")
    assert per_label[0] == ["label", "precision", "recall", "f1", "support"]
    assert sorted(row[0] for row in per_label[1:]) == ["hot", "wet"]
    assert len(_plot(project, "confusion_matrix.csv")) == 1  # another task's plot: header only


def test_regression_far_from_zero_beats_the_mean(trained) -> None:
    project, train_json, metrics = trained["regression"]
    for name in ("mae", "rmse", "r2"):
        assert f"val_{name}" in train_json and f"test_{name}" in metrics
    truth = np.array([float(r[0]) for r in _plot(project, "predictions.csv")[1:]])
    mean_mae = float(np.abs(truth - truth.mean()).mean())  # predicting the mean: R2 = 0
    assert train_json["val_r2"] >= 0.8 and metrics["test_r2"] >= 0.8
    assert metrics["test_mae"] <= 0.5 * mean_mae
    rows = _plot(project, "predictions.csv")
    assert rows[0] == ["actual", "predicted", "residual"] and len(rows) == ROWS // 5 + 1
    assert abs(np.mean([float(r[1]) for r in rows[1:]]) - 50) < 5  # in the user's units


@pytest.mark.parametrize(
    ("task", "title", "x_label", "y_label"),
    [
        ("multilabel", "F1 per label, test split (multilabel)", "F1", "label"),
        ("regression", "Predicted against true, test split (regression)", "true value",
         "predicted value"),
    ],
)  # fmt: skip
def test_dvc_plots_draw_each_kinds_plot(trained, task, title, x_label, y_label) -> None:
    """`dvc plots show` from dvc.yaml's `plots:`: the kind's own plot, titled, axes labelled,
    with a point per test example (or label), beside the training curves."""
    project = trained[task][0]
    shutil.copy(PROJECT / "dvc.yaml", project / "dvc.yaml")
    for args in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(args, cwd=project, check=True, capture_output=True)
    shown = subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "--json"], cwd=project,
                           capture_output=True, text=True, check=True)  # fmt: skip
    plots = json.loads(shown.stdout)
    assert "errors" not in plots, plots.get("errors")
    content = plots["data"][title][0]["content"]
    assert content["title"]["text"] == title
    assert (content["encoding"]["x"]["title"], content["encoding"]["y"]["title"]) == (
        x_label, y_label
    )  # fmt: skip
    rows = {"multilabel": 2, "regression": ROWS // 5}[task]  # labels, or test examples
    assert len(content["data"]["values"]) == rows
    assert len(plots["data"]["Loss per epoch"][0]["content"]["data"]["values"]) == 2 * 8


def test_predict_each_trained_task_in_a_fresh_process(trained, tmp_path: Path) -> None:
    """One process, only the package and the saved files: `predict` for each task."""
    new = tmp_path / "new.csv"  # the feature columns, one extra column, in another order
    new.write_text("note,f2,f1\na,120,80\nb,80,120\nc,120,120\n")
    calls = [
        ["predict", str(new), "--output", str(tmp_path / f"{task}.csv"),
         "--params", str(project / "params.yaml")]
        for task, (project, _, _) in trained.items()
    ]  # fmt: skip
    calls += [  # the whole source CSV: evaluate's test rows are among its rows
        ["predict", str(project / "data.csv"), "--output", str(tmp_path / f"{task}-all.csv"),
         "--params", str(project / "params.yaml")]
        for task, (project, _, _) in trained.items()
    ]  # fmt: skip
    proc = main_in_fresh_process(calls, tmp_path, tmp_path / "storage")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with (tmp_path / "multilabel.csv").open() as handle:
        labels = list(csv.DictReader(handle))
    assert list(labels[0]) == ["id", "prediction", "prob_hot", "prob_wet"]
    assert [r["id"] for r in labels] == ["1", "2", "3"]
    assert [r["prediction"] for r in labels] == ["wet", "hot", "hot|wet"]
    with (tmp_path / "regression.csv").open() as handle:
        values = list(csv.DictReader(handle))
    assert list(values[0]) == ["id", "prediction"]
    expected = [price(80, 120), price(120, 80), price(120, 120)]  # the rows of new.csv
    np.testing.assert_allclose([float(r["prediction"]) for r in values], expected, atol=3)
    for task, (project, _, _) in trained.items():
        with (tmp_path / f"{task}-all.csv").open() as handle:
            served = {row["id"]: row for row in csv.DictReader(handle)}
        with (project / "results/predictions/test.csv").open() as handle:
            tested = list(csv.DictReader(handle))
        source = (project / "data.csv").read_text().splitlines()  # line n: row n
        assert len(tested) == ROWS // 5
        for row in tested:  # predict's row to float tolerance, plus the truth
            truth = source[int(row["id"])].split(",")[2]
            want = served[row["id"]]
            if task == "regression":
                assert float(row["target"]) == pytest.approx(float(truth))
                assert float(row["prediction"]) == pytest.approx(float(want["prediction"]))
                continue
            assert row["target"] == truth and row["prediction"] == want["prediction"]
            for column in ("prob_hot", "prob_wet"):
                assert float(row[column]) == pytest.approx(float(want[column]), abs=1e-5)
