"""What defines a run: one fingerprint, recorded in every checkpoint's `meta.json`.

A checkpoint continues one computation: resumed with other data or settings, it would give a model
that no single run produced. So `train` refuses, naming each difference (`train.learning_rate was
0.001, now 0.003`). The fingerprint holds the data's hash; `seed` and `data.augment`; every key of
`model`, `task` and `train` but `RUN_ONLY` (how or when a run runs, not what it computes: more
`train.epochs` continue a run, unless a schedule spans all the steps); `global_batch` (not
`distribute` or `repro`: a run may resume on other hardware); and `DERIVED` values, named only
when nothing else differs and known on both sides.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from pathlib import Path
from typing import Any

from ..config import Params, flat
from ..core import locations
from ..core.files import file_sha256
from ..optim import scaled_learning_rate

RUN_ONLY = frozenset(
    {
        "train.checkpoint_every_steps",
        "train.keep_checkpoints",
        "train.steps_per_execution",
        "train.time_budget_minutes",
        "train.profile_steps",
        "train.early_stopping_patience",
        "train.batch_size",
        "train.epochs",
    }
)
SECTIONS = ("model", "task", "train")
DERIVED = ("learning_rate_applied", "variables")  # shown only when nothing else differs
DATA = "data"


def settings(params: Params) -> dict[str, Any]:
    """The keys of `params` that define a run (see the module docstring)."""
    tree = params.to_dict()
    found: dict[str, Any] = {"seed": tree["seed"], "data.augment": list(tree["data"]["augment"])}
    for section in SECTIONS:  # an empty `model.args: {}` sets nothing
        found.update(flat(tree[section], f"{section}."))
    found = {k: v for k, v in found.items() if k not in RUN_ONLY and v != {}}
    if params.train.schedule != "constant":  # the schedule's length is the run's
        found["train.epochs"] = params.train.epochs
    return found


def of(params: Params, data_hash: str, replicas: int) -> dict[str, Any]:
    """The fingerprint of training `params` on the data `data_hash` with `replicas` replicas
    (`with_variables` adds the model's once it is built), as a checkpoint's meta.json holds it,
    so that the two compare equal: lists, not tuples, and a float JSON has no number for as text
    (`.inf` is "Infinity", where json_text would write null, another value)."""
    found = {
        DATA: data_hash,
        **settings(params),
        "global_batch": params.train.batch_size * replicas,
        "learning_rate_applied": scaled_learning_rate(params.train, replicas),
    }
    return json.loads(json.dumps(found, default=str), parse_constant=str)


def with_variables(fingerprint: dict[str, Any], variables: list[Any]) -> dict[str, Any]:
    """`fingerprint` plus the model's variables: count, size and a hash of their shapes."""
    shapes = [tuple(int(d) for d in v.shape) for v in variables]
    size = sum(math.prod(s) for s in shapes)
    digest = hashlib.sha256(repr(shapes).encode()).hexdigest()[:8]
    described = f"{size:,} weights in {len(shapes)} tensors ({digest})"
    return {**fingerprint, "variables": described}


def digest(fingerprint: dict[str, Any], code: str = "") -> str:
    """A hex digest of `fingerprint` (derived values left out) and of `code` if given."""
    kept = {k: v for k, v in fingerprint.items() if k not in DERIVED}
    text = json.dumps(kept, sort_keys=True, default=str) + code
    return hashlib.sha256(text.encode()).hexdigest()


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`key was X, now Y` for every difference; derived values only when nothing else differs."""
    found, derived = [], []
    for key in [*current, *(k for k in recorded if k not in current)]:
        was, now = recorded.get(key), current.get(key)
        if was == now or (key in DERIVED and None in (was, now)):  # not known on one side
            continue
        if key == DATA:
            line = f"the data (data/manifest.json's files) was {was[:12]}, now {now[:12]}"
        else:
            line = f"{key} was {_shown(was)}, now {_shown(now)}"
        (derived if key in DERIVED else found).append(line)
    return found or derived


def _shown(value: Any) -> str:
    return "null" if value is None else str(value)


def folder_hash(folder: Path, prefix: str = "data/processed/") -> str:
    """A hash of every file under `folder` but hidden ones and Python caches: of a folder of
    shards, data/manifest.py's `data_hash` of its files."""
    found = [(p, p.relative_to(folder)) for p in Path(folder).rglob("*") if p.is_file()]
    lines = sorted(
        f"{prefix}{relative.as_posix()} {file_sha256(path)}"
        for path, relative in found
        if "__pycache__" not in relative.parts
        and path.suffix != ".pyc"
        and not locations.hidden(relative)
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@functools.cache
def code_digest(package: Path | None = None) -> str:
    """A hash of the package's source files (what a DVC stage depends on), once per process."""
    return folder_hash(Path(package or Path(__file__).resolve().parents[1]), prefix="")
