"""What a sweep leaves: `results/sweeps/<name>/trials.csv` and `trials.png`, the checkpoints
kept, and `sweep --best` (docs/training.md, Sweeps).
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState
from ruamel.yaml import YAML

from ..config import COMMAND, ConfigError, Params, flat, load_params, yaml_text
from ..core.files import atomic_write, temp_file
from ..core.storage import MODEL_FILE, SIDECAR_FILE, TRAIN_METRICS, results_root, storage_root
from .checkpoints import CheckpointStore
from .lease import LEASE_FILE, read_lease, why_free
from .policy import RunHooks
from .sweep_study import JOURNAL, Sweep, numbers_sorted, shown, study_folder
from .trainer import train

PROMOTED = (MODEL_FILE, SIDECAR_FILE, TRAIN_METRICS)
NOT_PROMOTED = ("sweep.",{% if cookiecutter.vertex_ai %} "vertex."{% endif %})  # how the trial was searched or submitted, not what it is


def write_trials(sweep: Sweep) -> pd.DataFrame:
    """trials.csv and trials.png (atomic writes); returns the table."""
    frame = sweep.study.trials_dataframe(attrs=("number", "state", "value", "params"))
    frame = frame.rename(columns={f"params_{k}": k for k in sweep.space} | {"value": sweep.monitor})
    table = frame.reindex(columns=["number", "state", *sweep.space, sweep.monitor])
    atomic_write(sweep.results / "trials.csv", table.to_csv(index=False))
    image = io.BytesIO()
    plot_trials(sweep, table).savefig(image, format="png", dpi=100)
    atomic_write(sweep.results / "trials.png", image.getvalue())
    return table


def plot_trials(sweep: Sweep, table: pd.DataFrame) -> Figure:
    """The value per trial with the best so far, then against each searched key (circles
    complete, crosses pruned; a key's choices in the space's order, numbers sorted; the value
    axis the complete trials': a pruned one's value, of an early epoch, may be far off and is
    drawn at its edge). A Figure, no pyplot: no window, any backend."""
    monitor, dists = sweep.monitor, sweep.space
    figure = Figure(figsize=(4.2 * (1 + len(dists)), 3.6), layout="constrained")
    axes = figure.subplots(1, 1 + len(dists), squeeze=False)[0]
    places = {  # a choice's place on its axis: a category axis lists them as trials took them
        key: {choice: i for i, choice in enumerate(numbers_sorted(dist.choices) or dist.choices)}
        for key, dist in dists.items()
        if isinstance(dist, CategoricalDistribution)
    }
    done = table[table.state == "COMPLETE"].dropna(subset=[monitor])
    low, high = done[monitor].min(), done[monitor].max()  # NaN when none is complete
    pad = (high - low) * 0.1 or abs(high) * 0.1 or 0.1
    span = (low - pad, high + pad) if len(done) else (None, None)  # None: no limit
    for state, marker, color in (("COMPLETE", "o", "C0"), ("PRUNED", "x", "C3")):
        rows = table[(table.state == state) & table[monitor].notna()]
        if rows.empty:  # no legend entry for a state no trial is in
            continue
        ys = rows[monitor].clip(*span)
        axes[0].scatter(
            rows.number, ys, marker=marker, color=color, label=state.lower(), clip_on=False
        )
        for ax, key in zip(axes[1:], dists, strict=True):
            xs = rows[key].map(places[key]) if key in places else rows[key]
            ax.scatter(xs, ys, marker=marker, color=color, clip_on=False)
    for ax in axes if len(done) else ():
        ax.set_ylim(*span)
    for ax, (key, dist) in zip(axes[1:], dists.items(), strict=True):
        ax.set(xlabel=key, ylabel=monitor)
        if getattr(dist, "log", False):  # the space's range, even before a trial is drawn
            ax.set(xscale="log", xlim=(dist.low, dist.high))
        if key in places:
            ax.set_xticks(list(places[key].values()), [str(c) for c in places[key]])
    best = done[monitor].cummin() if sweep.direction == "minimize" else done[monitor].cummax()
    axes[0].step(done.number, best, where="post", color="C2", marker=".", label="best so far")
    axes[0].set(xlabel="trial", ylabel=monitor, title=f"{sweep.direction} {monitor}")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))  # trial numbers, not 0.5
    axes[0].legend(fontsize="small")
    return figure


def keep_best_checkpoints(sweep: Sweep) -> list[str]:
    """Delete the checkpoints of finished runs (complete, pruned, failed) but the
    `sweep.keep_best` best (Drive's quota): their checkpoints and free lease, nothing the project
    did not write; returns those runs (`summary` says them)."""
    trials = sweep.study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    complete.sort(key=lambda t: t.value, reverse=sweep.direction == "maximize")
    finished = {t.user_attrs.get("run") for t in trials if t.state.is_finished()}
    # Kept: the best, and every run a trial may still train (running, or a retry waiting).
    keep = {t.user_attrs.get("run") for t in complete[: sweep.cfg.keep_best]}
    keep |= {t.user_attrs.get("run") for t in trials if not t.state.is_finished()}
    deleted = []
    for run in sorted(finished - keep - {None}):
        folder = storage_root(sweep.project_dir) / "checkpoints" / run
        if not folder.is_dir() or why_free(read_lease(folder / LEASE_FILE), time.time()) is None:
            continue  # none, or a live session trains it
        CheckpointStore(folder, keep=1).clear()
        (folder / LEASE_FILE).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when nothing else is in it
        deleted.append(run)
    return deleted


def summary(sweep: Sweep, table: pd.DataFrame, deleted: list[str]) -> None:
    """Where the sweep stands, in a few lines (`deleted`: runs whose checkpoints went)."""
    counts = ", ".join(f"{v} {k.lower()}" for k, v in table.state.value_counts().items())
    trials = f"{len(table)} trial{'s' if len(table) != 1 else ''}"
    print(
        f"\nSweep '{sweep.cfg.name}': {trials} ({counts}) for {sweep.cfg.n_trials} wanted; "
        f"table {sweep.results / 'trials.csv'}, figure {sweep.results / 'trials.png'}",
        flush=True,
    )
    if deleted:
        runs = f"{len(deleted)} finished run{'s' if len(deleted) != 1 else ''}"
        print(
            f"Checkpoints deleted for {runs}; kept for the "
            f"{sweep.cfg.keep_best} best (sweep.keep_best: Drive's quota).",
            flush=True,
        )
    with contextlib.suppress(ValueError):  # no complete trial yet
        best = sweep.study.best_trial
        print(
            f"Best so far: trial {best.number}, {sweep.monitor} {best.value:.4g} "
            f"({shown(sweep.values(best.params))}); "
            f"`{sweep.command('--best')}` promotes it.",
            flush=True,
        )


def promote_best(params: Params, project_dir: Path, params_file: Path) -> int:
    """Promote the best complete trial of `sweep.name`; one line of error when there is none."""
    name = params.sweep.name
    none_yet = ConfigError(
        f"sweep.name: the study '{name}' has no complete trial yet; run `{COMMAND} sweep` first "
        "(example: --set sweep.name=lr-dropout)"
    )
    if not params.sweep.storage and not (study_folder(project_dir, name) / JOURNAL).is_file():
        raise none_yet
    sweep = Sweep(params, params_file, project_dir, [])
    if not any(t.state == TrialState.COMPLETE for t in sweep.study.get_trials(deepcopy=False)):
        raise none_yet
    best = sweep.study.best_trial
    run = best.user_attrs["run"]
    trial = sweep.trial_params(sweep.values(best.params), run, best.user_attrs["overrides"])
    source = sweep.results / run.rsplit("-", 1)[1]
    if not all((source / file).is_file() for file in PROMOTED):
        print(f"Writing {source} from the checkpoints of run '{run}'", flush=True)
        if train(trial, project_dir, hooks=RunHooks(results=source)).status != "completed":
            raise ConfigError(f"run_name: the run '{run}' is not complete; run the sweep")
    for file in PROMOTED:
        atomic_write(results_root(project_dir) / file, (source / file).read_bytes())
    write_trials(sweep)
    changed = write_params(params_file, trial)
    shown = "; ".join(f"{k}: {yaml_text(a)} -> {yaml_text(b)}" for k, (a, b) in changed.items())
    print(
        f"Promoted trial {best.number} ({run}, {sweep.monitor} {best.value:.4g}) to "
        f"{results_root(project_dir)}\n{params_file.name}: {shown or 'already has its settings'}"
        "\nRecord it as the `train` stage without training again, and evaluate it: `dvc commit "
        f"--force train && dvc repro` (only `evaluate` runs); then commit {params_file.name}, "
        "dvc.lock and results/.",
        flush=True,
    )
    return 0


def write_params(path: Path, trial: Params) -> dict[str, tuple[Any, Any]]:
    """Write the keys in which `trial` differs from the params file into it (ruamel.yaml keeps
    its comments and layout), checked before it replaces the file; returns {key: (old, new)}."""
    current, wanted = flat(load_params(path).to_dict()), flat(trial.to_dict())
    changed = {
        k: (current.get(k), v)
        for k, v in wanted.items()
        if current.get(k) != v and not k.startswith(NOT_PROMOTED)
    }
    if not changed:
        return {}
    yaml = YAML()
    yaml.preserve_quotes, yaml.width = True, 4096
    doc = yaml.load(path.read_text())
    for key, (_, value) in changed.items():
        *sections, leaf = key.split(".")
        node = doc
        for part in sections:
            node = node.setdefault(part, {})
        node[leaf] = value
    tmp = Path(temp_file(path))
    try:
        yaml.dump(doc, tmp)
        written = flat(load_params(tmp).to_dict())
        if any(written.get(k) != v for k, (_, v) in changed.items()):
            raise ConfigError(
                f"{path}: could not write the trial's settings; set them by hand: "
                + ", ".join(f"{k}={yaml_text(v)}" for k, (_, v) in changed.items())
            )
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return changed
