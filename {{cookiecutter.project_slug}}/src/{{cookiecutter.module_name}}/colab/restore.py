"""What a new Colab VM brings back before a notebook trains or evaluates, in one line.

A fresh clone has no data and no model. A checkpoint's fingerprint names its data's hash,
`<storage>/manifests/<hash>.json` that data's manifest, whose files DVC's cache or remote hold;
`<storage>/models/<run_name>/` keeps a trained model (`keep_model`). Missing data is fetched from
DVC, else prepared again. Nothing on the VM is overwritten."""

from __future__ import annotations

import filecmp
import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from ..config import ConfigError, Params, load_params
from ..core.files import atomic_write, file_sha256, read_json, temp_file
from ..core.storage import MODEL_FILE, SIDECAR_FILE, TRAIN_METRICS, results_root, storage_root
from ..data import manifest
from ..training.checkpoints import newest_meta
from ..training.run_record import find_run
from .runtime_check import NotebookStop

MODELS = "models"  # <storage>/models/<run_name>/
KEPT_FILES = {"model.keras": MODEL_FILE, "model.json": SIDECAR_FILE, "train.json": TRAIN_METRICS}


def load_run_params(project_dir: Path, overrides: dict[str, Any] | None = None) -> Params:
    """params.yaml with a notebook's overrides ({"run_name": "x"}); a bad one stops the cell in
    one line (NotebookStop), as the command line does."""
    items = [f"{key}={value}" for key, value in (overrides or {}).items()]
    try:
        return load_params(Path(project_dir) / "params.yaml", items)
    except ConfigError as exc:
        raise NotebookStop(str(exc)) from None


def restore_for_training(project_dir: Path, overrides: dict[str, Any] | None = None) -> str:
    """Before 02 trains: the data run `run_name` was trained on, or for a new run dvc.lock's."""
    params = load_run_params(project_dir, overrides)
    name = params.run_name
    return _restore_trained_on(project_dir, params, re.escape(name), f"run '{name}'")


def restore_for_sweep(project_dir: Path, overrides: dict[str, Any] | None = None) -> str:
    """Before 04 searches: the data the trials `<sweep.name>-<n>` were trained on, or dvc.lock's."""
    params = load_run_params(project_dir, overrides)
    name = params.sweep.name  # its trials only: not those of a sweep named `<name>-more`
    return _restore_trained_on(project_dir, params, rf"{re.escape(name)}-\d+", f"sweep '{name}'")


def _restore_trained_on(project_dir: Path, params: Params, runs: str, whose: str) -> str:
    """`restore_data` for the data in the fingerprint of the runs matching `runs`, if any."""
    storage = storage_root(Path(project_dir))
    folders = sorted((storage / "checkpoints").glob("*"))
    metas = (newest_meta(run) or {} for run in folders if re.fullmatch(runs, run.name))
    hashes = ((meta.get("fingerprint") or {}).get("data") for meta in metas)
    data_hash = next((h for h in hashes if h), None)
    return restore_data(Path(project_dir), params, storage, data_hash, whose)


def run_facts(project_dir: Path, storage: Path | None = None) -> dict[str, Any]:
    """The facts (run_name, data_hash, ...) of the run record that wrote this model.keras, or {}."""
    elsewhere = (Path(storage) / "runs",) if storage else ()
    record = find_run(results_root(Path(project_dir)), MODEL_FILE, elsewhere)
    return (record or {}).get("facts") or {}


def restore_for_evaluation(project_dir: Path, run_name: str | None = None) -> str:
    """Before 03 evaluates: the model (this VM's, else `run_name`'s kept one) and its data."""
    project_dir = Path(project_dir)
    params = load_run_params(project_dir, {"run_name": run_name} if run_name else None)
    storage, results = storage_root(project_dir), results_root(project_dir)
    if all((results / rel).is_file() for rel in KEPT_FILES.values()):
        facts = run_facts(project_dir, storage)
        said = f"Model: {MODEL_FILE} of run '{facts.get('run_name') or '?'}' on this VM"
    else:
        kept = kept_model_folder(storage, params.run_name)
        if not all((kept / name).is_file() for name in KEPT_FILES):
            return (
                f"Model: none on this VM, and no model of run '{params.run_name}' in {kept}: "
                "train it first (02_train.ipynb)"
            )
        for name, rel in KEPT_FILES.items():
            atomic_write(results / rel, (kept / name).read_bytes())
        facts = run_facts(project_dir, storage)
        said = f"Model: run '{params.run_name}' restored from {kept}"
    whose = f"the model of run '{facts.get('run_name') or params.run_name}'"
    return f"{said}; {restore_data(project_dir, params, storage, facts.get('data_hash'), whose)}"


def restore_data(
    project_dir: Path, params: Params, storage: Path, data_hash: str | None, whose: str
) -> str:
    """Keep this VM's data; else fetch `data_hash`'s (None: dvc.lock's) from DVC; else prepare
    again, saying whether it made exactly that data."""
    here = manifest.load(project_dir)
    if here:
        mine = shown_id(project_dir / manifest.MANIFEST)
        if data_hash and manifest.data_hash(here) != data_hash:
            return (
                f"Data: {manifest.MANIFEST} on this VM ({mine}) kept; it is not the data "
                f"{whose} was trained on ({shown_id(manifest.kept_path(storage, data_hash))})"
            )
        return f"Data: {manifest.MANIFEST} on this VM ({mine}), nothing to restore"
    if data_hash:
        what, kept = f"the data {whose} was trained on", manifest.kept_path(storage, data_hash)
    else:
        what, kept = "the data dvc.lock records", dvc_lock_manifest(project_dir, storage)
    wanted = read_json(kept) if kept is not None else {}  # {}: no manifest of it is kept
    why = f"no manifest of it in {storage / manifest.KEPT}"
    if wanted:
        count, source = fetch_from_dvc(project_dir, wanted)
        if count:
            atomic_write(project_dir / manifest.MANIFEST, kept.read_bytes())
            return f"Data: {what} ({shown_id(kept)}), {count} files restored from {source}"
        why = source
    # Here: it imports TensorFlow, absent on a TPU runtime whose setup imports this module.
    from ..data.prepare import prepare

    prepare(params, project_dir)  # deterministic: the same sources and code make the same files
    made = manifest.data_hash(manifest.load(project_dir))
    target = data_hash or (manifest.data_hash(wanted) if wanted else None)
    ours = shown_id(project_dir / manifest.MANIFEST)
    if target is None:
        return f"Data: prepared on this VM ({ours}); no data was recorded for {whose}"
    if made == target:
        return f"Data: prepared again on this VM ({why}): exactly {what} ({ours})"
    return (
        f"WARNING: Data: prepared again on this VM ({why}), but not {what} (made "
        f"{ours}, recorded {shown_id(manifest.kept_path(storage, target))}): the sources or the "
        "data code changed"
    )


def shown_id(path: Path) -> str:
    """The data's ID in a line: its manifest's sha256 (`sha256sum data/manifest.json`), as the
    environment block and the model card show it; "?" when no manifest of it is kept."""
    return file_sha256(path)[:12] if path.is_file() else "?"


def dvc_lock_manifest(project_dir: Path, storage: Path) -> Path | None:
    """The kept manifest that dvc.lock records as `prepare`'s, or None."""
    lock = Path(project_dir) / "dvc.lock"
    try:
        outs = yaml.safe_load(lock.read_text())["stages"]["prepare"]["outs"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None
    md5 = next((o.get("md5") for o in outs if o.get("path") == manifest.MANIFEST), None)
    return manifest.find_kept(storage, md5) if md5 else None


def fetch_from_dvc(project_dir: Path, doc: dict[str, Any]) -> tuple[int, str]:
    """Copy the manifest's files from DVC's cache or remote, SHA-256 checked: (count, where
    from), or (0, why not) with nothing written when one is missing or in the way."""
    try:
        from dvc.repo import Repo

        with Repo(str(project_dir)) as repo:
            stores = [("the DVC cache", repo.cache.local)]
            try:
                remote = repo.cloud.get_remote(None, "pull")
                stores.append((f"the DVC remote {remote.path}", remote.odb))
            except Exception as exc:  # no remote, or one that needs credentials
                note = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                stores.append((f"no DVC remote ({note})", None))
            return _copy_from_stores(Path(project_dir), doc, stores)
    except Exception as exc:  # not a DVC project, DVC missing, an unreachable remote
        return 0, f"DVC: {type(exc).__name__}: {str(exc).strip()[:160]}"


def _copy_from_stores(project_dir: Path, doc: dict[str, Any], stores: list) -> tuple[int, str]:
    plan, used = [], set()
    for entry in doc["files"]:
        target = project_dir / entry["path"]
        if target.is_file():
            if file_sha256(target) == entry["sha256"]:
                continue
            return 0, f"{entry['path']} is on this VM with other content (kept)"
        for name, odb in stores:
            if odb is not None and odb.fs.exists(odb.oid_to_path(entry["dvc"]["md5"])):
                plan.append((entry, odb))
                used.add(name)
                break
        else:
            return 0, f"{entry['path']} is in neither the DVC cache nor {stores[-1][0]}"
    for entry, odb in plan:
        target = project_dir / entry["path"]
        tmp = temp_file(target)
        try:
            odb.fs.get_file(odb.oid_to_path(entry["dvc"]["md5"]), tmp)
            if file_sha256(Path(tmp)) != entry["sha256"]:
                return 0, f"{entry['path']}: the stored copy differs from the manifest"
            os.replace(tmp, target)
        finally:
            Path(tmp).unlink(missing_ok=True)
    return len(doc["files"]), " and ".join(sorted(used)) or "the copies already on this VM"


def kept_model_folder(storage: Path, run_name: str) -> Path:
    """`<storage>/models/<run_name>`, after undoing a `keep_model` swap cut off between renames."""
    target = Path(storage) / MODELS / run_name
    old = target.with_name(f".{run_name}.old")
    if old.is_dir() and not target.exists():
        os.replace(old, target)
    return target


def keep_model(project_dir: Path, storage: Path) -> str | None:
    """Swap the trained model's files into `<storage>/models/<run_name>/`; one line, or None."""
    results = results_root(Path(project_dir))
    files = {name: results / rel for name, rel in KEPT_FILES.items()}
    if not all(path.is_file() for path in files.values()):
        return None
    run_name = run_facts(project_dir, storage).get("run_name") or "run"
    target = kept_model_folder(storage, run_name)
    kept = target / "train.json"
    if kept.is_file() and filecmp.cmp(kept, files["train.json"], shallow=False):
        return f"Model of run '{run_name}': in {target} already"
    partial, old = target.with_name(f".{run_name}.partial"), target.with_name(f".{run_name}.old")
    for leftover in (partial, old):
        shutil.rmtree(leftover, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        for name, path in files.items():
            shutil.copyfile(path, partial / name)
    except OSError:  # Drive full: the kept model stays as it was
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if target.exists():
        os.replace(target, old)
    os.replace(partial, target)
    shutil.rmtree(old, ignore_errors=True)
    return f"Model of run '{run_name}': {target} (model.keras, model.json, train.json)"
