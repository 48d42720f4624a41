"""`python -m <module> sweep`: a hyperparameter search whose trials are ordinary training runs.

Each trial trains as the run `<name>-<number>`, so a trial cut off resumes at its next batch,
under its own number; the study is Optuna's (sweep_study.py). docs/training.md, Sweeps.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import tensorflow as tf
from optuna.trial import TrialState

from ..config import ConfigError, Params, flat, yaml_text
from ..core.progress import said_once
from ..registry import check
from .lease import EXIT_LEASE_LOST, HEARTBEAT_S, LEASE_FILE, Lease, LeaseHeld, holder, read_lease
from .policy import EXIT_BUDGET, RunHooks
from .sweep_results import keep_best_checkpoints, summary, write_trials
from .sweep_study import Sweep, quiet_optuna, searched, shown, study_folder
from .trainer import lower_the_rate, train

# Keys that may differ between the sessions of one study: they do not change what a trial learns.
FREE_KEYS = (
    "run_name",
    "sweep.",
    "distribute.",
{%- if cookiecutter.vertex_ai %}
    "vertex.",
{%- endif %}
    "train.time_budget_minutes",
    "train.profile_steps",
    "train.keep_checkpoints",
    "train.checkpoint_every_steps",
)


def run_sweep(
    params: Params,
    project_dir: Path,
    params_file: Path,
    overrides: list[str],
    take_over: bool = False,
) -> int:
    """Run trials until the study has `sweep.n_trials` finished ones, the time budget ends or a
    stop; the exit code is `train`'s (0 done, 3 time budget, 130/143 interrupted: run it again)."""
    cfg = params.sweep
    searched(params)
    check(params, space=True)  # a misspelt component, a bad argument in the space: no trial
    if params.distribute.strategy == "multiworker":
        raise ConfigError(
            "distribute.strategy: multiworker, but a sweep runs its trials one at a time on this "
            "machine (example: --set distribute.strategy=auto)"
        )
    tf.get_logger().addFilter(_not_retracing)  # the same object: added once per process
    lease = None if cfg.storage else _sweep_lease(project_dir, cfg.name, take_over)
    try:
        sweep = Sweep(params, params_file, project_dir, overrides, lease)
        _check_same_study(sweep)
        print(
            f"Sweep '{cfg.name}': {cfg.n_trials} trial{'s' if cfg.n_trials != 1 else ''}, "
            f"{cfg.sampler} sampler, {cfg.pruner} pruner, {sweep.direction} {sweep.monitor}; "
            f"study in {cfg.storage or study_folder(project_dir, cfg.name)}",
            flush=True,
        )
        budget = cfg.time_budget_minutes * 60
        deadline = time.monotonic() + budget if budget else None
        deleted: list[str] = []  # the runs whose checkpoints went, said once at the end
        with quiet_optuna(), said_once():  # a line that holds for every trial: said once
            code = _trials(sweep, deadline, take_over, deleted)
            table = write_trials(sweep)
    finally:
        if lease is not None:
            lease.release()
    summary(sweep, table, deleted)
    return code


def _not_retracing(record: logging.LogRecord) -> bool:
    """Each trial builds its model and training function afresh, on purpose: TensorFlow counts
    their traces as one function's and, from the sixth trial on, warns of excessive retracing."""
    return "triggered tf.function retracing" not in record.getMessage()


def _sweep_lease(project_dir: Path, name: str, take_over: bool) -> Lease:
    """One session per sweep without a database: the run lease, on the study's folder."""
    folder = study_folder(project_dir, name)
    try:
        return Lease.acquire(folder, name, take_over, kind="sweep").start_heartbeat()
    except LeaseHeld:
        who = holder(read_lease(folder / LEASE_FILE) or {})
        raise LeaseHeld(
            f"sweep '{name}' is run by another session ({who}); wait for it, set sweep.storage "
            "to share the study, or take the sweep over with `sweep --take-over` if that "
            "session is gone"
        ) from None


def _trials(sweep: Sweep, deadline: float | None, take_over: bool, deleted: list[str]) -> int:
    """The session's loop: the next trial, train it, tidy up (the runs whose checkpoints it
    deletes go in `deleted`); returns the exit code."""
    said = False
    preamble = True  # the first trial's strategy, seed and preflight lines hold for every trial
    while deadline is None or time.monotonic() < deadline:
        if sweep.lease is not None and not sweep.lease.check():  # `sweep --take-over` elsewhere
            print(f"Stopped: {sweep.lease.lost}.", flush=True)
            return EXIT_LEASE_LOST
        optuna.storages.fail_stale_trials(sweep.study)  # a database's worker that stopped beating
        trials = sweep.study.get_trials(deepcopy=False)
        retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
        done = [t for t in trials if t.state.is_finished() and t.number not in retried]
        running = [t for t in trials if t.state == TrialState.RUNNING]
        waiting = any(t.state == TrialState.WAITING for t in trials)
        if len(done) >= sweep.cfg.n_trials:
            return 0
        if sweep.lease is None and not waiting and len(done) + len(running) >= sweep.cfg.n_trials:
            if not said:  # if one of them dies, its retry runs here
                numbers = ", ".join(str(t.number) for t in running)
                print(f"Waiting for trials {numbers} of other workers to finish.", flush=True)
                said = True
            time.sleep(HEARTBEAT_S)
            continue
        if running and sweep.lease is not None:  # one session: a trial a killed session left
            trial, resumed = optuna.trial.Trial(sweep.study, running[0]._trial_id), True
        else:
            trial, resumed = sweep.study.ask(sweep.space), False
        code = run_trial(sweep, trial, resumed, deadline, take_over and resumed, preamble)
        preamble = False
        gc.collect()  # the trial's model, held in Keras's reference cycles: freed (a GPU's memory)
        if code == EXIT_LEASE_LOST:  # taken over: the study and its runs are the other session's
            return code
        write_trials(sweep)
        deleted += keep_best_checkpoints(sweep)
        if code:
            return code
    print(
        f"The sweep's time budget ({sweep.cfg.time_budget_minutes:g} min) is reached; run the "
        "sweep again to go on.",
        flush=True,
    )
    return EXIT_BUDGET


def run_trial(
    sweep: Sweep,
    trial: optuna.Trial,
    resumed: bool,
    deadline: float | None,
    take_over: bool,
    preamble: bool = True,
) -> int:
    """Train `trial` as its run (`preamble`: with train's first lines) and tell the study how it
    ended, in one line (a stopped trial stays running: it resumes later); returns train's exit
    code."""
    run = trial.user_attrs.get("run") or f"{sweep.cfg.name}-{trial.number}"
    trial.set_user_attr("run", run)  # a retry trains as its original's run
    trial.set_user_attr("overrides", sweep.overrides)
    if "pruned" in trial.user_attrs:  # its session died after the pruner's verdict: no more epochs
        print(f"Trial {trial.number} ({run}) pruned: {trial.user_attrs['pruned']}", flush=True)
        sweep.study.tell(trial, state=TrialState.PRUNED)
        return 0
    values = sweep.values(trial.params)
    how = ""
    retried = sweep.storage.get_trial_system_attrs(trial._trial_id)
    if "failed_trial" in retried:
        how = f", the retry of trial {retried['failed_trial']} (its worker stopped)"
    if resumed:  # train's line follows: from which step
        print(f"Trial {trial.number} ({run}) was cut off; resuming it with its values", flush=True)
    line = f"Trial {trial.number} ({run}){how}: {shown(values)} ->"  # its result follows
    stop = threading.Event()
    if sweep.lease is None:  # a database: Optuna's heartbeat (one session: the lease beats)
        threading.Thread(target=_beat, args=(sweep, trial._trial_id, stop), daemon=True).start()

    def on_epoch(record: dict[str, Any]) -> str:
        """The trainer's epoch hook: report the epoch's value, then ask the pruner."""
        if sweep.lease is not None and not sweep.lease.check():
            return ""  # another session took the sweep over: it writes the study now
        value, epoch = float(record[sweep.monitor]), int(record["epoch"])
        trial.report(value, epoch)
        if record.get("last") or not trial.should_prune():
            return ""
        why = (
            f"{sweep.monitor} {value:.4g} at epoch {epoch} is worse than the median of the other "
            "trials at that epoch"
        )
        trial.set_user_attr("pruned", why)  # the verdict, for a session killed before the tell
        return f"trial {trial.number} pruned: {why}"

    again = sweep.command()
    results = sweep.results / run.rsplit("-", 1)[1]
    hooks = RunHooks(results, on_epoch, deadline, say_preamble=preamble, say_epochs=False)
    try:
        params = sweep.trial_params(values, run, sweep.overrides)
        result = train(
            params, sweep.project_dir, resume_command=again, take_over=take_over, hooks=hooks
        )
    except ConfigError as exc:
        if not str(exc).startswith(tuple(f"{k}:" for k in values)):
            raise  # the setup's fault (data, params file): fix it and run the sweep again
        return _failed(sweep, trial, line, str(exc))  # the point's fault
    except (tf.errors.ResourceExhaustedError, MemoryError) as exc:  # the point does not fit
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return _failed(sweep, trial, line, f"{type(exc).__name__}: {first}")  # else taken up again
    finally:
        stop.set()
    value = result.metrics.get(sweep.monitor)
    if sweep.lease is not None and not sweep.lease.check():  # the session that took over tells it
        print(f"{line} stopped: {sweep.lease.lost}", flush=True)
        return EXIT_LEASE_LOST
    if "pruned" in trial.user_attrs:  # also when a stop came at the epoch end
        sweep.study.tell(trial, state=TrialState.PRUNED)
        print(f"{line} pruned: {trial.user_attrs['pruned']}", flush=True)
        return result.exit_code
    if result.status != "completed":
        print(f"{line} stopped: {result.reason}", flush=True)
        return result.exit_code  # stopped: it resumes later
    # A complete run's reason is its divergence: its NaN weights' val_accuracy is still a number.
    if result.reason:
        return _failed(sweep, trial, line, f"{result.reason}; {_lower_the_rate(sweep, params)}")
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return _failed(sweep, trial, line, f"{sweep.monitor} is {value}")
    sweep.study.tell(trial, value)
    print(f"{line} {sweep.monitor} {value:.4g}", flush=True)
    return 0


def _lower_the_rate(sweep: Sweep, params: Params) -> str:
    """What a trial that diverged at its train.learning_rate lowers: the setting, or its range
    in sweep.space where the space searches it (the trial's value overrides any --set)."""
    rate, spec = params.train.learning_rate, sweep.cfg.space.get("train.learning_rate")
    if spec is None:
        return lower_the_rate(rate)
    high = float(f"{rate / 10:.2g}")
    if "choices" in spec:
        lower = {"choices": [c for c in spec["choices"] if float(c) < rate] or [high]}
    else:
        low = min(float(spec["low"]), float(f"{high / 10:g}"))  # float: YAML reads 1e-4 as text
        lower = {**spec, "low": low, "high": high}
    return (  # a changed space is another study: the sweep refuses it under the same name
        f"lower sweep.space's train.learning_rate below {rate:.4g} (example: "
        f"train.learning_rate: {yaml_text(lower)}), in a new study "
        f"(example: --set sweep.name={sweep.cfg.name}-2)"
    )


def _failed(sweep: Sweep, trial: optuna.Trial, line: str, why: str) -> int:
    """Tell the study that `trial` failed, saying why after its `line`; the sweep goes on (0)."""
    print(f"{line} failed: {why}", flush=True)
    sweep.study.tell(trial, state=TrialState.FAIL)
    return 0


def _beat(sweep: Sweep, trial_id: int, stop: threading.Event) -> None:
    """Optuna's heartbeat of a database trial until `stop`: a worker that dies goes quiet."""
    while not stop.is_set():
        with contextlib.suppress(optuna.exceptions.StorageInternalError):  # a blip: the next beat
            sweep.storage.record_heartbeat(trial_id)
        stop.wait(HEARTBEAT_S)


def _check_same_study(sweep: Sweep) -> None:
    """Refuse a study begun with other shared settings: their trials' values would not compare."""
    values = flat(sweep.params.to_dict())
    mine = {k: v for k, v in values.items() if k not in sweep.space and not k.startswith(FREE_KEYS)}
    mine |= {"sweep.space": sweep.cfg.space, "sweep.sampler": sweep.cfg.sampler}
    first = sweep.study.user_attrs.get("definition")
    if first is None:
        sweep.study.set_user_attr("definition", mine)
        return
    changed = sorted(k for k in first.keys() | mine.keys() if first.get(k) != mine.get(k))
    if changed:
        key = changed[0]
        raise ConfigError(
            f"{key}: the study '{sweep.cfg.name}' was started with {yaml_text(first.get(key))}, "
            f"not {yaml_text(mine.get(key))}, so their results would not compare; put it back, "
            f"or start a new study (example: --set sweep.name={sweep.cfg.name}-2)"
        )
