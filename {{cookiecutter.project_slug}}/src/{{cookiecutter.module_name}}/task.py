"""Everything task-specific, in one module: `task.type` = classification / multilabel / regression.

From the task and the data's spec (dataspec.py) this decides the number of outputs, the loss, the
metrics, the output users get, how raw labels become targets, and what `evaluate` reports.
The model (model.py) only returns logits; the trainer calls this module and nothing else for them.

Targets, as the data pipeline gives them to `loss` and `update_metrics`:
- classification: the class index (int), from the class names by `encode_targets`;
- multilabel: a 0/1 vector with one entry per label; in a CSV, one column holds the labels of a
  row joined by `|` (`cat|dog`, empty = none);
- regression: the value in the user's units (the loss standardises it with the training split's
  mean and standard deviation, so a target around 50 trains as well as one around 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import ConfigError, Params
from .spec import DataSpec

LABEL_SEPARATOR = "|"  # multilabel CSV column: "cat|dog"
THRESHOLD = 0.5  # multilabel: a label is predicted when its probability reaches this


@dataclass(frozen=True)
class Task:
    """The task of a run. Build it with `make_task(params, spec)`."""

    type: str  # classification / multilabel / regression
    names: list[str]  # classes, labels, or [target name]
    target_mean: float = 0.0  # regression: the training split's mean and standard deviation
    target_std: float = 1.0
    label_smoothing: float = 0.0
    extra_metrics: list[str] = field(default_factory=list)

    @property
    def num_outputs(self) -> int:
        return 1 if self.type == "regression" else len(self.names)

    # --- training -------------------------------------------------------------------------

    def loss(self, y_true: Any, logits: Any) -> Any:
        """Per-example loss (shape [batch]) from logits: average it over the GLOBAL batch
        (`tf.nn.compute_average_loss`) so replicas add up to the single-device loss."""
        import keras

        if self.type == "classification":
            onehot = keras.ops.one_hot(keras.ops.cast(y_true, "int32"), self.num_outputs)
            fn = keras.losses.CategoricalCrossentropy(
                from_logits=True, label_smoothing=self.label_smoothing, reduction="none"
            )
            return fn(onehot, logits)
        if self.type == "multilabel":
            fn = keras.losses.BinaryCrossentropy(
                from_logits=True, label_smoothing=self.label_smoothing, reduction="none"
            )
            return fn(keras.ops.cast(y_true, "float32"), logits)
        standard = (keras.ops.cast(y_true, "float32") - self.target_mean) / self.target_std
        fn = keras.losses.MeanSquaredError(reduction="none")
        return fn(keras.ops.reshape(standard, (-1, 1)), logits)

    def outputs(self, logits: Any) -> Any:
        """Logits -> what users get: class probabilities, label probabilities, or the value."""
        import keras

        if self.type == "classification":
            return keras.ops.softmax(logits, axis=-1)
        if self.type == "multilabel":
            return keras.ops.sigmoid(logits)
        return logits[:, 0] * self.target_std + self.target_mean

    def output_layer(self) -> Any:
        """`outputs` as a Keras layer, for the saved model (`predict.wrap_for_users`)."""
        import keras

        if self.type == "classification":
            return keras.layers.Softmax(name="probabilities", dtype="float32")
        if self.type == "multilabel":
            return keras.layers.Activation("sigmoid", name="probabilities", dtype="float32")
        return keras.layers.Rescaling(
            self.target_std, offset=self.target_mean, name="value", dtype="float32"
        )

    def make_metrics(self, training: bool = False) -> list[Any]:
        """keras.metrics objects for validation and test (or, `training=True`, for the training
        steps), built and reset.

        Classification: accuracy, top-5 accuracy (more than 5 classes), AUC (one-vs-rest,
        macro), precision and recall (of the arg-max class, pooled over classes: with one
        label per example both equal accuracy; `evaluate` reports them per class), F1 (macro,
        of the arg-max class). Multilabel: binary accuracy, AUC (macro over labels),
        precision, recall (pooled, at 0.5), F1 (macro). Regression, in the user's units: MAE,
        RMSE, R2. Then `task.metrics` by name.

        Training steps get the first of these (accuracy, binary accuracy, MAE) and
        `task.metrics`: on a small model the whole set (AUC keeps 200 thresholds per class)
        cost 40 % of the step time, for numbers the validation pass gives once per epoch.

        Create them inside `strategy.scope()`: their variables then sum over replicas, and
        `result()` is the metric of the whole global batch."""
        standard = self._standard_metrics()[: 1 if training else None]
        metrics = [*standard, *self._named_metrics({m.name for m in standard})]
        for metric in metrics:
            _build(metric, self)
        return metrics

    def update_metrics(self, metrics: Sequence[Any], y_true: Any, logits: Any) -> None:
        """Update every metric from targets and logits; call inside the (replica) step."""
        self.update_metrics_from_outputs(metrics, y_true, self.outputs(logits))

    def update_metrics_from_outputs(
        self, metrics: Sequence[Any], y_true: Any, outputs: Any
    ) -> None:
        """The same from what the saved model gives (probabilities or values): `evaluate`."""
        import keras

        if self.type == "regression":  # R2Score takes [batch, outputs]
            y_true = keras.ops.reshape(keras.ops.cast(y_true, "float32"), (-1, 1))
            outputs = keras.ops.reshape(outputs, (-1, 1))
        if self.type == "classification":
            y_true = keras.ops.cast(y_true, "int32")
            onehot = keras.ops.one_hot(y_true, self.num_outputs)
        for metric in metrics:
            wants_onehot = self.type == "classification" and not _is_sparse(metric)
            metric.update_state(onehot if wants_onehot else y_true, outputs)

    def _standard_metrics(self) -> list[Any]:
        import keras

        m = keras.metrics
        if self.type == "regression":
            return [m.MeanAbsoluteError(name="mae"), m.RootMeanSquaredError(name="rmse"),
                    m.R2Score(name="r2")]  # fmt: skip
        labels = self.num_outputs
        # A class is predicted when it is the arg-max (top_k=1); a label, when it reaches 0.5.
        pick = {"top_k": 1} if self.type == "classification" else {"thresholds": THRESHOLD}
        common = [
            m.AUC(multi_label=True, num_labels=labels, name="auc"),
            m.Precision(name="precision", **pick),
            m.Recall(name="recall", **pick),
        ]
        if self.type == "multilabel":
            f1 = m.F1Score(average="macro", threshold=THRESHOLD, name="f1")
            return [m.BinaryAccuracy(threshold=THRESHOLD, name="binary_accuracy"), *common, f1]
        top_k = [m.SparseTopKCategoricalAccuracy(k=5, name="top5_accuracy")] if labels > 5 else []
        f1 = m.F1Score(average="macro", name="f1")  # threshold None: the arg-max class
        return [m.SparseCategoricalAccuracy(name="accuracy"), *top_k, *common, f1]

    def _named_metrics(self, taken: set[str]) -> list[Any]:
        """`task.metrics` by keras name, except those already there."""
        import keras

        metrics = []
        for name in [n for n in self.extra_metrics if n not in taken]:
            try:
                metric = keras.metrics.get(name)
            except ValueError:
                raise ConfigError(
                    f"task.metrics: {name!r} is not a keras metric name "
                    "(example: --set task.metrics=[mean_squared_error])"
                ) from None
            if not isinstance(metric, keras.metrics.Metric):  # a plain function: wrap it
                metric = keras.metrics.MeanMetricWrapper(metric, name=name)
            metrics.append(metric)
        return metrics

    # --- evaluation -----------------------------------------------------------------------

    def evaluate(self, batches: Iterable[tuple[Any, Any]]) -> Evaluation:
        """Test metrics and plot rows from (targets, outputs) batches of the saved model.

        `batches`: e.g. `[(y, model.predict(x))]`, or a generator over a test dataset."""
        metrics = self.make_metrics()
        ys, outs = [], []
        for y_true, outputs in batches:
            out = np.asarray(outputs, dtype=np.float64)
            out = out.reshape(-1) if self.type == "regression" else out  # [n, 1] -> [n]
            # float32: what the metrics' ops take (in_top_k refuses float64)
            self.update_metrics_from_outputs(metrics, y_true, out.astype(np.float32))
            ys.append(np.asarray(y_true))
            outs.append(out)
        if not ys:
            raise ConfigError("data.test_fraction: the test split is empty (example: 0.2)")
        y_all, out_all = np.concatenate(ys), np.concatenate(outs)
        scores = {f"test_{m.name}": float(m.result()) for m in metrics}
        scores["test_loss"] = self._loss_from_outputs(y_all, out_all)
        scores["test_examples"] = len(y_all)
        if self.type == "regression":
            return _regression_report(scores, y_all, out_all)
        return _label_report(self, scores, y_all, out_all)

    def _loss_from_outputs(self, y_true: np.ndarray, outputs: np.ndarray) -> float:
        """The training loss (as `loss` computes it from logits), from the model's outputs."""
        import keras

        if self.type == "regression":
            standard = ((y_true - outputs) / self.target_std) ** 2
            return float(np.mean(standard))
        if self.type == "classification":
            fn = keras.losses.SparseCategoricalCrossentropy()
        else:
            fn = keras.losses.BinaryCrossentropy()
        return float(fn(y_true, outputs.astype(np.float32)))

    # --- labels ---------------------------------------------------------------------------

    def encode_targets(self, values: Sequence[Any], column: str = "data.label") -> np.ndarray:
        """Raw label values (CSV cells, folder names) -> the targets `loss` takes."""
        if self.type == "classification":
            index = {name: i for i, name in enumerate(self.names)}
            unknown = next((v for v in values if str(v) not in index), None)
            if unknown is not None:
                raise ConfigError(
                    f"{column}: {unknown!r} is not one of the {len(index)} classes of the training "
                    f"split (example: {self.names[0]!r})"
                )
            return np.array([index[str(v)] for v in values], dtype=np.int64)
        if self.type == "multilabel":
            return encode_multilabel(values, self.names, column)
        return encode_numbers(values, column)


@dataclass
class Evaluation:
    """What `evaluate` writes: `metrics` (evaluate.json) and `plots` (file name -> CSV rows,
    the first row the header, under results/plots/)."""

    metrics: dict[str, float]
    plots: dict[str, list[list[Any]]]


# The DVC plots (dvc.yaml) that fit each task's files from `Task.evaluate`.
PLOTS = {
    "classification": ("confusion_matrix.csv", "per_class.csv"),
    "multilabel": ("per_label.csv",),
    "regression": ("predictions.csv",),
}


def _regression_report(scores: dict, y_true: np.ndarray, predicted: np.ndarray) -> Evaluation:
    residual = predicted - y_true
    scores.update(
        residual_mean=float(residual.mean()),
        residual_std=float(residual.std()),
        residual_abs_p90=float(np.percentile(np.abs(residual), 90)),
    )
    rows = [["actual", "predicted", "residual"]]
    rows += [
        [float(a), float(p), float(r)] for a, p, r in zip(y_true, predicted, residual, strict=True)
    ]
    return Evaluation(scores, {"predictions.csv": rows})


def _label_report(task: Task, scores: dict, y_true: np.ndarray, outputs: np.ndarray) -> Evaluation:
    """Per-class (or per-label) precision, recall, F1 and support from the counts."""
    if task.type == "classification":
        predicted = outputs.argmax(axis=1)
        truth = np.eye(len(task.names), dtype=bool)[y_true.astype(int)]
        chosen = np.eye(len(task.names), dtype=bool)[predicted]
    else:
        truth, chosen = y_true >= 0.5, outputs >= THRESHOLD
    hits = (truth & chosen).sum(axis=0)
    precision = hits / np.maximum(chosen.sum(axis=0), 1)
    recall = hits / np.maximum(truth.sum(axis=0), 1)
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
    header = ["class" if task.type == "classification" else "label"]
    rows = [[*header, "precision", "recall", "f1", "support"]]
    for i, name in enumerate(task.names):
        support = int(truth[:, i].sum())
        rows.append([name, float(precision[i]), float(recall[i]), float(f1[i]), support])
    if task.type == "multilabel":
        return Evaluation(scores, {"per_label.csv": rows})
    confusion = [["actual", "predicted"]]
    confusion += [
        [task.names[int(a)], task.names[p]] for a, p in zip(y_true, predicted, strict=True)
    ]
    scores["classes"] = len(task.names)
    return Evaluation(scores, {"confusion_matrix.csv": confusion, "per_class.csv": rows})


def make_task(params: Params, spec: DataSpec) -> Task:
    """The task of `params.task.type`, checked against what `prepare` found in the data."""
    kind = params.task.type
    if spec.task != kind:
        raise ConfigError(
            f"task.type: {kind} but the prepared data is for {spec.task}; run `prepare` again "
            f"(example: --set task.type={spec.task})"
        )
    if kind != "regression" and len(spec.names) < 2:
        raise ConfigError(
            f"data.label: {kind} needs at least 2 classes or labels, found {spec.names} "
            "(example: --set task.type=regression for a numeric target)"
        )
    return Task(
        type=kind,
        names=list(spec.names),
        target_mean=float(spec.target_mean or 0.0),
        target_std=float(spec.target_std or 1.0) or 1.0,
        label_smoothing=params.train.label_smoothing if kind != "regression" else 0.0,
        extra_metrics=list(params.task.metrics),
    )


def label_names(values: Iterable[Any]) -> list[str]:
    """The sorted distinct labels of a multilabel column (`cat|dog` cells)."""
    return sorted({part for v in values for part in _split_labels(v)})


def encode_multilabel(values: Sequence[Any], names: Sequence[str], column: str) -> np.ndarray:
    """`cat|dog` cells -> 0/1 rows over `names`."""
    index = {name: i for i, name in enumerate(names)}
    targets = np.zeros((len(values), len(names)), dtype=np.float32)
    for row, value in enumerate(values):
        for label in _split_labels(value):
            if label not in index:
                raise ConfigError(
                    f"{column}: row {row + 1}: unknown label {label!r} "
                    f"(labels joined by '{LABEL_SEPARATOR}', example: {'|'.join(names[:2])!r})"
                )
            targets[row, index[label]] = 1.0
    return targets


def encode_numbers(values: Sequence[Any], column: str) -> np.ndarray:
    """Regression targets as float32, refusing anything that is not a number."""
    out = np.empty(len(values), dtype=np.float32)
    for row, value in enumerate(values):
        try:
            out[row] = float(value)
        except (TypeError, ValueError):
            out[row] = np.nan
        if not np.isfinite(out[row]):
            raise ConfigError(
                f"{column}: row {row + 1}: expected a number for a regression target, got "
                f"{value!r} (example: 42.5, or --set task.type=classification)"
            )
    return out


def _split_labels(value: Any) -> list[str]:
    text = "" if value is None else str(value)
    return [part.strip() for part in text.split(LABEL_SEPARATOR) if part.strip()]


def _is_sparse(metric: Any) -> bool:
    """Metrics that take a class index (the rest take a one-hot row)."""
    import keras

    m = keras.metrics
    sparse = (m.SparseCategoricalAccuracy, m.SparseTopKCategoricalAccuracy)
    name = getattr(getattr(metric, "_fn", None), "__name__", "")
    return isinstance(metric, sparse) or name.startswith("sparse_")


def _build(metric: Any, task: Task) -> None:
    """F1Score and R2Score create their variables at their first update: create them now, with
    a zero-weight batch, so that no variable is created inside a replica step."""
    import keras

    y_pred = keras.ops.zeros((1, task.num_outputs))
    y_true = y_pred
    if task.type == "classification" and _is_sparse(metric):
        y_true = keras.ops.zeros((1,), dtype="int32")
    metric.update_state(y_true, y_pred, sample_weight=keras.ops.zeros((1,)))
    metric.reset_state()
