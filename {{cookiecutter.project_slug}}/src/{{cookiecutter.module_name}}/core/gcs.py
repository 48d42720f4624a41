"""Read `gs://` paths as a stream (no full download), and local paths the same way.

`gs://bucket/...` goes through `tf.io.gfile`, which streams from Cloud Storage; a local path (or
the mounted Drive) uses plain Python, so reading local data never pays TensorFlow's import.
On Colab, `authenticate()` asks for the user's Google credentials once per session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def is_gcs(path: str | os.PathLike[str]) -> bool:
    """True for a `gs://bucket/...` path."""
    return str(path).startswith("gs://")


def authenticate() -> None:
    """On Colab, authenticate the user for Cloud Storage (a no-op elsewhere, where
    `gcloud auth application-default login` or GOOGLE_APPLICATION_CREDENTIALS provide them)."""
    try:
        from google.colab import auth  # type: ignore[import-not-found]
    except ImportError:
        return
    try:
        auth.authenticate_user()
    except Exception as exc:  # a `!python` subprocess cannot show the sign-in prompt
        print(
            f"NOTE: Cloud Storage sign-in failed here ({type(exc).__name__}); if reading gs:// "
            "fails, run `from google.colab import auth; auth.authenticate_user()` in a cell.",
            flush=True,
        )


def _gfile() -> Any:
    import tensorflow as tf

    return tf.io.gfile


def _use_gfile(path: str, force_gfile: bool) -> bool:
    return force_gfile or is_gcs(path)


def open_binary(path: str, force_gfile: bool = False) -> IO[bytes]:
    """Open `path` for reading bytes: a stream for gs://, a file otherwise."""
    if _use_gfile(path, force_gfile):
        return _gfile().GFile(path, "rb")
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


def exists(path: str, force_gfile: bool = False) -> bool:
    return _gfile().exists(path) if _use_gfile(path, force_gfile) else os.path.exists(path)


def isdir(path: str, force_gfile: bool = False) -> bool:
    return _gfile().isdir(path) if _use_gfile(path, force_gfile) else os.path.isdir(path)


def join(base: str, *parts: str) -> str:
    """Join path parts with '/' for gs:// (os.path.join would use '\\' on Windows)."""
    if is_gcs(base):
        return "/".join([base.rstrip("/"), *parts])
    return os.path.join(base, *parts)


def list_dir(path: str, force_gfile: bool = False) -> list[str]:
    """Sorted entry names of a folder (no trailing '/')."""
    if _use_gfile(path, force_gfile):
        return sorted(name.rstrip("/") for name in _gfile().listdir(path))
    return sorted(os.listdir(path))


def walk_files(path: str, force_gfile: bool = False) -> Iterator[str]:
    """Every file under `path` (or `path` itself if it is a file), in a stable order."""
    if not isdir(path, force_gfile):
        yield path
        return
    for name in list_dir(path, force_gfile):
        if name.startswith("."):  # .gitkeep, .DS_Store, staging bookkeeping
            continue
        child = join(path, name)
        if isdir(child, force_gfile):
            yield from walk_files(child, force_gfile)
        else:
            yield child


def size(path: str, force_gfile: bool = False) -> int:
    if _use_gfile(path, force_gfile):
        return int(_gfile().stat(path).length)
    return Path(path).stat().st_size
