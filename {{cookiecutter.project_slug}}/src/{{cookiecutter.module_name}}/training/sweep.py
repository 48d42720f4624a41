"""`python -m <module> sweep`: a hyperparameter search whose trials are ordinary training runs.

An Optuna study (sweep_study.py) proposes each trial's values and prunes it; the trial trains as
the run `<name>-<number>`: `train` with the values as `--set` overrides, so its checkpoints,
lease, run record and tracker entry are those of any run, and a trial cut off by a disconnect
resumes at its next batch. Its model and train.json go to `results/sweeps/<name>/<number>/`.

One session (no `sweep.storage`): a trial that a killed session left running is taken up first,
under its own number and with its values, then new ones until `n_trials` trials are finished.
A database (`sweep.storage`): Optuna's heartbeat marks a dead worker's trial failed and queues its
retry, a new trial that trains as the failed trial's run (from its checkpoint where the storage
root is shared); each worker runs trials until the study has `n_trials` finished ones.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import optuna
import sqlalchemy
from optuna.trial import TrialState

from ..config import COMMAND, ConfigError, Dimension, Params, load_params, sweep_space, yaml_text
from ..core.storage import results_root, storage_root
from .checkpoints import list_checkpoints
from .early_stopping import mode_for
from .lease import HEARTBEAT_S, LEASE_FILE, Lease, LeaseHeld, holder, read_lease, why_free
from .policy import EXIT_BUDGET, RunHooks
from .sweep_study import (
    database_storage,
    distributions,
    journal_storage,
    make_pruner,
    make_sampler,
    quiet_optuna,
    study_folder,
    trials_table,
    values_of,
    write_trials,
)
from .trainer import train

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
    """One session's sweep: its settings, its study and where things go."""

    params: Params
    params_file: Path
    project_dir: Path
    overrides: list[str]  # the `--set` items of the command: the base of every trial
    study: optuna.Study
    storage: Any  # the study's: a JournalStorage, or an RDBStorage (a database)
    lease: Lease | None = None  # one session's sweep; None with a database
    deadline: float | None = None
    dims: dict[str, Dimension] = field(init=False)

    def __post_init__(self) -> None:
        self.dims = sweep_space(self.params)

    @property
    def cfg(self) -> Any:
        return self.params.sweep

    @property
    def monitor(self) -> str:
        return self.params.train.monitor

    @property
    def results(self) -> Path:
        return results_root(self.project_dir) / "sweeps" / self.cfg.name


def direction(params: Params) -> str:
    return "minimize" if mode_for(params.train.monitor) == "min" else "maximize"


def open_storage(params: Params, project_dir: Path, lease: Lease | None = None) -> Any:
    """The storage of `sweep.name`'s study (`lease`: this session writes the journal)."""
    if params.sweep.storage:
        return database_storage(params.sweep.storage)
    return journal_storage(study_folder(project_dir, params.sweep.name), mend=lease is not None)


def open_study(params: Params, storage: Any) -> optuna.Study:
    """The study of `sweep.name` in `storage`, made if it is new."""
    cfg = params.sweep
    return optuna.create_study(
        storage=storage,
        study_name=cfg.name,
        direction=direction(params),
        sampler=make_sampler(params, sweep_space(params)),
        pruner=make_pruner(params),
        load_if_exists=True,
    )


def run_sweep(
    params: Params, project_dir: Path, params_file: Path, overrides: list[str], take_over=False
) -> int:
    """Run trials until the study has `sweep.n_trials` finished ones, the time budget ends or a
    stop; the exit code is `train`'s (0 done, 3 time budget, 130/143 interrupted: run it again)."""
    if not sweep_space(params):
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
    with quiet_optuna():
        lease = None if cfg.storage else _sweep_lease(project_dir, cfg.name, take_over)
        try:
            storage = open_storage(params, project_dir, lease)
            study = open_study(params, storage)
            sweep = Sweep(params, params_file, project_dir, overrides, study, storage, lease)
            sweep.deadline = time.monotonic() + budget if budget else None
            _check_same_study(sweep)
            where = cfg.storage or study_folder(project_dir, cfg.name)
            print(
                f"Sweep '{cfg.name}': {cfg.n_trials} trials, {cfg.sampler} sampler, "
                f"{cfg.pruner} pruner, {direction(params)} {sweep.monitor}; study in {where}",
                flush=True,
            )
            code = _trials(sweep, take_over)
        finally:
            if lease is not None:
                lease.release()
        table = trials_table(study, sweep.dims, sweep.monitor)
        write_trials(table, sweep.dims, direction(params), sweep.results)
    _summary(sweep, table, code)
    return code


def _sweep_lease(project_dir: Path, name: str, take_over: bool) -> Lease:
    """One session per sweep without a database: the run lease, on the study's folder."""
    folder = study_folder(project_dir, name)
    try:
        return Lease.acquire(folder, f"sweep-{name}", take_over).start_heartbeat()
    except LeaseHeld:
        held_by = holder(read_lease(folder / LEASE_FILE) or {})
        raise LeaseHeld(
            f"sweep '{name}' is run by another session ({held_by}); wait for it, set "
            "sweep.storage to share the study, or take the sweep over with `sweep --take-over` "
            "if that session is gone"
        ) from None


def _trials(sweep: Sweep, take_over: bool) -> int:
    """The session's loop: the next trial, train it, tidy up; returns the exit code."""
    waiting_said = False
    while True:
        if sweep.deadline is not None and time.monotonic() > sweep.deadline:
            print(
                f"The sweep's time budget ({sweep.cfg.time_budget_minutes:g} min) is reached; "
                "run the sweep again to go on.",
                flush=True,
            )
            return EXIT_BUDGET
        if sweep.lease is None:  # a database: a worker whose heartbeat stopped is gone
            optuna.storages.fail_stale_trials(sweep.study)
        trials = sweep.study.get_trials(deepcopy=False)
        retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
        done = [t for t in trials if t.state.is_finished() and t.number not in retried]
        running = [t for t in trials if t.state == TrialState.RUNNING]
        waiting = [t for t in trials if t.state == TrialState.WAITING]
        if len(done) >= sweep.cfg.n_trials:
            return 0
        if sweep.lease is None and not waiting and len(done) + len(running) >= sweep.cfg.n_trials:
            if not waiting_said:  # wait: if one of them dies, its retry runs here
                numbers = ", ".join(str(t.number) for t in running)
                print(f"Waiting for trials {numbers} of other workers to finish.", flush=True)
                waiting_said = True
            time.sleep(HEARTBEAT_S)
            continue
        # One session: a running trial is one a killed session left; take it up as it is.
        adopted = running[0] if running and sweep.lease is not None else None
        trial = (
            optuna.trial.Trial(sweep.study, trial_id(sweep, adopted.number))
            if adopted
            else sweep.study.ask(distributions(sweep.dims))
        )
        code = run_trial(sweep, trial, resumed=adopted is not None, take_over=take_over)
        table = trials_table(sweep.study, sweep.dims, sweep.monitor)
        write_trials(table, sweep.dims, direction(sweep.params), sweep.results)
        kept = keep_best_checkpoints(sweep)
        if kept:
            print(kept, flush=True)
        if code:
            return code


def trial_params(sweep: Sweep, values: dict[str, Any], run_name: str) -> Params:
    """The params of a trial: the params file, the command's `--set` items, the trial's values."""
    sets = [sweep.dims[k].override(v) for k, v in values.items()]
    return load_params(sweep.params_file, [*sweep.overrides, *sets, f"run_name={run_name}"])


def run_trial(sweep: Sweep, trial: optuna.Trial, resumed: bool, take_over: bool) -> int:
    """Train `trial` as its run and tell the study how it ended (a stopped trial stays running:
    it resumes later); returns train's exit code."""
    run = trial.user_attrs.get("run") or f"{sweep.cfg.name}-{trial.number}"
    trial.set_user_attr("run", run)  # a retry keeps its original's run (and checkpoint)
    trial.set_user_attr("overrides", sweep.overrides)
    values = values_of(sweep.dims, trial.params)
    shown = " ".join(sweep.dims[k].override(v) for k, v in values.items())
    how = " was cut off; resuming it with its values" if resumed else ""
    if "failed_trial" in trial.system_attrs:
        how = f", the retry of trial {trial.system_attrs['failed_trial']} (its worker stopped)"
    print(f"\nTrial {trial.number} ({run}){how}: {shown}", flush=True)
    stop = threading.Event()
    beats = threading.Thread(target=_beat, args=(sweep, trial.number, stop), daemon=True)
    beats.start()
    try:
        params = trial_params(sweep, values, run)
        pruned: list[str] = []
        hooks = RunHooks(
            results=sweep.results / run.rsplit("-", 1)[1],
            on_epoch=_reporter(sweep, trial, pruned),
            deadline=sweep.deadline,
        )
        again = " ".join([*COMMAND.split(), "sweep", *(f"--set={o}" for o in sweep.overrides)])
        result = train(
            params, sweep.project_dir, resume_command=again, take_over=take_over, hooks=hooks
        )
    except ConfigError as exc:
        if not str(exc).startswith(tuple(f"{k}:" for k in values)):
            raise  # the setup's fault (data, params file): fix it and run the sweep again
        print(f"Trial {trial.number} failed: {exc}", flush=True)  # the point's fault
        sweep.study.tell(trial, state=TrialState.FAIL)
        return 0
    finally:
        stop.set()
        keras.backend.clear_session()  # the next trial builds its model afresh
    if result.status != "completed":
        return result.exit_code  # stopped: it resumes later
    if pruned:
        sweep.study.tell(trial, state=TrialState.PRUNED)
        return 0
    value = result.metrics.get(sweep.monitor)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        print(f"Trial {trial.number} failed: {sweep.monitor} is {value}", flush=True)
        sweep.study.tell(trial, state=TrialState.FAIL)
        return 0
    sweep.study.tell(trial, value)
    print(f"Trial {trial.number}: {sweep.monitor} {value:.4g}", flush=True)
    return 0


def trial_id(sweep: Sweep, number: int) -> int:
    """The storage's id of trial `number`."""
    study_id = sweep.storage.get_study_id_from_name(sweep.cfg.name)
    return sweep.storage.get_trial_id_from_study_id_trial_number(study_id, number)


def _beat(sweep: Sweep, number: int, stop: threading.Event) -> None:
    """Optuna's heartbeat of a database trial, until `stop`: a worker that dies goes quiet."""
    if sweep.lease is not None:
        return  # one session: the sweep's lease beats
    beating = trial_id(sweep, number)
    while not stop.is_set():
        with contextlib.suppress(sqlalchemy.exc.SQLAlchemyError):  # a blip: the next beat
            sweep.storage.record_heartbeat(beating)
        stop.wait(HEARTBEAT_S)


def _reporter(sweep: Sweep, trial: optuna.Trial, pruned: list[str]) -> Any:
    """The trainer's epoch hook: report the epoch's value, then ask the pruner."""

    def on_epoch(record: dict[str, Any]) -> str:
        if sweep.lease is not None and sweep.lease.lost:
            return ""  # another session took the sweep over: it writes the study now
        value, epoch = float(record[sweep.monitor]), int(record["epoch"])
        trial.report(value, epoch)
        if record.get("last") or not trial.should_prune():
            return ""
        pruned.append(str(epoch))
        return (
            f"trial {trial.number} pruned: {sweep.monitor} {value:.4g} at epoch {epoch} is "
            "worse than the median of the other trials at that epoch"
        )

    return on_epoch


def _definition(sweep: Sweep) -> dict[str, Any]:
    """What makes trials comparable: the space, the sampler, the monitor, the shared params."""
    flat = flat_params(sweep.params.to_dict())
    base = {k: v for k, v in flat.items() if k not in sweep.dims and not k.startswith(FREE_KEYS)}
    cfg = sweep.cfg
    return {"space": cfg.space, "sampler": cfg.sampler, "train.monitor": sweep.monitor, **base}


def _check_same_study(sweep: Sweep) -> None:
    """Refuse to add trials to a study that was started with another space or other params:
    their values would not compare."""
    mine = _definition(sweep)
    first = sweep.study.user_attrs.get("definition")
    if first is None:
        sweep.study.set_user_attr("definition", mine)
        return
    changed = [k for k in first.keys() | mine.keys() if first.get(k) != mine.get(k)]
    if changed:
        key = sorted(changed)[0]
        where = key if "." in key else f"sweep.{key}"
        raise ConfigError(
            f"{where}: the study '{sweep.cfg.name}' was started with {yaml_text(first.get(key))}, "
            f"not {yaml_text(mine.get(key))}, so their results would not compare; put it back, "
            f"or start a new study under another name (example: --set sweep.name="
            f"{sweep.cfg.name}-2)"
        )


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'train': {'epochs': 3}} -> {'train.epochs': 3} (lists and the space stay whole)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value and key != "space":
            flat.update(flat_params(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def keep_best_checkpoints(sweep: Sweep) -> str:
    """Delete the checkpoints of finished runs but the `sweep.keep_best` best (Drive's quota):
    their step folders and their free lease, nothing the project did not write. One line or ''."""
    trials = sweep.study.get_trials(deepcopy=False)
    open_runs = {t.user_attrs.get("run") for t in trials if not t.state.is_finished()}
    sign = 1 if direction(sweep.params) == "minimize" else -1
    ranked = sorted(
        (t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: sign * t.value
    )
    keep = {t.user_attrs.get("run") for t in ranked[: sweep.cfg.keep_best]}
    deleted = []
    for run in sorted({t.user_attrs.get("run") for t in trials} - open_runs - keep - {None}):
        folder = storage_root(sweep.project_dir) / "checkpoints" / run
        if not folder.is_dir() or why_free(read_lease(folder / LEASE_FILE), time.time()) is None:
            continue  # none, or a live session trains it
        for _, step in list_checkpoints(folder):
            shutil.rmtree(step, ignore_errors=True)
        (folder / LEASE_FILE).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when nothing else is in it
        deleted.append(run)
    if not deleted:
        return ""
    return f"Checkpoints deleted for finished runs {', '.join(deleted)}; kept for the best."


def _summary(sweep: Sweep, table: Any, code: int) -> None:
    """Where the sweep stands, in a few lines."""
    counts = ", ".join(f"{v} {k.lower()}" for k, v in table.state.value_counts().items())
    print(
        f"\nSweep '{sweep.cfg.name}': {len(table)} trials ({counts}) for {sweep.cfg.n_trials} "
        f"wanted; table {sweep.results / 'trials.csv'}, figure {sweep.results / 'trials.png'}",
        flush=True,
    )
    with contextlib.suppress(ValueError):  # no complete trial yet
        best = sweep.study.best_trial
        shown = " ".join(
            sweep.dims[k].override(v) for k, v in values_of(sweep.dims, best.params).items()
        )
        print(
            f"Best so far: trial {best.number}, {sweep.monitor} {best.value:.4g} ({shown}); "
            f"`{COMMAND} sweep --best` promotes it.",
            flush=True,
        )
