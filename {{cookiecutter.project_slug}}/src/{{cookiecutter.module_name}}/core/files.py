"""Writes that survive a crash, and file digests: the one place every writer and checker uses.

A crash (or a Colab disconnect) mid-write leaves either the old file or the new one, never half:
the data goes to a temporary file beside the target (same disk) and `os.replace` swaps it in. A
kill between the two leaves that temporary file: a later write into the folder removes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

CHUNK = 1 << 20
# A temporary file untouched this long is a killed write's: a live one is written in seconds (two
# sweep workers may write one trials.csv at the same moment). Folders are swept as seldom.
STALE_SECONDS = 600
LEFTOVER = re.compile(r"\..+-[0-9a-f]{16}\.tmp(\.\w+)?")  # temp_file's names, and nothing else
_swept: dict[Path, float] = {}  # folder -> when this process last removed leftovers there


def temp_file(target: Path, suffix: str = "", make_folder: bool = True) -> str:
    """A new empty file next to `target` (same disk, so os.replace is atomic), with the mode a
    plain open() would give (mkstemp's is 0600; reading the umask would set it process-wide);
    `suffix` ends its name (Keras saves only to a `.keras` file). Stale leftovers go first.
    `make_folder` False: the folder must be there (a dropped Drive is then a FileNotFoundError,
    not its path made again on the VM's disk)."""
    if make_folder:
        target.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(target.parent.absolute())
    tmp = target.parent / f".{target.name}-{secrets.token_hex(8)}.tmp{suffix}"
    tmp.touch(exist_ok=False)  # a new file, never one that is there
    return str(tmp)


def _remove_leftovers(folder: Path) -> None:
    """Remove the temporary files that killed writes left in `folder`, at most once per
    STALE_SECONDS: one listing, not one per file, when a folder of many files is written."""
    now = time.time()
    if now - _swept.get(folder, 0.0) < STALE_SECONDS:
        return
    _swept[folder] = now
    for entry in os.scandir(folder):
        with contextlib.suppress(OSError):  # gone already (another process swept it): fine
            if LEFTOVER.fullmatch(entry.name) and entry.stat().st_mtime < now - STALE_SECONDS:
                os.unlink(entry.path)


def atomic_write(target: Path, data: bytes | str, make_folder: bool = True) -> Path:
    """Write `data` (text is UTF-8) to `target` atomically; return `target` (`temp_file`'s
    `make_folder`)."""
    target = Path(target)
    tmp = temp_file(target, make_folder=make_folder)
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and not exc.filename:  # a failed write names no file
            exc.filename = str(target)
        raise
    return target


def json_text(data: Any) -> str:
    """`data` as standard JSON (jq and JavaScript read it): JSON has no NaN, so a number that is
    not finite (a diverged run's loss) is written as null."""
    return json.dumps(_finite(data), indent=2, default=str, allow_nan=False) + "\n"


def save_json(data: Any, path: Path) -> Path:
    """Write `data` as standard JSON (`json_text`), atomically."""
    return atomic_write(Path(path), json_text(data))


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path`, or {} when there is no such file."""
    return json.loads(path.read_text()) if path.is_file() else {}


def _finite(value: Any) -> Any:
    """`value` with each float that is not finite (NaN, infinity) made None, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def free_bytes(folder: Path) -> int | None:
    """Free space where `folder` is (or, not made yet, would be made), or None when unknown. Only
    a folder not made yet is looked past: one that cannot be reached (a dropped mount answers
    ENOTCONN or EIO, at its mount point too) is not, as the disk under a mount is another one."""
    for place in (folder, *folder.parents):
        try:
            return shutil.disk_usage(place).free
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return None


def file_digests(path: Path, *algorithms: str) -> dict[str, str]:
    """Hex digests of a file, read once in 1 MiB blocks: `file_digests(p, "sha256", "md5")`."""
    hashers = {name: hashlib.new(name) for name in algorithms}
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            for hasher in hashers.values():
                hasher.update(block)
    return {name: hasher.hexdigest() for name, hasher in hashers.items()}


def file_sha256(path: Path) -> str:
    """SHA-256 of a file."""
    return file_digests(path, "sha256")["sha256"]
