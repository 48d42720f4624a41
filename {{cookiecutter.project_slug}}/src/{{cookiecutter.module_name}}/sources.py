"""Your data: a reader per `data.source`, registered under that name.

A reader turns your data into labels plus a way to load example i; `prepare` splits, encodes and
shards what it returns. It holds what is small (labels, file paths, a CSV's numbers) and loads
the big part (an image) one example at a time, so `prepare` streams images instead of decoding
them all at once.
- `digits`: scikit-learn's bundled 8x8 digits, as 8x8x1 images of pixel values 0-255;
- `csv`: one row per example, a `data.label` column, every other column a number; the label is a
  class (classification), labels joined by `|` (multilabel, `cat|dog`) or a number (regression).
  With `data.text` set, that column's text is the input instead and the other columns are unused;
- `images`: a folder with one subfolder per class (`cats/001.png`, `dogs/002.jpg`, ...);
- `text`: a folder with one subfolder per class of UTF-8 `.txt` files, one example per file;
- `tfrecord`: your `tf.train.Example` records: `data.features` holds an encoded image
  (`data.feature_kind: image`) or a float vector (`vector`), `data.label` an integer or a string
  (classification), a number (regression), or label strings / a 0-1 vector (multilabel);
- `tfds`: the TensorFlow Datasets data set `data.name` (its supervised keys: input and label).

`data.split` says where train / validation / test come from (data/split.py holds the rule):
`random` splits what one reader call returns; `folders` and `files` call the reader once per
split folder or file under `data.path`; `column` is read here (`read_csv`: `data.split_column`
names each row's split, `given_splits`). A reader that finds no labels where a split needs them
(a competition's unlabelled test.csv) raises `MissingLabels`.

A source of your own: a function `(path, data, kind) -> Source` with `@source("<name>")`, here or
in a file beside this one, and `data.source: <name>` in params.yaml. `path` is where `data.path`
is to read (a local copy `prepare` staged under data/raw, or a `gs://` URL), `data` the `data:`
section of params.yaml, `kind` the task's kind (task.py: classification / multilabel /
regression); `task.encode(kind, raw_labels, column)` gives the targets and names.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import ConfigError, DataConfig
from .core import locations
from .registry import register
from .spec import SPLIT_NAMES, split_named
from .task import encode

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
TEXT_SUFFIXES = (".txt",)


@dataclass
class Source:
    """What a reader found: one label per example and how to load each example's input."""

    kind: str  # "image", "vector" or "text"
    labels: np.ndarray  # targets: int32 class index, 0/1 float32 rows, or float32 values
    names: list[str]  # class names, label names (index order), or [the target column]
    # i -> encoded image bytes, a uint8 [h, w, c] array, a vector, or a text (str)
    load: Callable[[int], Any]
    where: Callable[[int], str]  # i -> where example i came from (for error messages)
    # i -> example i's id in its source, kept in the shards and named in evaluate's per-example
    # predictions: a file relative to data.path, a row number as `predict` numbers rows (the
    # first data row is 1), an index in a split. None: its position i.
    ids: Callable[[int], str] | None = None
    input_shape: tuple[int, ...] = ()  # vectors: (features,); images: set by prepare
    encoding: str = "png"  # images: "jpeg" when the originals are JPEGs (no point in lossless)
    feature_names: list[str] = field(default_factory=list)  # vectors: columns; text: [column]
    # Given splits ({"train": indices, "test": ...}: tfds, a split column, split folders), else
    # prepare splits; a given split that is missing (validation, test) is carved out of train.
    splits: dict[str, np.ndarray] | None = None
    split_from: dict[str, str] = field(default_factory=dict)  # given split -> where it came from
    task: str = "classification"  # the task's kind: what `labels` hold
    # Sources that read no `data.path`: a record for data/raw, {file name: (bytes, description)}.
    raw: dict[str, tuple[bytes, str]] = field(default_factory=dict)


class MissingLabels(ConfigError):
    """The data has no labels (no `data.label` column, no class folders): what a reader raises,
    so that `prepare` can tell an unlabelled test file from a broken one."""


def source(name: str, reads_path: bool = True, patterns: bool = False) -> Callable[[Any], Any]:
    """Register a reader as `data.source: <name>`. `reads_path=False`: it needs no `data.path`
    (bundled or downloaded data) and gets an empty `path`. `patterns=True`: its `path` may be a
    glob pattern of several files (`data.split: files` with `train-*.tfrecord`)."""

    def add(reader: Any) -> Any:
        reader.reads_path = reads_path
        reader.patterns = patterns
        return register("source", name)(reader)

    return add


def given_splits(values: list[str], where: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Each example's split from its split name (a `data.split_column` cell: `train`, `val`,
    `test`, ...): (indices per split, where each came from). One line for a name that is none."""
    names = [split_named(str(v)) for v in values]
    bad = next((i for i, name in enumerate(names) if name is None), None)
    if bad is not None:
        known = ", ".join(n for aliases in SPLIT_NAMES.values() for n in aliases)
        raise ConfigError(
            f"data.split_column: {values[bad]!r} in {where} (row {bad + 2}) is not a split name "
            f"(one of {known}) (example: train)"
        )
    chosen = np.array(names, dtype=object)
    splits = {s: np.flatnonzero(chosen == s) for s in SPLIT_NAMES if (chosen == s).any()}
    return splits, {s: f"{where} = {s}" for s in splits}


def only_classes(name: str, kind: str) -> None:
    """Refuse a task other than classification for a source with one class per example."""
    if kind != "classification":
        raise ConfigError(
            f"task.type: {kind} needs a csv or tfrecord source; data.source {name} has one "
            "class per example (example: --set task.type=classification, or --set data.source=csv)"
        )


def is_number(text: Any) -> bool:
    """True when `text` reads as a number (CSV cells: prepare's and predict's checks)."""
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


@source("csv")
def read_csv(path: str, data: DataConfig, kind: str) -> Source:
    """A CSV with a header row: `data.label` is the target column, every other a number (or,
    with `data.text`, that column's text is the input)."""
    import pandas as pd

    if locations.isdir(path):
        raise ConfigError(
            f"data.path: {data.path} is a folder; source csv needs a file "
            "(example: --set data.path=data/external/my.csv)"
        )
    label = data.label
    try:
        with locations.open_binary(path) as f:
            table = pd.read_csv(f, dtype=str, keep_default_na=False, skip_blank_lines=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{path}: not a readable CSV ({first})") from None
    if label not in table.columns:
        raise MissingLabels(
            f"data.label: column {label!r} not in the header of {path} "
            f"(columns: {', '.join(list(table.columns)[:8])}) (example: --set data.label=target)"
        )
    splits, split_from = None, {}
    if data.split == "column":  # the split column says each row's split; it is no feature
        column = data.split_column
        if column not in table.columns:
            raise ConfigError(
                f"data.split_column: column {column!r} not in the header of {path} (columns: "
                f"{', '.join(list(table.columns)[:8])}) (example: --set data.split_column=fold)"
            )
        splits, split_from = given_splits(table[column].tolist(), f"column {column!r}")
        table = table.drop(columns=[column])
    if data.text:
        return _text_rows(path, table, data, kind, splits, split_from)
    features = table.drop(columns=[label])
    numbers = features.apply(pd.to_numeric, errors="coerce")
    missing_label = (table[label] == "") & (kind != "multilabel")  # "" = no labels (multilabel)
    bad = numbers.isna().to_numpy() | missing_label.to_numpy()[:, None]
    if bad.any():
        row, col = np.argwhere(bad)[0]
        column = features.columns[col] if numbers.isna().to_numpy()[row, col] else label
        cell = table[column].iloc[row]
        what = "a missing value" if cell == "" else "not a number"
        raise ConfigError(
            f"{path}: line {row + 2}, column {column!r}: {what} (every column but data.label "
            "must be a number, in every row)"
        )
    y, classes = encode(kind, table[label].tolist(), label)
    x = numbers.to_numpy(dtype=np.float32)
    return Source(
        "vector", y, classes, x.__getitem__, lambda i: f"{path}: row {i + 2}",
        lambda i: str(i + 1), x.shape[1:], feature_names=list(features.columns),
        splits=splits, split_from=split_from, task=kind,
    )  # fmt: skip


def _text_rows(
    path: str, table: Any, data: DataConfig, kind: str, splits: Any, split_from: dict[str, str]
) -> Source:
    """A CSV of texts: the column `data.text` is the input, `data.label` the target; the other
    columns (an id, a date) are not used, and `prepare` says which. `splits`: read_csv's split
    column's, or None."""
    text, label = data.text, data.label
    if text not in table.columns or text == label:
        what = "is data.label too" if text == label else f"not in the header of {path}"
        raise ConfigError(
            f"data.text: column {text!r} {what} (columns: {', '.join(list(table.columns)[:8])}) "
            "(example: --set data.text=review)"
        )
    if kind != "multilabel" and (table[label] == "").any():  # "" = no labels (multilabel)
        row = int(np.flatnonzero((table[label] == "").to_numpy())[0])
        raise ConfigError(f"{path}: line {row + 2}, column {label!r}: a missing value")
    unused = [str(c) for c in table.columns if c not in (text, label)]
    if unused:
        print(f"Note: data.text: the input is column {text!r}; not used: {', '.join(unused)}")
    y, names = encode(kind, table[label].tolist(), label)
    texts = table[text].tolist()
    return Source(
        "text", y, names, texts.__getitem__, lambda i: f"{path}: row {i + 2}",
        lambda i: str(i + 1), feature_names=[text], splits=splits, split_from=split_from,
        task=kind,
    )  # fmt: skip


@source("digits", reads_path=False)
def read_digits(path: str, data: DataConfig, kind: str) -> Source:
    """scikit-learn's bundled digits (values 0-16) as 8x8x1 images of pixel values 0-255; their
    CSV goes to data/raw (the versioned copy)."""
    import sklearn
    from sklearn.datasets import load_digits

    only_classes("digits", kind)
    digits = load_digits()
    pixels = np.round(digits.data.reshape(-1, 8, 8, 1) * (255.0 / 16.0)).astype(np.uint8)
    y, names = encode(kind, digits.target.tolist(), "label")
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow([f"pixel_{i}" for i in range(digits.data.shape[1])] + ["label"])
    writer.writerows(np.column_stack([digits.data.astype(np.int64), digits.target]).tolist())
    what = f"sklearn.datasets.load_digits (scikit-learn {sklearn.__version__}, bundled)"
    return Source(
        "image", y.astype(np.int32), names, pixels.__getitem__, lambda i: f"digits: row {i + 2}",
        lambda i: str(i + 1), (8, 8, 1), raw={"digits.csv": (table.getvalue().encode(), what)},
    )  # fmt: skip


def class_files(
    path: str, data: DataConfig, suffixes: tuple[str, ...], what: str, example: str
) -> tuple[list[str], list[str], np.ndarray]:
    """(classes, files, labels) of a folder with one subfolder per class: every file whose name
    ends with one of `suffixes` (`what`: "images"), anywhere below its class folder, sorted."""
    entries = locations.list_dir(path)
    classes = sorted(d for d in entries if locations.isdir(locations.join(path, d)))
    paths: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        found = sorted(
            p
            for p in locations.walk_files(locations.join(path, name))
            if p.lower().endswith(suffixes)
        )
        if not found:
            raise ConfigError(
                f"data.path: class folder {name!r} of {data.path} has no {what} "
                f"({', '.join(suffixes)}); remove it or add {what} (example: {example})"
            )
        paths += found
        labels += [label] * len(found)
    if not paths:
        loose = [p for p in entries if p.lower().endswith(suffixes)]
        error = MissingLabels if loose else ConfigError  # files without class folders: no labels
        raise error(
            f"data.path: no class subfolders with {what} in {data.path} "
            f"(example: data/external/{example.split('/')[0]} with {example})"
        )
    return classes, paths, np.array(labels, dtype=np.int32)


@source("images")
def read_images(path: str, data: DataConfig, kind: str) -> Source:
    """Images in class subfolders; decoded later, one at a time, by `prepare`."""
    only_classes("images", kind)
    classes, paths, labels = class_files(
        path, data, IMAGE_SUFFIXES, "images", "pets/cat/1.png, pets/dog/2.png"
    )
    jpegs = sum(p.lower().endswith((".jpg", ".jpeg")) for p in paths)

    def load(i: int) -> bytes:
        with locations.open_binary(paths[i]) as f:
            return f.read()

    return Source(
        "image", labels, classes, load, paths.__getitem__,
        lambda i: locations.relative(paths[i], path),
        encoding="jpeg" if jpegs * 2 > len(paths) else "png",
    )  # fmt: skip


@source("text")
def read_text_files(path: str, data: DataConfig, kind: str) -> Source:
    """`.txt` files in class subfolders (`reviews/pos/1.txt`, `reviews/neg/2.txt`), UTF-8, one
    example per file; read one at a time by `prepare`. A model trained on them reads a `text`
    column in `predict`'s CSVs."""
    only_classes("text", kind)
    if not locations.isdir(path):
        raise ConfigError(
            f"data.path: {data.path} is not a folder; source text reads class subfolders of .txt "
            "files (example: data/external/reviews; a CSV: --set data.source=csv --set "
            "data.text=review)"
        )
    classes, paths, labels = class_files(
        path, data, TEXT_SUFFIXES, "text files", "reviews/pos/1.txt, reviews/neg/2.txt"
    )

    def load(i: int) -> str:
        with locations.open_binary(paths[i]) as f:
            return decode_text(f.read(), paths[i])

    return Source(
        "text", labels, classes, load, paths.__getitem__,
        lambda i: locations.relative(paths[i], path), feature_names=["text"],
    )  # fmt: skip


def decode_text(payload: bytes, where: str) -> str:
    """UTF-8 bytes (a byte-order mark dropped) as text; anything else one line naming the file."""
    try:
        return payload.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None


@source("tfrecord", patterns=True)
def read_tfrecord(path: str, data: DataConfig, kind: str) -> Source:
    """Your TFRecord file(s): `data.features` (an encoded image or floats) and `data.label`: a
    class (int or string), a number (regression), or label strings or a 0/1 vector (multilabel).
    `path`: a file, a folder of them, or a glob pattern (`records/train-*.tfrecord`).

    The serialized records are held in memory while `prepare` runs (TFRecords have no random
    access, and prepare writes them in a seeded random order); `train` then streams the shards."""
    import tensorflow as tf

    features, label, task = data.features, data.label, kind
    if "*" in path:
        files = sorted(tf.io.gfile.glob(path))
    else:
        files = sorted(locations.walk_files(path)) if locations.isdir(path) else [path]

    # An id per record: its index in its file, after the file's name when there are several.
    def named(file: str) -> str:
        return file.rsplit("/", 1)[-1] if "*" in path else locations.relative(file, path)

    records = (
        (f"{named(file)}:{k}" if file != path else str(k), raw)
        for file in files
        for k, raw in enumerate(tf.data.TFRecordDataset(file).as_numpy_iterator())
    )
    inputs: list[Any] = []
    labels: list[Any] = []
    ids: list[str] = []
    for n, (example_id, raw) in enumerate(records):
        ids.append(example_id)
        feature = tf.train.Example.FromString(raw).features.feature
        if features in feature and label not in feature:
            raise MissingLabels(
                f"data.label: record {n} in {path} has no feature {label!r} (features: "
                f"{sorted(feature)}) (example: --set data.label=label)"
            )
        if features not in feature:
            raise ConfigError(
                f"data.features / data.label: record {n} in {path} has features "
                f"{sorted(feature)} (example: --set data.features=image --set data.label=label)"
            )
        x = feature[features]
        if data.feature_kind == "image":
            if not x.bytes_list.value:
                raise ConfigError(
                    f"data.feature_kind: {features!r} in {path} is not an encoded image "
                    "(example: --set data.feature_kind=vector)"
                )
            inputs.append(x.bytes_list.value[0])
        else:
            inputs.append(np.array(x.float_list.value or x.int64_list.value, np.float32))
        labels.append(_tfrecord_label(feature[label], task))
    y, classes = _tfrecord_targets(labels, task, label, path)
    where = lambda i: f"{path}: record {i}"  # noqa: E731
    if data.feature_kind == "image":
        return Source("image", y, classes, inputs.__getitem__, where, ids.__getitem__, task=task)
    widths = {len(v) for v in inputs}
    if len(widths) != 1:
        raise ConfigError(
            f"data.features: {features!r} in {path} has {sorted(widths)} values per record; "
            "every record needs the same number"
        )
    return Source(
        "vector", y, classes, inputs.__getitem__, where, ids.__getitem__, (widths.pop(),),
        task=task,
    )  # fmt: skip


def _tfrecord_label(lab: Any, task: str) -> Any:
    """One record's label feature: its first value, or for multilabel all its values."""
    values = (
        list(lab.int64_list.value)
        or list(lab.float_list.value)
        or [v.decode() for v in lab.bytes_list.value]
    )
    if task == "multilabel":
        return values
    return values[0] if values else ""


def _tfrecord_targets(
    labels: list[Any], task: str, label: str, path: str
) -> tuple[np.ndarray, list[str]]:
    """Multilabel: label strings (`[b"cat", b"dog"]`) or a 0/1 vector (names `label_0`, ...)."""
    if task == "regression":
        y, _ = encode(task, labels, f"data.label {label!r} in {path}")
        return y, [label]
    if task != "multilabel":
        return encode(task, labels, "data.label")
    if all(isinstance(v, str) for row in labels for v in row):
        return encode(task, ["|".join(row) for row in labels], f"data.label in {path}")
    widths = {len(row) for row in labels}
    if len(widths) != 1:
        raise ConfigError(
            f"data.label: {label!r} in {path} has {sorted(widths)} values per record; a multilabel "
            "0/1 vector needs the same number in every record (or give label strings)"
        )
    vectors = np.asarray(labels, dtype=np.float32)
    return vectors, [f"label_{i}" for i in range(vectors.shape[1])]


@source("tfds", reads_path=False)
def read_tfds(path: str, data: DataConfig, kind: str, data_dir: str | None = None) -> Source:
    """The TFDS data set `data.name`, e.g. `mnist`, `tf_flowers`, `cifar10`.

    Its `train` / `validation` / `test` splits are kept; a missing validation or test split is
    carved out of its train split (without a train split, `prepare` splits all of it)."""
    only_classes("tfds", kind)
    name = data.name
    try:
        import tensorflow_datasets as tfds

        tfds.builder  # noqa: B018 - tensorflow_datasets logs its own import errors and goes on, empty
    except Exception as exc:  # noqa: BLE001 - e.g. protobuf's VersionError, not an ImportError
        raise ConfigError(
            f"data.source: tfds, but tensorflow_datasets does not import ({type(exc).__name__}: "
            f"{str(exc)[:160]}; its own error is logged above); pip install -r requirements.txt "
            "(it pins tensorflow-metadata 1.17.3, which imports with protobuf 5)"
        ) from None
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as exc:  # tfds raises DatasetNotFoundError and friends
        raise ConfigError(
            f"data.name: {name!r} is not a TFDS data set ({str(exc).splitlines()[0][:120]}) "
            "(example: --set data.name=mnist)"
        ) from None
    builder.download_and_prepare()
    keys = builder.info.supervised_keys
    if not keys or len(keys) != 2:
        raise ConfigError(f"data.name: {name} has no (input, label) supervised keys to train on")
    is_image = isinstance(builder.info.features[keys[0]], tfds.features.Image)
    # Images stay encoded (as TFDS stores them) until prepare re-encodes them one at a time.
    decoders = {keys[0]: tfds.decode.SkipDecoding()} if is_image else None
    inputs: list[Any] = []
    labels: list[int] = []
    ids: list[str] = []  # an example's index in its TFDS split: `test[17]`
    ranges: dict[str, np.ndarray] = {}
    # A data set's info lists its splits once prepared (mock_data's lists none: ask for all three).
    available = [s for s in builder.info.splits if s in ("train", "validation", "test")]
    for split in available or ["train", "validation", "test"]:
        start = len(labels)
        dataset = builder.as_dataset(split=split, as_supervised=True, decoders=decoders)
        for k, (x, y) in enumerate(dataset.as_numpy_iterator()):
            inputs.append(x)
            labels.append(int(y))
            ids.append(f"{split}[{k}]")
        ranges[split] = np.arange(start, len(labels))
    if not labels:
        raise ConfigError(f"data.name: {name} has no train / validation / test examples")
    label_feature = builder.info.features[keys[1]]
    num = getattr(label_feature, "num_classes", None) or (max(labels) + 1)
    names = list(getattr(label_feature, "names", None) or [str(i) for i in range(num)])
    shape = () if is_image else np.asarray(inputs[0]).reshape(-1).shape
    load = inputs.__getitem__ if is_image else (lambda i: np.asarray(inputs[i], np.float32).ravel())
    # Its own splits are kept; a missing validation or test split is carved out of train.
    given = {s: r for s, r in ranges.items() if len(r)} if len(ranges.get("train", ())) else None
    record = json.dumps({"tfds": name, "examples": len(labels), "classes": names}, indent=2)
    return Source(
        "image" if is_image else "vector", np.array(labels, dtype=np.int32), names, load,
        lambda i: f"tfds {name}: example {i}", ids.__getitem__, tuple(shape), splits=given,
        split_from={s: f"tfds {name} {s}" for s in given or ()},
        raw={"tfds.json": (f"{record}\n".encode(), f"tensorflow_datasets {name}")},
    )  # fmt: skip
