"""Your data: a reader per `data.source`, registered under that name.

THE CONTRACT. A reader is a function

    reader(path, data, kind, <your own keyword arguments>) -> Source

registered with `@source("<name>")`. It receives `path`, where `data.path` is to be read (a
local copy that `prepare` staged under data/raw, or a `gs://` URL; "" for a source registered
with `reads_path=False`), `data`, the `data:` section of params.yaml (its errors name
`data.path`, the user's file, not `path`, the copy), and `kind`, the task's
kind (task.py); then its own keyword arguments, from `data.args` (checked against their
annotations before anything runs). It returns a `Source`: one target per example
(`encode(kind, raw_labels, column)`, importable from here, makes them and the names as the
task's kind reads labels) and a way to load example i, so that `prepare` streams big inputs
(images) instead of holding them all. A reader that finds no labels where a split needs them
(a competition's unlabelled test.csv) raises `MissingLabels`; any other problem is a
`ConfigError` of one line naming the key or the file.

`data.split` says where train / validation / test come from (data/split.py): `random` splits
what one call returns; `folders` and `files` call the reader once per split folder or file;
a reader may also give its own splits (`Source.splits`: a split column, a TFDS data set's).

`images` below is the worked example; the other built-ins are in readers/ (csv, text, tfrecord,
tfds, digits). Yours, here or in a file beside this one, then `data.source: <name>`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import ConfigError, DataConfig
from .core import locations
from .registry import register
from .tasks.base import encode

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


@dataclass
class Source:
    """What a reader found: one target per example and how to load each example's input."""

    kind: str  # the inputs: "image", "vector" or "text"
    task: str  # the task's kind: what `labels` hold (`encode` made them)
    labels: np.ndarray  # one target per example
    names: list[str]  # class names, label names, or [the target column]
    load: Callable[[int], Any]  # i -> encoded image bytes, a uint8 [h, w, c] array, a vector, a str
    where: Callable[[int], str]  # i -> example i as errors name it: under data.path, not `path`
    # i -> example i's id in its source (a file relative to data.path, a row number as `predict`
    # numbers rows): kept in the shards and naming evaluate's test predictions. None: i.
    ids: Callable[[int], str] | None = None
    input_shape: tuple[int, ...] = ()  # images: () for data.image_size; vectors: read from them
    encoding: str = "png"  # images: "jpeg" when the originals are JPEGs (no point in lossless)
    feature_names: list[str] = field(default_factory=list)  # vectors: columns; text: [column]
    # Given splits ({"train": indices, "test": ...}); a missing one is carved out of train.
    splits: dict[str, np.ndarray] | None = None
    split_from: dict[str, str] = field(default_factory=dict)  # given split -> where it came from
    # Sources that read no `data.path`: a record for data/raw, {file name: (bytes, description)}.
    raw: dict[str, tuple[bytes, str]] = field(default_factory=dict)


class MissingLabels(ConfigError):
    """The data has no labels (no `data.label` column, no class folders): what a reader raises,
    so that `prepare` can tell an unlabelled test file from a broken one."""


def source(
    name: str,
    reads_path: bool = True,
    patterns: bool = False,
    takes: str = "",
    example: str = "",
) -> Callable[[Any], Any]:
    """Register a reader as `data.source: <name>`. `reads_path=False`: it needs no `data.path`
    (bundled or downloaded data) and gets an empty `path`. `patterns=True`: its `path` may be a
    glob pattern of several files (`data.split: files` with `train-*.tfrecord`). `takes`: "file"
    or "folder" when `data.path` must be one ("": either), `example` a valid one: `prepare`
    checks it before it copies anything."""
    return register(
        "source", name, reads_path=reads_path, patterns=patterns, takes=takes, example=example
    )


@source("images", takes="folder", example="data/external/pets")
def read_images(path: str, data: DataConfig, kind: str) -> Source:
    """A folder with one subfolder per class (`pets/cat/1.png`, `pets/dog/2.jpg`); each image is
    decoded later, one at a time, by `prepare` (data/images.py)."""
    example = "pets/cat/1.png, pets/dog/2.png"
    paths, classes = class_files(path, data, IMAGE_SUFFIXES, "images", example)
    labels, names = encode(kind, classes, f"data.path {data.path} (class folders)")
    jpegs = sum(p.lower().endswith((".jpg", ".jpeg")) for p in paths)

    def load(i: int) -> bytes:
        with locations.open_binary(paths[i]) as f:
            return f.read()

    def ids(i: int) -> str:  # the file relative to data.path
        return locations.relative(paths[i], path)

    return Source(
        "image",
        kind,
        labels,
        names,
        load,
        lambda i: locations.join(data.path, ids(i)),
        ids,
        encoding="jpeg" if jpegs * 2 > len(paths) else "png",
    )


def class_files(
    path: str, data: DataConfig, suffixes: tuple[str, ...], what: str, example: str
) -> tuple[list[str], list[str]]:
    """(files, the class folder of each) of a folder with one subfolder per class: every file
    whose name ends with one of `suffixes` (`what`: "images"), anywhere below its class folder."""
    entries = locations.list_dir(path)
    paths: list[str] = []
    classes: list[str] = []
    # A hidden folder (Jupyter's .ipynb_checkpoints) is no class, as walk_files skips it.
    folders = [d for d in entries if not locations.hidden(d)]
    for name in sorted(d for d in folders if locations.isdir(locations.join(path, d))):
        found = [
            p
            for p in locations.walk_files(locations.join(path, name))
            if p.lower().endswith(suffixes)
        ]
        if not found:
            raise ConfigError(
                f"data.path: class folder {name!r} of {data.path} has no {what} "
                f"({', '.join(suffixes)}); move it out of data.path or add {what} "
                f"(example: {example})"
            )
        paths += sorted(found)
        classes += [name] * len(found)
    if not paths:
        loose = [p for p in entries if p.lower().endswith(suffixes)]
        error = MissingLabels if loose else ConfigError  # files without class folders: no labels
        raise error(
            f"data.path: no class subfolders with {what} in {data.path} "
            f"(example: data/external/{example.split('/')[0]} with {example})"
        )
    return paths, classes
