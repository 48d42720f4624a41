"""`python -m <module> sweep`: a hyperparameter search whose trials are ordinary training runs.

Trial `n` of `sweep.name` is the run `<name>-<n>`: `train` with the trial's values as `--set`
overrides, so its checkpoints, lease, run record and tracker entry are those of any run, its
values are part of the run's settings, and a trial cut off by a disconnect resumes at its next
batch. Its model and train.json go to `results/sweeps/<name>/<n>/`.

The study lives on the storage root (Drive on Colab) as event files (sweep_store.py), never in
Optuna's storages: Optuna only works in memory here. For a new trial number it gets a study
rebuilt from the events and a sampler seeded by that number, and proposes the values; at each
epoch end the pruner gets the same rebuilt study with this trial's reports. So a sweep started
again goes on where it stopped: the interrupted trial first, under its own number and with the
values read back from the study, then new numbers until `n_trials` trials are finished.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import COMMAND, ConfigError, Dimension, Params, load_params, sweep_space, yaml_text
from ..core.storage import results_root, storage_root
from .early_stopping import mode_for
from .lease import EXIT_LEASE_LOST, HEARTBEAT_S, LeaseHeld
from .policy import EXIT_BUDGET, RunHooks
from .sweep_results import flat_params, keep_best_checkpoints, write_trials
from .sweep_store import StudyStore, TrialView, View, default_settle

# Keys that may differ between the sessions of one study: they do not change what a trial learns.
FREE_KEYS = (
    "run_name",
    "sweep.",
    "distribute.",
{%- if cookiecutter.vertex_ai == "yes" %}
    "vertex.",
{%- endif %}
    "train.time_budget_minutes",
    "train.profile_steps",
    "train.keep_checkpoints",
    "train.checkpoint_every_steps",
)


@dataclass
class Sweep:
    """One session's sweep: its settings, its store and where things go."""

    params: Params
    params_file: Path
    project_dir: Path
    overrides: list[str]  # the `--set` items of the command: the base of every trial
    dims: dict[str, Dimension]
    store: StudyStore
    deadline: float | None = None

    @property
    def cfg(self) -> Any:
        return self.params.sweep

    @property
    def monitor(self) -> str:
        return self.params.train.monitor

    @property
    def direction(self) -> str:
        return "minimize" if mode_for(self.monitor) == "min" else "maximize"

    @property
    def results(self) -> Path:
        return results_root(self.project_dir) / "sweeps" / self.cfg.name

    def run_name(self, number: int) -> str:
        return f"{self.cfg.name}-{number}"


def study_folder(project_dir: Path, name: str) -> Path:
    """`<storage>/sweeps/<name>`: the study's event files."""
    return storage_root(project_dir) / "sweeps" / name


def open_store(project_dir: Path, name: str) -> StudyStore:
    """The study of sweep `name` (reading needs no session; `StudyStore.open` makes one)."""
    folder = study_folder(project_dir, name)
    return StudyStore(folder, default_settle(folder), HEARTBEAT_S)


def run_sweep(params: Params, project_dir: Path, params_file: Path, overrides: list[str]) -> int:
    """Run trials until `sweep.n_trials` are finished, the time budget ends or a stop; the exit
    code is `train`'s (0 done, 3 time budget, 130/143 interrupted: run the sweep again)."""
    dims = sweep_space(params)
    if not dims:
        raise ConfigError(
            "sweep.space: empty, nothing to search "
            "(example: train.learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true})"
        )
    if params.distribute.strategy == "multiworker":
        raise ConfigError(
            "distribute.strategy: multiworker, but a sweep runs its trials one at a time on this "
            "machine (example: --set distribute.strategy=auto)"
        )
    cfg = params.sweep
    budget = cfg.time_budget_minutes * 60
    sweep = Sweep(
        params,
        params_file,
        project_dir,
        overrides,
        dims,
        open_store(project_dir, cfg.name),
        time.monotonic() + budget if budget else None,
    )
    _check_same_study(sweep, sweep.store.view())
    print(
        f"Sweep '{cfg.name}': {cfg.n_trials} trials, {cfg.sampler} sampler, {cfg.pruner} pruner, "
        f"{sweep.direction} {sweep.monitor}; study in {sweep.store.folder.parent} (settle time "
        f"{sweep.store.settle:g} s)",
        flush=True,
    )
    sweep.store.open(_header(sweep))
    code = 0
    try:
        with _sigterm_as_exit():
            code = _trials(sweep)
    finally:
        sweep.store.close()
        view = sweep.store.view()
        write_trials(view, sweep.dims, sweep.direction, sweep.monitor, sweep.results)
    _summary(sweep, view, code)
    return code


def _trials(sweep: Sweep) -> int:
    """The session's loop: the next trial, train it, tidy up; returns the exit code."""
    while True:
        if sweep.deadline is not None and time.monotonic() > sweep.deadline:
            print(
                f"The sweep's time budget ({sweep.cfg.time_budget_minutes:g} min) is reached; "
                "run the sweep again to go on.",
                flush=True,
            )
            return EXIT_BUDGET
        job = next_trial(sweep)
        if job is None:
            return 0
        code = run_trial(sweep, *job)
        view = sweep.store.view()
        write_trials(view, sweep.dims, sweep.direction, sweep.monitor, sweep.results)
        kept = keep_best_checkpoints(view, sweep, storage_root(sweep.project_dir))
        if kept:
            print(kept, flush=True)
        if code not in (0, EXIT_LEASE_LOST):  # lost: another session has that trial now
            return code


def next_trial(sweep: Sweep) -> tuple[int, int, dict[str, Any]] | None:
    """(number, generation, values) of the trial to train now, or None when there is none: all
    are finished, or the rest are being trained by other sessions (said in one line)."""
    store, n_trials = sweep.store, sweep.cfg.n_trials
    waited = False
    while True:
        view = store.view()
        if len(view.finished(n_trials)) >= n_trials:
            return None
        now = time.time()
        running = [t for t in view.trials.values() if not t.finished and t.number < n_trials]
        owners = {t.number: view.sessions[t.owner] for t in running}
        orphans = [t for t in running if not store.active(owners[t.number], now)]
        for trial in sorted(orphans, key=lambda t: t.number):
            if store.claim(trial.number, trial.gen + 1, trial.params):
                return trial.number, trial.gen + 1, trial.params
        # A trial whose session has missed a heartbeat (its VM gone?): wait until it counts as
        # gone and resume that trial, rather than start a new one and leave it behind.
        silent = store.heartbeat + store.settle  # same host: its pid says it at once
        quiet = [
            t
            for t in running
            if now - owners[t.number].last > silent
            and owners[t.number].header.get("host") != store.host
        ]
        if quiet and not orphans:
            if not waited:
                print(
                    f"Trial {quiet[0].number}'s session has gone quiet; waiting up to "
                    f"{store.gone_after:.0f} s to resume it here.",
                    flush=True,
                )
                waited = True
            time.sleep(min(store.heartbeat, 10.0))
            continue
        free = [n for n in range(n_trials) if n not in view.trials]
        if not free and not orphans:
            busy = ", ".join(str(t.number) for t in running)
            print(
                f"Trials {busy} are being trained by other sessions; nothing left to start "
                "here (run the sweep again later to see the result).",
                flush=True,
            )
            return None
        if free:
            values = propose(sweep, view, free[0])
            if store.claim(free[0], 0, values):
                return free[0], 0, values
            print(f"Trial {free[0]} was claimed by another session; trying the next.", flush=True)


def run_trial(sweep: Sweep, number: int, gen: int, values: dict[str, Any]) -> int:
    """Train trial `number` (generation `gen`) as the run `<name>-<number>`; its finish event is
    appended here (COMPLETE, FAIL) or by the pruner; returns train's exit code."""
    from .trainer import train

    store, name = sweep.store, sweep.run_name(number)
    shown = " ".join(sweep.dims[k].override(v) for k, v in values.items() if k in sweep.dims)
    again = f", again (generation {gen}): it goes on from its checkpoint" if gen else ""
    print(f"\nTrial {number} of {sweep.cfg.n_trials} ({name}){again}: {shown}", flush=True)
    try:
        params = trial_params(sweep, values, name)
    except ConfigError as exc:  # a point of the space that these params refuse
        print(f"Trial {number} failed: {exc}", flush=True)
        store.append({"op": "finish", "number": number, "gen": gen, "state": "FAIL"})
        return 0
    hooks = RunHooks(
        results=sweep.results / str(number),
        on_epoch=_reporter(sweep, number, gen),
        deadline=sweep.deadline,
    )
    resume = " ".join([*COMMAND.split(), "sweep", *(f"--set={o}" for o in sweep.overrides)])
    try:
        result = train(params, sweep.project_dir, resume_command=resume, hooks=hooks)
    except LeaseHeld as exc:
        raise LeaseHeld(f"trial {number}: {exc}") from None
    except ConfigError as exc:
        if not str(exc).startswith(tuple(f"{k}:" for k in values)):
            raise  # the setup's fault (data, params file): fix it and run the sweep again
        print(f"Trial {number} failed: {exc}", flush=True)  # the point's fault: a searched key
        store.append({"op": "finish", "number": number, "gen": gen, "state": "FAIL"})
        return 0
    finally:
        _free_memory()
    view = store.view()
    if result.status != "completed" or not store.holds(number, gen, view):
        return result.exit_code  # stopped (it resumes later), or taken over meanwhile
    if view.trials[number].finished:
        return 0  # pruned: its finish is written
    value = result.metrics.get(sweep.monitor)
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    store.append(
        {
            "op": "finish",
            "number": number,
            "gen": gen,
            "state": "COMPLETE" if ok else "FAIL",
            "value": value if ok else None,
        }
    )
    print(f"Trial {number}: {sweep.monitor} {value:.4g}", flush=True)
    return 0


def trial_params(sweep: Sweep, values: dict[str, Any], run_name: str) -> Params:
    """The params of a trial: the params file, the command's `--set` items, the trial's values."""
    sets = [
        sweep.dims[k].override(v) if k in sweep.dims else f"{k}={yaml_text(v)}"
        for k, v in values.items()
    ]
    return load_params(sweep.params_file, [*sweep.overrides, *sets, f"run_name={run_name}"])


def _reporter(sweep: Sweep, number: int, gen: int) -> Any:
    """The trainer's epoch hook: report the epoch's value, then ask the pruner."""
    pruner = make_pruner(sweep.cfg)

    def on_epoch(record: dict[str, Any]) -> str:
        value, epoch = float(record[sweep.monitor]), int(record["epoch"])
        sweep.store.append(
            {"op": "report", "number": number, "gen": gen, "step": epoch, "value": value}
        )
        if pruner is None or record.get("last"):
            return ""
        view = sweep.store.view()
        if not sweep.store.holds(number, gen, view) or not should_prune(
            sweep, view, number, pruner
        ):
            return ""
        sweep.store.append(
            {"op": "finish", "number": number, "gen": gen, "state": "PRUNED", "value": value}
        )
        return (
            f"trial {number} pruned: {sweep.monitor} {value:.4g} at epoch {epoch} is worse "
            "than the median of the finished trials at that epoch"
        )

    return on_epoch


# -- Optuna, in memory only -------------------------------------------------------------------
def _encoded(dim: Dimension) -> bool:
    """Choices that Optuna cannot hold (lists, mappings) go to it as their YAML text."""
    return any(isinstance(c, (list, dict)) for c in dim.choices)


def distributions(dims: dict[str, Dimension]) -> dict[str, Any]:
    """Optuna's distribution for each searched key."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out: dict[str, Any] = {}
    for key, dim in dims.items():
        if dim.choices:
            choices = [yaml_text(c) for c in dim.choices] if _encoded(dim) else list(dim.choices)
            out[key] = CategoricalDistribution(choices)
        elif dim.integer:
            out[key] = IntDistribution(int(dim.low), int(dim.high), log=dim.log)
        else:
            out[key] = FloatDistribution(float(dim.low), float(dim.high), log=dim.log)
    return out


def _to_optuna(dims: dict[str, Dimension], values: dict[str, Any]) -> dict[str, Any]:
    return {k: yaml_text(v) if _encoded(dims[k]) else v for k, v in values.items() if k in dims}


def _from_optuna(dims: dict[str, Dimension], values: dict[str, Any]) -> dict[str, Any]:
    import yaml

    return {k: yaml.safe_load(v) if _encoded(dims[k]) else v for k, v in values.items()}


def rebuild_study(sweep: Sweep, view: View, pruner: Any = None) -> Any:
    """An in-memory Optuna study holding the trials of `view` (the running ones as RUNNING)."""
    import optuna
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=sweep.direction, pruner=pruner)
    dists = distributions(sweep.dims)
    for trial in sorted(view.trials.values(), key=lambda t: t.number):
        state = TrialState[trial.state]
        value = trial.value if state in (TrialState.COMPLETE, TrialState.PRUNED) else None
        if state == TrialState.PRUNED and value is None and trial.steps:
            value = trial.steps[max(trial.steps)]
        params = _to_optuna(sweep.dims, trial.params)
        try:
            frozen = create_trial(
                state=state,
                params=params,
                distributions={k: dists[k] for k in params},
                value=value,
                intermediate_values=trial.steps,
                user_attrs={"number": trial.number},
            )
        except ValueError:
            continue  # values from an older space: shown in the table, not given to the sampler
        study.add_trial(frozen)
    return study


def make_sampler(sweep: Sweep, number: int) -> Any:
    """The sampler for trial `number`, seeded by it: a sweep started again proposes what an
    uninterrupted one would, never the first trials' values again."""
    import optuna

    seed = sweep.params.seed * 100_003 + number
    if sweep.cfg.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if sweep.cfg.sampler == "grid":
        grid = {k: list(d.choices) for k, d in distributions(sweep.dims).items()}
        return optuna.samplers.GridSampler(grid, seed=sweep.params.seed)  # one fixed order
    return optuna.samplers.TPESampler(
        seed=seed, constant_liar=True, n_startup_trials=sweep.cfg.startup_trials
    )


def propose(sweep: Sweep, view: View, number: int) -> dict[str, Any]:
    """The values of new trial `number`, from the sampler and every trial known so far."""
    study = rebuild_study(sweep, view)
    study.sampler = make_sampler(sweep, number)
    return _from_optuna(sweep.dims, study.ask(distributions(sweep.dims)).params)


def make_pruner(cfg: Any) -> Any:
    """`sweep.pruner`: median (Optuna's MedianPruner) or none (None)."""
    if cfg.pruner == "none":
        return None
    import optuna

    return optuna.pruners.MedianPruner(
        n_startup_trials=cfg.startup_trials, n_warmup_steps=cfg.warmup_epochs
    )


def should_prune(sweep: Sweep, view: View, number: int, pruner: Any) -> bool:
    """The pruner's verdict on trial `number` with its reports so far."""
    study = rebuild_study(sweep, view, pruner)
    mine = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("number") == number]
    return bool(mine) and pruner.prune(study, mine[0])


# -- the session -----------------------------------------------------------------------------
def _header(sweep: Sweep) -> dict[str, Any]:
    """What a session's `start` event records: the study's definition and the trials' base."""
    cfg = sweep.cfg
    return {
        "name": cfg.name,
        "space": cfg.space,
        "sampler": cfg.sampler,
        "monitor": sweep.monitor,
        "direction": sweep.direction,
        "overrides": sweep.overrides,
        "base": _base(sweep.params, sweep.dims),
    }


def _base(params: Params, dims: dict[str, Dimension]) -> dict[str, Any]:
    """The params that every trial shares (the searched keys and FREE_KEYS left out)."""
    flat = flat_params(params.to_dict())
    return {k: v for k, v in flat.items() if k not in dims and not k.startswith(FREE_KEYS)}


def _check_same_study(sweep: Sweep, view: View) -> None:
    """Refuse to add trials to a study that was started with another space or other params:
    their values would not be comparable."""
    first = min(
        (s for s in view.sessions.values() if s.header), key=lambda s: s.first, default=None
    )
    if first is None:
        return
    head, cfg, rename = first.header, sweep.cfg, f"(example: --set sweep.name={sweep.cfg.name}-2)"
    for key, mine in (("space", cfg.space), ("sampler", cfg.sampler), ("monitor", sweep.monitor)):
        if head.get(key) != mine:
            where = "train.monitor" if key == "monitor" else f"sweep.{key}"
            raise ConfigError(
                f"{where}: the study '{cfg.name}' was started with {head.get(key)!r}, not "
                f"{mine!r}; put that back, or start a new study under another name {rename}"
            )
    base = _base(sweep.params, sweep.dims)
    changed = [
        f"{k}: {v!r} -> {base.get(k)!r}"
        for k, v in head.get("base", {}).items()
        if base.get(k) != v and k in base
    ]
    if changed:
        raise ConfigError(
            f"{changed[0].split(':')[0]}: the study '{cfg.name}' trains its trials with other "
            f"params ({'; '.join(changed[:3])}), so their results would not compare; put them "
            f"back, or start a new study under another name {rename}"
        )


@contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM between trials ends the session cleanly (its `stop` event is written); inside a
    trial the trainer's own handler stops at the next chunk with a checkpoint."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _free_memory() -> None:
    """Drop the last trial's model and traced functions before the next one is built."""
    import keras

    keras.backend.clear_session()


def _summary(sweep: Sweep, view: View, code: int) -> None:
    """Where the sweep stands, in a few lines."""
    n = sweep.cfg.n_trials
    done = view.finished(n)
    counts = {s: sum(t.state == s for t in done) for s in ("COMPLETE", "PRUNED", "FAIL")}
    print(
        f"\nSweep '{sweep.cfg.name}': {len(done)} of {n} trials finished "
        f"({', '.join(f'{v} {k.lower()}' for k, v in counts.items())}); "
        f"table {sweep.results / 'trials.csv'}, figure {sweep.results / 'trials.png'}",
        flush=True,
    )
    best = best_trial(view, sweep.direction, n)
    if best is not None:
        shown = " ".join(
            sweep.dims[k].override(v) for k, v in best.params.items() if k in sweep.dims
        )
        print(
            f"Best so far: trial {best.number}, {sweep.monitor} {best.value:.4g} ({shown}); "
            f"`{COMMAND} sweep --best` promotes it.",
            flush=True,
        )
    if code == 0 and len(done) < n:
        print(
            f"Run `{COMMAND} sweep` again once they are done, or to take over a trial whose "
            "session is gone.",
            flush=True,
        )


def best_trial(view: View, direction: str, below: int | None = None) -> TrialView | None:
    """The COMPLETE trial with the best value (lowest or highest), or None."""
    done = [
        t
        for t in view.trials.values()
        if t.state == "COMPLETE" and t.value is not None and (below is None or t.number < below)
    ]
    if not done:
        return None
    sign = 1 if direction == "minimize" else -1
    return min(done, key=lambda t: (sign * t.value, t.number))
