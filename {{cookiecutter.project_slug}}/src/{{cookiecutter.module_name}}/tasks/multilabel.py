"""Multi-label: any number of labels per example (a photo with a cat and a dog).

The target is a 0/1 vector over the labels: a CSV cell joins them by `|` (`cat|dog`; empty =
none), a TFRecord feature holds label strings or the vector. `train.class_weight` weighs each
label's positive term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import keras
import numpy as np
import pandas as pd
from sklearn.preprocessing import MultiLabelBinarizer

from ..config import ConfigError
from ..registry import register
from .base import EPSILON, Evaluation, MacroAUC, TargetError, Task, per_name_table
from .classes import listed, probabilities

LABEL_SEPARATOR = "|"  # a CSV cell: "cat|dog"
THRESHOLD = 0.5  # a label is predicted when its probability reaches this


@register("task", "multilabel")
@dataclass(frozen=True)
class Multilabel(Task):
    """A sigmoid probability per label, binary cross-entropy."""

    kind = "multilabel"
    train_metric_name = "binary_accuracy"
    name_word = "label"
    min_names = 2
    headline = ("f1", "auc")  # macro over labels; binary accuracy counts the many negatives
    plot_columns: ClassVar[dict[str, list[str]]] = {
        "per_label.csv": ["label", "precision", "recall", "f1", "support"]
    }

    def loss(self, y_true: Any, logits: Any) -> Any:
        # Binary cross-entropy with each label's positive term x its weight (1 when unweighted),
        # as tf.nn.weighted_cross_entropy_with_logits: (1 - y) z + (1 + (w - 1) y) softplus(-z).
        y = keras.ops.cast(y_true, "float32") * (1.0 - self.label_smoothing)
        y = y + 0.5 * self.label_smoothing
        z = keras.ops.cast(logits, "float32")
        w = keras.ops.convert_to_tensor(self.class_weights or [1.0] * len(self.names), "float32")
        per_label = (1.0 - y) * z + (1.0 + (w - 1.0) * y) * keras.ops.softplus(-z)
        return keras.ops.mean(per_label, axis=-1)

    def output_layer(self) -> keras.layers.Layer:
        return keras.layers.Activation("sigmoid", name="probabilities", dtype="float32")

    def logits_from_outputs(self, outputs: np.ndarray) -> np.ndarray:
        p = np.clip(outputs, EPSILON, 1.0 - EPSILON)
        return np.log(p / (1.0 - p))

    def standard_metrics(self) -> list[keras.metrics.Metric]:
        """Binary accuracy, macro AUC and F1, pooled precision and recall at the threshold."""
        m = keras.metrics
        return [
            m.BinaryAccuracy(threshold=THRESHOLD, name="binary_accuracy"),
            MacroAUC(self.num_outputs),
            m.Precision(name="precision", thresholds=THRESHOLD),
            m.Recall(name="recall", thresholds=THRESHOLD),
            m.F1Score(average="macro", threshold=THRESHOLD, name="f1"),
        ]

    def train_metric(self, y_true: Any, logits: Any) -> Any:
        hits = keras.metrics.binary_accuracy(y_true, self.outputs(logits), threshold=THRESHOLD)
        return keras.ops.mean(hits, axis=-1)  # every example has all labels: the same mean

    def report(
        self, scores: dict[str, float], y_true: np.ndarray, outputs: np.ndarray
    ) -> Evaluation:
        """Per-label precision, recall, F1 and support."""
        truth, chosen = (y_true >= 0.5).astype(int), (outputs >= THRESHOLD).astype(int)
        table = per_name_table("label", self.names, truth, chosen)
        return Evaluation(scores, {"per_label.csv": table}, table)

    @classmethod
    def names_of(cls, values: Sequence[Any], column: str) -> list[str]:
        """The sorted labels of `cat|dog` cells or label lists; `label_<i>` for 0/1 vectors."""
        if values and all(_is_vector(v) for v in values):
            return [f"label_{i}" for i in range(len(values[0]))]
        return sorted({label for v in values for label in _labels(v)})

    def encode_targets(self, values: Sequence[Any], column: str = "data.label") -> np.ndarray:
        """`cat|dog` cells (or label lists, or 0/1 vectors) -> 0/1 rows over the labels."""
        if values and all(_is_vector(v) for v in values):
            widths = {len(v) for v in values}
            if widths != {len(self.names)}:
                raise ConfigError(
                    f"{column}: {sorted(widths)} values per example; a 0/1 label vector needs "
                    f"{len(self.names)} in every one (or give label strings)"
                )
            return np.asarray(values, dtype=np.float32)
        rows = [_labels(value) for value in values]
        for row, labels in enumerate(rows):
            unknown = [label for label in labels if label not in self.names]
            if unknown:
                raise TargetError(
                    column,
                    row,
                    f"unknown label {unknown[0]!r} (labels joined by '{LABEL_SEPARATOR}', "
                    f"example: {'|'.join(self.names[:2])!r})",
                )
        return MultiLabelBinarizer(classes=self.names).fit_transform(rows).astype(np.float32)

    def target_shape(self) -> tuple[int, ...]:
        return (len(self.names),)

    def counts(self, targets: np.ndarray) -> np.ndarray:
        """Positive examples per label."""
        rows = np.asarray(targets).reshape(-1, len(self.names))
        return (rows >= 0.5).sum(axis=0).astype(np.int64)

    def relabel(self, targets: np.ndarray, own: list[str]) -> np.ndarray:
        out = np.zeros((len(targets), len(self.names)), dtype=np.float32)
        out[:, [self.names.index(n) for n in own]] = targets
        return out

    def balanced_weights(self, found: np.ndarray, examples: int) -> tuple[float, ...]:
        """Negatives / positives per label (a label without positives: 1)."""
        return tuple(float((examples - p) / p) if p else 1.0 for p in found)

    def predictions(self, outputs: np.ndarray) -> dict[str, list[Any]]:
        chosen = self._joined(outputs, THRESHOLD)
        return {"prediction": chosen, **probabilities(self.names, outputs)}

    def target_text(self, targets: np.ndarray) -> list[str]:
        return self._joined(np.asarray(targets).reshape(-1, len(self.names)), 0.5)

    def _joined(self, rows: np.ndarray, threshold: float) -> list[str]:
        """`cat|dog` for each row: the names whose value reaches `threshold`."""
        names = np.array(self.names, dtype=object)
        return [LABEL_SEPARATOR.join(names[row >= threshold]) for row in rows]

    def outputs_text(self) -> str:
        return (
            f"a probability per label ({len(self.names)}: {listed(self.names)}); a label is "
            f"predicted at {THRESHOLD} or more"
        )

    def figure(self, plots: dict[str, pd.DataFrame]) -> tuple[Any, str]:
        """Precision, recall and F1 of each label, as bars."""
        table = plots["per_label.csv"].set_index("label")[["precision", "recall", "f1"]]
        ax = table.plot.bar(figsize=(max(5.0, 0.8 * len(table) + 2), 3.5), ylim=(0, 1.05))
        ax.set(title="Per-label metrics (test split)", xlabel="label", ylabel="score")
        return ax.figure, "03_per_label_metrics"


def _is_vector(value: Any) -> bool:
    return isinstance(value, list | tuple | np.ndarray) and all(
        isinstance(v, int | float | np.number) for v in value
    )


def _labels(value: Any) -> list[str]:
    if isinstance(value, list | tuple | np.ndarray):
        return [str(v) for v in value]
    text = "" if value is None else str(value)
    return [part.strip() for part in text.split(LABEL_SEPARATOR) if part.strip()]
