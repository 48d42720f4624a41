"""Readers: each `data.source` as labels plus a way to load example i, for `prepare` to shard.

A reader holds what is small (labels, file paths, a CSV's numbers) and loads the big part (an
image) one example at a time, so `prepare` streams images instead of decoding them all at once.
- `digits`: scikit-learn's bundled 8x8 digits, as 8x8x1 images of pixel values 0-255;
- `csv`: one row per example, a `data.label` column, every other column a number; the label is a
  class (classification), labels joined by `|` (multilabel, `cat|dog`) or a number (regression);
- `images`: a folder with one subfolder per class (`cats/001.png`, `dogs/002.jpg`, ...);
- `tfrecord`: the user's `tf.train.Example` records: `data.features` holds an encoded image
  (`data.feature_kind: image`) or a float vector (`vector`), `data.label` an integer or a string
  (classification), a number (regression), or label strings / a 0-1 vector (multilabel);
- `tfds`: the TensorFlow Datasets data set `data.name` (its supervised keys: input and label).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import ConfigError
from .core import gcs
from .task import encode_multilabel, encode_numbers, label_names

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


@dataclass
class Source:
    """What a reader found: one label per example and how to load each example's input."""

    kind: str  # "image" or "vector"
    labels: np.ndarray  # targets: int32 class index, 0/1 float32 rows, or float32 values
    names: list[str]  # class names, label names (index order), or [the target column]
    load: Callable[[int], Any]  # i -> encoded image bytes, a uint8 [h, w, c] array, or a vector
    where: Callable[[int], str]  # i -> where example i came from (for error messages)
    input_shape: tuple[int, ...] = ()  # vectors: (features,); images: set by prepare
    encoding: str = "png"  # images: "jpeg" when the originals are JPEGs (no point in lossless)
    feature_names: list[str] = field(default_factory=list)
    splits: dict[str, np.ndarray] | None = None  # given splits (tfds), else prepare splits
    task: str = "classification"  # what `labels` hold (task.type)


def encode_targets(values: list[Any], task: str, column: str) -> tuple[np.ndarray, list[str]]:
    """Raw label values -> (targets, names) for `task` (task.py's encodings; `column` names
    the values in errors). Regression's one name is the column's."""
    if task == "multilabel":
        names = label_names(values)
        return encode_multilabel(values, names, column), names
    if task == "regression":
        return encode_numbers(values, column), [column]
    return encode_labels(values)


def encode_labels(values: list[Any]) -> tuple[np.ndarray, list[str]]:
    """Class indices and class names (sorted; numerically when every label is an integer)."""
    names = sorted({str(v) for v in values}, key=_label_order)
    lookup = {name: i for i, name in enumerate(names)}
    return np.array([lookup[str(v)] for v in values], dtype=np.int32), names


def _label_order(name: str) -> tuple[int, int, str]:
    return (0, int(name), name) if name.lstrip("-").isdigit() else (1, 0, name)


def is_number(text: Any) -> bool:
    """True when `text` reads as a number (CSV cells: prepare's and predict's checks)."""
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def read_csv(path: str, label: str, task: str = "classification") -> Source:
    """A CSV with a header row: `label` is the target column (`task`), every other a number."""
    with gcs.open_binary(path) as f:
        reader = csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline=""))
        header = next(reader, None)
        if header is None or label not in header:
            raise ConfigError(
                f"data.label: column {label!r} not in the header of {path} "
                f"(columns: {', '.join((header or [])[:8])}) (example: --set data.label=target)"
            )
        col = header.index(label)
        names = header[:col] + header[col + 1 :]
        features, labels = [], []
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            values = row[:col] + row[col + 1 :]
            bad = next((i for i, v in enumerate(values) if not is_number(v)), None)
            cell = row[col] if col < len(row) else ""
            no_label = cell == "" and (task != "multilabel" or col >= len(row))  # "" = no labels
            if bad is not None or len(values) != len(names) or no_label:
                what = "a missing value" if bad is None or values[bad] == "" else "not a number"
                where = names[bad] if bad is not None and bad < len(names) else label
                raise ConfigError(
                    f"{path}: line {line}, column {where!r}: {what} (every column but "
                    "data.label must be a number, in every row)"
                )
            features.append([float(v) for v in values])
            labels.append(row[col])
    y, classes = encode_targets(labels, task, label)
    x = np.array(features, dtype=np.float32).reshape(len(labels), len(names))
    return Source(
        "vector", y, classes, x.__getitem__, lambda i: f"{path}: row {i + 2}", x.shape[1:],
        feature_names=names, task=task,
    )  # fmt: skip


def read_digits(csv_path: str) -> Source:
    """The digits CSV that `prepare` writes (values 0-16) as 8x8x1 images of pixel values 0-255."""
    rows = read_csv(csv_path, "label")
    x = rows.load(slice(None)).reshape(-1, 8, 8, 1)
    pixels = np.round(x * (255.0 / 16.0)).astype(np.uint8)
    return Source("image", rows.labels, rows.names, pixels.__getitem__, rows.where, (8, 8, 1))


def read_images(folder: str) -> Source:
    """Images in class subfolders; decoded later, one at a time, by `prepare`."""
    classes = sorted(d for d in gcs.list_dir(folder) if gcs.isdir(gcs.join(folder, d)))
    paths: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        found = sorted(
            p for p in gcs.walk_files(gcs.join(folder, name)) if p.lower().endswith(IMAGE_SUFFIXES)
        )
        if not found:
            raise ConfigError(
                f"data.path: class folder {gcs.join(folder, name)} has no images "
                f"({', '.join(IMAGE_SUFFIXES)}); remove it or add images (example: pets/cat/1.png)"
            )
        paths += found
        labels += [label] * len(found)
    if not paths:
        raise ConfigError(
            f"data.path: no class subfolders with images in {folder} "
            "(example: data/external/pets with pets/cat/1.png, pets/dog/2.png)"
        )
    jpegs = sum(p.lower().endswith((".jpg", ".jpeg")) for p in paths)

    def load(i: int) -> bytes:
        with gcs.open_binary(paths[i]) as f:
            return f.read()

    return Source(
        "image", np.array(labels, dtype=np.int32), classes, load, paths.__getitem__,
        encoding="jpeg" if jpegs * 2 > len(paths) else "png",
    )  # fmt: skip


def read_tfrecord(
    path: str, features: str, label: str, kind: str, task: str = "classification"
) -> Source:
    """The user's TFRecord file(s): `features` (an encoded image or floats) and `label`: a class
    (int or string), a number (regression), or label strings or a 0/1 vector (multilabel).

    The serialized records are held in memory while `prepare` runs (TFRecords have no random
    access, and prepare writes them in a seeded random order); `train` then streams the shards."""
    import tensorflow as tf

    files = sorted(gcs.walk_files(path)) if gcs.isdir(path) else [path]
    inputs: list[Any] = []
    labels: list[Any] = []
    for n, raw in enumerate(tf.data.TFRecordDataset(files).as_numpy_iterator()):
        feature = tf.train.Example.FromString(raw).features.feature
        if features not in feature or label not in feature:
            raise ConfigError(
                f"data.features / data.label: record {n} in {path} has features "
                f"{sorted(feature)} (example: --set data.features=image --set data.label=label)"
            )
        x = feature[features]
        if kind == "image":
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
    if kind == "image":
        return Source("image", y, classes, inputs.__getitem__, where, task=task)
    widths = {len(v) for v in inputs}
    if len(widths) != 1:
        raise ConfigError(
            f"data.features: {features!r} in {path} has {sorted(widths)} values per record; "
            "every record needs the same number"
        )
    return Source("vector", y, classes, inputs.__getitem__, where, (widths.pop(),), task=task)


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
        return encode_numbers(labels, f"data.label {label!r} in {path}"), [label]
    if task != "multilabel":
        return encode_labels(labels)
    if all(isinstance(v, str) for row in labels for v in row):
        return encode_targets(["|".join(row) for row in labels], task, f"data.label in {path}")
    widths = {len(row) for row in labels}
    if len(widths) != 1:
        raise ConfigError(
            f"data.label: {label!r} in {path} has {sorted(widths)} values per record; a multilabel "
            "0/1 vector needs the same number in every record (or give label strings)"
        )
    vectors = np.asarray(labels, dtype=np.float32)
    return vectors, [f"label_{i}" for i in range(vectors.shape[1])]


def read_tfds(name: str, data_dir: str | None = None) -> Source:
    """The TFDS data set `name` (`data.name`), e.g. `mnist`, `tf_flowers`, `cifar10`.

    Its `train` / `validation` / `test` splits are kept when it has all three; otherwise its
    splits are pooled and `prepare` splits them as for any other source."""
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
    ranges: dict[str, np.ndarray] = {}
    # A data set's info lists its splits once prepared (mock_data's lists none: ask for all three).
    available = [s for s in builder.info.splits if s in ("train", "validation", "test")]
    for split in available or ["train", "validation", "test"]:
        start = len(labels)
        dataset = builder.as_dataset(split=split, as_supervised=True, decoders=decoders)
        for x, y in dataset.as_numpy_iterator():
            inputs.append(x)
            labels.append(int(y))
        ranges[split] = np.arange(start, len(labels))
    if not labels:
        raise ConfigError(f"data.name: {name} has no train / validation / test examples")
    label_feature = builder.info.features[keys[1]]
    num = getattr(label_feature, "num_classes", None) or (max(labels) + 1)
    names = list(getattr(label_feature, "names", None) or [str(i) for i in range(num)])
    kind = "image" if is_image else "vector"
    shape = () if is_image else np.asarray(inputs[0]).reshape(-1).shape
    load = inputs.__getitem__ if is_image else (lambda i: np.asarray(inputs[i], np.float32).ravel())
    given = {"train", "validation", "test"} <= set(ranges)
    return Source(
        kind, np.array(labels, dtype=np.int32), names, load,
        lambda i: f"tfds {name}: example {i}", tuple(shape),
        splits={s: ranges[s] for s in ("train", "validation", "test")} if given else None,
    )  # fmt: skip
