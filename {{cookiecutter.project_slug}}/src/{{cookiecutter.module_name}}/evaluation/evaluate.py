"""`evaluate`: the trained model on the held-out test split, reported as its task asks.

Reads `results/models/model.keras` and the test shards in `data/processed` (streamed through
the input pipeline); `task.py` (`Task.evaluate`) computes the metrics and the plot rows; this
module writes
- `results/metrics/evaluate.json`: the test loss (unweighted, whatever `train.class_weight`), the
  task's metrics (`dvc metrics show`) and `scored_on`, which test split they are of (how
  `prepare` made it: `the published test split: test.csv, 120 examples`);
- `results/plots/`: every task's plot files, the other tasks' with their header only, so that the
  static dvc.yaml declares them all and `dvc plots show` draws what fits the task (an empty file
  is an empty plot; a missing one would be an error): `confusion_matrix.csv` and
  `per_class.csv` (classification), `per_label.csv` (multilabel), `predictions.csv` (actual,
  predicted, residual: regression);
- `results/plots/training_curve.csv`: every per-epoch number from `results/metrics/train.json`;
- `results/predictions/test.csv`: each test example's prediction, in the columns of `predict`'s
  CSV plus `target` (the truth), its `id` the example's source (a file relative to `data.path`, a
  CSV row as `predict` numbers rows, an index in a TFRecord file or a TFDS split), sorted by id:
  `predict` on those sources gives the same rows (notebook 03 shows the worst).
- `results/reports/model_card.md` (model_card.py): the model, its data, training, test metrics
  and exported files, and your section "Intended use and limits", which it keeps.

The model: with `model.json` beside it (training/saved_model.py), its outputs are in the user's
units (probabilities or values); without, they are logits, turned into outputs by the task.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..config import COMMAND, ConfigError, Params
from ..core.files import atomic_write
from ..core.storage import MODEL_FILE, SIDECAR_FILE, TEST_METRICS, TRAIN_METRICS, results_root
from ..data import manifest
from ..data.pipeline import Prepared, eval_dataset, example_ids, load_prepared
from ..data.prepare import PROCESSED
from ..data.split import describe
from ..task import Evaluation, Task, make_task
from .model_card import write_card
from .predict import prediction_table

# Under the results root (`results/`, or $PROJECT_RESULTS_DIR where a cloud job sets it).
CONFUSION = "plots/confusion_matrix.csv"  # classification; report.load_confusion reads it
CURVE = "plots/training_curve.csv"
TEST_PREDICTIONS = "predictions/test.csv"  # report.worst_examples reads it
# The per-epoch columns dvc.yaml plots: always in the curve file (empty where a task has none).
CURVE_PLOTTED = ("loss", "accuracy", "binary_accuracy", "mae")
PLOT_HEADERS = {
    "confusion_matrix.csv": ["actual", "predicted"],
    "per_class.csv": ["class", "precision", "recall", "f1", "support"],
    "per_label.csv": ["label", "precision", "recall", "f1", "support"],
    "predictions.csv": ["actual", "predicted", "residual"],
}


def _csv(header: tuple[str, ...] | list[str], rows: list[list[Any]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode()


def write_evaluation(results: Path, evaluation: Evaluation) -> list[Path]:
    """Write what `Task.evaluate` found: evaluate.json, the task's plot files, the curve.

    The training curve keeps every per-epoch number `train` recorded (the task's metrics
    included), so it follows the task too."""
    written = [
        atomic_write(results / TEST_METRICS, json.dumps(evaluation.metrics, indent=2) + "\n")
    ]
    for name, rows in evaluation.plots.items():
        written.append(atomic_write(results / "plots" / name, _csv(rows[0], rows[1:])))
    history = _history(results / TRAIN_METRICS)
    columns = ["epoch", *sorted({k for rec in history for k in rec} - {"epoch"})]
    curve = [[rec.get(k) for k in columns] for rec in history]
    written.append(atomic_write(results / CURVE, _csv(columns, curve)))
    return written


def write_other_plots(results: Path, task: Task) -> list[Path]:
    """The other tasks' plot files, header only, and the plotted curve columns that this task's
    history lacks (empty cells): every plot dvc.yaml declares exists, and an empty one draws
    nothing."""
    written = []
    for name, header in PLOT_HEADERS.items():
        if name not in task.plots:
            written.append(atomic_write(results / "plots" / name, _csv(header, [])))
    curve = results / CURVE
    rows = list(csv.reader(io.StringIO(curve.read_text())))
    header, body = rows[0], rows[1:]
    missing = [c for m in CURVE_PLOTTED for c in (m, f"val_{m}") if c not in header]
    atomic_write(curve, _csv(header + missing, [row + [""] * len(missing) for row in body]))
    return written


def _history(train_metrics: Path) -> list[dict[str, Any]]:
    if not train_metrics.is_file():
        return []
    return json.loads(train_metrics.read_text()).get("history") or []


def load_model(results: Path, task: Task) -> Any:
    """x -> outputs in the user's units: the saved users' model (model.json beside it), or a
    logits model (an older `train`) with the task's output on top."""
    model_file = results / MODEL_FILE
    if not model_file.is_file():
        raise ConfigError(
            f"{model_file}: no trained model; train first: `{COMMAND} train` "
            "(or `dvc repro`, or `dvc pull` to fetch the versioned one)"
        )
    if (results / SIDECAR_FILE).is_file():
        from ..training.saved_model import load_for_users

        model, _ = load_for_users(model_file.parent)
        return lambda x: model(x, training=False)
    import keras

    from .. import model as _custom_layers  # noqa: F401 - registers the model's own layers

    logits_model = keras.models.load_model(model_file, compile=False)
    return lambda x: task.outputs(logits_model(x, training=False))


def scored_batches(predict: Any, data: Prepared, batch: int) -> Iterator[tuple[Any, Any]]:
    """(targets, outputs) of the test split, batch by batch: only these are kept."""
    for x, y in eval_dataset(data, "test", batch):
        yield y.numpy(), np.asarray(predict(x))


def _kept(batches: Iterator[Any], into: list[Any]) -> Iterator[Any]:
    """`batches` passed on, each also appended to `into`."""
    for batch in batches:
        into.append(batch)
        yield batch


def _natural(text: str) -> list[Any]:
    """A sort key that puts `row 2` before `row 10`: digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def write_test_predictions(
    results: Path, data: Prepared, task: Task, scored: list[tuple[Any, Any]]
) -> Path:
    """results/predictions/test.csv from the (targets, outputs) batches of the test split, in
    written order: one row per example, named by its source id, sorted by id."""
    ids = example_ids(data, "test")
    if not all(ids):  # shards written without ids: the position in the test split instead
        print(
            f"NOTE: the shards in {data.folder} hold no example ids; run prepare again to name "
            f"each row of {TEST_PREDICTIONS} by its source (now: its position in the test split)"
        )
        ids = [str(k) for k in range(len(ids))]
    targets = [t for batch, _ in scored for t in batch]
    outputs = [o for _, batch in scored for o in batch]
    order = sorted(range(len(ids)), key=lambda k: _natural(ids[k]))
    sidecar = results / SIDECAR_FILE
    threshold = json.loads(sidecar.read_text()).get("threshold", 0.5) if sidecar.is_file() else 0.5
    info = {"task": task.kind, "names": task.names, "threshold": threshold}
    table = prediction_table(
        info, [ids[k] for k in order], [outputs[k] for k in order], [targets[k] for k in order]
    )
    return atomic_write(results / TEST_PREDICTIONS, table)


def evaluate(params: Params, project_dir: Path) -> dict[str, Any]:
    """Evaluate the saved model on the test split and write metrics and plot data."""
    manifest.check(project_dir)
    results = results_root(project_dir)
    data = load_prepared(project_dir / PROCESSED)
    task = make_task(params, data.spec, weighted=False)  # test_loss: unweighted
    predict = load_model(results, task)
    # Images go in training-size batches: a conv net's activations, not the inputs, set the
    # memory.
    batch = 1024 if data.spec.kind == "vector" else params.train.batch_size
    scored: list[tuple[Any, Any]] = []  # kept for the per-example predictions
    evaluation = task.evaluate(_kept(scored_batches(predict, data, batch), scored))
    scored_on = describe(data.spec, "test")
    evaluation.metrics["scored_on"] = scored_on
    written = write_evaluation(results, evaluation)
    written += write_other_plots(results, task)
    written.append(write_test_predictions(results, data, task, scored))
    written.append(write_card(params, project_dir, data.spec, evaluation))
    shown = {k: v for k, v in evaluation.metrics.items() if k.startswith("test_")}
    print(
        f"Test ({task.kind}): "
        + ", ".join(f"{k[5:]} {v:.4g}" for k, v in shown.items() if isinstance(v, float))
        + f" on {scored_on}; wrote "
        + ", ".join(sorted(str(p.relative_to(results)) for p in written))
        + f" in {results}",
        flush=True,
    )
    return evaluation.metrics
