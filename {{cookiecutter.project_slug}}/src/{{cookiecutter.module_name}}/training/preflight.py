"""Checks before the first training step, one line per finding (docs/training-faults.md)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil
import tensorflow as tf

from ..config import ConfigError, Params
from ..core.files import free_bytes
from ..spec import DataSpec
from ..tasks.base import make_task
from .strategy import StrategyInfo

MIB = 1 << 20
IMBALANCE = 0.1  # the rarest class under this share of the commonest one's examples: a note


class PreflightError(ConfigError):
    """A finding that stops the run; one line for the user (printed as `error: ...`)."""


def check_accelerator(params: Params, info: StrategyInfo) -> str:
    """Stop on a CPU when `distribute.require_accelerator` is true; the finding otherwise."""
    if info.device in ("GPU", "TPU"):
        return f"Preflight: {info.replicas} x {info.device} ({info.name})"
    if params.distribute.require_accelerator:
        raise PreflightError(
            "distribute.require_accelerator: no GPU or TPU found, only the CPU (on Colab: "
            "Runtime > Change runtime type > T4 GPU; to train on the CPU anyway: "
            "--set distribute.require_accelerator=false)"
        )
    return "Preflight: no GPU or TPU, training on the CPU"


def variable_bytes(variables: Iterable[Any]) -> int:
    """About the size of the variables' checkpoint."""
    return sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in variables)


def data_bytes(input_shape: tuple[int, ...], global_batch: int, window: int = 1024) -> int:
    """What the input pipeline holds: a shuffle window and a few float32 batches in flight."""
    example = 4 * math.prod(input_shape)
    return window * example + 8 * global_batch * example


def space_finding(checkpoints: Path, checkpoint_bytes: int, keep: int) -> str:
    """Free space at `checkpoints` against the checkpoints the run will keep."""
    need = checkpoint_bytes * (keep + 1)  # `keep` kept plus the one being written
    free = free_bytes(checkpoints)
    what = f"checkpoints of ~{checkpoint_bytes / MIB:,.1f} MiB x ({keep} kept + 1 being written)"
    if free is None:
        return f"WARNING: preflight: free space at {checkpoints} unknown; {what}"
    if free < need:
        return (
            f"WARNING: preflight: {free / MIB:,.1f} MiB free at {checkpoints}, below {what} = "
            f"{need / MIB:,.1f} MiB; a checkpoint that does not fit is skipped and reported, "
            "training goes on (free space, or lower train.keep_checkpoints)"
        )
    return f"Preflight: {free / MIB:,.1f} MiB free at {checkpoints} for {what}"


def memory_finding(held_bytes: int) -> str:
    """Available memory against what the data path holds."""
    available = psutil.virtual_memory().available
    if held_bytes > 0.8 * available:
        return (
            f"WARNING: preflight: the data path holds ~{held_bytes / MIB:,.1f} MiB in memory, "
            f"{available / MIB:,.0f} MiB available; the run may be killed for memory (use a "
            "high-RAM runtime or smaller data)"
        )
    return (
        f"Preflight: the data path holds ~{held_bytes / MIB:,.1f} MiB in memory, "
        f"{available / MIB:,.0f} MiB available"
    )


def class_balance_finding(params: Params, spec: DataSpec) -> str:
    """The class weights, or a note on an imbalanced split, or ''; a bad class_weight stops."""
    task = make_task(params, spec)  # refuses a bad train.class_weight
    found = {n: c for n, c in spec.train_counts.items() if n in spec.names}
    if task.class_weights:
        shown = ", ".join(
            f"{n} {w:.3g}" for n, w in zip(spec.names[:12], task.class_weights, strict=False)
        )
        more = ", ..." if len(task.class_weights) > 12 else ""
        name = "balanced" if params.train.class_weight == "balanced" else "a map"
        return f"Preflight: train.class_weight {name}: weights per {task.name_word} {shown}{more}"
    if len(found) < 2 or max(found.values()) == 0:
        return ""
    rare, common = min(found, key=found.get), max(found, key=found.get)
    if found[rare] >= IMBALANCE * found[common]:
        return ""
    return (
        f"NOTE: preflight: the training split is imbalanced: {task.name_word} {rare!r} has "
        f"{found[rare]} examples, {common!r} {found[common]} (under a tenth); --set "
        f"train.class_weight=balanced weighs the loss by {task.name_word}"
    )


def before_training(params: Params, info: StrategyInfo, spec: DataSpec | None = None) -> list[str]:
    """The checks that need no model (`spec` None: the bundled digits, split by `train`); the
    findings for the chief to say. An unmounted Drive stopped the run before (`storage_root`)."""
    lines = [check_accelerator(params, info)]
    if spec is not None:
        lines.append(class_balance_finding(params, spec))
    return lines if info.is_chief else []


def before_first_step(
    params: Params, info: StrategyInfo, checkpoints: Path, variables: Iterable[Any], held_bytes: int
) -> list[str]:
    """The checks that need the built model and the data (warnings only); the chief's findings."""
    if not info.is_chief:
        return []
    space = space_finding(checkpoints, variable_bytes(variables), params.train.keep_checkpoints)
    return [space, memory_finding(held_bytes)]
