"""Where data is read from: a local path, or a URL such as `gs://bucket/...`, the same way: fsspec
picks the file system from the URL (gcsfs for `gs://`) and streams; nothing is downloaded whole.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from pathlib import Path, PurePath
from typing import IO, Any

from fsspec.core import url_to_fs


def is_url(path: str | os.PathLike[str]) -> bool:
    """True for `gs://bucket/...` (or any other fsspec URL, e.g. `memory://` in the tests)."""
    return "://" in str(path)


def resolved(path: str, project_dir: os.PathLike[str]) -> str:
    """`path` as the project reads it: a URL as it is, a local path relative to the project
    folder, `~` being the user's home (`~/data/x.csv`)."""
    if is_url(path):
        return path
    return str(Path(project_dir) / Path(path).expanduser())


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


def open_binary(path: str) -> IO[bytes]:
    """Open `path` for reading bytes: a stream for a URL, a file otherwise."""
    fs, inner = url_to_fs(path)
    return fs.open(inner, "rb")


def info(path: str) -> dict[str, Any] | None:
    """What the file system knows of `path`; None only where it says nothing is there. Any other
    error (a dropped Drive's ENOTCONN or EIO) is raised: fsspec's `exists` and `isdir` take it for
    "absent", which would send the user to fix a path that is right."""
    fs, inner = url_to_fs(path)
    try:
        return fs.info(inner)
    except (FileNotFoundError, NotADirectoryError):
        return None


def isdir(path: str) -> bool:
    """True if `path` is a folder (a prefix, for a bucket)."""
    found = info(path)
    return found is not None and found["type"] == "directory"


def join(base: str, *parts: str) -> str:
    """Join path parts with '/' for a URL (os.path.join would use '\\' on Windows)."""
    return posixpath.join(base, *parts) if is_url(base) else os.path.join(base, *parts)


def relative(path: str, folder: str) -> str:
    """`path` (found under `folder` by `walk_files`) relative to `folder`, with '/'."""
    if is_url(folder):
        return path[len(folder.rstrip("/")) + 1 :]
    return os.path.relpath(path, folder).replace(os.sep, "/")


def list_dir(path: str) -> list[str]:
    """Sorted entry names of a folder."""
    fs, inner = url_to_fs(path)
    return sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(inner, detail=False))


def hidden(relative: str | os.PathLike[str]) -> bool:
    """True for a path (relative to the folder looked in) with a part that starts with a dot: a
    hidden file (.gitkeep, .DS_Store, macOS's `._` copies, staging's bookkeeping) or anything in a
    hidden folder (Jupyter's .ipynb_checkpoints). No data and no code: the one rule for all."""
    return any(part.startswith(".") for part in PurePath(relative).parts)


def walk_files(path: str) -> dict[str, int]:
    """{file: its size in bytes} of every file under `path` (or of `path` itself if it is a
    file), in a stable order, but the `hidden` ones, what is no file to read (a link to nothing,
    a pipe) and what is in a link to a folder (one to a parent would list its files again and
    again), as staging copies none. The sizes come with the listing: a bucket's is a request per
    page of it, not one per file. A folder that cannot be listed (a dropped Drive's EIO) raises."""
    here = info(path)
    if here is None or here["type"] != "directory":
        return {path: here["size"]} if here else {}
    fs, inner = url_to_fs(path)
    if is_url(path):  # a bucket's `find` is one listing: its failure raises
        files = {f: entry["size"] for f, entry in fs.find(inner, detail=True).items()}
    else:  # fsspec's `find` leaves out a folder it cannot list, whatever its `on_error`
        walked = os.walk(inner, onerror=unlisted)
        listed = (f"{top}/{name}" for top, _, names in walked for name in names)
        files = {f: size for f in listed if (size := _file_size(f)) is not None}
    scheme = f"{str(path).split('://')[0]}://" if is_url(path) else ""
    root = inner.rstrip("/")
    return {scheme + f: files[f] for f in sorted(files) if not hidden(f[len(root) :].strip("/"))}


def _file_size(path: str) -> int | None:
    """The size of the file at `path` (through a link); None for a link to nothing or what is no
    file (a pipe). Any other error (a dropped Drive's EIO) raises: `os.path.isfile` says False
    there, and so does `Path.is_file` from Python 3.14."""
    try:
        found = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise
    return found.st_size if stat.S_ISREG(found.st_mode) else None


def unlisted(exc: OSError) -> None:
    """os.walk's error: a folder Drive could not list is not an empty one."""
    raise exc
