"""Regression: a number per example, in the user's units (the base Task's targets and splits).

The loss is the mean squared error of the STANDARDISED target (spec.json's training mean and
deviation), so a target around 50 trains as well as one around 0; outputs and metrics are in the
user's units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import keras
import numpy as np
import pandas as pd

from ..registry import register
from .base import Evaluation, Task


@register("task", "regression")
@dataclass(frozen=True)
class Regression(Task):
    """Mean squared error on the standardised target; MAE, RMSE and R2 in the user's units."""

    kind = "regression"
    train_metric_name = "mae"
    headline = ("mae", "r2")
    plot_columns: ClassVar[dict[str, list[str]]] = {
        "predictions.csv": ["actual", "predicted", "residual"]
    }

    @property
    def num_outputs(self) -> int:
        return 1

    def loss(self, y_true: Any, logits: Any) -> Any:
        standard = (keras.ops.cast(y_true, "float32") - self.target_mean) / self.target_std
        fn = keras.losses.MeanSquaredError(reduction="none")
        return fn(keras.ops.reshape(standard, (-1, 1)), logits)

    def output_layer(self) -> keras.layers.Layer:
        return keras.layers.Rescaling(
            self.target_std, offset=self.target_mean, name="value", dtype="float32"
        )

    def logits_from_outputs(self, outputs: np.ndarray) -> np.ndarray:
        return (np.asarray(outputs, np.float32) - self.target_mean) / self.target_std

    def standard_metrics(self) -> list[keras.metrics.Metric]:
        m = keras.metrics
        return [
            m.MeanAbsoluteError(name="mae"),
            m.RootMeanSquaredError(name="rmse"),
            m.R2Score(name="r2"),
        ]

    def train_metric(self, y_true: Any, logits: Any) -> Any:
        y_true = keras.ops.reshape(keras.ops.cast(y_true, "float32"), (-1, 1))
        return keras.metrics.mean_absolute_error(y_true, self.outputs(logits))

    def metric_targets(self, metric: keras.metrics.Metric, y_true: Any) -> Any:
        return keras.ops.reshape(keras.ops.cast(y_true, "float32"), (-1, 1))  # as the outputs

    def report(
        self, scores: dict[str, float], y_true: np.ndarray, outputs: np.ndarray
    ) -> Evaluation:
        """The residuals' mean, spread and 90th percentile size; each example's residual."""
        predicted = outputs.reshape(-1).astype(np.float64)
        residual = predicted - y_true
        scores.update(
            residual_mean=float(residual.mean()),
            residual_std=float(residual.std()),
            residual_abs_p90=float(np.percentile(np.abs(residual), 90)),
        )
        rows = pd.DataFrame({"actual": y_true, "predicted": predicted, "residual": residual})
        return Evaluation(scores, {"predictions.csv": rows})

    def figure(self, plots: dict[str, pd.DataFrame]) -> tuple[Any, str]:
        """Predicted against true values (the diagonal is perfect), beside the residuals."""
        import matplotlib.pyplot as plt  # only notebooks draw

        rows = plots["predictions.csv"]
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        rows.plot.scatter(x="actual", y="predicted", s=8, alpha=0.6, ax=left)
        low, high = rows[["actual", "predicted"]].stack().agg(["min", "max"])
        left.plot([low, high], [low, high], "k--", lw=1)
        left.set(xlabel="true", title="Predicted vs true (test split)")
        rows["residual"].plot.hist(bins=30, ax=right)
        right.set(xlabel="predicted - true", ylabel="examples", title="Residuals")
        return fig, "03_predicted_vs_true"
