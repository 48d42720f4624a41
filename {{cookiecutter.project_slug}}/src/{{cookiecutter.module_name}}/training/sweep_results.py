"""What a sweep leaves behind: the trials table and figure, and the checkpoints worth keeping.

- `results/sweeps/<name>/trials.csv`: `number, state, value`, one column per searched key, then
  `duration_s` (the time its sessions spent on it); `value` is `train.monitor` at the trial's
  best epoch (COMPLETE), its last reported epoch (PRUNED), or empty.
- `results/sweeps/<name>/trials.png`: the value of each trial and the best so far, and the value
  against each searched key.
Both are written from the study's events, so any session (or `sweep --best`) writes the same.
"""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
import time
from pathlib import Path
from typing import Any

from ..config import Dimension, yaml_text
from ..core.files import atomic_write
from .checkpoints import list_checkpoints
from .lease import LEASE_FILE, read_lease, why_free
from .sweep_store import TrialView, View

MARKERS = {"COMPLETE": ("o", "C0"), "PRUNED": ("x", "C3")}


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'train': {'epochs': 3}} -> {'train.epochs': 3} (lists stay lists)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value and key != "space":
            flat.update(flat_params(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _cell(value: Any) -> Any:
    return "" if value is None else yaml_text(value) if isinstance(value, (list, dict)) else value


def trials_rows(view: View, dims: dict[str, Dimension]) -> list[dict[str, Any]]:
    """One row per trial, by number: the columns of trials.csv."""
    rows = []
    for trial in sorted(view.trials.values(), key=lambda t: t.number):
        row = {"number": trial.number, "state": trial.state, "value": _value(trial)}
        row.update({key: _cell(trial.params.get(key)) for key in dims})
        row["duration_s"] = round(trial.duration_s, 1)
        rows.append(row)
    return rows


def _value(trial: TrialView) -> Any:
    if trial.state == "PRUNED" and trial.value is None and trial.steps:
        return trial.steps[max(trial.steps)]
    return "" if trial.value is None else trial.value


def write_trials(
    view: View, dims: dict[str, Dimension], direction: str, monitor: str, folder: Path
) -> Path:
    """Write trials.csv and trials.png into `folder` (atomically); return the table's path."""
    rows = trials_rows(view, dims)
    text = io.StringIO()
    writer = csv.DictWriter(text, ["number", "state", "value", *dims, "duration_s"])
    writer.writeheader()
    writer.writerows(rows)
    table = atomic_write(folder / "trials.csv", text.getvalue())
    figure = plot_trials(rows, dims, direction, monitor)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    atomic_write(folder / "trials.png", buffer.getvalue())
    return table


def plot_trials(
    rows: list[dict[str, Any]], dims: dict[str, Dimension], direction: str, monitor: str
) -> Any:
    """A matplotlib Figure: the value per trial with the best so far, then the value against
    each searched key (circles complete, crosses pruned). No pyplot: no window, any backend."""
    from matplotlib.figure import Figure

    scored = [r for r in rows if r["value"] != "" and r["state"] in MARKERS]
    figure = Figure(figsize=(4.2 * (1 + len(dims)), 3.6), layout="constrained")
    axes = figure.subplots(1, 1 + len(dims), squeeze=False)[0]
    for state, (marker, color) in MARKERS.items():
        mine = [r for r in scored if r["state"] == state]
        axes[0].scatter(
            [r["number"] for r in mine],
            [r["value"] for r in mine],
            marker=marker,
            color=color,
            label=state.lower(),
        )
    best, line = None, []
    for row in sorted((r for r in scored if r["state"] == "COMPLETE"), key=lambda r: r["number"]):
        better = best is None or (
            row["value"] < best if direction == "minimize" else row["value"] > best
        )
        best = row["value"] if better else best
        line.append((row["number"], best))
    if line:
        xs, ys = zip(*line, strict=True)
        axes[0].step(xs, ys, where="post", color="C2", marker=".", label="best so far")
    axes[0].set(xlabel="trial", ylabel=monitor, title=f"{direction} {monitor}")
    axes[0].xaxis.get_major_locator().set_params(integer=True)
    axes[0].legend(fontsize="small")
    for ax, (key, dim) in zip(axes[1:], dims.items(), strict=True):
        _plot_key(ax, scored, key, dim, monitor)
    return figure


def _plot_key(ax: Any, rows: list[dict[str, Any]], key: str, dim: Dimension, monitor: str) -> None:
    labels = [yaml_text(c) for c in dim.choices]
    for state, (marker, color) in MARKERS.items():
        mine = [r for r in rows if r["state"] == state]
        xs = [labels.index(yaml_text(r[key])) if dim.choices else r[key] for r in mine]
        ax.scatter(xs, [r["value"] for r in mine], marker=marker, color=color)
    if dim.choices:
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlim(-0.5, len(labels) - 0.5)
    else:
        ax.set_xscale("log" if dim.log else "linear")
        ax.set_xlim(dim.low, dim.high)  # the whole range searched
    ax.set(xlabel=key, ylabel=monitor)


def keep_best_checkpoints(view: View, sweep: Any, storage: Path) -> str:
    """Delete the checkpoints of finished trials but the `sweep.keep_best` best complete ones
    (Drive's quota): their step folders and their free lease, nothing the project did not write.
    Returns a one-line note, or ''."""
    finished = [t for t in view.trials.values() if t.finished]
    sign = 1 if sweep.direction == "minimize" else -1
    complete = sorted(
        (t for t in finished if t.state == "COMPLETE" and t.value is not None),
        key=lambda t: (sign * t.value, t.number),
    )
    keep = {t.number for t in complete[: sweep.cfg.keep_best]}
    deleted = []
    for trial in sorted(finished, key=lambda t: t.number):
        folder = storage / "checkpoints" / sweep.run_name(trial.number)
        if trial.number in keep or not folder.is_dir():
            continue
        if why_free(read_lease(folder / LEASE_FILE), time.time()) is None:
            continue  # a live session trains this run (by hand?): leave it alone
        for _, step in list_checkpoints(folder):
            shutil.rmtree(step, ignore_errors=True)
        for child in folder.glob(".tmp-*"):
            shutil.rmtree(child, ignore_errors=True)
        (folder / LEASE_FILE).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when nothing else is in it
        deleted.append(str(trial.number))
    if not deleted:
        return ""
    kept = ", ".join(str(n) for n in sorted(keep)) or "none yet"
    return (
        f"Checkpoints deleted for finished trials {', '.join(deleted)}; kept for the "
        f"{sweep.cfg.keep_best} best (trials {kept})."
    )
