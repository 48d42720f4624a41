"""`data/manifest.json`: every data file's size, SHA-256, source and DVC MD5. `train` and
`evaluate` check it first: a run never trains on data other than what was prepared.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..config import COMMAND
from ..core import locations
from ..core.files import atomic_write, file_digests, file_sha256, read_json, save_json

MANIFEST = "data/manifest.json"
KEPT = "manifests"  # <storage>/manifests/<data hash>.json


class ManifestMismatch(Exception):
    """A data file differs from the manifest; the message is one line naming the file."""


def _files_under(folder: Path) -> list[Path]:
    found = folder.rglob("*")
    return sorted(p for p in found if p.is_file() and not locations.hidden(p.relative_to(folder)))


def write(project_dir: Path, outs: dict[str, dict[str, str]], info: dict[str, Any]) -> dict:
    """Write and return the manifest of the DVC outputs `outs` ({out folder: {file: source}})."""
    files = []
    for out, sources in outs.items():
        for path in _files_under(project_dir / out):
            rel = path.relative_to(project_dir).as_posix()
            found = file_digests(path, "sha256", "md5")  # one read for both
            files.append(
                {
                    "path": rel,
                    "size": path.stat().st_size,
                    "sha256": found["sha256"],
                    "source": sources.get(rel, "prepare"),
                    "dvc": {"out": out, "md5": found["md5"]},
                }
            )
    doc = {"version": 1, **info, "outs": sorted(outs), "files": files}
    save_json(doc, project_dir / MANIFEST)
    return doc


def load(project_dir: Path) -> dict[str, Any]:
    """The manifest, or {} when `prepare` has not run."""
    try:
        return read_json(project_dir / MANIFEST)
    except json.JSONDecodeError as exc:  # a hand edit or a merge conflict: git has it whole
        raise ManifestMismatch(
            f"{MANIFEST}: not JSON ({exc}); restore the committed one (`git checkout -- "
            f"{MANIFEST}`), or move it out and run `{COMMAND} prepare`"
        ) from None


def check(project_dir: Path) -> int:
    """The number of files checked against the manifest, else ManifestMismatch (one line)."""
    manifest = load(project_dir)
    if not manifest:
        raise ManifestMismatch(
            f"{MANIFEST}: not found; prepare the data first: `{COMMAND} prepare` "
            "(or `dvc repro prepare`)"
        )
    fix = (
        "restore the versioned data, discarding the change: `dvc checkout --force prepare` (or "
        f"`dvc pull --force prepare`), or rerun `{COMMAND} prepare` to make this the new version"
    )
    listed = {entry["path"] for entry in manifest["files"]}
    for entry in manifest["files"]:
        rel, path = entry["path"], project_dir / entry["path"]
        if not path.is_file():
            raise ManifestMismatch(f"{rel}: missing, but listed in {MANIFEST}; {fix}")
        size = path.stat().st_size
        if size != entry["size"]:
            raise ManifestMismatch(
                f"{rel}: {size} bytes, but {MANIFEST} says {entry['size']}; {fix}"
            )
        sha = file_sha256(path)
        if sha != entry["sha256"]:
            raise ManifestMismatch(
                f"{rel}: changed since prepare (sha256 {sha[:12]}..., {MANIFEST} says "
                f"{entry['sha256'][:12]}...); {fix}"
            )
    for out in manifest.get("outs", []):
        for path in _files_under(project_dir / out):
            rel = path.relative_to(project_dir).as_posix()
            if rel not in listed:
                raise ManifestMismatch(
                    f"{rel}: not in {MANIFEST} (added after prepare, or copied by a prepare that "
                    f"stopped?); {fix}"
                )
    return len(listed)


def data_hash(doc: dict) -> str:
    """SHA-256 over every file's path and SHA-256: the data's version, wherever prepared."""
    lines = sorted(f"{e['path']} {e['sha256']}" for e in doc["files"])
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def kept_path(storage: Path, digest: str) -> Path:
    """Where `keep` puts the manifest of the data with hash `digest`."""
    return Path(storage) / KEPT / f"{digest}.json"


def keep(project_dir: Path, storage: Path) -> Path | None:
    """Copy the manifest to `kept_path`, where a new VM (whose clone has none) finds it."""
    doc = load(project_dir)
    if not doc or Path(storage).resolve() == Path(project_dir).resolve():
        return None
    target = kept_path(storage, data_hash(doc))
    if not target.is_file():
        atomic_write(target, (Path(project_dir) / MANIFEST).read_bytes())
    return target


def find_kept(storage: Path, md5: str) -> Path | None:
    """The kept manifest whose MD5 is `md5` (what dvc.lock records), or None."""
    folder = Path(storage) / KEPT
    for path in sorted(folder.glob("*.json")):
        if file_digests(path, "md5")["md5"] == md5:
            return path
    return None
