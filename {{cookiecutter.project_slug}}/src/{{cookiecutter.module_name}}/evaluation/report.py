"""Figures and tables for the notebooks: data exploration, training curves, evaluation.

The notebooks only call these functions, so a figure looks the same from every notebook and from
`make notebooks`, and the plotting code is reviewed and linted like the rest of the package.
Every figure is also saved to `results/figures/<name>.png`. Notebook 03 shows what fits the task
(`task.type`) through `evaluation_summary` and `plot_evaluation`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..config import COMMAND, Params
from ..task import make_task, task_class

FIGURES = Path("results") / "figures"


def save_figure(fig: Any, project_dir: Path, name: str) -> None:
    """Save `fig` as results/figures/<name>.png (150 dpi) and say where."""
    path = Path(project_dir) / FIGURES / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    print(f"Saved {FIGURES / path.name}")


def plot_targets(splits: dict[str, np.ndarray], names: list[str] | None = None) -> Any:
    """The targets of each split, as fits their task: examples per class (class indices),
    examples per label (0/1 rows: multilabel), or a histogram of the values (regression)."""
    first = np.asarray(next(iter(splits.values())))
    if first.ndim == 2:
        return _plot_label_counts(splits, names)
    if np.issubdtype(first.dtype, np.floating):
        return _plot_value_histogram(splits, names)
    return plot_class_counts(splits, names)


def _plot_label_counts(splits: dict[str, np.ndarray], names: list[str] | None) -> Any:
    import matplotlib.pyplot as plt

    width = 0.8 / len(splits)
    fig, ax = plt.subplots(figsize=(7, 3))
    for k, (split, y) in enumerate(splits.items()):
        counts = np.asarray(y).reshape(len(y), -1).sum(axis=0)
        ax.bar(np.arange(len(counts)) + k * width, counts, width, label=split)
    ticks = names or [str(i) for i in range(len(counts))]
    ax.set_xticks(np.arange(len(ticks)) + width * (len(splits) - 1) / 2, ticks)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set(xlabel="label", ylabel="examples", title="Examples per label and split")
    return fig


def _plot_value_histogram(splits: dict[str, np.ndarray], names: list[str] | None) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    for split, y in splits.items():
        if len(y):
            ax.hist(np.asarray(y, dtype=np.float64), bins=30, alpha=0.5, density=True, label=split)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    target = names[0] if names else "target"
    ax.set(xlabel=target, ylabel="density", title=f"{target} per split")
    return fig


def plot_class_counts(splits: dict[str, np.ndarray], names: list[str] | None = None) -> Any:
    """Examples per class in each split ({"train": y_train, ...}): imbalance shows at once."""
    import matplotlib.pyplot as plt

    labels = np.unique(np.concatenate(list(splits.values())))
    width = 0.8 / len(splits)
    fig, ax = plt.subplots(figsize=(7, 3))
    for k, (split, y) in enumerate(splits.items()):
        counts = [int((y == label).sum()) for label in labels]
        ax.bar(np.arange(len(labels)) + k * width, counts, width, label=split)
    ticks = [names[i] if names else str(i) for i in labels]
    ax.set_xticks(np.arange(len(labels)) + width * (len(splits) - 1) / 2, ticks)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set(xlabel="class", ylabel="examples", title="Examples per class and split")
    return fig


def split_table(project_dir: Path) -> str:
    """Markdown: each split's examples and where they came from (data.split: the published
    split's folder, file or column, or a seeded random share of the data or of train)."""
    from ..data.prepare import PROCESSED
    from ..data.split import origin
    from ..spec import SPLITS, load_spec

    spec = load_spec(Path(project_dir) / PROCESSED)
    method = spec.split.get("method", "?")
    lines = [f"Split (data.split: {method})", "", "| split | examples | from |", "|---|---|---|"]
    lines += [f"| {s} | {spec.counts.get(s, 0)} | {origin(spec, s)} |" for s in SPLITS]
    return "\n".join(lines)


def class_balance(project_dir: Path, params: Params) -> str:
    """Markdown: the training split's examples per class (multilabel: positives per label), their
    share, and the weight each gets in the loss (`train.class_weight`), then the preflight's note
    on imbalance. The weights are those `train` will use: from these counts."""
    from ..data.prepare import PROCESSED
    from ..spec import load_spec
    from ..training.preflight import class_balance_finding

    spec = load_spec(Path(project_dir) / PROCESSED)
    if spec.task == "regression":
        return "Regression: no classes to balance (train.class_weight stays none)."
    weights = make_task(params, spec).class_weights or (1.0,) * len(spec.names)
    total = max(int(spec.counts.get("train", 0)), 1)
    multilabel = spec.task == "multilabel"
    head = (
        "| label | positives | share of examples | positive weight |"
        if multilabel
        else ("| class | examples | share | weight |")
    )
    lines = [f"Training split, train.class_weight: {params.train.class_weight}", "", head]
    lines.append("|---|---|---|---|")
    for name, weight in zip(spec.names, weights, strict=True):
        n = spec.train_counts.get(name, 0)
        lines.append(f"| {name} | {n} | {n / total:.1%} | {weight:.3g} |")
    note = class_balance_finding(params, spec)
    return "\n".join(lines + ([f"\n{note}"] if note else []))


def as_image(features: np.ndarray) -> np.ndarray:
    """One example as an array to show: an image as it is (grey or RGB), a vector square when
    its length is (64, 784), else one row, so tabular data still gets a picture."""
    array = np.asarray(features)
    if array.ndim == 3:  # an image [h, w, c] of pixel values 0-255
        return array[..., 0] if array.shape[-1] == 1 else np.clip(array / 255.0, 0.0, 1.0)
    flat = array.reshape(-1)
    side = int(round(np.sqrt(flat.size)))
    return flat.reshape(side, side) if side * side == flat.size else flat.reshape(1, -1)


def _show(ax: Any, features: np.ndarray, cmap: str) -> None:
    """Draw one example on `ax` without ticks: an image square, a row of features stretched."""
    picture = as_image(features)
    ax.imshow(picture, cmap=cmap, aspect="auto" if picture.shape[0] == 1 else "equal")
    ax.set_xticks([])
    ax.set_yticks([])


def _target_text(target: np.ndarray, names: list[str] | None) -> str:
    """A multilabel row as its labels ("cat+dog", "-" for none), a value as 3 digits."""
    target = np.asarray(target)
    if target.ndim == 1:
        on = np.flatnonzero(target >= 0.5)
        return "+".join(names[i] if names else str(i) for i in on) or "-"
    return f"{float(target):.3g}"


def plot_examples(
    x: np.ndarray, y: np.ndarray, names: list[str] | None = None, per_class: int = 6
) -> Any:
    """A grid of examples as the task has them: one row per class, named (classification:
    class indices in `y`), else the first examples, each titled with its labels (multilabel:
    0/1 rows) or its value (regression). Images in their own colours; vectors square when
    they can be (8x8 digits, 28x28), else one row."""
    import matplotlib.pyplot as plt

    y = np.asarray(y)
    cmap = "gray" if np.asarray(x).ndim == 4 else "gray_r"  # photos as taken; digits dark on white
    by_class = y.ndim == 1 and np.issubdtype(y.dtype, np.integer)
    if by_class:
        rows = [np.flatnonzero(y == k)[:per_class] for k in np.unique(y)]
    else:
        first = np.arange(min(len(y), 3 * per_class))
        rows = [first[r : r + per_class] for r in range(0, len(first), per_class)]
    height = 1.0 if by_class else 1.25  # room for a title over each example
    fig, axes = plt.subplots(
        len(rows), per_class, figsize=(per_class, height * len(rows)), squeeze=False
    )
    for row, picks in zip(axes, rows, strict=True):
        for ax in row:
            ax.axis("off")
        for ax, i in zip(row, picks, strict=False):
            _show(ax, x[i], cmap)
            ax.axis("on")
            if not by_class:
                ax.set_title(_target_text(y[i], names), fontsize=8)
        if by_class:
            label = int(y[picks[0]])
            row[0].set_ylabel(names[label] if names else str(label), rotation=0, ha="right")
    fig.suptitle("Examples per class" if by_class else "Examples")
    return fig


def text_examples(
    x: np.ndarray, y: np.ndarray, names: list[str] | None = None, per_class: int = 3
) -> str:
    """Texts as the task has them, a Markdown table (notebook 01, for text): `per_class` of each
    class (classification), else the first ones with their labels or values."""
    y = np.asarray(y)
    if y.ndim == 1 and np.issubdtype(y.dtype, np.integer):
        picks = [i for k in np.unique(y) for i in np.flatnonzero(y == k)[:per_class]]
    else:
        picks = list(range(min(len(y), 3 * per_class)))
    rows = []
    for i in picks:
        if y.ndim == 2:  # multilabel: the names of the labels that are on
            target = "\\|".join(n for n, on in zip(names or [], y[i], strict=False) if on >= 0.5)
        elif np.issubdtype(y.dtype, np.integer):
            target = names[y[i]] if names else str(y[i])
        else:
            target = f"{float(y[i]):.4g}"
        rows.append(f"| {target} | {text_cell(str(x[i]))} |")
    return "\n".join(["| target | text |", "|---|---|", *rows])


TEXT_SHOWN = 120  # characters of a text in a table


def text_cell(text: str) -> str:
    """A text as one Markdown table cell: one line, its first `TEXT_SHOWN` characters."""
    text = " ".join(text.split())
    text = text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 1] + "…"
    return text.replace("|", "\\|")


def plot_mean_images(x: np.ndarray, y: np.ndarray, names: list[str] | None = None) -> Any:
    """The mean image of each class (classification): what the model can tell apart on
    average."""
    import matplotlib.pyplot as plt

    classes = np.unique(y)
    fig, axes = plt.subplots(1, len(classes), figsize=(1.2 * len(classes), 1.6))
    for ax, label in zip(np.atleast_1d(axes), classes, strict=True):
        _show(ax, x[y == label].mean(axis=0), "viridis")
        ax.set_title(names[label] if names else str(label), fontsize=9)
        ax.axis("off")
    return fig


def load_history(project_dir: Path) -> list[dict[str, float]]:
    """Per-epoch metrics of the last completed run (results/metrics/train.json)."""
    from ..core.storage import TRAIN_METRICS, results_root

    path = results_root(Path(project_dir)) / TRAIN_METRICS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no training metrics yet; run the training notebook first")
    return json.loads(path.read_text()).get("history", [])


def plot_training_curves(history: list[dict[str, float]]) -> Any:
    """Loss and accuracy per epoch, training and validation side by side."""
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, metric in ((left, "loss"), (right, main_metric(history))):
        ax.plot(epochs, [h[metric] for h in history], "o-", label=f"train {metric}")
        ax.plot(epochs, [h[f"val_{metric}"] for h in history], "s-", label=f"validation {metric}")
        ax.set(xlabel="epoch", ylabel=metric, title=metric)
        ax.grid(alpha=0.3)
        ax.legend()
    return fig


def main_metric(history: list[dict[str, float]]) -> str:
    """The task's headline metric in a history: accuracy, else the first with a val_ twin."""
    keys = list(history[0]) if history else []
    tracked = [k for k in keys if k not in ("epoch", "loss") and f"val_{k}" in keys]
    return "accuracy" if "accuracy" in tracked else (tracked or ["loss"])[0]


def load_plot_rows(project_dir: Path, name: str) -> list[dict[str, str]]:
    """Rows of `evaluate`'s results/plots/<name> (e.g. per_label.csv, predictions.csv)."""
    import csv

    path = _results_file(project_dir, f"plots/{name}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not written yet; run `{COMMAND} evaluate`")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def rows_table(rows: list[dict[str, str]]) -> str:
    """A Markdown table of CSV rows, numbers to 3 decimals (per-class or per-label metrics)."""

    def cell(text: str) -> str:
        try:
            return text if float(text).is_integer() and "." not in text else f"{float(text):.3f}"
        except ValueError:
            return text

    header = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(row[k]) for k in header) + " |" for row in rows]
    return "\n".join(lines)


def plot_predicted_vs_true(rows: list[dict[str, str]]) -> Any:
    """Regression: predicted against true values (the diagonal is perfect), and the residuals."""
    import matplotlib.pyplot as plt

    actual = np.array([float(r["actual"]) for r in rows])
    predicted = np.array([float(r["predicted"]) for r in rows])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.scatter(actual, predicted, s=8, alpha=0.6)
    low, high = float(min(actual.min(), predicted.min())), float(max(actual.max(), predicted.max()))
    left.plot([low, high], [low, high], "k--", lw=1)
    left.set(xlabel="true", ylabel="predicted", title="Predicted vs true (test split)")
    right.hist(predicted - actual, bins=30)
    right.set(xlabel="predicted - true", ylabel="examples", title="Residuals")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    return fig


def plot_confusion_matrix(counts: np.ndarray, classes: list[str] | None = None) -> Any:
    """The confusion matrix as a heat map with the counts written in."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.imshow(counts, cmap="Blues")
    n = counts.shape[0]
    for i in range(n):
        for j in range(n):
            color = "white" if counts[i, j] > counts.max() / 2 else "black"
            ax.text(j, i, str(counts[i, j]), ha="center", va="center", color=color, fontsize=8)
    labels = classes or [str(i) for i in range(n)]
    ax.set(xlabel="predicted", ylabel="actual", title="Confusion matrix (test split)")
    ax.set_xticks(range(n), labels, rotation=90 if max(map(len, labels)) > 2 else 0)
    ax.set_yticks(range(n), labels)
    return fig


def load_confusion(project_dir: Path) -> tuple[np.ndarray, list[str]]:
    """The confusion matrix of `evaluate`'s results/plots/confusion_matrix.csv over every class
    of per_class.csv (also a class the test split lacks), and the class names."""
    import csv

    from sklearn.metrics import confusion_matrix

    from .evaluate import CONFUSION

    classes = [row["class"] for row in load_plot_rows(project_dir, "per_class.csv")]
    with open(_results_file(project_dir, CONFUSION), newline="") as f:
        pairs = [(row["actual"], row["predicted"]) for row in csv.DictReader(f)]
    actual, predicted = zip(*pairs, strict=True) if pairs else ((), ())
    return confusion_matrix(actual, predicted, labels=classes), classes


def load_test_metrics(project_dir: Path) -> dict[str, Any]:
    """`evaluate`'s results/metrics/evaluate.json (test loss and accuracy)."""
    from ..core.storage import TEST_METRICS

    path = _results_file(project_dir, TEST_METRICS)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not written yet; run `{COMMAND} evaluate`")
    return json.loads(path.read_text())


def _results_file(project_dir: Path, name: str) -> Path:
    """`evaluate`'s output `name`, under the results root (`results/`, or $PROJECT_RESULTS_DIR)."""
    from ..core.storage import results_root

    if name.startswith("results/"):  # a path from the project folder
        return Path(project_dir) / name
    return results_root(Path(project_dir)) / name


def class_table(rows: list[dict[str, str]], accuracy: float, balanced: float | None = None) -> str:
    """A Markdown table of per-class precision, recall, F1 and support (rows of per_class.csv),
    plus the overall accuracy (and the balanced accuracy: the mean of the recalls)."""
    lines = ["| class | precision | recall | F1 | support |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['class']} | {float(r['precision']):.3f} | {float(r['recall']):.3f} "
            f"| {float(r['f1']):.3f} | {r['support']} |"
        )
    total = sum(int(r["support"]) for r in rows)
    both = f"accuracy {accuracy:.4f}"
    if balanced is not None:
        both += f", balanced accuracy {balanced:.4f}"
    lines.append(f"| **all** | | | **{both}** | {total} |")
    return "\n".join(lines)


# Notebook 03: what the test split says, as fits the task (`task.type`).


def evaluation_summary(project_dir: Path, task_type: str) -> str:
    """Markdown of `evaluate`'s results for the task: the test scores, then per-class precision,
    recall, F1 and support with the accuracy (classification), the same per label (multilabel),
    or the residuals' mean, spread and 90th percentile of their size (regression)."""
    kind = task_class(task_type).kind
    test = load_test_metrics(project_dir)
    # Float scores only: counts such as test_examples are said apart.
    scores = [
        f"{k[5:]} {v:.4f}"
        for k, v in test.items()
        if k.startswith("test_") and isinstance(v, float)
    ]
    if kind == "classification":
        rows = load_plot_rows(project_dir, "per_class.csv")
        detail = class_table(rows, test["test_accuracy"], test.get("test_balanced_accuracy"))
    elif kind == "multilabel":
        detail = rows_table(load_plot_rows(project_dir, "per_label.csv"))
    else:
        detail = (
            "| residual (predicted - true) | mean | std | abs, 90th percentile |\n"
            "|---|---|---|---|\n"
            f"| test split | {test['residual_mean']:.4g} | {test['residual_std']:.4g} "
            f"| {test['residual_abs_p90']:.4g} |"
        )
    # Which test split: evaluate's `scored_on` (`the published test split: test.csv, 120 ...`).
    scored_on = test.get("scored_on") or f"{test.get('test_examples', '?')} examples"
    return f"Test split ({task_type}, {scored_on}): {', '.join(scores)}\n\n{detail}"


def plot_evaluation(project_dir: Path, task_type: str) -> tuple[Any, str]:
    """The figure that fits the task, and its name for `save_figure`: the confusion matrix
    (classification), precision / recall / F1 per label (multilabel), predicted against true
    values beside the residuals (regression)."""
    kind = task_class(task_type).kind
    if kind == "classification":
        return plot_confusion_matrix(*load_confusion(project_dir)), "03_confusion_matrix"
    if kind == "multilabel":
        rows = load_plot_rows(project_dir, "per_label.csv")
        return plot_label_metrics(rows), "03_per_label_metrics"
    rows = load_plot_rows(project_dir, "predictions.csv")
    return plot_predicted_vs_true(rows), "03_predicted_vs_true"


def plot_label_metrics(rows: list[dict[str, str]]) -> Any:
    """Multilabel: precision, recall and F1 of each label (rows of per_label.csv) as bars."""
    import matplotlib.pyplot as plt

    labels = [r["label"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.8 * len(labels) + 2), 3.5))
    for k, metric in enumerate(("precision", "recall", "f1")):
        values = [float(r[metric]) for r in rows]
        ax.bar(np.arange(len(labels)) + (k - 1) * 0.27, values, 0.27, label=metric)
    ax.set_xticks(np.arange(len(labels)), labels, rotation=90 if len(labels) > 8 else 0)
    ax.set(ylim=(0, 1.05), xlabel="label", title="Per-label metrics (test split)")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.grid(alpha=0.3, axis="y")
    return fig


def worst_predictions(project_dir: Path, task_type: str, n: int = 12) -> list[dict[str, str]]:
    """The `n` rows of `evaluate`'s results/predictions/test.csv with the highest loss, highest
    first, each with its `loss`: the cross-entropy of the truth (classification; the most
    confident mistakes come first), the mean binary cross-entropy over the labels (multilabel),
    or the absolute error (regression)."""
    import csv

    from .evaluate import TEST_PREDICTIONS

    path = _results_file(project_dir, TEST_PREDICTIONS)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not written yet; run `{COMMAND} evaluate`")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    kind = task_class(task_type).kind
    for row in rows:
        row["loss"] = f"{_example_loss(row, kind):.4g}"
    return sorted(rows, key=lambda row: -float(row["loss"]))[:n]


def _example_loss(row: dict[str, str], kind: str) -> float:
    if kind == "regression":
        return abs(float(row["prediction"]) - float(row["target"]))
    probs = {k[5:]: float(v) for k, v in row.items() if k.startswith("prob_")}
    if kind == "classification":
        return float(-np.log(max(probs.get(row["target"], 0.0), 1e-7)))
    truth = set(filter(None, row["target"].split("|")))
    p = np.clip([probs[name] for name in probs], 1e-7, 1 - 1e-7)
    t = np.array([name in truth for name in probs], dtype=np.float64)
    return float(-np.mean(t * np.log(p) + (1 - t) * np.log(1 - p)))


def worst_examples(project_dir: Path, params: Any, n: int = 12) -> str:
    """Notebook 03: the `n` test examples the model gets most wrong (`worst_predictions`), as a
    Markdown table of id, truth, prediction and loss (for text also the text, its first
    `TEXT_SHOWN` characters); for images also a figure of them titled with truth, prediction and
    loss, saved as results/figures/03_worst_examples.png. Image files are shown from `data.path`
    as they are (upright, at their own size); other image sources (and a file no longer there)
    from the test shards, as the model saw them."""
    from ..spec import load_spec

    rows = worst_predictions(project_dir, params.task.type, n)
    columns = ["id", "target", "prediction", "loss"]
    spec = load_spec(Path(project_dir) / "data" / "processed")
    if spec.kind == "text" and rows:  # the text itself: a row number alone says nothing
        texts = _test_texts(Path(project_dir), {row["id"] for row in rows})
        for row in rows:
            row["text"] = texts.get(row["id"], "")
        columns.insert(1, "text")
    table = rows_table([{k: row[k] for k in columns} for row in rows])
    if spec.kind == "image" and rows:
        pictures = _pictures(Path(project_dir), params.data, spec, [r["id"] for r in rows])
        save_figure(plot_worst(rows, pictures), project_dir, "03_worst_examples")
    return f"The {len(rows)} test examples with the highest loss:\n\n{table}"


def _pictures(project_dir: Path, data: Any, spec: Any, ids: list[str]) -> dict[str, np.ndarray]:
    """{id: pixels 0-255 [h, w, c]}: the files in `data.path` (source images), else what the
    test shards hold."""
    from ..core import locations
    from ..data.images import load_image
    from ..data.pipeline import eval_dataset, example_ids, load_prepared

    found: dict[str, np.ndarray] = {}
    channels = spec.input_shape[-1]
    if data.source == "images":
        local = (project_dir / data.path).expanduser()  # as prepare reads it
        base = data.path if locations.is_url(data.path) else str(local)
        for example_id in ids:
            path = locations.join(base, example_id)
            if locations.exists(path):
                with locations.open_binary(path) as f:
                    image = load_image(f.read(), None, channels)
                image.thumbnail((256, 256))  # enough to see; a 12-megapixel photo is not
                found[example_id] = np.asarray(image).reshape(image.height, image.width, -1)
    wanted = set(ids) - set(found)
    if wanted:
        prepared = load_prepared(project_dir / "data" / "processed")
        order = iter(example_ids(prepared, "test"))
        for x, _ in eval_dataset(prepared, "test", 256).as_numpy_iterator():
            for image, example_id in zip(x, order, strict=False):
                if example_id in wanted:
                    found[example_id] = image
    return found


def _test_texts(project_dir: Path, ids: set[str]) -> dict[str, str]:
    """{id: the test example's text, shortened to one table cell} for the ids asked."""
    from ..data.pipeline import eval_dataset, example_ids, load_prepared

    prepared = load_prepared(project_dir / "data" / "processed")
    order = iter(example_ids(prepared, "test"))
    found: dict[str, str] = {}
    for x, _ in eval_dataset(prepared, "test", 256).as_numpy_iterator():
        for raw, example_id in zip(x, order, strict=False):
            if example_id in ids:
                found[example_id] = text_cell(raw.decode("utf-8"))
    return found


def plot_worst(rows: list[dict[str, str]], pictures: dict[str, np.ndarray]) -> Any:
    """A grid of the examples of `rows` (worst_predictions), four to a row, each titled
    "truth -> prediction" and its loss."""
    import matplotlib.pyplot as plt

    cols = 4
    lines = max(1, -(-len(rows) // cols))
    fig, axes = plt.subplots(lines, cols, figsize=(2.4 * cols, 2.6 * lines), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, row in zip(axes.ravel(), rows, strict=False):
        if row["id"] in pictures:
            _show(ax, pictures[row["id"]].astype(np.float32), "gray")
        title = f"{row['target'] or '-'} -> {row['prediction'] or '-'}\nloss {row['loss']}"
        ax.set_title(title, fontsize=8)
        ax.set_xlabel(row["id"][-28:], fontsize=6)
        ax.axis("on")
    fig.suptitle("Worst test examples (truth -> prediction)")
    fig.tight_layout()
    return fig
