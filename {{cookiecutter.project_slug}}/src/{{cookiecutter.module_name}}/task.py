"""Your task: `task.type` picks one of the classes below (or one you register) by its name.

A task decides the number of outputs, the loss, the metrics, the output users get, how raw labels
become targets and what `evaluate` reports. The model (model.py) only returns logits; the trainer
asks the task for everything else. Each task has a `kind`, what its targets are, which the data
pipeline, `prepare`'s split and the reports follow:
- classification: one class per example; the target is the class index (int);
- multilabel: any number of labels per example; the target is a 0/1 vector over the labels (in a
  CSV, one column holds the labels of a row joined by `|`: `cat|dog`, empty = none);
- regression: a number; the target is the value in the user's units (the loss standardises it
  with the training split's mean and standard deviation, so a target around 50 trains as well as
  one around 0).

`train.class_weight` (none / balanced / {class: weight}) becomes `Task.class_weights`, constants of
the run computed from the training split's counts in the spec (`resolve_class_weights`): for
classification each example's loss is multiplied by its class's weight, for multilabel each
label's positive term by the label's weight; regression refuses them. The trainer's task carries
them (the training loss and `val_loss`); `evaluate`'s does not (`test_loss` is unweighted).

A task of your own: subclass the one of its kind (here or in a file beside this one), change what
differs, register it and name it in params.yaml (`task.type: focal`):

    @register("task", "focal")
    @dataclass(frozen=True)
    class FocalClassification(Classification):
        def loss(self, y_true, logits): ...   # per example, from logits

(multiply its result by `self.example_weights(y_true)` to honour `train.class_weight`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .config import ConfigError, Params
from .registry import lookup, register
from .spec import DataSpec

LABEL_SEPARATOR = "|"  # multilabel CSV column: "cat|dog"
THRESHOLD = 0.5  # multilabel: a label is predicted when its probability reaches this
EPSILON = 1e-7  # probabilities are clipped to [EPSILON, 1 - EPSILON] before taking logs


@dataclass
class Evaluation:
    """What `evaluate` writes: `metrics` (evaluate.json) and `plots` (file name -> CSV rows,
    the first row the header, under results/plots/)."""

    metrics: dict[str, float]
    plots: dict[str, list[list[Any]]]


@dataclass(frozen=True)
class Task:
    """What every task shares. Build one with `make_task(params, spec)`."""

    names: list[str]  # classes, labels, or [target name]
    label_smoothing: float = 0.0
    extra_metrics: list[str] = field(default_factory=list)  # task.metrics: keras metric names
    target_mean: float = 0.0  # regression: the training split's mean and standard deviation
    target_std: float = 1.0
    # train.class_weight: a weight per class (classification) or a positive weight per label
    # (multilabel), in `names` order; () = unweighted. Constants of the run, from the spec.
    class_weights: tuple[float, ...] = ()

    kind: ClassVar[str] = ""  # classification / multilabel / regression
    train_metric_name: ClassVar[str] = ""  # the first standard metric, also tracked in training
    plots: ClassVar[tuple[str, ...]] = ()  # the files of results/plots/ that `report` fills

    @property
    def num_outputs(self) -> int:
        return len(self.names)

    # --- what each kind defines -----------------------------------------------------------

    def loss(self, y_true: Any, logits: Any) -> Any:
        """Per-example loss (shape [batch]) from logits, weighted by `class_weights` when there are
        any: the trainer averages it over the GLOBAL batch (`tf.nn.compute_average_loss`) so
        replicas add up to the single-device loss."""
        raise NotImplementedError

    def output_layer(self) -> Any:
        """Logits -> what users get (probabilities or values), as a Keras layer: the saved
        model ends with it."""
        raise NotImplementedError

    def logits_from_outputs(self, outputs: Any) -> Any:
        """The inverse of `output_layer`: `evaluate` scores the saved model with `loss`."""
        raise NotImplementedError

    def standard_metrics(self) -> list[Any]:
        """keras.metrics for validation and test; the first one (`train_metric_name`) is also
        tracked in training, by `train_metric`."""
        raise NotImplementedError

    def train_metric(self, y_true: Any, logits: Any) -> Any:
        """`train_metric_name` per example (shape [batch]), from keras's function of that metric:
        the train step sums these, and the epoch's training figure is their mean. The same number
        as the keras.metrics object, without its per-step state update (about 10 % of a small
        model's step)."""
        raise NotImplementedError

    def report(self, scores: dict[str, Any], y_true: np.ndarray, outputs: np.ndarray) -> Evaluation:
        """`evaluate`'s metrics and plot rows from every test target and output."""
        raise NotImplementedError

    def encode_targets(self, values: Sequence[Any], column: str = "data.label") -> np.ndarray:
        """Raw label values (CSV cells, folder names) -> the targets `loss` takes."""
        raise NotImplementedError

    @classmethod
    def names_of(cls, values: Sequence[Any], column: str) -> list[str]:
        """The classes, labels or target name that raw label values of a training split give."""
        raise NotImplementedError

    # --- shared ---------------------------------------------------------------------------

    def outputs(self, logits: Any) -> Any:
        """Logits -> what users get (the output layer's function)."""
        return self.output_layer()(logits)

    def example_weights(self, y_true: Any) -> Any:
        """Each example's weight in the loss: its class's `class_weights` entry (classification),
        or 1 for every example (no class weights)."""
        import keras

        if not self.class_weights:
            return keras.ops.ones(keras.ops.shape(y_true)[:1])
        weights = keras.ops.convert_to_tensor(self.class_weights, "float32")
        return keras.ops.take(weights, keras.ops.cast(y_true, "int32"))

    def make_metrics(self, training: bool = False) -> list[Any]:
        """keras.metrics objects for validation and test, then `task.metrics` by name; built and
        reset. `training=True`: `task.metrics` only (usually none), for the training steps, which
        track `train_metric` besides: the whole set (AUC keeps 200 thresholds per class) cost
        40 % of a small model's step.

        Create them inside `strategy.scope()`: their variables then sum over replicas, and
        `result()` is the metric of the whole global batch."""
        standard = [] if training else self.standard_metrics()
        taken = {self.train_metric_name} if training else {m.name for m in standard}
        metrics = [*standard, *self._named_metrics(taken)]
        for metric in metrics:
            self._build(metric)
        return metrics

    def update_metrics(self, metrics: Sequence[Any], y_true: Any, logits: Any) -> None:
        """Update every metric from targets and logits; call inside the (replica) step."""
        self.update_metrics_from_outputs(metrics, y_true, self.outputs(logits))

    def update_metrics_from_outputs(
        self, metrics: Sequence[Any], y_true: Any, outputs: Any
    ) -> None:
        """The same from what the saved model gives (probabilities or values): `evaluate`."""
        for metric in metrics:
            metric.update_state(self.metric_targets(metric, y_true), outputs)

    def metric_targets(self, metric: Any, y_true: Any) -> Any:
        """The targets as `metric` takes them (the class index, or a one-hot row)."""
        return y_true

    def evaluate(self, batches: Iterable[tuple[Any, Any]]) -> Evaluation:
        """Test metrics and plot rows from (targets, outputs) batches of the saved model.

        `test_loss` is the training loss (`loss`, label smoothing included) of the saved model's
        outputs turned back into logits: the same number `val_loss` is in training."""
        import keras

        metrics = self.make_metrics()
        ys, outs = [], []
        for y_true, outputs in batches:
            # float32: what the metrics' ops take (in_top_k refuses float64)
            out = np.asarray(outputs, dtype=np.float32).reshape(-1, self.num_outputs)
            self.update_metrics_from_outputs(metrics, y_true, out)
            ys.append(np.asarray(y_true))
            outs.append(out)
        if not ys:
            raise ConfigError("data.test_fraction: the test split is empty (example: 0.2)")
        y_all, out_all = np.concatenate(ys), np.concatenate(outs)
        scores: dict[str, Any] = {f"test_{m.name}": float(m.result()) for m in metrics}
        losses = self.loss(y_all, self.logits_from_outputs(out_all))
        scores["test_loss"] = float(np.mean(keras.ops.convert_to_numpy(losses)))
        scores["test_examples"] = len(y_all)
        return self.report(scores, y_all, out_all)

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

    def _build(self, metric: Any) -> None:
        """F1Score and R2Score create their variables at their first update: create them now,
        with a zero-weight batch, so that no variable is created inside a replica step."""
        import keras

        outputs = keras.ops.zeros((1, self.num_outputs))
        targets = keras.ops.zeros((1,), "int32") if self.kind == "classification" else outputs
        metric.update_state(
            self.metric_targets(metric, targets), outputs, sample_weight=keras.ops.zeros((1,))
        )
        metric.reset_state()


@register("task", "classification")
@dataclass(frozen=True)
class Classification(Task):
    """One class per example: softmax probabilities, cross-entropy."""

    kind = "classification"
    train_metric_name = "accuracy"
    plots = ("confusion_matrix.csv", "per_class.csv")

    def loss(self, y_true: Any, logits: Any) -> Any:
        import keras

        onehot = keras.ops.one_hot(keras.ops.cast(y_true, "int32"), self.num_outputs)
        fn = keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=self.label_smoothing, reduction="none"
        )
        losses = fn(onehot, logits)
        return losses * self.example_weights(y_true) if self.class_weights else losses

    def output_layer(self) -> Any:
        import keras

        return keras.layers.Softmax(name="probabilities", dtype="float32")

    def logits_from_outputs(self, outputs: Any) -> Any:
        return np.log(np.clip(outputs, EPSILON, 1.0))  # softmax(log p) = p

    def standard_metrics(self) -> list[Any]:
        """Accuracy, top-5 accuracy (more than 5 classes), AUC (one-vs-rest, macro), precision
        and recall of the arg-max class pooled over classes (with one label per example both
        equal accuracy; `evaluate` reports them per class), F1 (macro, of the arg-max class)."""
        import keras

        m = keras.metrics
        top_k = [m.SparseTopKCategoricalAccuracy(k=5, name="top5_accuracy")]
        return [
            m.SparseCategoricalAccuracy(name="accuracy"),
            *(top_k if self.num_outputs > 5 else []),
            m.AUC(multi_label=True, num_labels=self.num_outputs, name="auc"),
            m.Precision(name="precision", top_k=1),
            m.Recall(name="recall", top_k=1),
            m.F1Score(average="macro", name="f1"),  # threshold None: the arg-max class
        ]

    def train_metric(self, y_true: Any, logits: Any) -> Any:
        import keras

        # The arg-max of the logits is the arg-max of the probabilities.
        return keras.metrics.sparse_categorical_accuracy(y_true, logits)

    def metric_targets(self, metric: Any, y_true: Any) -> Any:
        import keras

        y_true = keras.ops.cast(y_true, "int32")
        sparse = (
            keras.metrics.SparseCategoricalAccuracy,
            keras.metrics.SparseTopKCategoricalAccuracy,
        )
        name = getattr(getattr(metric, "_fn", None), "__name__", "")
        if isinstance(metric, sparse) or name.startswith("sparse_"):
            return y_true
        return keras.ops.one_hot(y_true, self.num_outputs)

    def report(self, scores: dict[str, Any], y_true: np.ndarray, outputs: np.ndarray) -> Evaluation:
        """Balanced accuracy and macro F1 beside accuracy; per-class precision, recall, F1 and
        support (every class, also one the test split lacks); the confusion pairs."""
        from sklearn import metrics

        truth, predicted = y_true.astype(int), outputs.argmax(axis=1)
        classes = list(range(len(self.names)))
        scores["test_balanced_accuracy"] = float(metrics.balanced_accuracy_score(truth, predicted))
        scores["test_macro_f1"] = float(
            metrics.f1_score(truth, predicted, labels=classes, average="macro", zero_division=0)
        )
        scores["classes"] = len(self.names)
        per_class = _per_name_rows("class", self.names, truth, predicted, classes)
        confusion = [["actual", "predicted"]]
        confusion += [[self.names[a], self.names[p]] for a, p in zip(truth, predicted, strict=True)]
        return Evaluation(scores, {"confusion_matrix.csv": confusion, "per_class.csv": per_class})

    def encode_targets(self, values: Sequence[Any], column: str = "data.label") -> np.ndarray:
        index = {name: i for i, name in enumerate(self.names)}
        unknown = next((v for v in values if str(v) not in index), None)
        if unknown is not None:
            raise ConfigError(
                f"{column}: {unknown!r} is not one of the {len(index)} classes of the training "
                f"split (example: {self.names[0]!r})"
            )
        return np.array([index[str(v)] for v in values], dtype=np.int64)

    @classmethod
    def names_of(cls, values: Sequence[Any], column: str) -> list[str]:
        """Sorted; numerically when every class is an integer ('2' before '10')."""
        return sorted({str(v) for v in values}, key=natural_order)


@register("task", "multilabel")
@dataclass(frozen=True)
class Multilabel(Task):
    """Any number of labels per example: a sigmoid probability per label, binary
    cross-entropy; a label is predicted when its probability reaches THRESHOLD."""

    kind = "multilabel"
    train_metric_name = "binary_accuracy"
    plots = ("per_label.csv",)

    def loss(self, y_true: Any, logits: Any) -> Any:
        import keras

        y = keras.ops.cast(y_true, "float32")
        if not self.class_weights:
            fn = keras.losses.BinaryCrossentropy(
                from_logits=True, label_smoothing=self.label_smoothing, reduction="none"
            )
            return fn(y, logits)
        # Each label's positive term x its weight (tf.nn.weighted_cross_entropy_with_logits):
        # (1 - y) z + (1 + (w - 1) y) softplus(-z), which is the plain loss where w = 1.
        y = y * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        z = keras.ops.cast(logits, "float32")
        w = keras.ops.convert_to_tensor(self.class_weights, "float32")
        per_label = (1.0 - y) * z + (1.0 + (w - 1.0) * y) * keras.ops.softplus(-z)
        return keras.ops.mean(per_label, axis=-1)

    def output_layer(self) -> Any:
        import keras

        return keras.layers.Activation("sigmoid", name="probabilities", dtype="float32")

    def logits_from_outputs(self, outputs: Any) -> Any:
        p = np.clip(outputs, EPSILON, 1.0 - EPSILON)
        return np.log(p / (1.0 - p))

    def standard_metrics(self) -> list[Any]:
        """Binary accuracy, AUC (macro over labels), precision and recall (pooled, at the
        threshold), F1 (macro)."""
        import keras

        m = keras.metrics
        return [
            m.BinaryAccuracy(threshold=THRESHOLD, name="binary_accuracy"),
            m.AUC(multi_label=True, num_labels=self.num_outputs, name="auc"),
            m.Precision(name="precision", thresholds=THRESHOLD),
            m.Recall(name="recall", thresholds=THRESHOLD),
            m.F1Score(average="macro", threshold=THRESHOLD, name="f1"),
        ]

    def train_metric(self, y_true: Any, logits: Any) -> Any:
        import keras

        hits = keras.metrics.binary_accuracy(y_true, self.outputs(logits), threshold=THRESHOLD)
        return keras.ops.mean(hits, axis=-1)  # every example has all labels: the same mean

    def report(self, scores: dict[str, Any], y_true: np.ndarray, outputs: np.ndarray) -> Evaluation:
        """Per-label precision, recall, F1 and support."""
        truth, chosen = (y_true >= 0.5).astype(int), (outputs >= THRESHOLD).astype(int)
        rows = _per_name_rows("label", self.names, truth, chosen)
        return Evaluation(scores, {"per_label.csv": rows})

    def encode_targets(self, values: Sequence[Any], column: str = "data.label") -> np.ndarray:
        """`cat|dog` cells -> 0/1 rows over the labels."""
        index = {name: i for i, name in enumerate(self.names)}
        targets = np.zeros((len(values), len(self.names)), dtype=np.float32)
        for row, value in enumerate(values):
            for label in _split_labels(value):
                if label not in index:
                    raise ConfigError(
                        f"{column}: row {row + 1}: unknown label {label!r} (labels joined by "
                        f"'{LABEL_SEPARATOR}', example: {'|'.join(self.names[:2])!r})"
                    )
                targets[row, index[label]] = 1.0
        return targets

    @classmethod
    def names_of(cls, values: Sequence[Any], column: str) -> list[str]:
        """The sorted distinct labels of `cat|dog` cells."""
        return sorted({part for v in values for part in _split_labels(v)})


@register("task", "regression")
@dataclass(frozen=True)
class Regression(Task):
    """A number: the model learns the standardised target (mean squared error), the saved
    model answers in the user's units; metrics in the user's units."""

    kind = "regression"
    train_metric_name = "mae"
    plots = ("predictions.csv",)

    @property
    def num_outputs(self) -> int:
        return 1

    def loss(self, y_true: Any, logits: Any) -> Any:
        import keras

        standard = (keras.ops.cast(y_true, "float32") - self.target_mean) / self.target_std
        fn = keras.losses.MeanSquaredError(reduction="none")
        return fn(keras.ops.reshape(standard, (-1, 1)), logits)

    def output_layer(self) -> Any:
        import keras

        return keras.layers.Rescaling(
            self.target_std, offset=self.target_mean, name="value", dtype="float32"
        )

    def logits_from_outputs(self, outputs: Any) -> Any:
        return (np.asarray(outputs, np.float32) - self.target_mean) / self.target_std

    def standard_metrics(self) -> list[Any]:
        """MAE, RMSE, R2, in the user's units."""
        import keras

        m = keras.metrics
        return [m.MeanAbsoluteError(name="mae"), m.RootMeanSquaredError(name="rmse"),
                m.R2Score(name="r2")]  # fmt: skip

    def train_metric(self, y_true: Any, logits: Any) -> Any:
        import keras

        y_true = keras.ops.reshape(keras.ops.cast(y_true, "float32"), (-1, 1))
        return keras.metrics.mean_absolute_error(y_true, self.outputs(logits))

    def update_metrics_from_outputs(
        self, metrics: Sequence[Any], y_true: Any, outputs: Any
    ) -> None:
        import keras

        # R2Score takes [batch, outputs]
        y_true = keras.ops.reshape(keras.ops.cast(y_true, "float32"), (-1, 1))
        super().update_metrics_from_outputs(metrics, y_true, keras.ops.reshape(outputs, (-1, 1)))

    def report(self, scores: dict[str, Any], y_true: np.ndarray, outputs: np.ndarray) -> Evaluation:
        """The residuals' mean, spread and 90th percentile of their size; actual, predicted and
        residual per example."""
        predicted = outputs.reshape(-1).astype(np.float64)
        residual = predicted - y_true
        scores.update(
            residual_mean=float(residual.mean()),
            residual_std=float(residual.std()),
            residual_abs_p90=float(np.percentile(np.abs(residual), 90)),
        )
        rows = [["actual", "predicted", "residual"]]
        for a, p, r in zip(y_true, predicted, residual, strict=True):
            rows.append([float(a), float(p), float(r)])
        return Evaluation(scores, {"predictions.csv": rows})

    def encode_targets(self, values: Sequence[Any], column: str = "data.label") -> np.ndarray:
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

    @classmethod
    def names_of(cls, values: Sequence[Any], column: str) -> list[str]:
        return [column]


def task_class(task_type: str) -> type[Task]:
    """The task class registered as `task_type` (params.yaml `task.type`)."""
    return lookup("task", task_type)


def encode(kind: str, values: Sequence[Any], column: str) -> tuple[np.ndarray, list[str]]:
    """A training split's raw label values -> (targets, names) for a task of `kind` (the
    readers of sources.py; `column` names the values in errors)."""
    cls = task_class(kind)
    names = cls.names_of(values, column)
    return cls(names=names).encode_targets(values, column), names


def make_task(params: Params, spec: DataSpec, weighted: bool = True) -> Task:
    """The task of `params.task.type`, checked against what `prepare` found in the data, with
    `train.class_weight` resolved (`weighted=False`: without, as `evaluate` scores)."""
    cls = task_class(params.task.type)
    if spec.task != cls.kind:
        raise ConfigError(
            f"task.type: {params.task.type} but the prepared data is for {spec.task}; run "
            f"`prepare` again (example: --set task.type={spec.task})"
        )
    if cls.kind != "regression" and len(spec.names) < 2:
        raise ConfigError(
            f"data.label: {cls.kind} needs at least 2 classes or labels, found {spec.names} "
            "(example: --set task.type=regression for a numeric target)"
        )
    return cls(
        names=list(spec.names),
        label_smoothing=params.train.label_smoothing if cls.kind != "regression" else 0.0,
        extra_metrics=list(params.task.metrics),
        target_mean=float(spec.target_mean or 0.0),
        target_std=float(spec.target_std or 1.0) or 1.0,
        class_weights=resolve_class_weights(params, spec, cls.kind) if weighted else (),
    )


def resolve_class_weights(params: Params, spec: DataSpec, kind: str) -> tuple[float, ...]:
    """`train.class_weight` as one weight per name of the spec, from the training split's counts
    (`spec.train_counts`): `balanced` is n_samples / (n_classes x count) per class (scikit-learn's
    `compute_class_weight`), or negatives / positives per label (multilabel); a map gives its
    classes' weights and 1 to the others. () for `none`."""
    setting, names = params.train.class_weight, list(spec.names)
    if setting == "none":
        return ()
    if kind not in ("classification", "multilabel"):
        raise ConfigError(
            f"train.class_weight: {setting} weighs classes, and task.type {params.task.type} has "
            "none (example: --set train.class_weight=none)"
        )
    if isinstance(setting, dict):
        unknown = next((name for name in setting if name not in names), None)
        if unknown is not None:
            example = "{" + f"{names[0]}: 2.0" + "}"
            raise ConfigError(
                f"train.class_weight: {unknown!r} is not a class of the prepared data ("
                f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''}) (example: --set "
                f"train.class_weight={example})"
            )
        return tuple(float(setting.get(name, 1.0)) for name in names)
    if set(spec.train_counts) != set(names):
        raise ConfigError(
            "train.class_weight: balanced needs the training split's counts, which "
            "data/processed/spec.json lacks (prepared by an older version): run `prepare` again"
        )
    found = np.array([spec.train_counts[name] for name in names], dtype=np.int64)
    if kind == "multilabel":  # a label without positives has nothing to weigh
        negatives = spec.counts["train"] - found
        return tuple(float(n / p) if p else 1.0 for n, p in zip(negatives, found, strict=True))
    from sklearn.utils.class_weight import compute_class_weight

    present = np.flatnonzero(found)  # a class without training examples keeps weight 1
    weights = np.ones(len(names))
    y = np.repeat(present, found[present])
    weights[present] = compute_class_weight("balanced", classes=present, y=y)
    return tuple(float(w) for w in weights)


def natural_order(name: str) -> tuple[int, int, str]:
    """Sort key: integers by value ('2' before '10'), before any other name, alphabetically."""
    return (0, int(name), name) if name.lstrip("-").isdigit() else (1, 0, name)


def _split_labels(value: Any) -> list[str]:
    text = "" if value is None else str(value)
    return [part.strip() for part in text.split(LABEL_SEPARATOR) if part.strip()]


def _per_name_rows(
    header: str, names: list[str], truth: Any, predicted: Any, labels: Any = None
) -> list[list[Any]]:
    """A `header, precision, recall, f1, support` row per class or label (scikit-learn)."""
    from sklearn.metrics import precision_recall_fscore_support

    precision, recall, f1, support = precision_recall_fscore_support(
        truth, predicted, labels=labels, zero_division=0
    )
    rows = [[header, "precision", "recall", "f1", "support"]]
    for i, name in enumerate(names):
        rows.append([name, float(precision[i]), float(recall[i]), float(f1[i]), int(support[i])])
    return rows
