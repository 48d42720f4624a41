"""`evaluate`: the trained model on the test split; the task computes, this module writes.

`results/plots/` holds every registered kind's files, the others' with their header only (and
unnamed in the printed line): dvc.yaml is static, and DVC leaves out a plot whose file has no
rows, where a missing file makes each `dvc plots show` say it "failed to load some plots".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config import ConfigError, Params, flat, yaml_text
from ..core.files import atomic_write, read_json, save_json
from ..core.storage import MODEL_FILE, TEST_METRICS, TRAIN_METRICS, results_root
from ..data import manifest
from ..data.pipeline import eval_dataset, example_ids, load_prepared
from ..data.prepare import PROCESSED
from ..data.split import describe
from ..spec import natural_order
from ..tasks.base import Evaluation, Task, kinds, make_task
from ..training.run_record import find_run
from ..training.saved_model import load_for_users
from .model_card import write_card
from .predict import prediction_table

# Under the results root (`results/`, or $PROJECT_RESULTS_DIR where a cloud job sets it).
PLOTS = "plots"
CURVE = "plots/training_curve.csv"
TEST_PREDICTIONS = "predictions/test.csv"  # report.worst_predictions reads it
LOSS_KEYS = ("task.type", "train.label_smoothing")  # what makes the loss the model trained on


def write_evaluation(results: Path, evaluation: Evaluation, task: Task) -> list[Path]:
    """Write evaluate.json and the plot tables, and return the task's own files (the other
    kinds' are header only); the training curve's columns are each number `train` recorded per
    epoch and each kind's training metric."""
    compared = task.compared(evaluation.metrics, "test")
    written = [save_json(compared, results / TEST_METRICS)]
    history = pd.DataFrame(read_json(results / TRAIN_METRICS).get("history") or [])
    plotted = {
        f"{v}{m}" for k in kinds() for m in ("loss", k.train_metric_name) for v in ("", "val_")
    }
    columns = ["epoch", *sorted((set(history.columns) | plotted) - {"epoch"})]
    tables = {**evaluation.plots, Path(CURVE).name: history.reindex(columns=columns)}
    for name, table in tables.items():
        written.append(atomic_write(results / PLOTS / name, table.to_csv(index=False)))
    for kind in kinds():
        for name, header in kind.plot_columns.items():
            if name not in tables:
                atomic_write(results / PLOTS / name, ",".join(header) + "\n")
    return written


def check_trained_alike(params: Params, run: dict[str, Any]) -> None:
    """Refuse to score the saved model with another loss than its `run` (its record) trained it
    with (a run trained with `--set task.type=...` is evaluated with the same `--set`); no record:
    no check."""
    trained, mine = flat(run.get("params", {})), flat(params.to_dict())
    for key in LOSS_KEYS:
        if key in trained and trained[key] != mine[key]:
            raise ConfigError(
                f"{key}: {yaml_text(mine[key])}, but the saved model was trained with "
                f"{yaml_text(trained[key])} (run '{trained.get('run_name')}'), so its test loss "
                f"would be another loss (example: --set {key}={yaml_text(trained[key])})"
            )


def evaluate(params: Params, project_dir: Path) -> dict[str, Any]:
    """Evaluate the saved model on the test split and write metrics and plot data."""
    manifest.check(project_dir)
    results = results_root(project_dir)
    run = find_run(results, MODEL_FILE) or {}  # the model's run record (the card's too)
    check_trained_alike(params, run)
    data = load_prepared(project_dir / PROCESSED)
    task = make_task(params, data.spec, weighted=False)  # test_loss: unweighted
    model, _ = load_for_users(results / "models", data.spec)
    # Images go in training-size batches: a conv net's activations set the memory.
    batch = 1024 if data.spec.kind == "vector" else params.train.batch_size
    evaluation = task.evaluate(
        (y.numpy(), np.asarray(model(x, training=False)))
        for x, y in eval_dataset(data, "test", batch)
    )
    scored_on = describe(data.spec, "test")
    written = write_evaluation(results, evaluation, task)
    table = prediction_table(
        task, example_ids(data, "test"), evaluation.outputs, evaluation.targets
    )
    table["loss"] = [f"{v:.6g}" for v in evaluation.losses]
    table = table.sort_values("id", key=lambda ids: ids.map(natural_order), kind="stable")
    written.append(atomic_write(results / TEST_PREDICTIONS, table.to_csv(index=False)))
    written.append(write_card(params, project_dir, data.spec, evaluation, run))
    shown = {k: v for k, v in evaluation.metrics.items() if k != "test_examples"}
    print(
        f"Test ({task.kind}): "
        + ", ".join(f"{k.removeprefix('test_')} {v:.4f}" for k, v in shown.items())
        + f" on {scored_on}; wrote "
        + ", ".join(sorted(str(p.relative_to(results)) for p in written))
        + f" in {results}",
        flush=True,
    )
    return evaluation.metrics
