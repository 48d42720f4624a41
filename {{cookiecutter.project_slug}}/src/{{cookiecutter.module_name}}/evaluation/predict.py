"""Predictions from the saved model alone (training/saved_model.py: `model.keras`, `model.json`).

`predict` scores a CSV with the training feature columns (or the text column), an image file or a
folder of images (every format `prepare` accepts, made into pixels by data/images.py as `prepare`
stored the training images), a `.txt` file or a folder of them. export.py writes the same model
for other programs: a SavedModel, a LiteRT `.tflite`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ConfigError
from ..core.files import atomic_write
from ..data.images import IMAGE_SUFFIXES, model_input
from ..training.saved_model import load_for_users

CHUNK = 256  # examples per model call: bounds memory for a large folder


def predict(source: Path, output: Path, models_dir: Path) -> int:
    """Score `source` (a CSV, an image or a folder of images; for text a CSV, a .txt file or a
    folder of them); write the CSV `output`."""
    model, info = load_for_users(models_dir)
    ids, outputs = [], []
    for chunk_ids, inputs in _read_inputs(source, info):
        ids += chunk_ids
        outputs += list(model.predict(inputs, batch_size=CHUNK, verbose=0))
    atomic_write(output, prediction_table(info, ids, outputs))
    return len(ids)


def prediction_table(
    info: dict[str, Any], ids: list[str], outputs: list[Any], targets: list[Any] | None = None
) -> str:
    """The predictions CSV of `predict` and of `evaluate` (results/predictions/test.csv): `id`,
    (`target`: the truth, when `targets` are given), `prediction` and, for classification and
    multilabel, `prob_<name>` per class or label. `info`: model.json (task, names, threshold);
    `outputs`: the model's outputs in the user's units, one per id."""
    names = info["names"]
    header = ["id", *(["target"] if targets is not None else []), "prediction"]
    if info["task"] != "regression":
        header += [f"prob_{name}" for name in names]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for k, (example_id, out) in enumerate(zip(ids, outputs, strict=True)):
        truth = [] if targets is None else [_target_text(info, targets[k])]
        writer.writerow([example_id, *truth, *_prediction_row(info, np.asarray(out, np.float64))])
    return buf.getvalue()


def _prediction_row(info: dict[str, Any], out: np.ndarray) -> list[Any]:
    names = info["names"]
    if info["task"] == "regression":
        return [f"{float(np.ravel(out)[0]):.6g}"]
    probs = [f"{p:.6g}" for p in out]
    if info["task"] == "classification":
        return [names[int(np.argmax(out))], *probs]
    chosen = [name for name, p in zip(names, out, strict=True) if p >= info["threshold"]]
    return ["|".join(chosen), *probs]


def _target_text(info: dict[str, Any], target: Any) -> str:
    """A target as the prediction column says it: a class name, labels joined by `|`, a value."""
    names = info["names"]
    if info["task"] == "regression":
        return f"{float(np.ravel(target)[0]):.6g}"
    if info["task"] == "classification":
        return names[int(target)]
    return "|".join(name for name, on in zip(names, np.ravel(target), strict=True) if on >= 0.5)


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
    if source.is_file():
        files = [source]
    else:
        files = sorted(p for p in source.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files or files[0].suffix.lower() not in IMAGE_SUFFIXES:
        raise ConfigError(
            f"{source}: no images ({' '.join(IMAGE_SUFFIXES)}) (example: predict photos/)"
        )
    for start in range(0, len(files), CHUNK):
        chunk = files[start : start + CHUNK]
        fmt = info.get("image_encoding") or "png"
        pixels = np.stack([_read_image(p, info["input_shape"], fmt) for p in chunk])
        yield [str(p) for p in chunk], pixels


def _read_csv(source: Path, features: list[str]) -> Iterator[tuple[list[str], np.ndarray]]:
    """(row numbers, the training feature columns as float32) in chunks of CHUNK rows."""
    import pandas as pd

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
            value = table[features[col]].iloc[row]
            raise ConfigError(
                f"{source}: row {table.index[row] + 1}, column {features[col]!r}: expected a "
                f"number, got {value!r}"
            )
        yield [str(i + 1) for i in table.index], numbers.to_numpy(dtype=np.float32)


def _read_texts(source: Path, column: str) -> Iterator[tuple[list[str], Any]]:
    """(row numbers or file paths, a string tensor) in chunks: the column `column` of a CSV, a
    `.txt` file, or every `.txt` file under a folder (UTF-8). A tensor, not a NumPy array of
    strings: Keras's `predict` refuses those."""
    import pandas as pd
    import tensorflow as tf

    from ..sources import decode_text

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


def _read_image(path: Path, shape: list[int], fmt: str) -> np.ndarray:
    """Pixel values 0-255 at the training size and channels: what the pipeline decodes from what
    `prepare` stores for this file (`fmt`: the shards' encoding)."""
    return model_input(path.read_bytes(), shape, fmt, str(path))
