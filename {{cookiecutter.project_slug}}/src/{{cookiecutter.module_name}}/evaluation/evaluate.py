"""`evaluate`: the trained model on the held-out test split, reported as its task's kind asks.

Reads `results/models/model.keras` (with `model.json`: its outputs are in the user's units) and
the test shards in `data/processed`, streamed through the input pipeline; the task
(`Task.evaluate`, tasks/) computes the metrics and the plot tables; this module writes
- `results/metrics/evaluate.json`: numbers only (`dvc metrics show`): the test loss (unweighted,
  whatever `train.class_weight`), the task's metrics, the number of test examples;
- `results/plots/`: the kind's plot tables (dvc.yaml's `plots:`), and every other registered
  kind's with its header only: dvc.yaml is static, and an empty file draws an empty plot where a
  missing one is an error; `training_curve.csv`: every per-epoch number of
  `results/metrics/train.json`;
- `results/predictions/test.csv`: each test example's prediction, in the columns of `predict`'s
  CSV plus `target` (the truth) and `loss` (the task's loss of that example), its `id` the
  example's source (a file relative to `data.path`, a CSV row as `predict` numbers rows, an
  index in a TFRecord file or a TFDS split), sorted by id (notebook 03 shows the worst);
- `results/reports/model_card.md` (model_card.py), which also says what was scored: which test
  split, how `prepare` made it (a fact, not a metric).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config import Params
from ..core.files import atomic_write
from ..core.storage import TEST_METRICS, TRAIN_METRICS, results_root
from ..data import manifest
from ..data.pipeline import Prepared, eval_dataset, example_ids, load_prepared
from ..data.prepare import PROCESSED
from ..data.split import describe
from ..spec import natural_order
from ..tasks.base import Evaluation, Task, kinds, make_task
from ..training.saved_model import load_for_users
from .export import load_exports
from .model_card import write_card
from .predict import prediction_table

# Under the results root (`results/`, or $PROJECT_RESULTS_DIR where a cloud job sets it).
PLOTS = "plots"
CURVE = "plots/training_curve.csv"
TEST_PREDICTIONS = "predictions/test.csv"  # report.worst_predictions reads it


def write_evaluation(results: Path, evaluation: Evaluation) -> list[Path]:
    """Write what `Task.evaluate` found: evaluate.json, the plot tables (every registered kind's
    files: the others' with their header only) and the training curve, whose columns are every
    per-epoch number `train` recorded plus each kind's training metric (empty where absent)."""
    written = [
        atomic_write(results / TEST_METRICS, json.dumps(evaluation.metrics, indent=2) + "\n")
    ]
    tables = dict(evaluation.plots)
    for kind in kinds():
        for name, header in kind.plot_columns.items():
            tables.setdefault(name, pd.DataFrame(columns=header))
    history = pd.DataFrame(_history(results / TRAIN_METRICS))
    plotted = {
        f"{v}{m}" for k in kinds() for m in ("loss", k.train_metric_name) for v in ("", "val_")
    }
    columns = ["epoch", *sorted((set(history.columns) | plotted) - {"epoch"})]
    tables[Path(CURVE).name] = history.reindex(columns=columns)
    for name, table in tables.items():
        written.append(atomic_write(results / PLOTS / name, table.to_csv(index=False)))
    return written


def _history(train_metrics: Path) -> list[dict[str, Any]]:
    if not train_metrics.is_file():
        return []
    return json.loads(train_metrics.read_text()).get("history") or []


def scored_batches(model: Any, data: Prepared, batch: int) -> Iterator[tuple[Any, Any]]:
    """(targets, outputs) of the test split, batch by batch."""
    for x, y in eval_dataset(data, "test", batch):
        yield y.numpy(), np.asarray(model(x, training=False))


def _kept(batches: Iterator[Any], into: list[Any]) -> Iterator[Any]:
    """`batches` passed on, each also appended to `into`."""
    for batch in batches:
        into.append(batch)
        yield batch


def write_test_predictions(
    results: Path, data: Prepared, task: Task, scored: list[tuple[Any, Any]]
) -> Path:
    """results/predictions/test.csv from the (targets, outputs) batches of the test split, in
    written order: one row per example, named by its source id, sorted by id."""
    ids = example_ids(data, "test")
    targets = np.concatenate([t for t, _ in scored])
    outputs = np.concatenate([np.asarray(o).reshape(len(o), -1) for _, o in scored])
    table = prediction_table(task, ids, outputs, targets)
    table["loss"] = [f"{v:.6g}" for v in task.example_losses(targets, outputs)]
    table = table.sort_values("id", key=lambda ids: ids.map(natural_order), kind="stable")
    return atomic_write(results / TEST_PREDICTIONS, table.to_csv(index=False))


def evaluate(params: Params, project_dir: Path) -> dict[str, Any]:
    """Evaluate the saved model on the test split and write metrics and plot data."""
    manifest.check(project_dir)
    results = results_root(project_dir)
    data = load_prepared(project_dir / PROCESSED)
    task = make_task(params, data.spec, weighted=False)  # test_loss: unweighted
    model, _ = load_for_users(results / "models")
    # Images go in training-size batches: a conv net's activations, not the inputs, set the
    # memory.
    batch = 1024 if data.spec.kind == "vector" else params.train.batch_size
    scored: list[tuple[Any, Any]] = []  # kept for the per-example predictions
    evaluation = task.evaluate(_kept(scored_batches(model, data, batch), scored))
    scored_on = describe(data.spec, "test")
    written = write_evaluation(results, evaluation)
    written.append(write_test_predictions(results, data, task, scored))
    written.append(
        write_card(params, project_dir, data.spec, evaluation, scored_on, load_exports(results))
    )
    shown = {k: v for k, v in evaluation.metrics.items() if k != "test_examples"}
    print(
        f"Test ({task.kind}): "
        + ", ".join(f"{k.removeprefix('test_')} {v:.4g}" for k, v in shown.items())
        + f" on {scored_on}; wrote "
        + ", ".join(sorted(str(p.relative_to(results)) for p in written))
        + f" in {results}",
        flush=True,
    )
    return evaluation.metrics
