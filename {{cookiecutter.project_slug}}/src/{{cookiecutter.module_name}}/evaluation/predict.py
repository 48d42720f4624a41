"""Predictions from the saved model alone (training/saved_model.py: `model.keras`, `model.json`).

`predict` scores a CSV with the training feature columns (or the text column), an image file or a
folder of images (every format `prepare` accepts, made into pixels by data/images.py as `prepare`
stored the training images), a `.txt` file or a folder of them. Its CSV holds `id` (a row number,
the first data row being 1, or a file) and the columns the task's kind gives (`prediction`, and
a probability per class or label). export.py writes the same model for other programs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf

from ..config import ConfigError
from ..core.files import atomic_write
from ..data.images import IMAGE_SUFFIXES, model_input
from ..readers.text_files import decode_text
from ..tasks.base import Task, task_class
from ..training.saved_model import load_for_users

CHUNK = 256  # examples per model call: bounds memory for a large folder


def predict(source: Path, output: Path, models_dir: Path) -> int:
    """Score `source` (a CSV, an image or a folder of images; for text a CSV, a .txt file or a
    folder of them); write the CSV `output`."""
    model, info = load_for_users(models_dir)
    ids, outputs = [], []
    for chunk_ids, inputs in _read_inputs(source, info):
        ids += chunk_ids
        outputs.append(np.asarray(model.predict(inputs, batch_size=CHUNK, verbose=0)))
    task = task_class(info["task"])(names=info["names"])
    atomic_write(output, prediction_table(task, ids, np.concatenate(outputs)).to_csv(index=False))
    return len(ids)


def prediction_table(
    task: Task, ids: list[str], outputs: np.ndarray, targets: np.ndarray | None = None
) -> pd.DataFrame:
    """The predictions of `predict` and of `evaluate` (results/predictions/test.csv): `id`,
    `target` (the truth, when `targets` are given), then the task's columns for the outputs
    (`prediction`, and `prob_<name>` per class or label)."""
    table = pd.DataFrame({"id": ids})
    if targets is not None:
        table["target"] = task.target_text(targets)
    outputs = np.asarray(outputs, np.float64).reshape(len(ids), -1)
    return table.assign(**task.predictions(outputs))


def _read_inputs(source: Path, info: dict[str, Any]) -> Iterator[tuple[list[str], Any]]:
    """(ids, raw inputs) in chunks: CSV rows for vectors, files for images, either for text."""
    if not source.exists():
        raise ConfigError(f"{source}: no such file or folder (example: predict data/new.csv)")
    if info["input_kind"] == "text":
        yield from _read_texts(source, info["feature_names"][0])
        return
    if info["input_kind"] == "vector":
        if source.suffix.lower() != ".csv":
            raise ConfigError(f"{source}: this model takes a CSV of features (example: new.csv)")
        yield from _read_csv(source, info["feature_names"])
        return
    files = [source] if source.is_file() else sorted(
        p for p in source.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES
    )  # fmt: skip
    if not files or files[0].suffix.lower() not in IMAGE_SUFFIXES:
        raise ConfigError(
            f"{source}: no images ({' '.join(IMAGE_SUFFIXES)}) (example: predict photos/)"
        )
    fmt = info.get("image_encoding") or "png"
    for start in range(0, len(files), CHUNK):
        chunk = files[start : start + CHUNK]
        pixels = [model_input(p.read_bytes(), info["input_shape"], fmt, str(p)) for p in chunk]
        yield [str(p) for p in chunk], np.stack(pixels)


def _read_csv(source: Path, features: list[str]) -> Iterator[tuple[list[str], np.ndarray]]:
    """(row numbers, the training feature columns as float32) in chunks of CHUNK rows."""
    for table in pd.read_csv(source, dtype=str, keep_default_na=False, chunksize=CHUNK):
        missing = [name for name in features if name not in table.columns]
        if missing:
            raise ConfigError(
                f"{source}: missing feature column {missing[0]!r} "
                f"(the training features: {', '.join(features)})"
            )
        numbers = table[features].apply(pd.to_numeric, errors="coerce")
        bad = numbers.isna().to_numpy()
        if bad.any():
            row, col = np.argwhere(bad)[0]
            raise ConfigError(
                f"{source}: row {table.index[row] + 1}, column {features[col]!r}: expected a "
                f"number, got {table[features[col]].iloc[row]!r}"
            )
        yield [str(i + 1) for i in table.index], numbers.to_numpy(dtype=np.float32)


def _read_texts(source: Path, column: str) -> Iterator[tuple[list[str], Any]]:
    """(row numbers or file paths, a string tensor) in chunks: the column `column` of a CSV, a
    `.txt` file, or every `.txt` file under a folder (UTF-8). A tensor, not a NumPy array of
    strings: Keras's `predict` refuses those."""
    if source.suffix.lower() == ".csv":
        for table in pd.read_csv(source, dtype=str, keep_default_na=False, chunksize=CHUNK):
            if column not in table.columns:
                raise ConfigError(
                    f"{source}: no column {column!r}, the text this model was trained on "
                    f"(columns: {', '.join(list(table.columns)[:8])})"
                )
            yield [str(i + 1) for i in table.index], tf.constant(table[column].tolist())
        return
    files = [source] if source.is_file() else sorted(source.rglob("*.txt"))
    if not files or files[0].suffix.lower() != ".txt":
        raise ConfigError(
            f"{source}: this model takes text: a CSV with a {column!r} column, a .txt file or a "
            "folder of them (example: predict reviews.csv)"
        )
    for start in range(0, len(files), CHUNK):
        chunk = files[start : start + CHUNK]
        texts = [decode_text(p.read_bytes(), str(p)) for p in chunk]
        yield [str(p) for p in chunk], tf.constant(texts)
