"""Your task: what the model learns and how it is scored. `task.type` picks a task by its name.

THE CONTRACT. A task is a frozen dataclass registered under a name, built for the prepared data
by `make_task` (it receives `names`: the classes, labels or target name; `label_smoothing`,
`class_weights`, `target_mean` / `target_std` from params.yaml and spec.json). The model
(model.py) returns logits; the trainer asks the task for everything else:

    loss(y_true, logits) -> [batch]          the per-example loss; the trainer averages it over
                                             the GLOBAL batch, so replicas add up
    output_layer() -> keras layer            logits -> what users get (probabilities, values)
    logits_from_outputs(outputs) -> logits   its inverse: `evaluate` scores the saved model
    standard_metrics() -> [keras.metrics]    validation and test; the first is also tracked
                                             in training, as `train_metric(y_true, logits)`
                                             -> [batch] (`train_metric_name`)

Every task has a KIND (`kind`, the name its kind registers under), which owns what depends on
the targets: how labels are read and encoded, the splits, the reports, the prediction columns,
the model card's lines (tasks/base.py lists them). `Classification` below is the worked example
of a task; its targets and reports are those of one class per example (tasks/classes.py). The
other built-in kinds are tasks/multilabel.py and tasks/regression.py.

A task of an existing kind changes what differs and keeps the kind, e.g. in a file beside this
one (multiply by `self.example_weights(y_true)` to honour `train.class_weight`):

    @register("task", "focal")
    @dataclass(frozen=True)
    class Focal(Classification):
        def loss(self, y_true, logits): ...

A new kind subclasses `Task` (or `Classes`) with `kind = "<its registered name>"` and defines
the rest of tasks/base.py's list; `prepare` then writes data for it (spec.json's `task`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from .registry import register
from .tasks.base import EPSILON, Evaluation, MacroAUC, Task, make_task, task_class
from .tasks.classes import Classes

__all__ = ["Classification", "Evaluation", "Task", "make_task", "task_class"]


@register("task", "classification")
@dataclass(frozen=True)
class Classification(Classes):
    """One class per example: softmax probabilities, cross-entropy (`train.label_smoothing`)."""

    kind = "classification"
    train_metric_name = "accuracy"

    def loss(self, y_true: Any, logits: Any) -> Any:
        onehot = keras.ops.one_hot(keras.ops.cast(y_true, "int32"), self.num_outputs)
        fn = keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=self.label_smoothing, reduction="none"
        )
        losses = fn(onehot, logits)
        return losses * self.example_weights(y_true) if self.class_weights else losses

    def output_layer(self) -> keras.layers.Layer:
        # float32: a bfloat16 or float16 softmax loses too much precision.
        return keras.layers.Softmax(name="probabilities", dtype="float32")

    def logits_from_outputs(self, outputs: np.ndarray) -> np.ndarray:
        return np.log(np.clip(outputs, EPSILON, 1.0))  # softmax(log p) = p

    def standard_metrics(self) -> list[keras.metrics.Metric]:
        """Accuracy, top-5 accuracy (more than 5 classes), AUC (one-vs-rest, macro), F1 (macro,
        of the arg-max class). No pooled precision or recall: with one label per example both
        equal accuracy; `evaluate` reports them per class."""
        m = keras.metrics
        top_k = [m.SparseTopKCategoricalAccuracy(k=5, name="top5_accuracy")]
        return [
            m.SparseCategoricalAccuracy(name="accuracy"),
            *(top_k if self.num_outputs > 5 else []),
            MacroAUC(self.num_outputs),
            m.F1Score(average="macro", name="f1"),  # threshold None: the arg-max class
        ]

    def train_metric(self, y_true: Any, logits: Any) -> Any:
        # The arg-max of the logits is the arg-max of the probabilities.
        return keras.metrics.sparse_categorical_accuracy(y_true, logits)

    def metric_targets(self, metric: keras.metrics.Metric, y_true: Any) -> Any:
        """Class indices for the sparse metrics (`sparse_...`), one-hot rows for the others."""
        y_true = keras.ops.cast(y_true, "int32")
        if getattr(getattr(metric, "_fn", None), "__name__", "").startswith("sparse_"):
            return y_true
        return keras.ops.one_hot(y_true, self.num_outputs)
