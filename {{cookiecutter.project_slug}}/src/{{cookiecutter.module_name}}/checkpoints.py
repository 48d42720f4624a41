"""Atomic checkpoints: a crash mid-write never leaves a checkpoint that is read as good.

Layout of `<storage>/checkpoints/<run_name>/`:

    step-000000120/ckpt.index, ckpt.data-00000-of-00001, meta.json
    step-000000160/...

A checkpoint is written into a hidden `.tmp-*` folder, its files are flushed to disk, `meta.json`
(step, sizes and CRC32 of every file) is written last, and only then is the folder renamed to
`step-*`: a rename is atomic, so a `step-*` folder is always complete. Restoring checks sizes and
checksums too (a synced Drive folder can still lose or truncate files), and falls back to the
previous checkpoint with a warning when the newest one is damaged.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import zlib
from pathlib import Path
from typing import Any

_STEP_DIR = re.compile(r"step-(\d+)")


class CheckpointMismatch(RuntimeError):
    """An intact checkpoint that does not fit the current model or settings."""


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _fsync(path: Path) -> None:
    """Flush a file or folder to disk, so a rename cannot overtake the data it names."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems (e.g. FUSE mounts) do not support fsync on folders
    finally:
        os.close(fd)


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """Committed checkpoints in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    found = []
    for child in directory.iterdir():
        match = _STEP_DIR.fullmatch(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


class CheckpointStore:
    """Saves to `directory`, keeps the newest `keep`, restores from `restore_from`.

    `restore_from` differs from `directory` only on non-chief workers of a multi-worker run: they
    read the chief's checkpoints (shared storage) but save into a scratch folder.
    """

    def __init__(self, directory: Path, keep: int, restore_from: Path | None = None) -> None:
        self.directory = directory
        self.keep = keep
        self.restore_from = restore_from or directory

    def save(self, checkpoint: Any, step: int, meta: dict[str, Any]) -> Path:
        """Write `checkpoint` (a tf.train.Checkpoint) as step `step`, atomically."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"step-{step:09d}"
        tmp = self.directory / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        checkpoint.write(str(tmp / "ckpt"))
        files = {}
        for path in sorted(tmp.iterdir()):
            _fsync(path)
            files[path.name] = {"size": path.stat().st_size, "crc32": _crc32(path)}
        record = {**meta, "step": step, "saved_at": time.time(), "files": files}
        meta_tmp = tmp / "meta.json.tmp"
        meta_tmp.write_text(json.dumps(record, indent=1))
        _fsync(meta_tmp)
        os.replace(meta_tmp, tmp / "meta.json")
        _fsync(tmp)
        if final.exists():  # the same step saved again (e.g. after a restart): replace it
            shutil.rmtree(final)
        try:
            os.replace(tmp, final)  # the commit: atomic
        except OSError:
            _commit_file_by_file(tmp, final)
        _fsync(self.directory)
        self._prune()
        return final

    def restore(self, checkpoint: Any) -> dict[str, Any] | None:
        """Restore the newest intact checkpoint into `checkpoint`; return its meta, or None."""
        for _, path in reversed(list_checkpoints(self.restore_from)):
            problem = verify(path)
            if problem:
                print(
                    f"WARNING: checkpoint {path} is damaged ({problem}); "
                    "falling back to the one before it.",
                    flush=True,
                )
                if self.restore_from == self.directory:
                    # Move it aside: it would otherwise count as the newest when pruning.
                    with contextlib.suppress(OSError):
                        os.replace(path, path.with_name(f"damaged-{path.name}-{int(time.time())}"))
                continue
            try:
                checkpoint.read(str(path / "ckpt")).assert_existing_objects_matched()
            except Exception as exc:  # intact files that do not fit: a changed model
                first = str(exc).strip().splitlines()[0][:200]
                raise CheckpointMismatch(
                    f"checkpoint {path} does not match the current model ({first}); "
                    "start over with --fresh or use another run_name"
                ) from None
            return json.loads((path / "meta.json").read_text())
        return None

    def clean_partial(self) -> None:
        """Delete `.tmp-*` folders left by a crash during a save."""
        if self.directory.is_dir():
            for child in self.directory.glob(".tmp-*"):
                shutil.rmtree(child, ignore_errors=True)

    def clear(self) -> None:
        """Delete every checkpoint of this run (`train --fresh`)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def _prune(self) -> None:
        for _, path in list_checkpoints(self.directory)[: -self.keep]:
            shutil.rmtree(path, ignore_errors=True)


def _commit_file_by_file(tmp: Path, final: Path) -> None:
    """The commit where folders cannot be renamed (Cloud Storage FUSE on a flat bucket): move the
    files one by one, `meta.json` last. Until it lands, `verify` rejects the folder."""
    final.mkdir()
    for path in sorted(tmp.iterdir(), key=lambda p: p.name == "meta.json"):
        os.replace(path, final / path.name)
    tmp.rmdir()


def verify(path: Path) -> str | None:
    """None if the checkpoint folder is complete and unchanged, else what is wrong with it."""
    try:
        meta = json.loads((path / "meta.json").read_text())
        files = meta["files"]
    except (OSError, ValueError, KeyError) as exc:
        return f"meta.json unreadable: {type(exc).__name__}"
    if not any(name.endswith(".index") for name in files):
        return "no index file listed"
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} missing"
        if file.stat().st_size != expected["size"]:
            return f"{name} has {file.stat().st_size} bytes, expected {expected['size']}"
        if _crc32(file) != expected["crc32"]:
            return f"{name} checksum differs"
    return None
