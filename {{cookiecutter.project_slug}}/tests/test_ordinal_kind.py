"""A task kind the built-ins lack, in this one file: ordinal classification (a rating 1-5, whose
classes are ordered). Nothing else in the package changes; prepare, train, evaluate, predict,
export and the model card all follow the kind.

The kind: K classes in natural order, K-1 cumulative logits z_k with P(y > k) = sigmoid(z_k)
(the cumulative link model), a binary cross-entropy per threshold; the saved model gives a
probability per class; the metrics add the mean absolute error in classes (a 5 predicted as 4
is less wrong than as 1).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pandas as pd
import pytest
from conftest import PARAMS

from {{ cookiecutter.module_name }} import registry
from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.evaluation.evaluate import evaluate
from {{ cookiecutter.module_name }}.evaluation.export import export_litert
from {{ cookiecutter.module_name }}.evaluation.predict import predict
from {{ cookiecutter.module_name }}.spec import load_spec
from {{ cookiecutter.module_name }}.tasks.base import EPSILON, Evaluation
from {{ cookiecutter.module_name }}.tasks.classes import Classes
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # trains a model: about 20 s


@keras.saving.register_keras_serializable(package="test_ordinal")
class ClassProbabilities(keras.layers.Layer):
    """K-1 cumulative logits -> K class probabilities: P(y = k) = P(y > k-1) - P(y > k)."""

    def call(self, logits: Any) -> Any:
        above = keras.ops.sigmoid(logits)  # P(y > k), k = 0 .. K-2
        first, last = keras.ops.ones_like(above[:, :1]), keras.ops.zeros_like(above[:, :1])
        p = keras.ops.relu(
            keras.ops.concatenate([first, above], -1) - keras.ops.concatenate([above, last], -1)
        )
        return p / keras.ops.maximum(keras.ops.sum(p, axis=-1, keepdims=True), EPSILON)


def class_distance(y_true: Any, probabilities: Any) -> Any:
    """|predicted class - true class|, per example."""
    predicted = keras.ops.cast(keras.ops.argmax(probabilities, axis=-1), "float32")
    return keras.ops.abs(predicted - keras.ops.cast(keras.ops.reshape(y_true, [-1]), "float32"))


@dataclass(frozen=True)
class Ordinal(Classes):
    """Ordered classes: labels, splits and per-class reports as one class per example (Classes),
    with its own outputs, loss, metrics and headline."""

    kind = "ordinal"
    train_metric_name = "accuracy"
    headline = ("accuracy", "class_mae")

    @property
    def num_outputs(self) -> int:
        return len(self.names) - 1  # one threshold between each two neighbouring classes

    def loss(self, y_true: Any, logits: Any) -> Any:
        thresholds = keras.ops.arange(self.num_outputs, dtype="float32")
        above = keras.ops.cast(
            keras.ops.cast(keras.ops.reshape(y_true, [-1, 1]), "float32") > thresholds, "float32"
        )
        per_threshold = keras.losses.binary_crossentropy(
            above[..., None], keras.ops.cast(logits, "float32")[..., None], from_logits=True
        )
        return keras.ops.mean(per_threshold, axis=-1) * self.example_weights(y_true)

    def output_layer(self) -> keras.layers.Layer:
        return ClassProbabilities(name="probabilities", dtype="float32")

    def logits_from_outputs(self, outputs: np.ndarray) -> np.ndarray:
        above = np.clip(np.cumsum(outputs[:, ::-1], axis=1)[:, ::-1][:, 1:], EPSILON, 1 - EPSILON)
        return np.log(above / (1 - above))

    def standard_metrics(self) -> list[keras.metrics.Metric]:
        return [
            keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            keras.metrics.MeanMetricWrapper(class_distance, name="class_mae"),
        ]

    def train_metric(self, y_true: Any, logits: Any) -> Any:
        return keras.metrics.sparse_categorical_accuracy(y_true, self.outputs(logits))

    def metric_targets(self, metric: keras.metrics.Metric, y_true: Any) -> Any:
        return keras.ops.cast(y_true, "int32")

    def report(
        self, scores: dict[str, float], y_true: np.ndarray, outputs: np.ndarray
    ) -> Evaluation:
        """The per-class reports, and how far off the mistakes are: within one class."""
        distance = np.abs(outputs.argmax(axis=1) - y_true.astype(int))
        scores["test_within_one_class"] = float(np.mean(distance <= 1))
        return super().report(scores, y_true, outputs)

    def outputs_text(self) -> str:
        return f"a probability per ordered class ({', '.join(self.names)}), sum 1"


def ratings(rows: int, seed: int = 0) -> pd.DataFrame:
    """A rating 1-5 that rises with f1 + f2 (and some noise): ordered classes."""
    rng = np.random.default_rng(seed)
    f1, f2 = rng.normal(0, 1, rows), rng.normal(0, 1, rows)
    score = f1 + f2 + rng.normal(0, 0.3, rows)
    rating = 1 + np.searchsorted(np.quantile(score, [0.2, 0.4, 0.6, 0.8]), score)
    return pd.DataFrame({"f1": f1.round(3), "f2": f2.round(3), "rating": rating})


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kind registered as a file of the user's would register it (for this module only);
    a ratings CSV prepared, trained, evaluated."""
    root = tmp_path_factory.mktemp("ordinal")
    ratings(400).to_csv(root / "ratings.csv", index=False)
    (root / "params.yaml").write_text((PARAMS).read_text())
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(registry._ENTRIES["task"], "ordinal", Ordinal)  # what @register does
        mp.setenv("PROJECT_STORAGE_DIR", str(root / "storage"))
        params = load_params(root / "params.yaml", [
            "data.source=csv", f"data.path={root / 'ratings.csv'}", "data.label=rating",
            "task.type=ordinal", "train.epochs=15", "train.batch_size=32",
            "train.learning_rate=0.01", "model.hidden_units=[16]", "model.dropout=0",
        ])  # fmt: skip
        prepare(params, root)
        assert train(params, root).status == "completed"
        metrics = evaluate(params, root)
        print("ordinal kind, test split:", {k: round(v, 4) for k, v in metrics.items()})
        export_litert(params, root)
        predict(root / "ratings.csv", root / "predicted.csv", root / "results" / "models")
        yield root


def test_prepare_writes_data_for_the_kind(project: Path) -> None:
    spec = load_spec(project / "data" / "processed")
    assert spec.task == "ordinal" and spec.names == ["1", "2", "3", "4", "5"]
    assert spec.split["stratified"] is True  # one class per example: split by class
    assert sum(spec.train_counts.values()) == spec.counts["train"]


def test_train_and_evaluate_report_the_kinds_metrics(project: Path) -> None:
    train_json = json.loads((project / "results/metrics/train.json").read_text())
    assert {"val_accuracy", "val_class_mae"} <= set(train_json)
    metrics = json.loads((project / "results/metrics/evaluate.json").read_text())
    assert set(metrics) == {"test_accuracy", "test_class_mae"}  # its headline
    assert metrics["test_accuracy"] >= 0.5 and metrics["test_class_mae"] <= 0.7
    card = (project / "results/reports/model_card.md").read_text()  # every metric
    assert float(re.search(r"\| within_one_class +\| ([0-9.]+)", card)[1]) >= 0.9
    per_class = pd.read_csv(project / "results/plots/per_class.csv")
    assert list(per_class["class"]) == [1, 2, 3, 4, 5]
    tested = pd.read_csv(project / "results/predictions/test.csv")
    assert list(tested.columns) == ["id", "target", "prediction", *(f"prob_{k}" for k in "12345"),
                                    "loss"]  # fmt: skip
    assert np.allclose(tested.filter(like="prob_").sum(axis=1), 1.0, atol=1e-4)


def test_predict_export_and_the_card_follow_the_kind(project: Path) -> None:
    predicted = pd.read_csv(project / "predicted.csv")
    assert len(predicted) == 400 and set(predicted["prediction"]) <= {1, 2, 3, 4, 5}
    truth = ratings(400)["rating"]
    assert np.mean(np.abs(predicted["prediction"] - truth) <= 1) >= 0.9
    export = json.loads((project / "results/metrics/export.json").read_text())[
        "models/model.tflite"
    ]
    assert export["task"] == "ordinal" and export["same_prediction"] >= 0.99
    assert set(export["litert"]) >= {"accuracy", "class_mae", "within_one_class"}
    card = (project / "results/reports/model_card.md").read_text()
    assert re.search(r"^\| task +\| ordinal +\|$", card, flags=re.MULTILINE)  # its kind: once
    assert "a probability per ordered class (1, 2, 3, 4, 5), sum 1" in card
    assert "within_one_class" in card and "Examples per class and split" in card
