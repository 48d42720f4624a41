"""Figures and tables for the notebooks: data exploration, training curves, evaluation.

The notebooks only call these, so a figure is the same from each; figures go to
`results/figures/<name>.png`, tables are Markdown; the kind draws its own evaluation (tasks/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config import COMMAND, Params
from ..core import locations
from ..core.files import read_json
from ..core.storage import TEST_METRICS, TRAIN_METRICS, results_root
from ..data.images import load_image
from ..data.pipeline import eval_dataset, example_ids, load_prepared
from ..data.prepare import PROCESSED
from ..data.split import describe, origin
from ..spec import SPLITS, load_spec
from ..tasks.base import Task, make_task, task_class
from ..training.preflight import class_balance_finding
from .evaluate import PLOTS, TEST_PREDICTIONS
from .model_card import number_text
from .model_card import table as markdown

FIGURES = "figures"  # under the results root, beside metrics/ and plots/
TEXT_SHOWN = 120  # characters of a text in a table


def save_figure(fig: Any, project_dir: Path, name: str) -> None:
    """Save `fig` as results/figures/<name>.png (150 dpi) and say where."""
    project = Path(project_dir)
    path = results_root(project) / FIGURES / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    print(f"Saved {path.relative_to(project) if path.is_relative_to(project) else path}")


def plot_targets(splits: dict[str, np.ndarray], task: Task) -> Any:
    """Each split's examples per class or label (`Task.counts`), else a histogram of values."""
    counts = {split: task.counts(np.asarray(y)) for split, y in splits.items()}
    if any(c is None for c in counts.values()):
        table = pd.DataFrame(
            {s: pd.Series(np.ravel(y).astype(np.float64)) for s, y in splits.items()}
        )
        ax = table.plot.hist(bins=30, alpha=0.5, density=True, figsize=(7, 3))
        ax.set(xlabel=task.names[0], ylabel="density", title=f"{task.names[0]} per split")
        return ax.figure
    ax = pd.DataFrame(counts, index=task.names).plot.bar(figsize=(7, 3), rot=0)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    what = task.name_word
    ax.set(xlabel=what, ylabel="examples", title=f"Examples per {what} and split")
    return ax.figure


def split_table(project_dir: Path) -> str:
    """Markdown: each split's examples and where they came from (data.split)."""
    spec = load_spec(Path(project_dir) / PROCESSED)
    rows = [[s, spec.counts.get(s, 0), origin(spec, s)] for s in SPLITS]
    table = markdown(pd.DataFrame(rows, columns=["split", "examples", "from"]))
    return f"Split (data.split: {spec.split.get('method', '?')})\n\n{table}"


def class_balance(project_dir: Path, params: Params) -> str:
    """Markdown: the training split's examples per class or label, share and loss weight, then
    the preflight's note on imbalance."""
    spec = load_spec(Path(project_dir) / PROCESSED)
    if not spec.train_counts:
        return f"{spec.task}: no classes to balance (train.class_weight stays none)."
    task = make_task(params, spec)
    counts = pd.Series(spec.train_counts).reindex(spec.names).fillna(0).astype(int)
    table = pd.DataFrame({task.name_word: spec.names, "examples": counts.to_numpy()})
    share = table["examples"] / max(int(spec.counts.get("train", 0)), 1)
    table["share"] = share.map("{:.1%}".format)
    table["weight"] = task.class_weights or (1.0,) * len(spec.names)
    note = class_balance_finding(params, spec)
    head = f"Training split, train.class_weight: {params.train.class_weight}"
    return f"{head}\n\n{markdown(table)}" + (f"\n\n{note}" if note else "")


def _show(ax: Any, features: np.ndarray) -> None:
    """One example on `ax`: an image as it is (grey), a vector as a square when it is one (64,
    784), else as one stretched row (dark on white, as digits are drawn)."""
    picture, cmap = np.asarray(features), "gray"
    if picture.ndim == 3:  # an image [h, w, c] of pixel values 0-255
        picture = picture[..., 0] if picture.shape[-1] == 1 else np.clip(picture / 255.0, 0, 1)
    else:
        side, cmap = int(round(np.sqrt(picture.size))), "gray_r"
        picture = picture.reshape((side, side) if side * side == picture.size else (1, -1))
    ax.imshow(picture, cmap=cmap, aspect="auto" if picture.shape[0] == 1 else "equal")
    ax.set(xticks=[], yticks=[])


def _picks(y: np.ndarray, task: Task, per_class: int) -> list[np.ndarray]:
    """Rows of example indices: one per class (`stratified` kinds), else the first examples."""
    if task.stratified:
        return [np.flatnonzero(y == k)[:per_class] for k in np.unique(y)]
    first = np.arange(min(len(y), 3 * per_class))
    return [first[r : r + per_class] for r in range(0, len(first), per_class)]


def plot_examples(x: np.ndarray, y: np.ndarray, task: Task, per_class: int = 6) -> Any:
    """A grid of examples: a named row per class (`stratified` kinds), else the first examples,
    each titled with its target."""
    import matplotlib.pyplot as plt  # only notebooks draw

    y, by_class = np.asarray(y), task.stratified
    rows = _picks(y, task, per_class)
    height = 1.0 if by_class else 1.25  # room for a title over each example
    size = (per_class, height * len(rows))
    fig, axes = plt.subplots(
        len(rows), per_class, figsize=size, squeeze=False, layout="constrained"
    )
    for row, picks in zip(axes, rows, strict=True):
        for ax in row[len(picks) :]:
            ax.axis("off")  # an empty cell
        titles = task.target_text(y[picks])
        for ax, i, title in zip(row, picks, titles, strict=False):
            _show(ax, x[i])
            if not by_class:
                ax.set_title(title or "-", fontsize=8)
        if by_class:
            row[0].set_ylabel(titles[0], rotation=0, ha="right")
    fig.suptitle("Examples per class" if by_class else "Examples")
    return fig


def text_examples(x: np.ndarray, y: np.ndarray, task: Task, per_class: int = 3) -> str:
    """Texts and their targets as a Markdown table, picked as `plot_examples` does."""
    y = np.asarray(y)
    picks = [i for row in _picks(y, task, per_class) for i in row]
    texts = [text or "-" for text in task.target_text(y[picks])]
    table = pd.DataFrame({"target": texts, "text": [text_cell(str(x[i])) for i in picks]})
    return markdown(table)


def text_cell(text: str) -> str:
    """A text as one table cell: one line, its first `TEXT_SHOWN` characters."""
    text = " ".join(text.split())
    return text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 1] + "…"


def plot_mean_images(x: np.ndarray, y: np.ndarray, names: list[str]) -> Any:
    """The mean image of each class (class indices): what the model can tell apart on average."""
    import matplotlib.pyplot as plt  # only notebooks draw

    classes = np.unique(y)
    size = (1.2 * len(classes), 1.8)
    fig, axes = plt.subplots(1, len(classes), figsize=size, squeeze=False, layout="constrained")
    for ax, label in zip(axes[0], classes, strict=True):
        _show(ax, x[y == label].mean(axis=0))  # the examples' colours: the same pixels
        ax.set_title(names[label], fontsize=9)
        ax.axis("off")
    fig.suptitle("Mean image per class")
    return fig


def load_history(project_dir: Path) -> list[dict[str, float]]:
    """Per-epoch metrics of the last completed run (results/metrics/train.json)."""
    path = _written(project_dir, TRAIN_METRICS, "run the training notebook first")
    return read_json(path).get("history", [])


def plot_training_curves(history: list[dict[str, float]]) -> Any:
    """Loss and the task's training metric per epoch, training and validation side by side."""
    import matplotlib.pyplot as plt  # only notebooks draw

    table = pd.DataFrame(history).set_index("epoch").astype(float)  # null (NaN) too
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, metric in zip(axes, ("loss", main_metric(history)), strict=True):
        shown = table[[metric, f"val_{metric}"]].rename(
            columns={metric: f"train {metric}", f"val_{metric}": f"validation {metric}"}
        )
        shown.plot(ax=ax, style=["o-", "s-"], title=metric, ylabel=metric, grid=True)
    return fig


def main_metric(history: list[dict[str, float]]) -> str:
    """The task's training metric in a history: the first with a val_ twin, else the loss."""
    keys = list(history[0]) if history else []
    tracked = [k for k in keys if k not in ("epoch", "loss") and f"val_{k}" in keys]
    return (tracked or ["loss"])[0]


def _written(project_dir: Path, name: str, how: str = f"run `{COMMAND} evaluate`") -> Path:
    """The file `name` under the results root, or an error saying `how` to write it."""
    path = results_root(Path(project_dir)) / name
    if not path.exists():
        raise FileNotFoundError(f"{path}: not written yet; {how}")
    return path


def _plots(project_dir: Path, task: Task) -> dict[str, pd.DataFrame]:
    """`evaluate`'s plot tables of the task's kind (results/plots/)."""
    paths = {name: _written(project_dir, f"{PLOTS}/{name}") for name in task.plot_columns}
    return {name: pd.read_csv(path, keep_default_na=False) for name, path in paths.items()}


def evaluation_summary(project_dir: Path, task_type: str) -> str:
    """Markdown of `evaluate`'s test scores, then the kind's table per class or label, if any."""
    test = read_json(_written(project_dir, TEST_METRICS))
    scored_on = describe(load_spec(Path(project_dir) / PROCESSED), "test")
    scores = ", ".join(
        f"{k.removeprefix('test_')} {number_text(v)}"
        for k, v in test.items()
        if k != "test_examples"
    )
    task = task_class(task_type)(names=[])
    per_name = [n for n, cols in task.plot_columns.items() if cols[0] == task.name_word]
    detail = markdown(_plots(project_dir, task)[per_name[0]], digits=".3f") if per_name else ""
    return f"Test split ({task_type}, {scored_on}): {scores}\n\n{detail}".rstrip()


def plot_evaluation(project_dir: Path, task_type: str) -> tuple[Any, str]:
    """The kind's evaluation figure, and its name for `save_figure`."""
    spec = load_spec(Path(project_dir) / PROCESSED)
    task = task_class(task_type)(names=list(spec.names))
    return task.figure(_plots(project_dir, task))


def worst_predictions(project_dir: Path, n: int = 12) -> pd.DataFrame:
    """The `n` rows of results/predictions/test.csv with the highest loss, highest first."""
    path = _written(project_dir, TEST_PREDICTIONS)
    rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    worst = rows.iloc[np.argsort(-rows["loss"].astype(float).to_numpy(), kind="stable")[:n]]
    return worst.assign(loss=[f"{float(v):.4f}" for v in worst["loss"]])  # as the metrics: 4.3606


def worst_examples(project_dir: Path, params: Any, n: int = 12) -> str:
    """`worst_predictions` as Markdown (with the text, for text); for images also a figure."""
    rows = worst_predictions(project_dir, n)
    spec = load_spec(Path(project_dir) / PROCESSED)
    columns = ["id", "target", "prediction", "loss"]
    if spec.kind == "text" and len(rows):  # the text itself: a row number alone says nothing
        texts = _test_examples(Path(project_dir), set(rows["id"]))
        rows = rows.assign(text=[text_cell(texts.get(i, b"").decode("utf-8")) for i in rows["id"]])
        columns.insert(1, "text")
    if spec.kind == "image" and len(rows):
        pictures = _pictures(Path(project_dir), params.data, spec, list(rows["id"]))
        save_figure(plot_worst(rows, pictures), project_dir, "03_worst_examples")
    table = markdown(rows[columns])
    return f"The {len(rows)} test examples with the highest loss:\n\n{table}"


def _pictures(project_dir: Path, data: Any, spec: Any, ids: list[str]) -> dict[str, np.ndarray]:
    """{id: pixels 0-255 [h, w, c]}: source images' files in `data.path` as they are, else (or
    when gone) what the test shards hold."""
    found: dict[str, np.ndarray] = {}
    if data.source == "images":
        base = locations.resolved(data.path, project_dir)  # as prepare reads it
        for example_id in ids:
            try:
                with locations.open_binary(locations.join(base, example_id)) as f:
                    payload = f.read()
            except OSError:  # gone, or on a Drive that dropped: the shards have it too
                continue
            image = load_image(payload, None, spec.input_shape[-1])
            image.thumbnail((256, 256))  # enough to see; a 12-megapixel photo is not
            found[example_id] = np.asarray(image).reshape(image.height, image.width, -1)
    return {**_test_examples(project_dir, set(ids) - set(found)), **found}


def _test_examples(project_dir: Path, ids: set[str]) -> dict[str, Any]:
    """{id: the test example's input as the shards hold it} for the ids asked."""
    found: dict[str, Any] = {}
    if not ids:
        return found
    prepared = load_prepared(project_dir / PROCESSED)
    order = iter(example_ids(prepared, "test"))
    for x, _ in eval_dataset(prepared, "test", 256).as_numpy_iterator():
        for value, example_id in zip(x, order, strict=False):
            if example_id in ids:
                found[example_id] = value
    return found


def plot_worst(rows: pd.DataFrame, pictures: dict[str, np.ndarray]) -> Any:
    """The examples of `rows`, four to a row, titled "truth -> prediction" and the loss."""
    import matplotlib.pyplot as plt  # only notebooks draw

    cols = 4
    lines = max(1, -(-len(rows) // cols))
    size = (2.4 * cols, 2.6 * lines)
    fig, axes = plt.subplots(lines, cols, figsize=size, squeeze=False, layout="constrained")
    for ax in axes.ravel()[len(rows) :]:
        ax.axis("off")  # an empty cell
    for ax, row in zip(axes.ravel(), rows.to_dict("records"), strict=False):
        if row["id"] in pictures:
            _show(ax, pictures[row["id"]].astype(np.float32))
        title = f"{row['target'] or '-'} -> {row['prediction'] or '-'}\nloss {row['loss']}"
        ax.set_title(title, fontsize=8)
        ax.set_xlabel(row["id"][-28:], fontsize=8)
    fig.suptitle("Worst test examples (truth -> prediction)")
    return fig
