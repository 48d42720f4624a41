"""`evaluate`: the trained model on the held-out test split.

Reads `results/models/model.keras` and the test shards in `data/processed` (streamed through
the input pipeline); writes
- `results/metrics/evaluate.json`: test loss and accuracy (`dvc metrics show`),
- `results/plots/confusion_matrix.csv`: one row per test example, actual and predicted class,
- `results/plots/training_curve.csv`: loss and accuracy per epoch, from `results/metrics/train.json`
  (`dvc plots show` draws both, as declared in dvc.yaml).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from . import manifest
from .config import ConfigError, Params
from .files import atomic_write
from .pipeline import eval_dataset, load_prepared
from .prepare import PROCESSED
from .storage import results_root
from .task import Evaluation

# Under the results root (`results/`, or $PROJECT_RESULTS_DIR where a cloud job sets it).
MODEL = "models/model.keras"
TRAIN_METRICS = "metrics/train.json"
METRICS = "metrics/evaluate.json"
CONFUSION = "plots/confusion_matrix.csv"
CURVE = "plots/training_curve.csv"
CURVE_COLUMNS = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy")


def _csv(header: tuple[str, ...] | list[str], rows: list[list[Any]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode()


def scores(logits: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Mean softmax cross-entropy and accuracy of `logits` against integer labels `y`."""
    import keras

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits)
    accuracy = keras.metrics.SparseCategoricalAccuracy()
    accuracy.update_state(y, logits)
    return {"test_loss": float(loss), "test_accuracy": float(accuracy.result())}


def training_curve(train_metrics: Path) -> list[list[Any]]:
    """Rows of CURVE_COLUMNS from the `history` that `train` writes into train.json."""
    if not train_metrics.is_file():
        return []
    history = json.loads(train_metrics.read_text()).get("history") or []
    return [[rec.get(k) for k in CURVE_COLUMNS] for rec in history]


def write_evaluation(results: Path, evaluation: Evaluation) -> list[Path]:
    """Write what `Task.evaluate` found: evaluate.json, the task's plot files, the curve.

    The training curve keeps every per-epoch number `train` recorded (the task's metrics
    included), so it follows the task too."""
    written = [atomic_write(results / METRICS, json.dumps(evaluation.metrics, indent=2) + "\n")]
    for name, rows in evaluation.plots.items():
        written.append(atomic_write(results / "plots" / name, _csv(rows[0], rows[1:])))
    history = _history(results / TRAIN_METRICS)
    columns = ["epoch", *sorted({k for rec in history for k in rec} - {"epoch"})]
    curve = [[rec.get(k) for k in columns] for rec in history]
    written.append(atomic_write(results / CURVE, _csv(columns, curve)))
    return written


def _history(train_metrics: Path) -> list[dict[str, Any]]:
    if not train_metrics.is_file():
        return []
    return json.loads(train_metrics.read_text()).get("history") or []


def evaluate(params: Params, project_dir: Path) -> dict[str, Any]:
    """Evaluate the saved model on the test split and write metrics and plot data."""
    manifest.check(project_dir, module=__package__ or "")
    results = results_root(project_dir)
    model_file = results / MODEL
    if not model_file.is_file():
        raise ConfigError(
            f"{model_file}: no trained model; train first: `python -m {__package__} train` "
            "(or `dvc repro`, or `dvc pull` to fetch the versioned one)"
        )
    import keras

    data = load_prepared(project_dir / PROCESSED)
    classes = data.spec.names
    model = keras.models.load_model(model_file, compile=False)
    # The test split streams from its shards; only the logits and labels are kept (for the
    # confusion matrix): a few numbers per example. Images go in training-size batches: a conv
    # net's activations, not the inputs, set the memory.
    batch = 1024 if data.spec.kind == "vector" else params.train.batch_size
    parts = [(model(x, training=False).numpy(), y) for x, y in eval_dataset(data, "test", batch)]
    logits = np.concatenate([p[0] for p in parts]).astype(np.float64)
    y = np.concatenate([p[1] for p in parts])
    metrics = {**scores(logits, y), "test_examples": len(y), "classes": len(classes)}
    atomic_write(results / METRICS, (json.dumps(metrics, indent=2) + "\n").encode())

    predicted = logits.argmax(axis=1)
    confusion = [[classes[a], classes[p]] for a, p in zip(y, predicted, strict=True)]
    atomic_write(results / CONFUSION, _csv(["actual", "predicted"], confusion))
    curve = training_curve(results / TRAIN_METRICS)
    atomic_write(results / CURVE, _csv(CURVE_COLUMNS, curve))
    print(
        f"Test accuracy {metrics['test_accuracy']:.4f}, loss {metrics['test_loss']:.4f} on "
        f"{len(y)} examples; wrote {METRICS}, {CONFUSION}, {CURVE} in {results}",
        flush=True,
    )
    return metrics
