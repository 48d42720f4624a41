"""Tasks whose target is one class per example, whatever their loss (Classification: task.py).

Targets are class indices over `names` in natural order ('2' before '10'); splits are stratified;
predictions name the arg-max class beside a probability per class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from sklearn import metrics

from ..config import ConfigError
from ..spec import natural_order
from .base import Evaluation, TargetError, Task, per_name_table


class Classes(Task):
    """The targets, splits and reports of one class per example (see the module docstring)."""

    name_word = "class"
    min_names = 2
    stratified = True
    target_dtype = "int64"
    headline = ("accuracy", "f1")
    plot_columns: ClassVar[dict[str, list[str]]] = {
        "confusion_matrix.csv": ["actual", "predicted"],
        "per_class.csv": ["class", "precision", "recall", "f1", "support"],
    }

    @classmethod
    def names_of(cls, values: Sequence[Any], column: str) -> list[str]:
        """The distinct classes, in natural order; an empty cell is refused."""
        if "" in values:
            row = list(values).index("")
            raise TargetError(column, row, "a missing value (every example needs a class)")
        return sorted({str(v) for v in values}, key=natural_order)

    def encode_targets(self, values: Sequence[Any], column: str = "data.label") -> np.ndarray:
        index = {name: i for i, name in enumerate(self.names)}
        unknown = next((v for v in values if str(v) not in index), None)
        if unknown is not None:
            raise ConfigError(
                f"{column}: {unknown!r} is not one of the {len(index)} classes of the training "
                f"split (example: {self.names[0]!r})"
            )
        return np.array([index[str(v)] for v in values], dtype=np.int64)

    def counts(self, targets: np.ndarray) -> np.ndarray:
        return np.bincount(np.asarray(targets, dtype=np.int64), minlength=len(self.names))

    def relabel(self, targets: np.ndarray, own: list[str]) -> np.ndarray:
        position = np.array([self.names.index(n) for n in own], dtype=np.int64)
        return position[np.asarray(targets, dtype=np.int64)]

    def report(
        self, scores: dict[str, float], y_true: np.ndarray, outputs: np.ndarray
    ) -> Evaluation:
        """Balanced accuracy, macro F1, the per-class table and the confusion pairs."""
        truth, predicted = y_true.astype(int), outputs.argmax(axis=1)
        table = per_name_table("class", self.names, truth, predicted)
        scores["test_balanced_accuracy"] = float(metrics.balanced_accuracy_score(truth, predicted))
        # A kind whose metrics have Keras's macro F1Score (classification) has it already.
        scores.setdefault("test_f1", float(table["f1"].mean()))
        names = np.array(self.names, dtype=object)
        pairs = pd.DataFrame({"actual": names[truth], "predicted": names[predicted]})
        return Evaluation(scores, {"confusion_matrix.csv": pairs, "per_class.csv": table}, table)

    def predictions(self, outputs: np.ndarray) -> dict[str, list[Any]]:
        chosen = [self.names[i] for i in np.argmax(outputs, axis=1)]
        return {"prediction": chosen, **probabilities(self.names, outputs)}

    def target_text(self, targets: np.ndarray) -> list[str]:
        return [self.names[int(t)] for t in np.ravel(targets)]

    def outputs_text(self) -> str:
        return f"a probability per class ({len(self.names)}: {listed(self.names)}), sum 1"

    def figure(self, plots: dict[str, pd.DataFrame]) -> tuple[Any, str]:
        """The confusion matrix of the test split, counts written in."""
        pairs = plots["confusion_matrix.csv"]
        shown = metrics.ConfusionMatrixDisplay.from_predictions(
            pairs["actual"].astype(str),
            pairs["predicted"].astype(str),
            labels=self.names,
            cmap="Blues",
            colorbar=False,
            xticks_rotation="vertical",
        )
        shown.ax_.set(title="Confusion matrix (test split)", xlabel="predicted", ylabel="actual")
        return shown.figure_, "03_confusion_matrix"


def probabilities(names: list[str], outputs: np.ndarray) -> dict[str, list[str]]:
    """A `prob_<name>` column per class or label."""
    return {f"prob_{name}": [f"{p:.6g}" for p in outputs[:, k]] for k, name in enumerate(names)}


def listed(names: list[str], most: int = 12) -> str:
    """`a`, `b` and 3 more."""
    shown = ", ".join(f"`{n}`" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
