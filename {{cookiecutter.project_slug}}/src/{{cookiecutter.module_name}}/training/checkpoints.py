"""Atomic checkpoints: a crash mid-write never leaves a checkpoint that is read as good.

`<storage>/checkpoints/<run_name>/step-000000120/` holds `ckpt.index`, `ckpt.data-*` and
`meta.json`, written last with every file's size and CRC32, into a hidden `.tmp-*` folder renamed
to `step-*` only then. A restore checks them again: a synced Drive can still lose or cut files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.files import free_bytes, json_text, save_json, temp_file
from ..core.progress import say
from ..core.storage import SIDECAR_FILE
from .lease import LEASE_FILE

# TensorFlow is imported in the methods that use it: the command line imports this module for
# its errors, and `prepare` or `--help` should not wait 10 s for TensorFlow.

_STEP_DIR = re.compile(r"step-(\d+)")
MIB = 1 << 20
# meta.json's `format`: raise it when what a checkpoint holds changes (its variables, meta.json's
# `state` or `fingerprint`): an older checkpoint is then refused by name, never misread.
FORMAT = 2


class CheckpointMismatch(RuntimeError):
    """An intact checkpoint that does not fit the current model or settings."""


class ResultsWriteError(RuntimeError):
    """The final model or metrics could not be written; one line for the user."""


def keep_it(run_name: str, new_name: str = "") -> str:
    """What every refusal to resume suggests: another run, or the old settings."""
    return (
        f"its checkpoints are kept: train under another run_name (example: --set "
        f"run_name={new_name or run_name + '-2'}), or put back what changed to resume run "
        f"'{run_name}'"
    )


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """Committed checkpoints in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    found = [(_STEP_DIR.fullmatch(p.name), p) for p in directory.iterdir() if p.is_dir()]
    return sorted((int(match.group(1)), p) for match, p in found if match)


def newest_meta(directory: Path) -> dict[str, Any] | None:
    """The `meta.json` of the newest intact checkpoint in `directory` (only read), or None."""
    for _, path in reversed(list_checkpoints(directory)):
        if verify(path) is None:
            return json.loads((path / "meta.json").read_text())
    return None


def verify(path: Path) -> str | None:
    """None if the checkpoint folder is complete and unchanged, else what is wrong with it."""
    try:
        files = json.loads((path / "meta.json").read_text())["files"]
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


class CheckpointStore:
    """Saves to `directory`, keeps the newest `keep`, restores from `restore_from` (the chief's
    folder, for a multi-worker run's other workers, which save into a scratch folder)."""

    def __init__(self, directory: Path, keep: int, restore_from: Path | None = None) -> None:
        self.directory = directory
        self.keep = keep
        self.restore_from = restore_from or directory
        self._traced: tuple[Any, Callable[[Any], Any]] | None = None  # (checkpoint, its write)

    def try_save(self, checkpoint: Any, step: int, meta: dict[str, Any]) -> Path | None:
        """`save`, but a storage fault is said in one line and returns None (the run goes on)."""
        try:
            self._make_room()
            return self.save(checkpoint, step, meta)
        except Exception as exc:
            if not is_storage_fault(exc):
                raise
            cause = first_line(exc)
        cleaned = False
        with contextlib.suppress(OSError):  # a dropped Drive: the next start removes it
            cleaned = self.clean_partial()
        # A folder gone with a dropped Drive: the disk under its path is not the storage's.
        free = _free(self.directory) if os.path.isdir(self.directory) else "free space unknown"
        partial = "partial write removed" if cleaned else "a partial write may be left"
        say(
            f"WARNING: checkpoint at step {step} not saved ({cause}); {free} in {self.directory}"
            f"{_damaged(self.directory)}; {partial}, training goes on and the next checkpoint "
            "tries again"
        )
        return None

    def _make_room(self) -> None:
        """Prune older checkpoints (never the newest) before a save that would not fit."""
        *older, newest = list_checkpoints(self.directory) or [(0, None)]
        need = _folder_bytes(newest[1])  # the next one will be about as big
        free = free_bytes(self.directory)
        if free is None or free >= need or free + sum(_folder_bytes(p) for _, p in older) < need:
            return  # it fits, or pruning would not help (or free space is unknown): keep them
        for _, path in older:
            run = path.parent.name  # named too: a sweep's trials each prune a step-... alike
            say(f"Pruning {run}/{path.name} early to make room for the next checkpoint.")
            shutil.rmtree(path, ignore_errors=True)
            if (free_bytes(self.directory) or 0) >= need:
                return

    def save(self, checkpoint: Any, step: int, meta: dict[str, Any]) -> Path:
        """Write `checkpoint` (a tf.train.Checkpoint) as step `step`, atomically."""
        import tensorflow as tf

        final = self.directory / f"step-{step:09d}"
        tmp = self.directory / f".tmp-{final.name}-{os.getpid()}"
        write = self.prepare(checkpoint)  # it made the run's folder, once
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()  # not its parents: a dropped Drive's path is not made again on the VM's disk
        write(tf.constant(str(tmp / "ckpt")))
        files = {}
        for path in sorted(tmp.iterdir()):
            _fsync(path)
            files[path.name] = {"size": path.stat().st_size, "crc32": _crc32(path)}
        record = {**meta, "format": FORMAT, "step": step, "saved_at": time.time(), "files": files}
        (tmp / "meta.json").write_text(json_text(record))  # the folder is still hidden
        _fsync(tmp / "meta.json")
        _fsync(tmp)
        # The same step saved again (e.g. after a restart): set the old one aside, not delete it,
        # so a failing commit still leaves a complete checkpoint of that step.
        aside = self.directory / f".tmp-old-{final.name}-{os.getpid()}"
        if final.exists():
            os.replace(final, aside)
        try:
            _commit(tmp, final)
        except OSError:
            if aside.exists():
                shutil.rmtree(final, ignore_errors=True)
                os.replace(aside, final)
            raise
        shutil.rmtree(aside, ignore_errors=True)
        _fsync(self.directory)
        for _, path in list_checkpoints(self.directory)[: -self.keep]:
            shutil.rmtree(path, ignore_errors=True)
        return final

    def prepare(self, checkpoint: Any) -> Callable[[Any], Any]:
        """`checkpoint.write` traced once, before training: eagerly, a write reads every variable
        with ops of its own (MobileNetV3Small: 125 ms a save on 2 CPU cores, traced 19 ms). The
        run's folder is made then, once: a save makes only its own."""
        import tensorflow as tf

        if self._traced is None or self._traced[0] is not checkpoint:
            self.directory.mkdir(parents=True, exist_ok=True)
            write = tf.function(checkpoint.write)
            write.get_concrete_function(tf.TensorSpec([], tf.string))
            self._traced = (checkpoint, write)
        return self._traced[1]

    def restore(
        self, checkpoint: Any, check: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any] | None:
        """Restore the newest intact checkpoint into `checkpoint`; return its meta, or None.
        `check(meta)` runs first and raises CheckpointMismatch when the run is another one."""
        for _, path in reversed(list_checkpoints(self.restore_from)):
            problem = verify(path)
            if problem:
                say(
                    f"WARNING: checkpoint {path} is damaged ({problem}); "
                    "falling back to the one before it."
                )
                if self.restore_from == self.directory:
                    # Moved aside: it would otherwise count as the newest when pruning.
                    with contextlib.suppress(OSError):
                        os.replace(path, path.with_name(f"damaged-{path.name}-{int(time.time())}"))
                continue
            meta = json.loads((path / "meta.json").read_text())
            if check is not None:
                check(meta)
            try:
                checkpoint.read(str(path / "ckpt")).assert_existing_objects_matched()
            except Exception as exc:  # intact files that do not fit: a changed model
                first = str(exc).strip().splitlines()[0][:200]
                raise CheckpointMismatch(
                    f"checkpoint {path} holds another model than the one built now ({first}): "
                    "the architecture changed since the run started (model.* in params.yaml, "
                    f"or the code of model.py); {keep_it(path.parent.name)}"
                ) from None
            return meta
        return None

    def clean_partial(self) -> bool:
        """Delete `.tmp-*` folders left by a crash during a save (a complete checkpoint that a
        crash left set aside goes back to its place first); True when none is left."""
        for aside in self.directory.glob(".tmp-old-step-*"):
            final = self.directory / aside.name[len(".tmp-old-") :].rsplit("-", 1)[0]
            if not final.exists():
                with contextlib.suppress(OSError):
                    os.replace(aside, final)
        for child in self.directory.glob(".tmp-*"):
            shutil.rmtree(child, ignore_errors=True)
        return os.path.isdir(self.directory) and not any(self.directory.glob(".tmp-*"))

    def clear(self) -> list[int]:
        """Delete every checkpoint of this run (`train --fresh`): complete, partial, damaged, a
        lease write cut short; return the steps of the complete ones. The lease stays (this
        session holds it), and so does anything else in the folder: the project did not write it."""
        complete = list_checkpoints(self.directory)
        for _, path in complete:
            shutil.rmtree(path, ignore_errors=True)
        for pattern in (".tmp-*", "damaged-step-*", f".{LEASE_FILE}-*.tmp"):
            for path in self.directory.glob(pattern):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        return [step for step, _ in complete]


def _commit(tmp: Path, final: Path) -> None:
    """Rename `tmp` to `final` (atomic); where folders cannot be renamed (Cloud Storage FUSE on a
    flat bucket), move the files one by one, `meta.json` last: until it lands, `verify` rejects
    the folder."""
    try:
        os.replace(tmp, final)
    except OSError:
        final.mkdir()
        for path in sorted(tmp.iterdir(), key=lambda p: p.name == "meta.json"):
            os.replace(path, final / path.name)
        tmp.rmdir()


def is_storage_fault(exc: BaseException) -> bool:
    """True for a write that failed because of the storage: an OSError, or a TensorFlow OpError
    of the save op (on a full disk, SaveV2 raises `ResourceExhaustedError`)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return isinstance(exc, OSError) or (
        "OpError" in names and type(exc).__name__ != "InvalidArgumentError"
    )


def first_line(exc: BaseException) -> str:
    """`ErrorType: cause` in one short line. TensorFlow's message names the file, then
    `; <cause>`: the cause is the part after the last `; `, on the first line that has one (a
    traced op's message starts with "Graph execution error:" and where the op was defined)."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = next((line for line in lines if "; " in line), (lines or [""])[0])
    return f"{type(exc).__name__}: {without_op(first).rsplit('; ', 1)[-1][:160]}"


def without_op(line: str) -> str:
    """A line of TensorFlow's message without its op's name: the `function_node ...` in double
    braces before the file, `[Op:SaveV2]` after the cause."""
    line = re.sub(r"\s*\[Op:\w+\]$", "", line.strip())
    return re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line)


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(MIB):
            crc = zlib.crc32(chunk, crc)
    return crc


def _fsync(path: Path) -> None:
    """Flush a file or folder to disk, so a rename cannot overtake the data it names (FUSE mounts
    may not fsync a folder: skipped there)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _free(directory: Path) -> str:
    free = free_bytes(directory)
    return "free space unknown" if free is None else f"{free / MIB:,.1f} MiB free"


def _damaged(directory: Path) -> str:
    """`; <folders set aside as damaged, with their size> ...`, or '': never deleted but by you."""
    with contextlib.suppress(OSError):
        found = sorted(directory.glob("damaged-step-*"))
        if found:
            sizes = ", ".join(f"{p.name} ({_folder_bytes(p) / MIB:,.1f} MiB)" for p in found)
            return f"; damaged checkpoints set aside, yours to delete to free space: {sizes}"
    return ""


def _folder_bytes(path: Path | None) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file()) if path else 0


def same_bytes(saved: Path, target: Path) -> None:
    """Copy a saved .keras file to `target` (atomically) so that the same model always gives the
    same bytes (a complete run's results written again, after `dvc repro` deleted them, are then
    the ones its record names): Keras stamps the time into metadata.json and the zip's entries,
    and Python object ids into config.json's `shared_object_id`; here the time is 1980-01-01, as
    Keras dates its other entries, and the ids are numbered in order. The weights are streamed
    (a backbone's 100 MB are never all in memory), so the disk holds the model twice meanwhile."""
    fixed = Path(temp_file(target))
    try:
        with zipfile.ZipFile(saved) as source, zipfile.ZipFile(fixed, "w") as copy:
            for saved_entry in source.infolist():
                name, entry_info = saved_entry.filename, zipfile.ZipInfo(saved_entry.filename)
                entry_info.file_size = saved_entry.file_size  # past 2 GiB: zip64, as saved
                with source.open(name) as entry, copy.open(entry_info, "w") as out:
                    if name == "config.json":
                        out.write(_ids_in_order(entry.read().decode()).encode())
                    elif name == "metadata.json":
                        metadata = {**json.load(entry), "date_saved": "1980-01-01@00:00:00"}
                        out.write(json.dumps(metadata).encode())
                    else:
                        shutil.copyfileobj(entry, out, 1 << 20)
        os.replace(fixed, target)
    finally:
        fixed.unlink(missing_ok=True)


def _ids_in_order(config: str) -> str:
    """A saved model's config.json with its `shared_object_id`s numbered 1, 2, ... in order."""
    ids: dict[str, int] = {}
    number = lambda found: str(ids.setdefault(found[0], len(ids) + 1))  # noqa: E731
    return re.sub(r'(?<="shared_object_id": )\d+', number, config)


def write_results(
    model: Any,
    metrics: dict[str, Any],
    model_file: Path,
    metrics_file: Path,
    sidecar: dict[str, Any] | None = None,
) -> None:
    """Save the final model, its `sidecar` (models/model.json) and metrics, each atomically; a
    storage fault raises ResultsWriteError naming the file and the cause."""
    target = model_file
    try:
        keras_tmp = Path(temp_file(model_file, suffix=".keras"))
        try:
            model.save(keras_tmp)
            same_bytes(keras_tmp, model_file)
        finally:
            keras_tmp.unlink(missing_ok=True)
        if sidecar is not None:
            target = model_file.with_name(Path(SIDECAR_FILE).name)
            save_json(sidecar, target)
        target = metrics_file
        save_json(metrics, metrics_file)
    except Exception as exc:
        if not is_storage_fault(exc):
            raise
        raise ResultsWriteError(
            f"{target}: the final results could not be written ({first_line(exc)}; "
            f"{_free(target.parent)}); the checkpoints hold the trained run: "
            "free some space and run the same train command again to write them"
        ) from None
