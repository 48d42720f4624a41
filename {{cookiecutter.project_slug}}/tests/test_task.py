"""task.py and tasks/: loss, metrics across replicas, outputs, label encoding, evaluation per
kind."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import keras
import numpy as np
import pandas as pd
import pytest
import tensorflow as tf
from conftest import PARAMS
from sklearn.metrics import roc_auc_score

from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.core.files import save_json
from {{ cookiecutter.module_name }}.spec import DataSpec
from {{ cookiecutter.module_name }}.task import Classification, Task, make_task
from {{ cookiecutter.module_name }}.tasks.multilabel import Multilabel
from {{ cookiecutter.module_name }}.tasks.regression import Regression
from {{ cookiecutter.module_name }}.training.policy import (
    EarlyStopping,
    mode_for,
)

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

CLASSES = [f"c{i}" for i in range(7)]
LABELS = ["cat", "dog", "owl"]


def task_for(kind: str, **changes: object) -> Task:
    names = {"classification": CLASSES, "multilabel": LABELS, "regression": ["price"]}[kind]
    spec = DataSpec(
        kind="vector", input_shape=(4,), task=kind, names=names, target_mean=50.0, target_std=10.0
    )
    params = load_params(PARAMS, [f"task.type={kind}"])
    return dataclasses.replace(make_task(params, spec), **changes)


def batch(kind: str, n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    width = {"classification": 7, "multilabel": 3, "regression": 1}[kind]
    logits = rng.normal(size=(n, width)).astype("float32")
    y = {
        "classification": rng.integers(0, 7, n),
        "multilabel": (rng.random((n, 3)) > 0.5).astype("float32"),
        "regression": rng.normal(50, 10, n).astype("float32"),
    }[kind]
    return y, logits


@pytest.mark.parametrize("kind", ["classification", "multilabel", "regression"])
def test_metrics_aggregate_across_replicas(kind: str) -> None:
    """Two replicas (conftest's logical CPUs) give the single-device metrics."""
    task = task_for(kind, extra_metrics=["mean_squared_error"] if kind == "regression" else [])
    y, logits = batch(kind)
    single = task.make_metrics()
    task.update_metrics(single, y, logits)
    expected = {m.name: float(m.result()) for m in single}

    strategy = two_cpus(tf)
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        metrics = task.make_metrics()
    data = tf.data.Dataset.from_tensor_slices((y, logits)).batch(8)  # 4 per replica, 2 steps

    @tf.function
    def step(inputs: tuple) -> None:
        strategy.run(lambda yy, ll: task.update_metrics(metrics, yy, ll), args=inputs)

    for inputs in strategy.experimental_distribute_dataset(data):
        step(inputs)
    got = {m.name: float(m.result()) for m in metrics}
    # float32 sums in another order (R2 sums squares of values near 50): not bit-equal.
    assert got == pytest.approx(expected, rel=1e-4, abs=1e-6)
    names = {"classification": "accuracy", "multilabel": "binary_accuracy", "regression": "r2"}
    assert names[kind] in got


def test_metric_names_per_task() -> None:
    names = {kind: [m.name for m in task_for(kind).make_metrics()] for kind in
             ("classification", "multilabel", "regression")}  # fmt: skip
    assert names["classification"] == [
        "accuracy", "top5_accuracy", "auc", "f1"
    ]  # fmt: skip
    assert names["multilabel"] == ["binary_accuracy", "auc", "precision", "recall", "f1"]
    assert names["regression"] == ["mae", "rmse", "r2"]
    # Training steps: the first standard metric by `train_metric`, task.metrics as objects.
    extra = ["mean_squared_error", "accuracy"]
    training = {kind: [m.name for m in task_for(kind, extra_metrics=extra).make_metrics(True)]
                for kind in ("classification", "multilabel", "regression")}  # fmt: skip
    assert training == {
        "classification": ["mean_squared_error"],  # accuracy is the train metric already
        "multilabel": extra,
        "regression": extra,
    }
    assert {kind: task_for(kind).train_metric_name for kind in training} == {
        "classification": "accuracy", "multilabel": "binary_accuracy", "regression": "mae"
    }  # fmt: skip
    small = dataclasses.replace(task_for("classification"), names=["a", "b", "c"])
    assert "top5_accuracy" not in [m.name for m in small.make_metrics()]
    with pytest.raises(ConfigError, match=r"^task\.metrics: 'accurcy' is not a keras metric"):
        dataclasses.replace(small, extra_metrics=["accurcy"]).make_metrics()


@pytest.mark.parametrize("kind", ["classification", "multilabel", "regression"])
def test_train_metric_is_the_first_standard_metric(kind: str) -> None:
    """The mean of `train_metric` over examples is the keras metric the history names."""
    task = task_for(kind)
    y, logits = batch(kind, n=64)
    first = task.standard_metrics()[0]
    assert first.name == task.train_metric_name
    task.update_metrics([first], y, logits)
    values = keras.ops.convert_to_numpy(task.train_metric(y, logits))
    assert values.shape == (64,)
    assert float(values.mean()) == pytest.approx(float(first.result()), rel=1e-6)


def test_losses_are_per_example_from_logits() -> None:
    y, logits = batch("classification")
    plain = task_for("classification").loss(y, logits)
    reference = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    np.testing.assert_allclose(np.asarray(plain), np.asarray(reference), rtol=1e-5)
    smoothed = task_for("classification", label_smoothing=0.1).loss(y, logits)
    assert smoothed.shape == (16,) and not np.allclose(smoothed, plain)
    y, logits = batch("multilabel")
    assert task_for("multilabel").loss(y, logits).shape == (16,)


def test_regression_trains_on_the_standardised_target_and_answers_in_user_units() -> None:
    task = task_for("regression")
    y = np.array([50.0, 60.0, 30.0], "float32")
    perfect = ((y - 50.0) / 10.0).reshape(-1, 1)
    np.testing.assert_allclose(np.asarray(task.loss(y, perfect)), 0.0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(task.outputs(perfect))[:, 0], y, rtol=1e-6)
    layer = task.output_layer()
    np.testing.assert_allclose(np.asarray(layer(perfect))[:, 0], y, rtol=1e-6)


def test_label_encoding_for_every_task() -> None:
    task = dataclasses.replace(task_for("classification"), names=["a", "b"])
    assert task.encode_targets(["b", "a"]).tolist() == [1, 0]
    with pytest.raises(ConfigError, match=r"^data\.label: 'z' is not one of the 2 classes"):
        task.encode_targets(["a", "z"])
    assert Multilabel.names_of(["cat|dog", "owl", "", "dog | cat"], "tags") == LABELS
    rows = task_for("multilabel").encode_targets(["cat|owl", "", "dog"])
    assert rows.tolist() == [[1, 0, 1], [0, 0, 0], [0, 1, 0]]
    with pytest.raises(ConfigError, match=r"^data\.label: row 1: unknown label 'emu'"):
        task_for("multilabel").encode_targets(["emu"])
    assert task_for("regression").encode_targets(["1.5", 2]).tolist() == [1.5, 2.0]
    with pytest.raises(ConfigError) as info:
        task_for("regression").encode_targets(["1.5", "n/a"])
    assert str(info.value).startswith("data.label: row 2: expected a number") and "\n" not in str(
        info.value
    )
    with pytest.raises(ConfigError, match=r"^data\.label: row 2: expected a number .* '1e39'"):
        task_for("regression").encode_targets(["1.5", "1e39"])  # infinite as float32


def test_make_task_checks_the_prepared_data() -> None:
    params = load_params(PARAMS, ["task.type=regression"])
    spec = DataSpec(kind="vector", input_shape=(2,), task="classification", names=["a", "b"])
    with pytest.raises(ConfigError, match=r"^task\.type: regression but the prepared data"):
        make_task(params, spec)


def test_evaluate_reports_what_fits_each_task() -> None:
    task = dataclasses.replace(task_for("classification"), names=["a", "b", "c"])
    y = np.array([0, 1, 2, 2])
    probs = np.eye(3)[[0, 1, 1, 2]]
    report = task.evaluate([(y[:2], probs[:2]), (y[2:], probs[2:])])  # batches
    assert report.metrics["test_accuracy"] == pytest.approx(0.75)
    assert report.metrics["test_examples"] == 4
    confusion = report.plots["confusion_matrix.csv"].to_numpy().tolist()
    assert confusion == [["a", "a"], ["b", "b"], ["c", "b"], ["c", "c"]]
    per_class = report.plots["per_class.csv"].set_index("class")
    assert list(per_class.columns) == ["precision", "recall", "f1", "support"]
    assert per_class.loc["b"].tolist() == pytest.approx([0.5, 1.0, 2 / 3, 1])
    assert per_class.loc["c"].tolist() == pytest.approx([1.0, 0.5, 2 / 3, 2])
    assert report.table is report.plots["per_class.csv"]  # the card's per-class table

    multi = task_for("multilabel")
    truth = np.array([[1, 0, 1], [0, 1, 0]])
    report = multi.evaluate([(truth, np.array([[0.9, 0.2, 0.4], [0.1, 0.8, 0.3]]))])
    per_label = report.plots["per_label.csv"].set_index("label")
    assert per_label.loc["owl"].tolist() == pytest.approx([0.0, 0.0, 0.0, 1])
    assert report.metrics["test_binary_accuracy"] == pytest.approx(5 / 6)

    reg = task_for("regression")
    report = reg.evaluate([(np.array([50.0, 70.0]), np.array([[52.0], [66.0]]))])  # model: [n, 1]
    assert report.metrics["test_mae"] == pytest.approx(3.0)
    assert report.metrics["residual_mean"] == pytest.approx(-1.0)
    assert report.plots["predictions.csv"].to_numpy().tolist() == [
        [50.0, 52.0, 2.0],
        [70.0, 66.0, -4.0],
    ]
    assert report.table is None
    assert all(isinstance(v, int | float) for v in report.metrics.values())  # evaluate.json


def test_metric_updates_in_evaluate_do_not_retrace(caplog: pytest.LogCaptureFixture) -> None:
    """AUC(multi_label=True) builds a tf.function at each eager update (vectorized_map), which
    TensorFlow reports as retracing after five: evaluate updates inside one tf.function, built
    once for equal tasks (each command, `export` then `evaluate`, builds its own)."""
    truth = (np.random.default_rng(0).random((96, 3)) > 0.5).astype("float32")

    def split_in(size: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(truth[i : i + size], truth[i : i + size] * 0.8 + 0.1) for i in range(0, 96, size)]

    with caplog.at_level("WARNING", logger="tensorflow"):
        first = task_for("multilabel").evaluate(split_in(8))
        for size in [96, 48, 96, 32, 96, 1]:  # the whole split at once, as `export` does, and more
            again = task_for("multilabel").evaluate(split_in(size))
            assert again.metrics == pytest.approx(first.metrics)  # the metrics start afresh
        task_for("classification").evaluate([(np.arange(7) % 7, np.eye(7))] * 8)
    assert "retracing" not in caplog.text


def test_macro_auc_leaves_out_a_class_the_split_lacks() -> None:
    """Keras's AUC(multi_label=True) scores a class with no example (or no negative) as 0: a
    perfect model got 0.667 on three labels, one missing from the split."""
    rng = np.random.default_rng(0)
    for task in (task_for("classification"), task_for("multilabel")):
        n = len(task.names)
        truth = np.eye(n, dtype="float32")[rng.integers(0, n - 1, 64)]  # the last never occurs
        outputs = np.clip(truth * 0.6 + rng.random((64, n)) * 0.5, 0, 1).astype("float32")
        auc = next(m for m in task.standard_metrics() if m.name == "auc")
        auc.update_state(truth, truth)
        assert float(auc.result()) == pytest.approx(1.0)
        auc.reset_state()
        auc.update_state(truth, outputs)
        wanted = roc_auc_score(truth[:, :-1], outputs[:, :-1], average="macro")
        assert float(auc.result()) == pytest.approx(wanted, abs=0.01)


def test_early_stopping_policy_tracks_the_best_and_resumes() -> None:
    assert mode_for("val_loss") == "min" and mode_for("val_rmse") == "min"
    assert mode_for("val_accuracy") == "max" and mode_for("val_r2") == "max"
    policy = EarlyStopping(monitor="val_accuracy", patience=2)
    assert policy.update({"val_accuracy": 0.5}, step=10) is True
    assert policy.update({"val_accuracy": 0.7}, step=20) is True
    assert policy.update({"val_accuracy": 0.6}, step=30) is False and not policy.should_stop
    saved = dataclasses.asdict(policy)  # as a checkpoint's meta.json keeps it
    resumed = EarlyStopping.from_state("val_accuracy", 2, saved)
    assert (resumed.best, resumed.best_step) == (0.7, 20)
    assert resumed.update({"val_accuracy": 0.7}, step=40) is False and resumed.should_stop
    assert EarlyStopping.from_state("val_loss", 2, saved).best is None  # another metric
    never = EarlyStopping(monitor="val_loss", patience=0)
    for step, loss in enumerate([1.0, 2.0, 3.0, 4.0]):
        never.update({"val_loss": loss}, step)
    assert not never.should_stop and never.best_step == 0
    with pytest.raises(ConfigError, match=r"^train\.monitor: 'val_auc' is not a validation"):
        EarlyStopping("val_auc").update({"val_loss": 1.0}, 5)


def test_evaluate_writes_the_task_files(tmp_path: Path) -> None:
    from {{ cookiecutter.module_name }}.evaluation.evaluate import write_evaluation

    (tmp_path / "metrics").mkdir()
    history = [{"epoch": 1, "loss": 0.5, "val_loss": 0.6, "val_r2": 0.1}]
    (tmp_path / "metrics" / "train.json").write_text(json.dumps({"history": history}))
    task = task_for("regression")
    evaluation = task.evaluate([(np.array([50.0, 70.0]), np.array([52.0, 66.0]))])
    written = write_evaluation(tmp_path, evaluation, task)
    # The kind's own files; every other registered kind's (dvc.yaml declares them all) with
    # their header only, and not among the written: `evaluate`'s line lists only the kind's.
    assert {p.name for p in written} == {"evaluate.json", "predictions.csv", "training_curve.csv"}
    assert (
        tmp_path / "plots" / "per_label.csv"
    ).read_text() == "label,precision,recall,f1,support\n"
    # The numbers DVC compares: the kind's headline metrics.
    compared = json.loads((tmp_path / "metrics" / "evaluate.json").read_text())
    assert compared.keys() == {"test_mae", "test_r2"} and compared["test_mae"] == 3.0
    curve = (tmp_path / "plots" / "training_curve.csv").read_text().splitlines()
    assert curve[0] == (
        "epoch,accuracy,binary_accuracy,loss,mae,val_accuracy,val_binary_accuracy,val_loss,"
        "val_mae,val_r2"
    )  # each kind's training metric, empty where this task has none
    assert curve[1] == "1,,,0.5,,,,0.6,,0.1"


def test_notebook_03_shows_what_fits_each_task(tmp_path: Path) -> None:
    """What notebook 03 calls after `evaluate`: the summary and the figure, chosen by task.type."""
    import matplotlib

    matplotlib.use("Agg")
    from {{ cookiecutter.module_name }}.evaluation import report
    from {{ cookiecutter.module_name }}.evaluation.evaluate import write_evaluation

    truth = np.array([[1, 0, 1], [0, 1, 0]])
    cases = {
        "classification": (np.array([0, 1, 2, 2]), np.eye(7)[[0, 1, 1, 2]]),
        "multilabel": (truth, truth * 0.9),
        "regression": (np.array([50.0, 70.0]), np.array([52.0, 66.0])),
    }
    shown = {}
    for kind, (y, outputs) in cases.items():
        task = task_for(kind)
        record = {"method": "files", "from": {"test": "test.csv"}, "carved": {}}
        spec = DataSpec("vector", (4,), kind, task.names, {"test": len(y)}, split=record)
        save_json(dataclasses.asdict(spec), tmp_path / kind / "data" / "processed" / "spec.json")
        write_evaluation(tmp_path / kind / "results", task.evaluate([(y, outputs)]), task)
        fig, name = report.plot_evaluation(tmp_path / kind, kind)
        shown[kind] = report.evaluation_summary(tmp_path / kind, kind).splitlines(), fig, name

    lines, fig, name = shown["classification"]  # per-class metrics, the confusion matrix
    scored_on = "the published test split: test.csv, 4 examples"
    assert lines[0].startswith(f"Test split (classification, {scored_on}): accuracy")
    assert cells(lines[2]) == ["class", "precision", "recall", "f1", "support"]
    assert ["c1", "0.500", "1.000", "0.667", "1"] in [cells(line) for line in lines]
    assert name == "03_confusion_matrix" and fig.axes[0].get_title().startswith("Confusion")
    lines, fig, name = shown["multilabel"]  # per-label metrics, as a table and as bars
    assert cells(lines[2]) == ["label", "precision", "recall", "f1", "support"]
    assert cells(lines[4]) == ["cat", "1.000", "1.000", "1.000", "1"]
    assert name == "03_per_label_metrics"
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == LABELS
    lines, fig, name = shown["regression"]  # residuals (predicted - true: 2, -4), predicted vs true
    assert "mae 3.0000" in lines[0] and "r2 " in lines[0] and len(lines) == 1  # evaluate.json's
    assert name == "03_predicted_vs_true" and len(fig.axes) == 2
    with pytest.raises(
        ConfigError, match=r"^task\.type: 'ranking' is not registered \(registered: "
    ):
        report.plot_evaluation(tmp_path / "regression", "ranking")


def cells(line: str) -> list[str]:
    """A Markdown table row's cells, without tabulate's padding."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_notebook_01_shows_the_data_as_the_task_has_it() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from {{ cookiecutter.module_name }}.evaluation import report

    # Examples of images (RGB, 0-255): a named row per class, else titled with labels or values.
    images = np.random.default_rng(0).integers(0, 256, (6, 5, 5, 3)).astype("float32")
    y = np.array([0, 1, 2, 0, 1, 2])
    abc, price, labels = Classification(["a", "b", "c"]), Regression(["price"]), Multilabel(LABELS)
    by_class = report.plot_examples(images, y, abc, per_class=2)
    assert [by_class.axes[i].get_ylabel() for i in (0, 2, 4)] == ["a", "b", "c"]
    truth = np.array([[1, 0, 1], [0, 0, 0]] * 3, dtype="float32")
    labelled = report.plot_examples(images, truth, labels, per_class=2)
    assert [ax.get_title() for ax in labelled.axes[:2]] == ["cat|owl", "-"]
    values = report.plot_examples(images, np.arange(6, dtype="float32") * 10, price, 3)
    assert [ax.get_title() for ax in values.axes[:3]] == ["0", "10", "20"]
    means = report.plot_mean_images(images, y, ["a", "b", "c"])
    assert [ax.get_title() for ax in means.axes] == ["a", "b", "c"]
    # The targets: label counts, a histogram of values, class counts; the training curves.
    per_label = report.plot_targets({"train": truth}, labels)
    assert [t.get_text() for t in per_label.axes[0].get_xticklabels()] == LABELS
    values = report.plot_targets({"train": np.array([50.0, 70.0], "float32")}, price)
    assert values.axes[0].get_xlabel() == "price"
    classes = report.plot_targets({"train": np.array([0, 1, 1])}, Classification(["a", "b"]))
    assert classes.axes[0].get_xlabel() == "class"
    history = [{"epoch": 1, "loss": 1.0, "val_loss": 1.1, "mae": 3.0, "val_mae": 4.0}]
    assert report.main_metric(history) == "mae"
    assert len(report.plot_training_curves(history).axes) == 2


def test_the_notebooks_figures_are_laid_out_and_drawn_alike() -> None:
    """Each title sits on its grid, the mean images are titled and grey as the examples are,
    and the worst examples' ids are as large as their titles and clear of the next row's."""
    import matplotlib

    matplotlib.use("Agg")
    from {{ cookiecutter.module_name }}.evaluation import report

    digits = np.random.default_rng(0).integers(0, 17, (20, 8, 8, 1)).astype("float32")
    y, names = np.arange(20) % 10, [str(k) for k in range(10)]
    examples = report.plot_examples(digits, y, Classification(names))
    means = report.plot_mean_images(digits, y, names)
    ids = [f"images/{i}.png" for i in range(8)]
    rows = pd.DataFrame({"id": ids, "target": "1", "prediction": "7", "loss": "4.361"})
    worst = report.plot_worst(rows, dict(zip(ids, digits, strict=False)))
    for fig in (examples, means, worst):
        fig.canvas.draw()  # lays the figure out
    grid_top = max(ax.get_window_extent().y1 for ax in examples.axes)
    assert examples.get_suptitle() == "Examples per class"
    assert examples._suptitle.get_window_extent().y0 - grid_top < 0.2 * examples.dpi  # inches
    assert means.get_suptitle() == "Mean image per class"
    cmaps = {fig.axes[0].images[0].get_cmap().name for fig in (examples, means)}
    assert cmaps == {"gray"}
    label, title_below = worst.axes[0].xaxis.label, worst.axes[4].title
    assert label.get_text() == "images/0.png" and label.get_fontsize() == title_below.get_fontsize()
    assert label.get_window_extent().y0 > title_below.get_window_extent().y1


def test_a_target_far_from_zero_trains_well_from_raw_features() -> None:
    """Prices around 50 from features around 100, none rescaled by the user: the model's
    normalisation and the task's standardised target do it (build_model + task + optim)."""
    from {{ cookiecutter.module_name }}.model import build_model
    from {{ cookiecutter.module_name }}.optim import build_optimizer
    from {{ cookiecutter.module_name }}.training.saved_model import wrap_for_users

    rng = np.random.default_rng(0)
    x = rng.normal(100.0, 20.0, size=(600, 3)).astype("float32")
    y = (50.0 + 0.4 * (x[:, 0] - 100.0) - 0.2 * (x[:, 1] - 100.0)).astype("float32")
    train, test = slice(0, 500), slice(500, None)
    spec = DataSpec(
        kind="vector", input_shape=(3,), task="regression", names=["price"],
        feature_mean=x[train].mean(0).tolist(), feature_var=x[train].var(0).tolist(),
        target_mean=float(y[train].mean()), target_std=float(y[train].std()),
    )  # fmt: skip
    overrides = ["task.type=regression", "model.hidden_units=[16]", "model.dropout=0"]
    params = load_params(PARAMS, [*overrides, "train.learning_rate=0.01"])
    task = make_task(params, spec)
    keras.utils.set_random_seed(0)
    model = build_model(spec, task.num_outputs, params.model)
    optimizer = build_optimizer(params.train, total_steps=150)

    @tf.function
    def step(xb: tf.Tensor, yb: tf.Tensor) -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(task.loss(yb, model(xb, training=True)))
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)

    for _ in range(150):
        step(x[train], y[train])
    users = wrap_for_users(model, task)
    report = task.evaluate([(y[test], users(x[test]))])
    assert report.metrics["test_r2"] > 0.95, report.metrics
    assert report.metrics["test_mae"] < 1.5


def two_cpus(tf):
    """MirroredStrategy over the two logical CPUs, reducing without collective ops: TensorFlow
    caches a collective instance's shape per device group for the process, so a second strategy
    with collectives (the trainer's, in a later test) would meet this test's shapes."""
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
