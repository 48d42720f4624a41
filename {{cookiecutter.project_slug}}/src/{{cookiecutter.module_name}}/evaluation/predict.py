"""Predictions from the saved model alone (`model.keras`, `model.json`; docs/customise.md).

`predict` scores a CSV, image files (made into pixels as `prepare` stored the training images)
or `.txt` files; its CSV holds `id` (a row number from 1, or a file) and the kind's columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf

from ..config import ConfigError
from ..core import locations
from ..core.files import atomic_write
from ..data.images import model_input
from ..readers.csv_rows import CSV_ERRORS, as_numbers, fields_fit, line_of, unreadable
from ..readers.text_files import decode_text
from ..sources import IMAGE_SUFFIXES
from ..tasks.base import Task, task_class
from ..training.saved_model import load_for_users

CHUNK = 256  # examples per model call: bounds memory for a large folder


def predict(source: Path, output: Path, models_dir: Path) -> int:
    """Score `source` (a CSV, a file or a folder of them); write the CSV `output`."""
    if output.resolve() == source.resolve():
        raise ConfigError(
            f"--output {output}: is the input; predictions would replace it "
            "(example: --output results/predictions.csv)"
        )
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
    """`predict`'s and `evaluate`'s table: `id`, `target` (when given), the task's columns."""
    table = pd.DataFrame({"id": ids})
    if targets is not None:
        table["target"] = task.target_text(targets)
    outputs = np.asarray(outputs, np.float64).reshape(len(ids), -1)
    return table.assign(**task.predictions(outputs))


def _read_inputs(source: Path, info: dict[str, Any]) -> Iterator[tuple[list[str], Any]]:
    """(ids, raw inputs) in chunks of CHUNK; text as a string tensor (Keras's `predict` refuses
    a NumPy array of strings)."""
    kind, columns = info["input_kind"], info["feature_names"]
    if not source.exists():
        raise ConfigError(f"{source}: no such file or folder (example: predict data/new.csv)")
    if source.suffix.lower() == ".csv" and kind != "image":
        yield from _read_csv(source, columns, text=kind == "text")
        return
    suffixes = (".txt",) if kind == "text" else IMAGE_SUFFIXES
    # A folder's hidden names (macOS's `._` copies, .ipynb_checkpoints) are left out, as prepare.
    listed = [] if kind == "vector" else locations.walk_files(str(source))
    files = [Path(p) for p in listed if p.lower().endswith(suffixes)]
    if not files:
        raise _refusal(source, kind, columns)
    fmt = info.get("image_encoding") or "png"
    for start in range(0, len(files), CHUNK):
        chunk = files[start : start + CHUNK]
        if kind == "text":
            inputs = tf.constant([decode_text(p.read_bytes(), str(p)) for p in chunk])
        else:
            pixels = [model_input(p.read_bytes(), info["input_shape"], fmt, str(p)) for p in chunk]
            inputs = np.stack(pixels)
        yield [str(p) for p in chunk], inputs


def _refusal(source: Path, kind: str, columns: list[str]) -> ConfigError:
    """One line: what the model takes, what `source` is, and a valid example."""
    if kind == "vector":
        shown = ", ".join(columns[:4]) + (", ..." if len(columns) > 4 else "")
        takes, example = f"a CSV of its training features ({shown})", "new.csv"
    elif kind == "text":
        takes = f"text: a CSV with a {columns[0]!r} column, a .txt file or a folder of them"
        example = "reviews.csv"
    else:
        takes, example = f"images ({' '.join(IMAGE_SUFFIXES)}): one, or a folder of them", "photos/"
    if source.is_dir():
        given = "this is a folder" if kind == "vector" else "this folder has none"
    elif source.suffix.lower() == ".csv":
        given = "this is a CSV"
    else:
        given = f"this is a {source.suffix or 'suffixless'} file"
    return ConfigError(f"{source}: this model takes {takes}; {given} (example: predict {example})")


def _read_csv(source: Path, columns: list[str], text: bool) -> Iterator[tuple[list[str], Any]]:
    """(row numbers, inputs) in chunks: the text column, or the feature columns as float32."""
    rows: list[str] = []

    def where(row: int) -> str:
        return f"{source} line {line_of(str(source), row)}"

    try:
        for table in pd.read_csv(source, dtype=str, keep_default_na=False, chunksize=CHUNK):
            fields_fit(table)
            missing = [name for name in columns if name not in table.columns]
            if missing:
                raise ConfigError(
                    f"{source}: no column {missing[0]!r}, the text this model was trained on "
                    f"(columns: {', '.join(list(table.columns)[:8])})"
                    if text
                    else f"{source}: missing feature column {missing[0]!r} "
                    f"(the training features: {', '.join(columns)})"
                )
            rows = [str(i + 1) for i in table.index]
            if not rows:  # a header alone
                break
            if text:
                yield rows, tf.constant(table[columns[0]].tolist())
                continue
            features = f"the training features: {', '.join(columns)}"
            yield rows, as_numbers(table[columns], where, features)
    except pd.errors.EmptyDataError:  # not even a header
        pass
    except CSV_ERRORS as exc:
        raise unreadable(source, exc) from None
    if not rows:
        raise ConfigError(
            f"{source}: no rows to predict (example: a header row, then a row per example)"
        )
