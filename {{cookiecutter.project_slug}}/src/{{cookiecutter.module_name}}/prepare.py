"""`prepare`: raw data -> `data/raw` (the versioned copy) -> seeded split in `data/processed`.

`data.source` picks the reader; `data.path` points at your data (local, Drive or gs://):
- `digits`: scikit-learn's bundled 8x8 digits (no download), written to `data/raw/digits.csv`;
- `csv`: one row per example, a `data.label` column, every other column a number;
- `images`: a folder with one subfolder per class (`cats/001.png`, `dogs/002.jpg`, ...);
- `tfrecord`: a TFRecord file or a folder of them, each `tf.train.Example` with a float feature
  `data.features` and a class feature `data.label` (an integer or a string).
Local data is staged into `data/raw` (copied once, skipped when unchanged); gs:// data is read as
a stream and only listed in `data/raw/source.json`. The split (train / validation / test) is
stratified by class and depends only on `seed`; `data/manifest.json` records every file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from . import gcs, manifest
from .config import ConfigError, Params
from .files import atomic_write, temp_file
from .staging import INDEX, stage

RAW = "data/raw"
PROCESSED = "data/processed"
SPLITS = ("train", "validation", "test")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
Loaded = tuple[np.ndarray, np.ndarray, list[str]]  # features, labels, class names


def encode_labels(values: list[Any]) -> tuple[np.ndarray, list[str]]:
    """Class indices and class names (sorted; numerically when every label is an integer)."""
    names = sorted({str(v) for v in values}, key=_label_order)
    lookup = {name: i for i, name in enumerate(names)}
    return np.array([lookup[str(v)] for v in values], dtype=np.int32), names


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def _label_order(name: str) -> tuple[int, int, str]:
    return (0, int(name), name) if _is_int(name) else (1, 0, name)


def write_digits_csv(path: Path) -> str:
    """Write scikit-learn's bundled digits as CSV; return a description of the source."""
    import sklearn
    from sklearn.datasets import load_digits

    digits = load_digits()
    header = [f"pixel_{i}" for i in range(digits.data.shape[1])] + ["label"]
    rows = np.column_stack([digits.data.astype(np.int64), digits.target])
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows.tolist())
    atomic_write(path, buf.getvalue().encode())
    return f"sklearn.datasets.load_digits (scikit-learn {sklearn.__version__}, bundled)"


def read_csv(path: str, label: str) -> Loaded:
    """Features (float32) and labels from a CSV with a header row and a `label` column."""
    with gcs.open_binary(path) as f:
        reader = csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline=""))
        header = next(reader, None)
        if header is None or label not in header:
            raise ConfigError(
                f"data.label: column {label!r} not in the header of {path} "
                f"(columns: {', '.join((header or [])[:8])}) (example: --set data.label=target)"
            )
        col = header.index(label)
        features, labels = [], []
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise ConfigError(
                    f"{path}: line {line} has {len(row)} values, the header has {len(header)} "
                    "(every row needs a value in every column, example: 0.5,1.2,cat)"
                )
            labels.append(row[col])
            values = row[:col] + row[col + 1 :]
            try:
                features.append([float(v) for v in values])
            except ValueError:
                bad = next(i for i, v in enumerate(values) if not _is_float(v))
                name = (header[:col] + header[col + 1 :])[bad]
                raise ConfigError(
                    f"{path}: line {line}, column {name!r}: {values[bad]!r} is not a number "
                    "(every column but data.label must be numeric)"
                ) from None
    y, classes = encode_labels(labels)
    return np.array(features, dtype=np.float32), y, classes


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_images(folder: str, size: list[int], channels: int) -> Loaded:
    """Images in class subfolders -> flat float32 rows in [0, 1], resized to `size` (h, w)."""
    from PIL import Image

    if len(size) != 2 or channels not in (1, 3):
        raise ConfigError(
            "data.image_size / data.image_channels: expected [height, width] and 1 or 3 "
            "(example: --set data.image_size=[28,28] --set data.image_channels=1)"
        )
    classes = [d for d in gcs.list_dir(folder) if gcs.isdir(gcs.join(folder, d))]
    rows, labels = [], []
    for label, name in enumerate(classes):
        for path in gcs.walk_files(gcs.join(folder, name)):
            if not path.lower().endswith(IMAGE_SUFFIXES):
                continue
            with gcs.open_binary(path) as f:
                image = Image.open(io.BytesIO(f.read())).convert("L" if channels == 1 else "RGB")
            image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            rows.append(np.asarray(image, dtype=np.float32).reshape(-1) / 255.0)
            labels.append(label)
    if not rows:
        raise ConfigError(
            f"data.path: no images ({', '.join(IMAGE_SUFFIXES)}) in class subfolders of {folder} "
            "(example: data/external/pets with pets/cat/1.png, pets/dog/2.png)"
        )
    return np.stack(rows), np.array(labels, dtype=np.int32), classes


def read_tfrecords(path: str, features: str, label: str) -> Loaded:
    """Examples from TFRecord file(s), streamed (gs:// is never downloaded whole)."""
    import tensorflow as tf

    files = list(gcs.walk_files(path))
    rows, labels = [], []
    for raw in tf.data.TFRecordDataset(files).as_numpy_iterator():
        feature = tf.train.Example.FromString(raw).features.feature
        if features not in feature or label not in feature:
            raise ConfigError(
                f"data.features / data.label: an example in {path} has features "
                f"{sorted(feature)} (example: --set data.features=pixels --set data.label=label)"
            )
        x = feature[features]
        rows.append(list(x.float_list.value) or list(x.int64_list.value))
        lab = feature[label]
        values = list(lab.int64_list.value) or [v.decode() for v in lab.bytes_list.value]
        labels.append(values[0])
    y, classes = encode_labels(labels)
    return np.array(rows, dtype=np.float32), y, classes


def split_indices(
    y: np.ndarray, validation_fraction: float, test_fraction: float, seed: int
) -> dict[str, np.ndarray]:
    """Stratified train / validation / test indices, a pure function of labels, fractions, seed."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in SPLITS}
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_test = round(len(idx) * test_fraction)
        n_val = round(len(idx) * validation_fraction)
        parts["test"].append(idx[:n_test])
        parts["validation"].append(idx[n_test : n_test + n_val])
        parts["train"].append(idx[n_test + n_val :])
    out = {name: np.sort(np.concatenate(p)) for name, p in parts.items()}
    for name, idx in out.items():
        if len(idx) == 0:
            raise ConfigError(
                f"data: {len(y)} examples leave the {name} split empty "
                "(example: --set data.validation_fraction=0.2 --set data.test_fraction=0.2)"
            )
    return out


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """np.savez, but byte-identical for identical arrays (fixed zip timestamps), written atomically:
    the same data gives the same hash, so DVC stores it once."""
    tmp = temp_file(path)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zf:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(array), allow_pickle=False)
    os.replace(tmp, path)


def _load_source(
    params: Params, project_dir: Path, recorded: set[str]
) -> tuple[Loaded, dict[str, str]]:
    """Read the configured source; return ((x, y, classes), {raw file: source description}).
    `recorded`: the files an earlier `prepare` wrote (only those may be overwritten)."""
    cfg = params.data
    raw_dir = project_dir / RAW
    raw_dir.mkdir(parents=True, exist_ok=True)
    if cfg.source == "digits":
        target = raw_dir / "digits.csv"
        refuse_unrecorded(project_dir, target, recorded)
        source = write_digits_csv(target)
        return read_csv(str(target), "label"), {f"{RAW}/digits.csv": source}

    path = cfg.path if gcs.is_gcs(cfg.path) else str((project_dir / cfg.path).expanduser())
    if gcs.is_gcs(path):
        gcs.authenticate()
    else:
        for out in (RAW, PROCESSED):
            if Path(path).resolve().is_relative_to((project_dir / out).resolve()):
                raise ConfigError(
                    f"data.path: {cfg.path} is inside {out}, which prepare writes; keep your "
                    "data elsewhere (example: --set data.path=data/external/my.csv)"
                )
    if not gcs.exists(path):
        raise ConfigError(
            f"data.path: {cfg.path} does not exist (example: --set data.path=data/external/my.csv)"
        )
    sources: dict[str, str] = {}
    if gcs.is_gcs(path):
        # Streamed, not copied: list what was read so the manifest says where the data came from.
        listing = [{"path": p, "size": gcs.size(p)} for p in gcs.walk_files(path)]
        atomic_write(raw_dir / "source.json", (json.dumps(listing, indent=2) + "\n").encode())
        sources[f"{RAW}/source.json"] = f"listing of {path}"
        read_from = path
    else:
        # Staged: a local, versioned copy (fast to read; skipped when already there).
        local = Path(path)
        target_dir = raw_dir if local.is_file() else raw_dir / local.name
        refuse_unrecorded(project_dir, raw_dir / local.name, recorded)
        stage(local, target_dir, progress=True)
        read_from = str(raw_dir / local.name)
        for p in gcs.walk_files(read_from):
            sources[Path(p).relative_to(project_dir).as_posix()] = str(
                local / Path(p).relative_to(read_from) if local.is_dir() else local
            )
    if cfg.source == "csv":
        if gcs.isdir(read_from):
            raise ConfigError(
                f"data.path: {cfg.path} is a folder; source csv needs a file "
                "(example: --set data.path=data/external/my.csv)"
            )
        x, y, classes = read_csv(read_from, cfg.label)
    elif cfg.source == "images":
        x, y, classes = read_images(read_from, cfg.image_size, cfg.image_channels)
        # Staging copies files, not empty folders: an empty class folder is found in the source.
        for name in gcs.list_dir(path):
            if gcs.isdir(gcs.join(path, name)) and name not in classes + [".", ".."]:
                classes.append(name)  # counted as a class with 0 examples below
    else:
        x, y, classes = read_tfrecords(read_from, cfg.features, cfg.label)
    return (x, y, classes), sources


def written_before(project_dir: Path) -> set[str]:
    """The files an earlier `prepare` wrote, from `data/manifest.json`: its `written` list, or in
    a manifest from before that list existed, the entries whose source prepare named itself (a
    file prepare only found there got the source "prepare")."""
    doc = manifest.load(project_dir) or {}
    if "written" in doc:
        return set(doc["written"])
    return {e["path"] for e in doc.get("files", []) if e.get("source", "prepare") != "prepare"}


def refuse_unrecorded(project_dir: Path, target: Path, recorded: set[str]) -> None:
    """Stop, before anything is written, when `target` (a file, or a folder's files) exists and
    an earlier `prepare` did not write it: it is the user's, and prepare would overwrite or mix
    into it."""
    files = [target] if target.is_file() else list(target.rglob("*")) if target.is_dir() else []
    # Staging's index in the destination lists what it copied (also in a run that then failed).
    dest = target if target.is_dir() else target.parent
    try:
        staged = {(dest / rel).relative_to(project_dir).as_posix() for rel in _staged(dest)}
    except (OSError, ValueError, TypeError):
        staged = set()
    for path in files:
        rel = path.relative_to(project_dir).as_posix()
        if path.is_file() and not path.name.startswith(".") and rel not in recorded | staged:
            raise ConfigError(
                f"{rel}: prepare would write here, but it did not write this file (it is yours); "
                "move your data out of data/raw to data/external/ and point data.path at it "
                "(example: --set data.path=data/external/my.csv)"
            )


def _staged(dest: Path) -> list[str]:
    index = dest / INDEX
    return list(json.loads(index.read_text())) if index.is_file() else []


def remove_stale(project_dir: Path, recorded: set[str], written: set[str]) -> None:
    """Delete the files an earlier `prepare` wrote (`recorded`) that this one did not (`written`),
    and nothing else: never a file prepare did not write, never outside data/raw, data/processed.
    Folders left empty by it go too (staging's own index file does not count)."""
    outs = [(project_dir / out).resolve() for out in (RAW, PROCESSED)]
    for rel in sorted(recorded - written):
        path = project_dir / rel
        if not path.is_file() or not any(path.resolve().is_relative_to(o) for o in outs):
            continue
        path.unlink()
        folder = path.parent
        while folder.resolve() not in outs and all(p.name == INDEX for p in folder.iterdir()):
            shutil.rmtree(folder)
            folder = folder.parent


def check_class_counts(y: np.ndarray, classes: list[str], cfg: Any) -> None:
    """Every class needs an example in each split (the split is stratified): an empty class
    folder or a class with one example is refused here, naming the class."""
    if len(classes) < 2:
        raise ConfigError(
            f"data.path: {cfg.path} has {len(classes)} class(es); a classifier needs two or more "
            "(example: pets/cat/1.png, pets/dog/2.png)"
        )
    counts = np.bincount(y, minlength=len(classes))
    for name, n in zip(classes, counts, strict=True):
        n_test, n_val = round(n * cfg.test_fraction), round(n * cfg.validation_fraction)
        if n_test < 1 or n_val < 1 or n - n_test - n_val < 1:
            raise ConfigError(
                f"data.path: class {name!r} has {n} example(s) in {cfg.path}, too few to have one "
                "in each of train / validation / test; add examples or remove the class "
                "(example: 10 or more per class)"
            )


def prepare(params: Params, project_dir: Path) -> dict[str, Any]:
    """Write `data/raw`, the split in `data/processed`, `data/manifest.json`; return a summary."""
    cfg = params.data
    if cfg.validation_fraction + cfg.test_fraction >= 1.0:
        raise ConfigError(
            "data.validation_fraction + data.test_fraction: must be below 1 "
            "(example: --set data.validation_fraction=0.2 --set data.test_fraction=0.2)"
        )
    recorded = written_before(project_dir)
    (x, y, classes), raw_sources = _load_source(params, project_dir, recorded)
    check_class_counts(y, classes, cfg)
    idx = split_indices(y, cfg.validation_fraction, cfg.test_fraction, params.seed)
    # Scale features into [-1, 1] by the training split's largest value (images are already in
    # [0, 1]): evaluation data never influences the scale.
    scale = float(np.abs(x[idx["train"]]).max()) if cfg.source in ("digits", "csv") else 1.0
    scale = scale if scale > 1.0 else 1.0
    processed = project_dir / PROCESSED
    processed.mkdir(parents=True, exist_ok=True)
    split_source = f"{cfg.source} split (seed {params.seed})"
    sources = {}
    for name in SPLITS:
        save_npz(
            processed / f"{name}.npz",
            x=x[idx[name]] / np.float32(scale),
            y=y[idx[name]],
            classes=np.array(classes),
        )
        sources[f"{PROCESSED}/{name}.npz"] = split_source
    written = set(raw_sources) | set(sources)
    remove_stale(project_dir, recorded, written)  # only what an earlier prepare wrote
    counts = {name: int(len(i)) for name, i in idx.items()}
    info = {
        "generated_by": f"python -m {__package__} prepare",
        "source": cfg.source,
        "data_path": None if cfg.source == "digits" else cfg.path,
        "seed": params.seed,
        "counts": counts,
        "classes": classes,
        "features": int(x.shape[1]),
        "scale": scale,
        "written": sorted(written),  # what prepare wrote: the only files it may delete later
    }
    doc = manifest.build(project_dir, {RAW: raw_sources, PROCESSED: sources}, info)
    manifest.write(project_dir, doc)
    print(
        f"Prepared {len(y)} examples of {len(classes)} classes from {cfg.source}: "
        + ", ".join(f"{n} {c}" for n, c in counts.items())
        + f"; {len(doc['files'])} files in {manifest.MANIFEST}",
        flush=True,
    )
    return info
