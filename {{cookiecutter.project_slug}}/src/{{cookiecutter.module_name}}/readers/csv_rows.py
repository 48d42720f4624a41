"""`data.source: csv`: one example per row of a CSV with a header row."""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from ..config import ConfigError, DataConfig
from ..core import locations
from ..sources import MissingLabels, Source, source
from ..spec import SPLIT_NAMES, split_named
from ..tasks.base import TargetError, encode

CSV_ERRORS = (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError)


def unreadable(path: object, exc: Exception, name: object = None) -> ConfigError:
    """One line for a CSV that pandas cannot read (CSV_ERRORS), naming it `name` (else `path`)."""
    name = name or path
    if isinstance(exc, pd.errors.ParserError):  # the first row with more fields than the header
        records = _records(str(path))
        header = next(records, (1, []))[1]
        for line, fields in records:
            if len(fields) > len(header):
                return ConfigError(
                    f"{name} line {line}: {len(fields)} fields, the header has {len(header)}; "
                    "each field needs its name in the header "
                    "(example: header a,b,label, rows 1,2,3)"
                )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ConfigError(f"{name}: not a readable CSV ({first})")


@source("csv", takes="file", example="data/external/my.csv")
def read_csv(path: str, data: DataConfig, kind: str) -> Source:
    """`data.label` is the target column, every other column a number (or `data.text` the input)."""
    try:
        with locations.open_binary(path) as f:
            table = fields_fit(pd.read_csv(f, dtype=str, keep_default_na=False))
    except CSV_ERRORS as exc:
        raise unreadable(path, exc, data.path) from None
    last = table.columns[-1] if len(table.columns) else None
    if last == f"Unnamed: {len(table.columns) - 1}" and not table[last].any():
        table = table.drop(columns=last)  # a trailing comma's: no name, no value
    nameless = next((i for i, c in enumerate(table.columns) if c == f"Unnamed: {i}"), None)
    if nameless is not None:  # pandas's name for an empty header cell: `df.to_csv`'s index
        raise ConfigError(
            f"{data.path}: column {nameless + 1} has no name in the header (an index pandas "
            "saved? it would be trained on as a feature); save the data without it "
            "(example: df.to_csv(path, index=False))"
        )

    def where(row: int) -> str:
        return f"{data.path} line {line_of(path, row)}"

    label = _column(table, data.label, "data.label", data.path, "target", MissingLabels)
    splits, split_from = None, {}
    if data.split == "column":  # the split column says each row's split; it is no feature
        column = _column(table, data.split_column, "data.split_column", data.path, "fold")
        splits, split_from = given_splits(table.pop(column).tolist(), column, where)
    try:  # the task's kind reads the labels (a missing one may be none: multilabel)
        y, names = encode(kind, table[label].tolist(), label)
    except TargetError as exc:
        raise ConfigError(f"{where(exc.row)}, column {label!r}: {exc.what}") from None
    except ConfigError as exc:
        raise ConfigError(f"{data.path}: {exc}") from None
    rows = dict(where=where, ids=lambda i: str(i + 1), splits=splits, split_from=split_from)
    if data.text:
        text = _column(table, data.text, "data.text", data.path, "review")
        if text == label:
            raise ConfigError(f"data.text: column {text!r} is data.label too (example: review)")
        unused = [str(c) for c in table.columns if c not in (text, label)]
        if unused:
            print(f"Note: data.text: the input is column {text!r}; not used: {', '.join(unused)}")
        texts = table[text].tolist()
        return Source("text", kind, y, names, texts.__getitem__, **rows, feature_names=[text])
    features = table.drop(columns=[label])
    x = as_numbers(features, where, "every column but data.label must be a number, in every row")
    return Source("vector", kind, y, names, x.__getitem__, **rows, feature_names=list(features))


def _column(
    table: pd.DataFrame, name: str, key: str, path: str, example: str, error: type = ConfigError
) -> str:
    """`name`, or one line naming `key` when the CSV's header lacks it."""
    if name not in table.columns:
        raise error(
            f"{key}: column {name!r} not in the header of {path} (columns: "
            f"{', '.join(list(table.columns)[:8])}) (example: --set {key}={example})"
        )
    return name


def fields_fit(table: pd.DataFrame) -> pd.DataFrame:
    """`table`, or a ParserError where pandas took each row's first field as the index."""
    if not isinstance(table.index, pd.RangeIndex):
        raise pd.errors.ParserError("a row has more fields than the header")
    return table


def _records(path: str) -> Iterator[tuple[int, list[str]]]:
    """(line, fields) of each non-blank record, lines as an editor numbers them: for errors."""
    with locations.open_binary(path) as f:
        reader = csv.reader(io.TextIOWrapper(f, "utf-8-sig", errors="replace", newline=""))
        start = 1
        try:
            for record in reader:
                if record:
                    yield start, record
                start = reader.line_num + 1
        except csv.Error:
            return


def line_of(path: str, row: int) -> int:
    """The line of the CSV `path` where data row `row` (from 0, as pandas counts them) starts."""
    return next(itertools.islice(_records(path), row + 1, None), (row + 2,))[0]


def as_numbers(table: pd.DataFrame, where: Callable[[int], str], rule: str) -> np.ndarray:
    """Every cell as float32, or one line naming the first that is empty, not a number, or
    infinite as float32 (`1e39`: the model would learn NaN)."""
    with np.errstate(over="ignore"):
        numbers = table.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float32)
    bad = ~np.isfinite(numbers)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        cell = table.iloc[row, col]
        if cell == "":
            what = "a missing value"
        elif pd.isna(pd.to_numeric(cell, errors="coerce")):
            what = f"not a number ({cell!r})"
        else:
            what = f"not a finite number ({cell!r}: infinite, or too large for float32)"
        at = where(int(table.index[row]))
        raise ConfigError(f"{at}, column {table.columns[col]!r}: {what} ({rule})")
    return numbers


def given_splits(
    values: list[str], column: str, where: Callable[[int], str]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(indices per split, where each came from) from each example's `data.split_column` cell."""
    chosen = np.array([split_named(str(v)) for v in values], dtype=object)
    bad = next((i for i, name in enumerate(chosen) if name is None), None)
    if bad is not None:
        known = ", ".join(n for aliases in SPLIT_NAMES.values() for n in aliases)
        raise ConfigError(
            f"{where(bad)}, column {column!r} (data.split_column): {values[bad]!r} is not a "
            f"split name (one of {known}) (example: train)"
        )
    splits = {s: np.flatnonzero(chosen == s) for s in SPLIT_NAMES if (chosen == s).any()}
    return splits, {s: f"column {column!r} = {s}" for s in splits}
