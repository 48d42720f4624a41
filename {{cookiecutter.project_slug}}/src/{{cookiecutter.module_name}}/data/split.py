"""Train / validation / test: how `prepare` splits the examples (`data.split`; docs/data.md)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import PurePosixPath
from typing import Any

import numpy as np
import pandas as pd

from ..config import COMMAND, ConfigError, DataConfig
from ..core import locations
from ..sources import MissingLabels, Source
from ..spec import SPLITS, DataSpec, split_named
from ..tasks.base import task_class

MAX_DISTINCT_SHARE = 0.5  # more distinct classes than this share of examples: not classes


def read_layout(reader: Any, path: str, data: DataConfig, kind: str) -> Source:
    """`folders` / `files`: the reader on each split's folder or file(s), merged into one Source."""
    if data.split == "folders":
        found = _split_folders(path, data)
    else:
        found = _split_files(path, data, reader)
    parts: dict[str, Source] = {}
    for split, (target, shown) in found.items():
        # The reader names the split's own file or folder in its errors, as the user knows it.
        named = dataclasses.replace(
            data, path=locations.join(data.path, locations.relative(target, path))
        )
        try:
            parts[split] = reader(target, named, kind)
        except MissingLabels:
            if split == "train":
                raise
            raise ConfigError(
                f"data.split: {shown} in {data.path} has no labels: an unlabelled {split} file is "
                f"not a {split} split; move it out of data.path (a missing {split} split is "
                f"carved out of train) and score it after training: `{COMMAND} predict "
                f"{PurePosixPath(data.path) / shown.rstrip('/')}`"
            ) from None
        if len(parts[split].labels) == 0:
            raise ConfigError(
                f"data.path: {shown} in {data.path} holds no examples; add them, or move it out "
                f"(a missing {split} split is carved out of train)"
            )
    return merge(parts, {s: shown for s, (_, shown) in found.items()})


def _split_folders(path: str, data: DataConfig) -> dict[str, tuple[str, str]]:
    """{split: (its folder, its name as shown)} of `train/`, `validation/`, `test/` in `path`."""
    entries = sorted(e for e in locations.list_dir(path) if not locations.hidden(e))
    folders = [e for e in entries if locations.isdir(locations.join(path, e))]
    if not any(split_named(f) == "train" for f in folders):
        raise ConfigError(
            f"data.split: folders, but {data.path} has no train/ folder (it has "
            f"{', '.join(f + '/' for f in folders[:6]) or 'no folders'}); class folders right "
            "under data.path are split at random (example: --set data.split=random)"
        )
    found: dict[str, tuple[str, str]] = {}
    for folder in folders:
        split = split_named(folder)
        if split is None:
            raise ConfigError(
                f"data.split: {folder}/ in {data.path} is no split folder (train/, validation/ "
                "or val/, test/); move it out of data.path"
            )
        if split in found:
            raise ConfigError(
                f"data.split: {data.path} has both {found[split][1]} and {folder}/ for the {split} "
                "split; keep one"
            )
        target = locations.join(path, folder)
        if not locations.walk_files(target):
            raise ConfigError(
                f"data.path: {folder}/ in {data.path} is an empty split folder; add its examples, "
                f"or move it out of data.path (a missing {split} split is carved out of train)"
            )
        found[split] = (target, f"{folder}/")
    return found


def _stem(name: str) -> str:
    """A file name's leading letters: `train` of train.csv, train-00001.tfrecord, train_a.csv."""
    return "".join(itertools.takewhile(str.isalpha, name))


def _split_files(path: str, data: DataConfig, reader: Any) -> dict[str, tuple[str, str]]:
    """{split: (its file or glob pattern, as shown)} of `train*`, `validation*`, `test*` files."""
    names = sorted(e for e in locations.list_dir(path) if not locations.hidden(e))
    groups: dict[str, list[str]] = {}
    for name in names:
        split = split_named(_stem(name))
        if split is not None and not locations.isdir(locations.join(path, name)):
            groups.setdefault(split, []).append(name)
    if "train" not in groups:
        raise ConfigError(
            f"data.split: files, but {data.path} has no train file (train.csv, train-*.tfrecord; "
            f"it has {', '.join(names[:6]) or 'nothing'}); name it train.csv or the like, or let "
            "prepare split the data (example: --set data.split=random)"
        )
    found = {}
    for split, files in groups.items():
        stems = {_stem(f) for f in files}
        if len(files) == 1:
            found[split] = (locations.join(path, files[0]), files[0])
        elif reader.patterns and len(stems) == 1:  # the glob matches exactly these files
            found[split] = (locations.join(path, f"{stems.pop()}[!A-Za-z]*"), f"{files[0]}, ...")
        else:
            raise ConfigError(
                f"data.split: {len(files)} files for the {split} split in {data.path} "
                f"({', '.join(files[:4])}); data.source {data.source} reads one file per split: "
                "move the others out of data.path"
            )
    return {s: found[s] for s in SPLITS if s in found}


def merge(parts: dict[str, Source], shown: dict[str, str]) -> Source:
    """The sources of each split as one: the union of the classes, train's feature columns."""
    train = parts["train"]
    names = list(train.names)
    for part in parts.values():
        names += sorted(n for n in part.names if n not in names)
    labels, loads = [], []
    for split, part in parts.items():
        if part.kind != train.kind or part.task != train.task:
            raise ConfigError(f"data.split: {shown[split]} holds {part.kind}s, train {train.kind}s")
        loads.append(_aligned_load(part, train, shown[split]))
        task = task_class(part.task)(names=names)
        labels.append(task.relabel(part.labels, part.names))
    # Pooled example i is example local[i] of the owner[i]-th part.
    owner = np.concatenate([np.full(len(y), k) for k, y in enumerate(labels)])
    local = np.concatenate([np.arange(len(y)) for y in labels])
    sources, folders = list(parts.values()), [shown[s] for s in parts]

    def load(i: int) -> Any:
        return loads[owner[i]](int(local[i]))

    def where(i: int) -> str:
        return sources[owner[i]].where(int(local[i]))

    def ids(i: int) -> str:  # relative to data.path: `test/cat/7.jpg`, `test.csv:12`
        part, folder, j = sources[owner[i]], folders[owner[i]], int(local[i])
        own = part.ids(j) if part.ids else str(j)
        return f"{folder}{own}" if folder.endswith("/") else f"{folder}:{own}"

    splits = {s: np.flatnonzero(owner == k) for k, s in enumerate(parts)}
    return Source(
        train.kind,
        train.task,
        np.concatenate(labels),
        names,
        load,
        where,
        ids,
        train.input_shape,
        encoding=train.encoding,
        feature_names=list(train.feature_names),
        splits=splits,
        split_from=dict(shown),
    )


def _aligned_load(part: Source, train: Source, shown: str) -> Any:
    """`part.load`, giving vectors in train's column order; other columns are an error (other
    widths too: prepare refuses the first vector of another width, naming it)."""
    if part.kind != "vector" or part.feature_names == train.feature_names:
        return part.load
    missing = sorted(set(train.feature_names) - set(part.feature_names))
    extra = sorted(set(part.feature_names) - set(train.feature_names))
    if missing or extra:
        raise ConfigError(
            f"data.split: {shown} has other feature columns than train (missing: "
            f"{', '.join(missing) or '-'}; extra: {', '.join(extra) or '-'}); every split needs "
            "the same ones"
        )
    order = [part.feature_names.index(n) for n in train.feature_names]
    return lambda i: np.asarray(part.load(i))[order]


def split_examples(
    source: Source, data: DataConfig, seed: int, origin: str, test_fraction: float | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(sorted indices per split, the record for spec.json): the splits the data gives, a missing
    one carved out of train, seeded."""
    if data.split == "column" and source.splits is None:
        raise ConfigError(
            f"data.split: column, but data.source {data.source} read no split column (the csv "
            "source reads data.split_column) (example: --set data.split=random)"
        )
    n = len(source.labels)
    given = dict(source.splits) if source.splits is not None else {"train": np.arange(n)}
    came_from = dict(source.split_from) if source.splits is not None else {"train": origin}
    if n == 0:
        raise ConfigError(
            f"data.path: {data.path} holds no examples (empty, or only a header) "
            "(example: --set data.path=data/external/my.csv)"
        )
    if len(given.get("train", ())) == 0:
        raise ConfigError(
            f"data.split: no training examples in {data.path} (the data gives only "
            f"{', '.join(given) or 'nothing'}) (example: --set data.split=random)"
        )
    task = task_class(source.task)(names=source.names)
    if len(source.names) < task.min_names:  # one class: nothing to tell apart, nothing to train
        raise ConfigError(
            f"data: {task.kind} needs at least {task.min_names} {task.name_word} names, found "
            f"{len(source.names)} ({', '.join(map(repr, source.names))}) in {came_from['train']} "
            f"(example: add examples of another {task.name_word}, or --set task.type=regression)"
        )
    _check_train_has_every_name(source, task, given, came_from)
    fractions = {"validation": data.validation_fraction, "test": data.test_fraction}
    if test_fraction is not None:
        fractions["test"] = test_fraction
    carve = {s: f for s, f in fractions.items() if s not in given}
    if carve:
        train = np.asarray(given["train"])
        pool = source.labels[train]
        if task.stratified:
            check_classes(source.names, pool, came_from["train"] if source.splits else "")
        else:  # multilabel, regression: no classes to stratify by, one group of all
            pool = np.zeros(len(pool))
        parts = split_indices(pool, carve.get("validation", 0.0), carve.get("test", 0.0), seed)
        for split in ["train", *carve]:
            given[split] = train[parts[split]]
            came_from[split] = came_from["train"]
    idx = {s: np.sort(np.asarray(given.get(s, []), dtype=np.int64)) for s in SPLITS}
    record = {
        "method": data.split,
        "seed": seed,
        "stratified": task.stratified,
        "from": {s: came_from[s] for s in SPLITS if s in came_from},
        "carved": carve,
    }
    return idx, record


def _check_train_has_every_name(
    source: Source, task: Any, given: dict[str, np.ndarray], came_from: dict[str, str]
) -> None:
    """One line for a class (or a label's positives) that a given split has and train lacks."""
    train = task.counts(source.labels[given["train"]])
    if train is None:  # a kind without classes to count
        return
    for split, idx in given.items():
        here = task.counts(source.labels[idx])
        lacking = np.flatnonzero((here > 0) & (train == 0))
        if split != "train" and len(lacking):
            name = source.names[lacking[0]]
            raise ConfigError(
                f"data.split: {task.name_word} {name!r} is in {split} "
                f"({came_from.get(split, split)}: {here[lacking[0]]} examples) but not in train "
                f"({came_from['train']}); the "
                f"model cannot learn it: add training examples of it, or move it out of {split}"
            )


def split_indices(
    y: np.ndarray, validation_fraction: float, test_fraction: float, seed: int
) -> dict[str, np.ndarray]:
    """Stratified train / validation / test indices, seeded (a fraction of 0: that split empty)."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in SPLITS}
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_test = round(len(idx) * test_fraction)
        n_val = round(len(idx) * validation_fraction)
        parts["test"].append(idx[:n_test])
        parts["validation"].append(idx[n_test : n_test + n_val])
        parts["train"].append(idx[n_test + n_val :])
    wanted = {"train": 1.0, "validation": validation_fraction, "test": test_fraction}
    out = {name: np.sort(np.concatenate(p)) for name, p in parts.items()}
    for name, idx in out.items():
        if len(idx) == 0 and wanted[name] > 0:
            raise ConfigError(
                f"data: {len(y)} examples leave the {name} split empty "
                "(example: --set data.validation_fraction=0.2 --set data.test_fraction=0.2)"
            )
    return out


def check_classes(names: list[str], labels: np.ndarray, where: str) -> None:
    """Every class needs two examples or more to be stratified, and a continuous target is none."""
    found = np.bincount(np.asarray(labels, dtype=np.int64), minlength=len(names))
    numeric = bool(pd.to_numeric(pd.Series(names, dtype=str), errors="coerce").notna().all())
    hint = " (example: --set task.type=regression for a numeric target)" if numeric else ""
    if numeric and len(names) > MAX_DISTINCT_SHARE * len(labels):
        raise ConfigError(
            f"data.label: {len(names)} distinct values in {len(labels)} examples "
            "look like a continuous target, not classes (example: --set task.type=regression)"
        )
    for name, n in zip(names, found, strict=True):
        if n < 2:
            raise ConfigError(
                f"data: class {name!r} has {n} example{'s' if n != 1 else ''}"
                f"{f' in {where}' if where else ''}; the split needs at least 2 per class (add "
                f"examples, or leave the class out){hint}"
            )


def origin_of(data: DataConfig, path: str) -> str:
    """The data a random split is drawn from: `pets/`, `houses.csv`, or `digits`, `tfds mnist`."""
    if not path:
        return f"tfds {data.name}" if data.source == "tfds" else data.source
    name = PurePosixPath(data.path.rstrip("/")).name or data.path
    return name + ("/" if locations.isdir(path) else "")


def origin(spec: DataSpec, split: str, short: bool = False) -> str:
    """Where a split's examples came from (`the published test split: test.csv`); `short`:
    `test.csv`, `20 % of pets/, seed 42`."""
    record = spec.split
    came_from = record["from"].get(split, "?")
    if split in record["carved"]:
        share = f"{100 * record['carved'][split]:g} %"
        if short:
            return f"{share} of {came_from}, seed {record['seed']}"
        how = "stratified by class" if record["stratified"] else "not stratified"
        return f"a random {share} of {came_from} (seed {record['seed']}, {how})"
    if split == "train" and came_from in {record["from"].get(s) for s in record["carved"]}:
        return f"the rest of {came_from}"
    return came_from if short else f"the published {split} split: {came_from}"


def describe(spec: DataSpec, split: str) -> str:
    """`origin` with the split's size: `the published test split: test.csv, 120 examples`."""
    return f"{origin(spec, split)}, {spec.counts.get(split, 0)} examples"


def summary(spec: DataSpec) -> str:
    """The splits on one line: `train 540 (train/), validation 135 (20 % of train/, seed 42)`."""
    return ", ".join(
        f"{split} {spec.counts.get(split, 0)} ({origin(spec, split, short=True)})"
        if split in spec.split["from"]
        else f"{split} {spec.counts.get(split, 0)}"
        for split in SPLITS
    )
