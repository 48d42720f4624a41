"""`stage SRC DEST`: copy a dataset from slow storage (the mounted Drive) to fast local disk.

Reading thousands of small files straight from Drive is the usual reason a Colab epoch is slow.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core import locations
from ..core.files import atomic_write, file_sha256, free_bytes
from ..core.progress import progress_bar

INDEX = ".stage-index.json"
CHUNK_BYTES = 4 << 20  # read/write unit; a resumed copy restarts at a chunk boundary
RESUME_MIN_BYTES = 16 << 20  # smaller files are simply copied again
RESERVE_BYTES = 256 << 20  # never fill DEST closer than this


class StagingError(Exception):
    """Staging cannot start or finish; the message is one line."""


@dataclass
class StageReport:
    """What one call to `stage` did."""

    copied: int = 0
    skipped: int = 0
    resumed: int = 0
    bytes_copied: int = 0
    files: list[tuple[Path, str]] = field(default_factory=list)  # (source, path relative to DEST)

    def summary(self) -> str:
        return (
            f"{self.copied + self.skipped} files: {self.copied} copied ({self.resumed} resumed, "
            f"{self.bytes_copied / 2**20:,.1f} MiB), {self.skipped} already there"
        )


def _listing(src: Path) -> tuple[list[tuple[Path, str]], list[str]]:
    """(path, path relative to DEST) of every file to stage, and the folders to make, relative to
    DEST: `src` listed once (on Drive each listing of a folder is slow), but the hidden names,
    which `prepare`'s readers leave out too."""
    if src.is_file():
        return [(src, src.name)], []
    if not src.is_dir():
        raise StagingError(
            f"stage: {src} does not exist "
            "(example: stage /content/drive/MyDrive/data /content/data)"
        )
    files: list[tuple[Path, str]] = []
    folders: list[str] = []
    for top, subfolders, names in os.walk(src, onerror=locations.unlisted):
        subfolders[:] = sorted(name for name in subfolders if not locations.hidden(name))
        rel = Path(top).relative_to(src)
        folders += [(rel / name).as_posix() for name in subfolders]
        for name in names:  # not a broken link, a socket: what is no file is not copied
            if not locations.hidden(name) and Path(top, name).is_file():
                files.append((Path(top, name), (rel / name).as_posix()))
    return sorted(files), folders


def _partial_name(dest: Path, st: os.stat_result) -> Path:
    # The source's size and mtime are in the name: a copy of an older version is never resumed.
    return dest.with_name(f".{dest.name}.{st.st_size}-{st.st_mtime_ns}.partial")


def _partial_of(partial: Path) -> Path:
    """The file a partial copy is of: `_partial_name` read back."""
    return partial.with_name(partial.name[1:].rsplit(".", 2)[0])


def load_index(dest_dir: Path) -> dict[str, dict]:
    """{file relative to `dest_dir`: its sizes and mtimes} of what staging copied there, or {}."""
    try:
        return json.loads((dest_dir / INDEX).read_text())
    except (OSError, ValueError):
        return {}


def save_index(dest_dir: Path, index: dict[str, dict]) -> None:
    """Write `index` as what staging copied to `dest_dir`; none when it lists nothing, so a folder
    left with only the user's things holds no index of staging's."""
    if index:
        atomic_write(dest_dir / INDEX, json.dumps(index))
    else:
        (dest_dir / INDEX).unlink(missing_ok=True)


def _stamp(st: os.stat_result, target: Path) -> dict[str, list[int]]:
    d = target.stat()
    return {"src": [st.st_size, st.st_mtime_ns], "dest": [d.st_size, d.st_mtime_ns]}


def _unchanged(src: Path, dest: Path, st: os.stat_result, entry: dict | None, verify: bool) -> bool:
    """True when `dest` already holds `src` (same SHA-256, or an index entry: neither changed)."""
    if not dest.is_file() or dest.stat().st_size != st.st_size:
        return False
    if not verify and entry == _stamp(st, dest):
        return True
    return file_sha256(src) == file_sha256(dest)


def stage(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    verify: bool = False,
    reserve_bytes: int = RESERVE_BYTES,
    progress: bool = True,
    mirror: bool = False,
) -> StageReport:
    """Copy the file or folder `src` into the folder `dest`, skipping unchanged files and resuming
    big ones. `mirror`: the copies of files `src` no longer has go too."""
    src, dest = Path(src).expanduser(), Path(dest).expanduser()
    files, folders = _listing(src)
    index = load_index(dest)
    if mirror:  # before the folders are made below: an empty class folder `src` has stays
        _remove_copies(dest, index, {rel for _, rel in files})
    report = StageReport(files=files)
    # Partial copies, listed once: a listing per file copied would read a folder of N files N times.
    partials: dict[Path, list[Path]] = {}
    for found in dest.rglob(".*.partial"):
        partials.setdefault(_partial_of(found), []).append(found)

    todo: list[tuple[str, Path, os.stat_result, int]] = []  # (rel, source, stat, resume offset)
    for path, rel in files:
        st = path.stat()
        target = dest / rel
        if _unchanged(path, target, st, index.get(rel), verify):
            report.skipped += 1
            index[rel] = _stamp(st, target)
            continue
        partial = _partial_name(target, st)
        offset = 0
        if partial.is_file() and st.st_size >= RESUME_MIN_BYTES:
            offset = min(partial.stat().st_size, st.st_size) // CHUNK_BYTES * CHUNK_BYTES
        todo.append((rel, path, st, offset))

    needed = sum(st.st_size - offset for *_, st, offset in todo)
    free = free_bytes(dest)  # checked before any folder is made: a refusal leaves nothing
    if free is not None and needed + reserve_bytes > free:
        raise StagingError(
            f"stage: {dest} has {free / 2**30:.2f} GiB free, but copying needs "
            f"{needed / 2**30:.2f} GiB plus {reserve_bytes / 2**30:.2f} GiB spare; free some "
            "space or stage to another disk"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for folder in folders:  # empty ones too: a reader must see a class folder that has no files
        (dest / folder).mkdir(parents=True, exist_ok=True)

    bar = progress_bar(needed, disable=not progress, unit="B", unit_scale=True, desc="stage")
    try:
        for rel, path, st, offset in todo:
            target = dest / rel
            report.bytes_copied += _copy(path, target, st, offset, bar, partials.get(target, []))
            report.copied += 1
            report.resumed += offset > 0
            index[rel] = _stamp(st, target)
    finally:
        bar.close()
        save_index(dest, index)  # also after an interruption: finished files stay known
    return report


def _remove_copies(dest: Path, index: dict[str, dict], kept: set[str]) -> None:
    """Delete the copies `index` lists but `kept` does not, and the folders that leaves empty."""
    for rel in sorted(set(index) - kept):
        del index[rel]
        target = dest / rel
        target.unlink(missing_ok=True)
        folder = target.parent
        while folder != dest and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent


def _copy(
    src: Path, target: Path, st: os.stat_result, offset: int, bar: object, partials: list[Path]
) -> int:
    """Copy `src` to `target` through a `.partial` file from byte `offset`; the bytes copied."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = _partial_name(target, st)
    for stale in partials:
        if stale != partial:
            stale.unlink(missing_ok=True)
    copied = 0
    with open(src, "rb") as fin, open(partial, "r+b" if offset else "wb") as fout:
        fin.seek(offset)
        fout.seek(offset)
        fout.truncate()
        while chunk := fin.read(CHUNK_BYTES):
            fout.write(chunk)
            copied += len(chunk)
            bar.update(len(chunk))  # type: ignore[attr-defined]
        fout.flush()
        os.fsync(fout.fileno())
    if partial.stat().st_size != st.st_size:
        raise StagingError(f"stage: {src} changed while it was copied; run stage again")
    os.utime(partial, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(partial, target)
    return copied
