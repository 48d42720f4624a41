"""`data.source: text`: `.txt` files in class subfolders, one example per file."""

from __future__ import annotations

from ..config import ConfigError, DataConfig
from ..core import locations
from ..sources import Source, class_files, source
from ..tasks.base import encode


@source("text", takes="folder", example="data/external/reviews")
def read_text_files(path: str, data: DataConfig, kind: str) -> Source:
    """UTF-8 `.txt` files in class subfolders (`reviews/pos/1.txt`), read one at a time."""
    example = "reviews/pos/1.txt, reviews/neg/2.txt"
    paths, classes = class_files(path, data, (".txt",), "text files", example)
    labels, names = encode(kind, classes, f"data.path {data.path} (class folders)")

    def ids(i: int) -> str:  # the file relative to data.path
        return locations.relative(paths[i], path)

    def where(i: int) -> str:
        return locations.join(data.path, ids(i))

    def load(i: int) -> str:
        with locations.open_binary(paths[i]) as f:
            return decode_text(f.read(), where(i))

    return Source("text", kind, labels, names, load, where, ids, feature_names=["text"])


def csv_of_texts(data: DataConfig) -> str:
    """What prepare's refusal of a file as data.path adds: a CSV of texts is the csv source's."""
    if not data.path.lower().endswith(".csv"):
        return ""
    column = data.text or "review"  # the user's column, when params.yaml names one
    return f"; a CSV with a text column: --set data.source=csv --set data.text={column}"


read_text_files.given_a_file = csv_of_texts  # prepare adds it to its refusal of a file


def decode_text(payload: bytes, where: str) -> str:
    """UTF-8 bytes (a byte-order mark dropped) as text; anything else one line naming the file."""
    try:
        return payload.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
