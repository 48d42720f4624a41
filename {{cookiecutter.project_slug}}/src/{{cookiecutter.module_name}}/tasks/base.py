"""What every task shares, and `make_task`, which builds params.yaml's task for the data.

A task KIND is a task class registered under its `kind` (classification, multilabel, regression:
task.py and this folder; one of yours in a file beside model.py). It owns everything that depends
on what the targets are, so no other module names a kind:
- training (the trainer and loop.py): `loss`, `output_layer`, `train_metric`, the metrics;
- targets (`prepare`, the split, the input pipeline): `names_of`, `encode_targets`,
  `target_shape` and `target_dtype`, `counts` (per class or label), `statistics` (what spec.json
  keeps), `relabel` (split files merged), `stratified`;
- reports (`evaluate`, `predict`, `export`, the model card, notebook 03): `report`,
  `predictions`, `target_text`, `outputs_text`, `figure`, `headline`, `plot_columns`.
The defaults below suit a target that is one number per example; a kind changes what differs.
A task of an existing kind (a focal loss) subclasses that kind's class and keeps its `kind`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import keras
import numpy as np
import pandas as pd
import tensorflow as tf
from sklearn.metrics import classification_report

from ..config import ConfigError, Params
from ..registry import lookup, names
from ..spec import DataSpec

EPSILON = 1e-7  # probabilities are clipped to [EPSILON, 1 - EPSILON] before taking logs
# `evaluate`'s metrics and their traced update, one per task value: eagerly, AUC(multi_label=True)
# traces at each update, and a graph per call warns as retracing after five `evaluate`s.
_TEST_METRICS: dict[tuple[type, str], tuple[list[keras.metrics.Metric], Any]] = {}


class TargetError(ConfigError):
    """A raw label value refused: value `row` (from 0), and `what` is wrong with it."""

    def __init__(self, column: str, row: int, what: str) -> None:
        super().__init__(f"{column}: row {row + 1}: {what}")
        self.row, self.what = row, what


@dataclass
class Evaluation:
    """What `evaluate` writes; `Task.evaluate` adds each test example's target, output and loss."""

    metrics: dict[str, float]  # every test number
    plots: dict[str, pd.DataFrame]  # results/plots/ tables by file name
    table: pd.DataFrame | None = None  # per class or label (None: the kind has none)
    targets: np.ndarray | None = None
    outputs: np.ndarray | None = None
    losses: np.ndarray | None = None


@dataclass(frozen=True)
class Task:
    """What every task shares. Build one with `make_task(params, spec)`."""

    names: list[str]  # classes, labels, or [the target's name]
    label_smoothing: float = 0.0
    extra_metrics: list[str] = field(default_factory=list)  # task.metrics: keras metric names
    target_mean: float = 0.0  # a numeric target: the training split's mean and deviation
    target_std: float = 1.0
    class_weights: tuple[float, ...] = ()  # train.class_weight, in `names` order; () = none

    kind: ClassVar[str] = ""  # the name the kind registers under; spec.json's `task`
    train_metric_name: ClassVar[str] = ""  # the first standard metric, also tracked in training
    # What `names` are, in messages: class / label / target (a number: export compares no
    # predictions as text, since a number differs in its last digits)
    name_word: ClassVar[str] = "target"
    min_names: ClassVar[int] = 1
    stratified: ClassVar[bool] = False  # `prepare` splits each class alike (class indices)
    target_dtype: ClassVar[str] = "float32"  # the targets' type in the shards and the batches
    # The metrics compared between runs (evaluate.json, train.json, `export`'s line): few enough
    # for `dvc metrics show`; every metric is in the run record and the model card.
    headline: ClassVar[tuple[str, ...]] = ()
    plot_columns: ClassVar[dict[str, list[str]]] = {}  # results/plots/ files `report` fills

    @property
    def num_outputs(self) -> int:
        return len(self.names)

    # --- what each kind defines (besides task.py's contract) --------------------------------

    def report(
        self, scores: dict[str, float], y_true: np.ndarray, outputs: np.ndarray
    ) -> Evaluation:
        """`evaluate`'s Evaluation from every test target and output and `scores` (the keras
        metrics' results, `test_loss`, `test_examples`)."""
        raise NotImplementedError

    def predictions(self, outputs: np.ndarray) -> dict[str, list[Any]]:
        """The columns of the predictions CSV for these outputs: `prediction`, then any more."""
        return {"prediction": self.target_text(outputs)}

    def target_text(self, targets: np.ndarray) -> list[str]:
        """Targets as the `prediction` column writes them (evaluate's `target` column)."""
        return [f"{float(v):.6g}" for v in np.ravel(targets)]

    def outputs_text(self) -> str:
        """What the saved model gives, in words (the model card)."""
        return f"the value of `{self.names[0]}`, in its own units"

    def figure(self, plots: dict[str, pd.DataFrame]) -> tuple[Any, str]:
        """Notebook 03's figure from `evaluate`'s plot tables, and its file name."""
        raise NotImplementedError

    def compared(self, scores: dict[str, Any], split: str, *also: str) -> dict[str, Any]:
        """What a metrics file keeps of `scores`: the headline metrics on `split`, and `also`."""
        kept = {*(f"{split}_{name}" for name in self.headline), *also}
        return {key: value for key, value in scores.items() if key in kept}

    @classmethod
    def names_of(cls, values: Sequence[Any], column: str) -> list[str]:
        """The classes, labels or target name that raw label values of a training split give."""
        return [column]

    def encode_targets(self, values: Sequence[Any], column: str = "data.label") -> np.ndarray:
        """Raw label values (CSV cells, folder names) -> the targets `loss` takes."""
        out = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce")
        with np.errstate(over="ignore"):  # 1e39 is infinite as float32: refused below
            targets = out.to_numpy(np.float32)
        bad = np.flatnonzero(~np.isfinite(targets))
        if len(bad):
            raise TargetError(
                column,
                int(bad[0]),
                f"expected a number for a {self.kind} target, got {values[bad[0]]!r} (finite in "
                "float32; example: 42.5, or another task.type)",
            )
        return targets

    def target_shape(self) -> tuple[int, ...]:
        """One example's target shape: () for a class index or a value, (labels,) for 0/1."""
        return ()

    def counts(self, targets: np.ndarray) -> np.ndarray | None:
        """Examples per name (class, label), or None for a kind that has no classes to count."""
        return None

    def statistics(self, targets: np.ndarray) -> dict[str, Any]:
        """What spec.json keeps of the training split's targets (DataSpec fields)."""
        counts = self.counts(targets)
        if counts is None:
            return {"target_mean": float(np.mean(targets)), "target_std": float(np.std(targets))}
        return {"train_counts": {n: int(c) for n, c in zip(self.names, counts, strict=True)}}

    def relabel(self, targets: np.ndarray, own: list[str]) -> np.ndarray:
        """Targets encoded over the names `own` (one split's files) -> over `self.names`."""
        return np.asarray(targets, dtype=self.target_dtype)

    def balanced_weights(self, found: np.ndarray, examples: int) -> tuple[float, ...]:
        """`train.class_weight: balanced` from the examples per name (scikit-learn's rule,
        n_samples / (n_classes x count)); a name without examples keeps weight 1."""
        present = found > 0
        weights = np.ones(len(found))
        weights[present] = examples / (present.sum() * found[present])
        return tuple(float(w) for w in weights)

    def metric_targets(self, metric: keras.metrics.Metric, y_true: Any) -> Any:
        """The targets as `metric` takes them."""
        return y_true

    def example_weights(self, y_true: Any) -> Any:
        """Each example's weight in the loss: its class's `class_weights` entry, or 1."""
        if not self.class_weights:
            return keras.ops.ones(keras.ops.shape(y_true)[:1])
        weights = keras.ops.convert_to_tensor(self.class_weights, "float32")
        return keras.ops.take(weights, keras.ops.cast(y_true, "int32"))

    # --- shared -----------------------------------------------------------------------------

    def outputs(self, logits: Any) -> Any:
        """Logits -> what users get (the output layer's function)."""
        return self.output_layer()(logits)

    def make_metrics(self, training: bool = False) -> list[keras.metrics.Metric]:
        """keras.metrics for validation and test, then `task.metrics`, built (inside
        `strategy.scope()`). `training=True`: `task.metrics` only (the whole set cost 40 % of a
        small model's step)."""
        metrics = [] if training else self.standard_metrics()
        taken = {self.train_metric_name} if training else {m.name for m in metrics}
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
        # F1Score and R2Score create variables at their first update, which must not happen in a
        # replica step or a traced update: a zero-weight batch creates them here.
        outputs = keras.ops.zeros((1, len(self.names)))
        targets = keras.ops.zeros((1, *self.target_shape()), self.target_dtype)
        for metric in [m for m in metrics if not getattr(m, "_built", bool(m.variables))]:
            weight = keras.ops.zeros((1,))
            metric.update_state(self.metric_targets(metric, targets), outputs, sample_weight=weight)
            metric.reset_state()
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

    def _test_metrics(self) -> tuple[list[keras.metrics.Metric], Any]:
        """`evaluate`'s metrics and their update as one graph, one per task value."""
        key = (type(self), repr(self))
        if key not in _TEST_METRICS:
            metrics = self.make_metrics()

            # One trace for every batch (outputs can be wider than logits: ordinal's).
            targets = tf.TensorSpec((None, *self.target_shape()), self.target_dtype)
            outputs = tf.TensorSpec((None, None), tf.float32)

            @tf.function(input_signature=[targets, outputs])
            def update(y_true: Any, outputs: Any) -> None:
                self.update_metrics_from_outputs(metrics, y_true, outputs)

            _TEST_METRICS[key] = metrics, update
        return _TEST_METRICS[key]

    def evaluate(self, batches: Iterable[tuple[Any, Any]]) -> Evaluation:
        """`report` of the saved model's (targets, outputs) batches; `test_loss` is the training
        loss of the outputs turned back into logits, as `val_loss` is."""
        metrics, update = self._test_metrics()
        for metric in metrics:
            metric.reset_state()
        ys, outs = [], []
        for y_true, outputs in batches:
            out = np.asarray(outputs, dtype=np.float32).reshape(len(outputs), -1)
            update(np.asarray(y_true, self.target_dtype), out)
            ys.append(np.asarray(y_true))
            outs.append(out)
        if not ys:
            raise ConfigError("data.test_fraction: the test split is empty (example: 0.2)")
        y_all, out_all = np.concatenate(ys), np.concatenate(outs)
        losses = self.loss(y_all, self.logits_from_outputs(out_all))
        losses = keras.ops.convert_to_numpy(losses).astype(np.float64)
        scores = {f"test_{m.name}": float(m.result()) for m in metrics}
        scores["test_loss"] = float(np.mean(losses))
        scores["test_examples"] = len(y_all)
        found = self.report(scores, y_all, out_all)
        return replace(found, targets=y_all, outputs=out_all, losses=losses)


class MacroAUC(keras.metrics.AUC):
    """ROC AUC per class or label, averaged over those the data has both with and without:
    Keras's `AUC(multi_label=True)` scores one a split lacks as 0, lowering the mean."""

    def __init__(self, num_labels: int, name: str = "auc") -> None:
        super().__init__(multi_label=True, num_labels=num_labels, name=name)

    def result(self) -> Any:
        ops, tp, fp = keras.ops, self.true_positives, self.false_positives
        positives, negatives = tp + self.false_negatives, fp + self.true_negatives
        recall, fp_rate = ops.divide_no_nan(tp, positives), ops.divide_no_nan(fp, negatives)
        # Keras's own sum: trapezoids between the thresholds, one column per label.
        by_label = ops.sum((fp_rate[:-1] - fp_rate[1:]) * (recall[:-1] + recall[1:]) / 2, axis=0)
        scored = ops.cast((positives[0] > 0) & (negatives[0] > 0), by_label.dtype)
        return ops.divide_no_nan(ops.sum(by_label * scored), ops.sum(scored))


def per_name_table(header: str, names: list[str], truth: Any, predicted: Any) -> pd.DataFrame:
    """scikit-learn's precision, recall, F1 and support per name, also one the split lacks."""
    labels = list(range(len(names))) if np.ndim(truth) == 1 else None
    report = classification_report(
        truth, predicted, labels=labels, target_names=names, output_dict=True, zero_division=0
    )
    table = pd.DataFrame(report).T.loc[names].rename(columns={"f1-score": "f1"})
    table["support"] = table["support"].astype(int)
    return table.rename_axis(header).reset_index()


def task_class(task_type: str) -> type[Task]:
    """The task class registered as `task_type` (params.yaml `task.type`, or spec's kind)."""
    return lookup("task", task_type)


def kinds() -> list[type[Task]]:
    """The class of every registered kind (a subclass keeping its kind's name is not one)."""
    found = {task_class(name) for name in names("task")}
    return sorted((cls for cls in found if task_class(cls.kind) is cls), key=lambda c: c.kind)


def for_spec(spec: DataSpec) -> Task:
    """A task of the prepared data's kind and names (the data path's targets)."""
    return task_class(spec.task)(names=list(spec.names))


def encode(kind: str, values: Sequence[Any], column: str) -> tuple[np.ndarray, list[str]]:
    """A training split's raw label values -> (targets, names) for a task of `kind`."""
    cls = task_class(kind)
    found = cls.names_of(values, column)
    return cls(names=found).encode_targets(values, column), found


def make_task(params: Params, spec: DataSpec, weighted: bool = True) -> Task:
    """The task of `params.task.type` for the prepared data (`weighted=False`: no class weights)."""
    cls = task_class(params.task.type)
    if spec.task != cls.kind:
        raise ConfigError(
            f"task.type: {params.task.type} but the prepared data is for {spec.task}; run "
            f"`prepare` again (example: --set task.type={spec.task})"
        )
    if len(spec.names) < cls.min_names:
        raise ConfigError(
            f"data.label: {cls.kind} needs at least {cls.min_names} distinct values, found "
            f"{spec.names} (example: another task.type for a numeric target)"
        )
    task = cls(
        names=list(spec.names),
        label_smoothing=params.train.label_smoothing,
        extra_metrics=list(params.task.metrics),
        target_mean=float(spec.target_mean or 0.0),
        target_std=float(spec.target_std or 1.0) or 1.0,
    )
    return replace(
        task, class_weights=resolve_class_weights(params, spec, task) if weighted else ()
    )


def resolve_class_weights(params: Params, spec: DataSpec, task: Task) -> tuple[float, ...]:
    """`train.class_weight` as a weight per name: `balanced` by the kind's rule, a map's (1 for
    names left out), or () for `none`."""
    setting, found = params.train.class_weight, list(spec.names)
    if setting == "none":
        return ()
    if not spec.train_counts:
        raise ConfigError(
            f"train.class_weight: {setting} weighs classes, and task.type {params.task.type} has "
            "none (example: --set train.class_weight=none)"
        )
    if isinstance(setting, dict):
        unknown = next((name for name in setting if name not in found), None)
        if unknown is not None:
            example = "{" + f"{found[0]}: 2.0" + "}"
            raise ConfigError(
                f"train.class_weight: {unknown!r} is not a {task.name_word} of the prepared data "
                f"({', '.join(found[:8])}{', ...' if len(found) > 8 else ''}) (example: --set "
                f"train.class_weight={example})"
            )
        return tuple(float(setting.get(name, 1.0)) for name in found)
    counted = np.array([spec.train_counts.get(name, 0) for name in found], dtype=np.int64)
    return task.balanced_weights(counted, spec.counts["train"])
