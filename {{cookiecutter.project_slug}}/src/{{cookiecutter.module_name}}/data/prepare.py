"""`prepare`: raw data -> `data/raw` (the versioned copy) -> TFRecord shards in `data/processed`."""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from ..config import COMMAND, ConfigError, DataConfig, Params
from ..core import locations
from ..core.files import atomic_write, save_json
from ..core.storage import storage_root
from ..readers.digits import read_digits
from ..registry import bound, check, lookup
from ..sources import Source
from ..spec import SPEC, SPLITS, DataSpec
from ..tasks.base import task_class
from . import manifest
from .images import stored_image
from .pipeline import X, serialize, string_feature
from .split import origin_of, read_layout, split_examples, summary
from .staging import INDEX, load_index, save_index, stage
from .text import RESERVED, VOCABULARY, learn_vocabulary

RAW = "data/raw"
PROCESSED = "data/processed"
SHARD_BYTES = 100 * 2**20  # about 100 MB per shard: big reads, yet many shards to interleave
ENCODE_CHUNK = 256  # images decoded and re-encoded at a time (threads: PIL releases the GIL)


def _load_source(
    params: Params, project_dir: Path, recorded: set[str]
) -> tuple[Source, dict[str, str], str]:
    """(the source, {raw file: its origin}, what a random split is drawn from)."""
    cfg = params.data
    reader = bound("source", cfg.source, cfg.args, "data.args")
    kind = task_class(params.task.type).kind
    if cfg.split != "random" and not reader.reads_path:
        raise ConfigError(
            f"data.split: {cfg.split} reads split folders, files or a column under data.path, "
            f"but data.source {cfg.source} reads no path (it brings its own splits, or none) "
            "(example: --set data.split=random)"
        )
    raw_dir = project_dir / RAW
    if not reader.reads_path:  # bundled or downloaded: the reader says what data/raw records
        found = reader("", cfg, kind)
        for name, (payload, _) in found.raw.items():
            path = raw_dir / name  # the same bytes: left by a prepare stopped after writing it
            if not (path.is_file() and path.read_bytes() == payload):
                refuse_unrecorded(project_dir, path, recorded)
        for name, (payload, _) in found.raw.items():
            atomic_write(raw_dir / name, payload)
        written = {f"{RAW}/{name}": what for name, (_, what) in found.raw.items()}
        return found, written, origin_of(cfg, "")
    path, sources = _stage(_checked_path(cfg, reader, project_dir), project_dir, recorded)
    # The reader reads the staged copy, `path`, and names the user's, data.path, in its errors.
    if cfg.split in ("folders", "files"):
        found = read_layout(reader, path, cfg, kind)
    else:
        found = reader(path, cfg, kind)
    return found, sources, origin_of(cfg, path)


def _checked_path(data: DataConfig, reader: Any, project_dir: Path) -> str:
    """`data.path`, checked before anything is copied: it exists, outside what prepare writes, and
    is the kind of path the reader and `data.split` take."""
    path = locations.resolved(data.path, project_dir)
    if locations.is_url(path):
        locations.authenticate()
    else:
        here = Path(path).resolve()
        for out in (RAW, PROCESSED):
            written = (project_dir / out).resolve()
            if here.is_relative_to(written) or written.is_relative_to(here):
                where = "is inside" if here.is_relative_to(written) else "holds"
                raise ConfigError(
                    f"data.path: {data.path} {where} {out}, which prepare writes; keep your "
                    "data elsewhere (example: --set data.path=data/external/my.csv)"
                )
    found = locations.info(path)  # one look (a request, on gs://) for both questions
    if found is None:
        raise ConfigError(
            f"data.path: {data.path} does not exist (example: --set data.path=data/external/my.csv)"
        )
    folder = found["type"] == "directory"
    if data.split in ("folders", "files"):
        if not folder:
            holding = "train/ (validation/, test/)" if data.split == "folders" else "train.csv"
            raise ConfigError(
                f"data.split: {data.split} needs a folder at data.path holding {holding}; "
                f"{data.path} is a file (example: --set data.split=random)"
            )
        each = "folder" if data.split == "folders" else "file"  # what the reader gets per split
        if reader.takes and reader.takes != each:
            other = "folders" if each == "file" else "files"
            raise ConfigError(
                f"data.split: {data.split} gives data.source {data.source} a {each} per split, "
                f"but it reads a {reader.takes} (example: --set data.split={other})"
            )
    elif reader.takes and folder != (reader.takes == "folder"):
        example = reader.example or f"data/external/my-{reader.takes}"
        hint = getattr(reader, "given_a_file", None)  # a reader's own: the source that reads it
        raise ConfigError(
            f"data.path: {data.path} is a {'folder' if folder else 'file'}; data.source "
            f"{data.source} reads a {reader.takes} (example: --set data.path={example})"
            + (hint(data) if hint and not folder else "")
        )
    return path


def _stage(path: str, project_dir: Path, recorded: set[str]) -> tuple[str, dict[str, str]]:
    """(where to read, {raw file: its origin}): a local path staged into data/raw, a URL listed."""
    raw_dir = project_dir / RAW
    if locations.is_url(path):
        # Streamed, not copied: list what was read so the manifest says where the data came from.
        listing = [{"path": p, "size": n} for p, n in locations.walk_files(path).items()]
        save_json(listing, raw_dir / "source.json")
        return path, {f"{RAW}/source.json": f"listing of {path}"}
    local = Path(path)
    read_from = raw_dir / local.name
    refuse_unrecorded(project_dir, read_from, recorded)
    dest = read_from if local.is_dir() else raw_dir
    # mirror: a file gone from data.path (left out after a failed prepare) leaves the copy too.
    staged = stage(local, dest, mirror=local.is_dir())
    copies: dict[str, str] = {}  # {the staged copy, relative to the project: its source}
    for file, rel in staged.files:  # staging's listing: on Drive, listing data.path again is slow
        copies[(dest / rel).relative_to(project_dir).as_posix()] = str(file)
    return str(read_from), copies


def refuse_unrecorded(project_dir: Path, target: Path, recorded: set[str]) -> None:
    """Stop when `target` (a file, or a folder's files) holds a file prepare did not write."""
    files = [target] if target.is_file() else target.rglob("*")  # none when it does not exist
    for path in files:
        rel = path.relative_to(project_dir).as_posix()
        if path.is_file() and not locations.hidden(rel) and rel not in recorded:
            raise ConfigError(
                f"{rel}: prepare would write here, but it did not write this file (it is yours); "
                "move your data out of data/raw to data/external/ and point data.path at it "
                "(example: --set data.path=data/external/my.csv)"
            )


def _staged_folders(project_dir: Path) -> list[Path]:
    """The folders staging copied into, each with its index: data/raw and the folders in it."""
    raw = project_dir / RAW
    return [raw, *(index.parent for index in raw.glob(f"*/{INDEX}"))]


def staged_files(project_dir: Path) -> set[str]:
    """The files staging copied into data/raw (also a failed prepare's: a retry copies none)."""
    return {
        (folder / rel).relative_to(project_dir).as_posix()
        for folder in _staged_folders(project_dir)
        for rel in load_index(folder)
    }


def remove_stale(project_dir: Path, recorded: set[str], written: set[str]) -> None:
    """Delete the files `recorded` but not `written` (only in data/raw, data/processed), then
    their entries in staging's indexes and the folders that leaves empty."""
    outs = [(project_dir / out).resolve() for out in (RAW, PROCESSED)]
    stale = {project_dir / rel for rel in recorded - written}
    deleted = sorted(
        p for p in stale if p.is_file() and any(p.resolve().is_relative_to(o) for o in outs)
    )
    for path in deleted:
        path.unlink()
    # An entry left in an index would make a file of the user's, put at its path later, prepare's
    # to delete. After the files: a stop in between leaves entries the next prepare drops, not
    # copies no index lists, which would pass for the user's.
    for folder in _staged_folders(project_dir):
        index = load_index(folder)
        kept = {rel: stamp for rel, stamp in index.items() if folder / rel not in stale}
        if len(kept) < len(index):
            save_index(folder, kept)
    for path in deleted:
        folder = path.parent
        # is_dir: the walk from a copy beside it may have removed it already
        while folder.is_dir() and folder.resolve() not in outs and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent


@dataclasses.dataclass
class Moments:
    """A vector source's training split, gathered as it is written (Welford's: one pass, no
    example held): the feature mean and variance the model standardises with, and the width."""

    count: int = 0
    mean: Any = np.float64(0)  # float64 (an array from the first example on: its width is all's)
    squares: Any = np.float64(0)  # the sum of squared deviations
    first: str = ""  # where the first example is


def _payloads(source: Source, order: np.ndarray, image: tuple[int, int, int] | None):
    """The encoded x of each example in `order` (images re-encoded in threads, chunk by chunk)."""
    if image is None:
        for i in order:
            if source.kind == "vector":  # flat float32 (a reader's `None`: NaN; `1e39`: inf)
                with np.errstate(over="ignore"):
                    x = np.asarray(source.load(int(i)), np.float32).reshape(-1)
                yield x
            else:
                yield str(source.load(int(i))).encode("utf-8")
        return

    def one(i: int) -> bytes:
        return stored_image(source.load(i), image[:2], image[2], source.encoding, source.where(i))

    with ThreadPoolExecutor(max_workers=4) as pool:
        for start in range(0, len(order), ENCODE_CHUNK):
            yield from pool.map(one, [int(i) for i in order[start : start + ENCODE_CHUNK]])


def write_shards(
    source: Source,
    order: np.ndarray,
    folder: Path,
    split: str,
    image: tuple | None,
    moments: Moments | None = None,
) -> list[str]:
    """Write the examples `order` of `source` as `<split>-NNNNN.tfrecord` shards; return names.
    Vectors: one line names one with a number missing or infinite (the model would learn NaN) or
    not as wide as the first training one (written first); the training split's go to `moments`."""
    names: list[str] = []
    writer = None
    written = 0
    for i, x in zip(order, _payloads(source, order, image), strict=True):
        if moments is not None:
            width = moments.mean.size if moments.count else len(x)
            if len(x) != width or not np.isfinite(x).all():
                raise _refusal(source.where(int(i)), x, width, moments.first)
        if moments is not None and split == "train":
            moments.first = moments.first or source.where(int(i))
            moments.count += 1
            delta = x - moments.mean
            moments.mean = moments.mean + delta / moments.count
            moments.squares = moments.squares + delta * (x - moments.mean)
        record = serialize(x, source.labels[i], source.ids(int(i)) if source.ids else str(i))
        if writer is None or written >= SHARD_BYTES:
            if writer is not None:
                writer.close()
            names.append(f"{split}-{len(names):05d}.tfrecord")
            writer = tf.io.TFRecordWriter(str(folder / names[-1]))
            written = 0
        writer.write(record)
        written += len(record) + 16  # TFRecord framing: length, two CRCs
    if writer is not None:
        writer.close()
    return names


def _refusal(where: str, x: np.ndarray, width: int, first: str) -> ConfigError:
    """The line that refuses the vector at `where`: a number missing or infinite, or not `width`
    numbers as the first training example (at `first`)."""
    example = ", ".join(["0.5"] * min(width, 3)) + (", ..." if width > 3 else "")
    if not np.isfinite(x).all():
        return ConfigError(
            f"{where}: {x[~np.isfinite(x)][0]} among its {len(x)} numbers; fill in the missing "
            f"or infinite values, or leave the example out (example: [{example}])"
        )
    return ConfigError(
        f"{where}: {len(x)} numbers, where {first} (the first training example) has {width}; "
        f"give every example as many (example: [{example}])"
    )


def write_processed(
    source: Source,
    idx: dict[str, np.ndarray],
    folder: Path,
    params: Params,
    record: dict[str, Any] | None = None,
) -> DataSpec:
    """Every split of `source` as shards in `folder`, plus `spec.json`; a failure leaves the
    previous shards as they were."""
    cfg = params.data
    image = None
    if source.kind == "image":
        image = source.input_shape or (*cfg.image_size, cfg.image_channels)
        if len(image) != 3 or image[2] not in (1, 3):
            raise ConfigError(
                "data.image_size / data.image_channels: expected [height, width] and 1 or 3 "
                "(example: --set data.image_size=[64,64] --set data.image_channels=3)"
            )
    moments = Moments() if source.kind == "vector" else None
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".prepare-partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    shards: dict[str, list[str]] = {}
    vocabulary: dict[str, Any] = {}
    try:
        for n, split in enumerate(SPLITS):
            # A seeded random order: classes mixed within and across shards.
            order = np.random.default_rng([params.seed, n]).permutation(idx[split])
            shards[split] = write_shards(source, order, tmp, split, image, moments)
        if source.kind == "text":  # from the training split only
            vocabulary = write_text_vocabulary(tmp, shards["train"], cfg.max_tokens)
        for p in tmp.iterdir():
            p.replace(folder / p.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    task = task_class(source.task)(names=list(source.names))
    labels = np.asarray(source.labels)
    stats = {**task.statistics(labels[idx["train"]]), **vocabulary}
    if moments is not None:
        var = moments.squares / moments.count
        stats.update(feature_mean=moments.mean.tolist(), feature_var=var.tolist())
    counts = {s: task.counts(labels[idx[s]]) for s in SPLITS}  # None: a kind without classes
    class_counts = None if counts["train"] is None else {s: c.tolist() for s, c in counts.items()}
    # Vectors flat, as the shards hold them (a reader's nested lists row by row), as wide as they
    # are (a reader may not say): one CSV column each for predict, one input each for the model.
    flat = (moments.mean.size,) if moments is not None else ()
    shape = image or ((cfg.sequence_length,) if source.kind == "text" else flat)
    names = list(source.feature_names)
    if source.kind == "vector" and not names:  # yours, TFRecord, TFDS: predict's CSV columns
        names = [f"x{i}" for i in range(flat[0])]
    spec = DataSpec(
        kind=source.kind,
        task=source.task,
        input_shape=tuple(int(v) for v in shape),
        names=list(source.names),
        counts={s: int(len(idx[s])) for s in SPLITS},
        split=record or {},
        feature_names=names,
        extra={
            "shards": shards,
            "encoding": source.encoding if image else {"text": "utf-8"}.get(source.kind, "float"),
            "seed": params.seed,
            "class_counts": class_counts,  # per split, in the order of the names
        },
        **stats,
    )
    save_json(dataclasses.asdict(spec), folder / SPEC)
    return spec


def write_text_vocabulary(folder: Path, train_shards: list[str], max_tokens: int) -> dict[str, Any]:
    """`folder/vocabulary.txt` from the training shards' texts; the spec's fields for it."""
    texts = string_feature([str(folder / name) for name in train_shards], X).unbatch()
    tokens = learn_vocabulary(texts, max_tokens)
    if not tokens:
        raise ConfigError(
            "data.text: the training split has no words (every text is empty or punctuation); "
            "check the column (example: --set data.text=review)"
        )
    # One token per line, UTF-8, `\n` endings: what TextVectorization reads back.
    (folder / VOCABULARY).write_bytes(("\n".join(tokens) + "\n").encode("utf-8"))
    return {"vocabulary": VOCABULARY, "vocabulary_size": len(tokens) + RESERVED}


def _described(spec: DataSpec) -> str:
    """The targets and the inputs, as prepare's last line says them."""
    if spec.target_mean is not None:
        what = f"{spec.task} on {spec.names[0]!r}, mean {spec.target_mean:.4g}"
    else:
        what = f"{spec.task}: {len(spec.names)} {task_class(spec.task).name_word} names"
    if spec.kind == "text":
        return (
            f"{what}; texts, {spec.vocabulary_size} tokens in {PROCESSED}/{spec.vocabulary}, "
            f"{spec.input_shape[0]} per example"
        )
    return f"{what}; {spec.kind}s {'x'.join(map(str, spec.input_shape))}"


def bundled_digits(folder: Path, params: Params) -> DataSpec:
    """The bundled digits as train and validation shards: what `train` uses without `prepare`."""
    source = read_digits("", params.data, task_class(params.task.type).kind)
    data = dataclasses.replace(params.data, split="random")
    idx, split = split_examples(source, data, params.seed, "digits", test_fraction=0.0)
    return write_processed(source, idx, folder, params, split)


def prepare(params: Params, project_dir: Path) -> dict[str, Any]:
    """Write `data/raw`, `data/processed` and `data/manifest.json`; a failed one leaves no empty
    folder it made (data/raw is a DVC output)."""
    before = _folders(project_dir)
    try:
        return _prepare(params, project_dir)
    except BaseException:
        # Deepest first: a folder's new folders are gone before it is looked in. What staging
        # copied stays, so that a retry copies nothing again.
        for folder in sorted(_folders(project_dir) - before, key=lambda p: len(p.parts))[::-1]:
            if not any(folder.iterdir()):
                folder.rmdir()
        raise


def _folders(project_dir: Path) -> set[Path]:
    """data/raw, data/processed and every folder in them."""
    tops = [project_dir / out for out in (RAW, PROCESSED)]
    return {Path(folder) for top in tops for folder, _, _ in os.walk(top)}


def _prepare(params: Params, project_dir: Path) -> dict[str, Any]:
    cfg = params.data
    if cfg.validation_fraction + cfg.test_fraction >= 1.0:
        raise ConfigError(
            "data.validation_fraction + data.test_fraction: must be below 1 "
            "(example: --set data.validation_fraction=0.2 --set data.test_fraction=0.2)"
        )
    check(params)  # names and the components' own arguments, before anything is written
    storage = storage_root(project_dir)  # an unmounted Drive too
    # What an earlier prepare wrote, or staged before it failed: the only files it may replace.
    recorded = staged_files(project_dir)
    recorded |= set(manifest.load(project_dir).get("written", []))
    source, raw_sources, origin = _load_source(params, project_dir, recorded)
    idx, split = split_examples(source, cfg, params.seed, origin)
    processed = project_dir / PROCESSED
    spec = write_processed(source, idx, processed, params, split)
    names = [SPEC, spec.vocabulary, *itertools.chain(*spec.extra["shards"].values())]
    written = {f"{PROCESSED}/{name}" for name in names if name}
    remove_stale(project_dir, recorded, written | set(raw_sources))
    split_source = f"{cfg.source}, data.split {cfg.split} (seed {params.seed})"
    info = {
        "generated_by": f"{COMMAND} prepare",
        "source": cfg.source,
        "data_path": cfg.path if lookup("source", cfg.source).reads_path else None,
        "seed": params.seed,
        "counts": spec.counts,
        "split": spec.split,
        "task": spec.task,
        "classes": spec.names,
        "kind": spec.kind,
        "input_shape": list(spec.input_shape),
        # What prepare wrote: the only files it may delete later.
        "written": sorted(written | set(raw_sources)),
    }
    doc = manifest.write(
        project_dir, {RAW: raw_sources, PROCESSED: dict.fromkeys(written, split_source)}, info
    )
    # A copy outlives the VM (Drive on Colab): a new VM's clone has no manifest to restore from.
    manifest.keep(project_dir, storage)
    size = sum(e["size"] for e in doc["files"] if e["path"].startswith(PROCESSED))
    print(
        f"Prepared {len(source.labels)} examples from {cfg.source} ({_described(spec)}): "
        f"{summary(spec)}; {size / 2**20:.1f} MB in {PROCESSED}; {len(doc['files'])} files in "
        f"{manifest.MANIFEST}",
        flush=True,
    )
    return info
