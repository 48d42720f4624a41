"""What `prepare` wrote, as the model and the trainer need to know it: `data/processed/spec.json`.

`prepare` writes it beside the shards; `train`, `evaluate` and `predict` read it. The model is built
from it (input shape, feature statistics for tabular inputs, the vocabulary for text) and it names
the classes or labels.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC = "spec.json"
SPLITS = ("train", "validation", "test")
# What a split folder, file or column value may be called (`val/`, `valid.csv`, `dev`).
SPLIT_NAMES = {
    "train": ("train", "training"),
    "validation": ("validation", "val", "valid", "dev"),
    "test": ("test", "testing"),
}


def natural_order(text: str) -> list[Any]:
    """Sort key: digit runs compare as numbers, so `row 2` comes before `row 10`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def split_named(text: str) -> str | None:
    """The split a folder, file stem or column value names (case-insensitive), or None."""
    word = text.strip().lower()
    return next((split for split, names in SPLIT_NAMES.items() if word in names), None)


@dataclass(frozen=True)
class DataSpec:
    """The shape and meaning of the processed data."""

    kind: str  # "image" (pixels 0-255, [h, w, c]), "vector" (raw features), "text" (strings)
    input_shape: tuple[int, ...]  # (height, width, channels), (num_features,) or (sequence_length,)
    task: str  # the task's kind (task.py, tasks/): what the targets `y` in the shards are
    names: list[str] = field(default_factory=list)  # classes, labels, or the target's name
    counts: dict[str, int] = field(default_factory=dict)  # examples per split
    # The training split's examples per class or label: for class_weight and the imbalance note.
    train_counts: dict[str, int] = field(default_factory=dict)
    # How the split was made (data/split.py): `method` (data.split, or the source's own splits),
    # `seed`, `stratified`, and per split where its examples came from.
    split: dict[str, Any] = field(default_factory=dict)
    feature_names: list[str] = field(default_factory=list)  # vectors: the input columns
    feature_mean: list[float] | None = None  # vectors: per-feature mean of the training split
    feature_var: list[float] | None = None  # vectors: per-feature variance of the training split
    target_mean: float | None = None  # a numeric target: mean of the training targets
    target_std: float | None = None  # ... and their standard deviation
    vocabulary: str = ""  # text: the vocabulary file beside spec.json, one token per line
    vocabulary_size: int = 0  # text: its tokens plus padding (id 0) and [UNK] (id 1)
    extra: dict[str, Any] = field(default_factory=dict)  # source-specific details (shards, ...)


def load_spec(processed_dir: Path) -> DataSpec:
    """Read `<processed_dir>/spec.json`."""
    doc = json.loads((Path(processed_dir) / SPEC).read_text())
    doc["input_shape"] = tuple(doc["input_shape"])
    return DataSpec(**doc)
