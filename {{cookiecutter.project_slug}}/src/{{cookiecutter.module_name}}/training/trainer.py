"""Training: one custom loop for every strategy (default, mirrored, multi-worker, TPU).

Why not `model.fit`: in Keras 3 it fails under MultiWorkerMirroredStrategy, and its
`BackupAndRestore` resumes only at an epoch start. A `Run` holds the parts built once; its
`RunState`, all that changes as it trains, is in every checkpoint: a resumed run continues at the
very next batch and ends with the uninterrupted run's weights and train.json. A resume with other
data or settings is refused (fingerprint.py); nothing here deletes a run's checkpoints but
`--fresh`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from .. import registry
from ..config import COMMAND, ConfigError, Params
from ..core.progress import progress_bar, say
from ..core.storage import SIDECAR_FILE, RunPaths, run_paths, storage_root
from ..data import manifest, pipeline
from ..data.feed import make_feed, resident_bytes
from ..data.pipeline import Prepared
from ..data.prepare import PROCESSED, bundled_digits
from ..loop import StepParts, Validator, make_chunk_function, metric_values
from ..model import build_model, fine_tune_variables, set_backbone_trainable
from ..optim import build_optimizer, scaled_learning_rate
from ..task import make_task
from . import fingerprint, preflight
from .checkpoints import (
    FORMAT,
    CheckpointMismatch,
    CheckpointStore,
    keep_it,
    newest_meta,
    write_results,
)
from .lease import EXIT_LEASE_LOST, Lease
from .policy import BestWeights, EarlyStopping, RunHooks, Stopper, agree, alike, checkpoint_due
from .run_record import is_recorded, record_run
from .saved_model import user_sidecar, wrap_for_users
from .seeding import as_run, seed_everything
from .strategy import StrategyError, StrategyInfo, make_strategy, mixed_precision_policy
from .tracking import Curves


@dataclass
class TrainResult:
    """How a call to `train` ended."""

    status: str  # "completed" | "stopped"
    step: int
    exit_code: int = 0
    reason: str = ""  # why it stopped, or why a complete run ended early (it diverged)
    metrics: dict[str, Any] = field(default_factory=dict)  # every number (train.json: a few)
    class_weight: dict[str, float] | None = None  # train.class_weight as the loss used it
    facts: dict[str, Any] = field(default_factory=dict)  # the run record's `facts`
    kept: bool = False  # trained no step; its results are as a run record names them


@dataclass
class RunPlan:
    """The run's numbers, fixed before the first step."""

    global_batch: int
    per_epoch: int
    total: int
    learning_rate: float
    precision: str
    phase_step: int  # the fine-tune phase change (0 = none)


@dataclass
class RunState:
    """What changes as the run trains. Every checkpoint holds all of it: `step` with the model's
    variables, the rest in its meta.json (`state`), so a resumed run goes on as if never stopped."""

    step: int = 0
    epoch_loss: float = 0.0  # this epoch's sums so far: the loss of each step,
    epoch_metric: float = 0.0  # and task.train_metric of each example
    history: list[dict[str, float]] = field(default_factory=list)  # a row per epoch
    early: EarlyStopping = field(default_factory=EarlyStopping)
    resumes: int = 0  # how many times the run was resumed from a checkpoint
    train_seconds: float = 0.0  # in the step function, every session: the run's examples/s
    seconds: float = 0.0  # the run's wall time up to its newest checkpoint, every session


@dataclass
class Run:
    """The run's parts, built once by `_build`; its `state`; what only this session knows."""

    params: Params
    info: StrategyInfo
    data: Prepared
    paths: RunPaths
    plan: RunPlan
    parts: StepParts  # strategy, model, optimizer, task, the step's variables
    validate: Callable[[], dict[str, float]]  # the validation split's {val_loss, val_<metric>}
    best: BestWeights
    checkpoint: Any  # a tf.train.Checkpoint of every variable the run changes
    store: CheckpointStore
    fingerprint: dict[str, Any]
    hooks: RunHooks
    state: RunState = field(default_factory=RunState)
    session_start: float = field(default_factory=time.monotonic)
    started_at_step: int = 0
    last_saved: int = -1
    stopped_early: bool = False

    def elapsed(self) -> float:
        """The run's wall time so far, every session."""
        return self.state.seconds + time.monotonic() - self.session_start


def train(
    params: Params,
    project_dir: Path,
    fresh: bool = False,
    resume_command: str = "",
    take_over: bool = False,
    new_run_if_changed: bool = False,
    hooks: RunHooks | None = None,
) -> TrainResult:
    """`python -m <module> train`: data, strategy, seeds, the run (`choose_run`), one writer per
    run (the lease), then the run's steps (`hooks`: a sweep's trial)."""
    registry.check(params)  # a misspelt architecture or task: one line, before anything is written
    prepared = check_data(params, project_dir)
    hooks = hooks or RunHooks()
    # Keras names layers by what this process built before (dense, dense_1, ...): cleared, a run's
    # model.keras is in the same bytes in a notebook's kernel as in `dvc repro`'s process. No
    # gc.collect: half a second per run in a long-lived process (a sweep collects per trial).
    keras.backend.clear_session(free_memory=False)
    # The strategy comes first: device setup and MultiWorkerMirroredStrategy need a TensorFlow
    # that has not run any op yet.
    strategy, info = make_strategy(params.distribute)
    seeded = seed_everything(params.seed, params.repro.deterministic)
    params, determinism = as_run(params)  # as it runs: its line and its record say the truth
    say(f"Seed {params.seed} ({', '.join(seeded)}); deterministic ops {determinism}")
    with tempfile.TemporaryDirectory(prefix="digits-") as tmp:
        data = open_data(params, project_dir, prepared, Path(tmp))
        # The data's version: data/manifest.json's, or the hash of the temporary split's shards.
        version = (
            manifest.data_hash(manifest.load(project_dir))
            if prepared
            else fingerprint.folder_hash(data.folder)
        )
        expected = fingerprint.of(params, version, info.replicas)
        if new_run_if_changed:
            params = choose_run(params, project_dir, expected, data.count("train"))
        # Workers started with other settings would part at the first all-reduce one of them
        # skips, the chief recording a run the others never finished: all stop here instead.
        cfg = params.train
        run_of = [params.run_name, cfg.epochs, cfg.steps_per_execution, cfg.checkpoint_every_steps]
        code = fingerprint.code_digest()
        if not alike(strategy, f"{fingerprint.digest(expected, code)} {run_of}", info.workers):
            raise StrategyError(
                "the workers were started with other settings, data or code: start every worker "
                "from the same commit, data/processed and --set values (docs/scaling.md)"
            )
        paths = run_paths(project_dir, params.run_name, info.is_chief, hooks.results)
        storage = paths.restore_from.parents[1]
        # Preflight, then one writer per run (the chief holds the lease) before any write.
        spec = data.spec if prepared else None
        _say_findings(hooks, preflight.before_training(params, info, spec))
        if info.is_chief and prepared:
            _keep_manifest(project_dir, storage)
        lease = None
        if info.is_chief:
            lease = Lease.acquire(paths.checkpoints, params.run_name, take_over).start_heartbeat()
        started_at = datetime.now(UTC)
        try:
            data = pipeline.for_model(data, params.model)  # text: token ids in the input pipeline
            plan = make_plan(params, info, data, hooks)
            run = _build(params, strategy, info, data, paths, plan, expected, hooks)
            _restore(run, fresh)
            with Stopper(params.train.time_budget_minutes, lease, run.hooks.deadline) as stopper:
                reason = _train_loop(run, stopper)
            result = _result(run, reason, stopper.exit_code, resume_command, project_dir)
        finally:
            if lease is not None:
                lease.release()
            paths.cleanup()
    # results/runs/<run_id>/manifest.json and the tracker's run, unless the results are left as
    # the record of the session that wrote them says: that record stays the run's
    if info.is_chief and not result.kept:
        record = record_run(params, project_dir, paths, result, started_at, resume_command)
        if hooks.say_epochs:  # a sweep's trial: its one line instead
            say(f"Run record: {record}")
    return result


def _keep_manifest(project_dir: Path, storage: Path) -> None:
    """The data manifest in the storage folder, under its hash: what a new VM restores from."""
    try:
        manifest.keep(project_dir, storage)
    except OSError as exc:  # a full or dropped Drive: training goes on without the copy
        say(
            f"WARNING: {manifest.MANIFEST} not copied to {storage / manifest.KEPT} "
            f"({exc.strerror or exc}); a new VM will prepare the data again instead"
        )


def choose_run(
    params: Params, project_dir: Path, expected: dict[str, Any], train_examples: int
) -> Params:
    """The run that `train --new-run-if-changed` (the DVC stage) trains: `run_name` when it has
    no checkpoint, or when its newest one has this fingerprint and code and has not passed
    train.epochs (a notebook's run is reused, an interrupted stage continues); else a run of its
    own, `<run_name>-<8 hex digits of the fingerprint and the code>`. Nothing is deleted."""
    code = fingerprint.code_digest()
    own = f"{params.run_name}-{fingerprint.digest(expected, code)[:8]}"
    meta = newest_meta(storage_root(project_dir) / "checkpoints" / params.run_name)
    if meta is None:
        return params
    total = train_examples // expected["global_batch"] * params.train.epochs
    if meta.get("format") != FORMAT:
        why = ["its checkpoints are of an older version of this project"]
    else:
        why = fingerprint.differences(meta["fingerprint"], expected)
    if meta.get("code") != code:
        why.append(f"the code of src/{__package__.split('.')[0]} differs")
    if meta.get("step", 0) > total:
        why.append(f"it trained {meta['step']} steps, more than train.epochs makes ({total})")
    if not why:
        return params
    say(
        f"Run '{params.run_name}' differs from this stage ({'; '.join(why)}): training run "
        f"'{own}' instead; run '{params.run_name}' keeps its checkpoints."
    )
    return dataclasses.replace(params, run_name=own)


def check_data(params: Params, project_dir: Path) -> bool:
    """The data first: a file that differs from data/manifest.json stops here. True when
    `prepare` ran; else `open_data` splits the bundled digits."""
    prepared = bool(manifest.load(project_dir))
    if prepared:
        manifest.check(project_dir)
    elif params.data.source != "digits":  # never train on the example by surprise
        raise ConfigError(
            f"data.source: {params.data.source}, but {manifest.MANIFEST} is missing: run "
            f"`{COMMAND} prepare` (or `dvc repro prepare`) first"
        )
    else:
        say(
            f"Note: {manifest.MANIFEST} not found, so training on the bundled digits (a "
            f"temporary train/validation split); `{COMMAND} prepare` (or "
            "`dvc repro`) prepares and versions the data that train and evaluate share."
        )
    return prepared


def open_data(params: Params, project_dir: Path, prepared: bool, tmp: Path) -> Prepared:
    """What `prepare` wrote, or the bundled digits split into `tmp`."""
    if prepared:
        return pipeline.load_prepared(project_dir / PROCESSED)
    return Prepared(bundled_digits(tmp, params), tmp)


def _result(
    run: Run, reason: str, exit_code: int, resume_command: str, project_dir: Path
) -> TrainResult:
    """How the run ended: stopped (`reason`; said with how to continue), or complete (`_finish`)."""
    digest = weights_digest(run.parts.model)  # the last step's: equal digests, bit-identical runs
    if exit_code == EXIT_LEASE_LOST:  # the run's folder is the other session's now
        say(
            f"Stopped at step {run.state.step} of {run.plan.total} ({reason}); that session "
            "trains it on, so this one wrote nothing more."
        )
    elif reason:
        saved = f"checkpoint saved in {run.paths.checkpoints}"
        if run.last_saved < 0:  # the stop's save failed, every one before it too, no resume
            saved = (
                "its checkpoint could not be saved and the run has none: it starts again at step 0"
            )
        elif run.last_saved != run.state.step:  # the stop's save failed (a storage fault, said)
            saved = f"its checkpoint could not be saved, the newest is at step {run.last_saved}"
        say(
            f"Stopped at step {run.state.step} of {run.plan.total} ({reason}); {saved}.\n"
            f"Continue with: {resume_command or 'the same train command'}"
        )
    status, task = "stopped" if reason else "completed", run.parts.task
    # The class (multilabel: positive) weights the loss used, by name; None when unweighted.
    weights = [round(w, 6) for w in task.class_weights]
    by_name = dict(zip(task.names, weights, strict=True)) if weights else None
    facts = {  # the run record's: its `metrics` hold the numbers, params.yaml the settings
        "run_name": run.params.run_name,
        "status": status,
        "data_hash": run.fingerprint[fingerprint.DATA],
        "run_fingerprint": fingerprint.digest(run.fingerprint),
        "weights_sha256": digest,
        "strategy": run.info.name,
        "device": run.info.device,
        "precision": run.plan.precision,
        "monitor": run.params.train.monitor,
        "replicas": run.info.replicas,
        "workers": run.info.workers,
        "global_batch": run.plan.global_batch,
        "learning_rate": run.plan.learning_rate,  # train.learning_rate, scaled_learning_rate's
        "resumes": run.state.resumes,
        "started_at_step": run.started_at_step,
    }
    # A session that trained no step leaves the run's results as a record names them, or writes
    # them again in the same bytes (`dvc repro` deletes a stage's outputs first): that record
    # stays the run's, for find_run (the model card) and DVC.
    idle = run.state.step == run.started_at_step
    files = [run.paths.model_file, run.paths.metrics_file]
    sidecar = run.paths.model_file.with_name(Path(SIDECAR_FILE).name)  # beside them, unrecorded
    kept = idle and sidecar.is_file() and is_recorded(project_dir, facts, files)
    metrics = _finish(run, digest, write=not kept) if not reason else {}
    kept = kept or (idle and not reason and is_recorded(project_dir, facts, files))
    why = reason or divergence(run)
    return TrainResult(status, run.state.step, exit_code, why, metrics, by_name, facts, kept)


def make_plan(
    params: Params, info: StrategyInfo, data: Prepared, hooks: RunHooks | None = None
) -> RunPlan:
    """Batch, steps, learning rate and precision of the run; their line unless a sweep's later
    trial (`hooks`), a note on the precision."""
    cfg = params.train
    hooks = hooks or RunHooks()  # speed's plan: its lines
    global_batch = cfg.batch_size * info.replicas
    lr = scaled_learning_rate(cfg, info.replicas)
    n_train = data.count("train")
    # Full global batches only: every step has the same shape (XLA, TPUs), and the dropped
    # examples change every epoch.
    per_epoch = n_train // global_batch
    if per_epoch == 0:
        fits = n_train // info.replicas  # the largest batch per replica that fills one step
        if fits == 0:
            raise ConfigError(
                f"train.batch_size: the training split has {n_train} examples, fewer than the "
                f"{info.replicas} replicas; add data and prepare it again, or train on one "
                "replica (example: --set distribute.strategy=default)"
            )
        raise ConfigError(
            f"train.batch_size: {cfg.batch_size} x {info.replicas} replicas is more than the "
            f"{n_train} training examples (example: --set train.batch_size="
            f"{2 ** int(math.log2(fits))})"
        )
    total = per_epoch * cfg.epochs
    frozen = cfg.fine_tune.frozen_epochs if params.model.architecture == "backbone" else 0
    phase_step = per_epoch * frozen if 0 < frozen < cfg.epochs else 0
    policy, notice = mixed_precision_policy(info.device, cfg.mixed_precision)
    if notice:
        say(f"Note: {notice}")
    keras.mixed_precision.set_global_policy(policy)
    frozen_note = f"; backbone frozen for {frozen} epochs (until step {phase_step})"
    replicas = f"{info.replicas} replica{'s' if info.replicas != 1 else ''}"
    if hooks.say_preamble:  # the rate as optim.py's rule gave it (yours, if you wrote one)
        say(
            f"Global batch {global_batch} = {cfg.batch_size} per replica x {replicas}; "
            f"learning rate {lr:g} = scaled_learning_rate(train.learning_rate "
            f"{cfg.learning_rate:g}, {replicas}), {cfg.optimizer}, {cfg.schedule}; "
            f"{per_epoch} steps per epoch, {total} in all; "
            f"precision {policy}{', XLA' if cfg.xla else ''}{frozen_note if phase_step else ''}"
        )
    return RunPlan(global_batch, per_epoch, total, lr, policy, phase_step)


def build_parts(
    params: Params, strategy: Any, info: StrategyInfo, data: Prepared, plan: RunPlan
) -> StepParts:
    """Model, task, optimizer, metrics and the step's variables, in `strategy.scope()`."""
    cfg = params.train
    task = make_task(params, data.spec)
    with strategy.scope():
        model = build_model(data.spec, task.num_outputs, params.model)
        optimizer = build_optimizer(cfg, plan.total, info.replicas, plan.phase_step)
        if plan.precision == "mixed_float16":  # float16 gradients underflow without scaling
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        # Fine-tuning: the optimizer knows the variables of both phases from the start, so its
        # state and the checkpoint have one structure before and after the phase change.
        unfreeze = cfg.fine_tune.unfreeze_layers
        tuned = fine_tune_variables(model, unfreeze) if plan.phase_step else None
        optimizer.build(tuned if tuned is not None else model.trainable_variables)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # The chunk's [loss, train metric]: per-replica sums, added up only when read.
        sums = tf.Variable(
            tf.zeros([2]),
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
            trainable=False,
        )
        metrics = task.make_metrics(training=True)
    return StepParts(strategy, model, optimizer, task, metrics, sums, step_var, plan.global_batch)


def _build(
    params: Params,
    strategy: Any,
    info: StrategyInfo,
    data: Prepared,
    paths: RunPaths,
    plan: RunPlan,
    expected: dict[str, Any],
    hooks: RunHooks,
) -> Run:
    """The step's parts, the best weights, the checkpoint, the validation data, the fingerprint."""
    parts = build_parts(params, strategy, info, data, plan)
    model, optimizer = parts.model, parts.optimizer
    validator = Validator(model, parts.task)
    # A misspelt train.monitor stops the run here, not at the end of its first epoch.
    names = [f"val_{m.name}" for m in (validator.loss, *validator.metrics)]
    EarlyStopping(params.train.monitor).check(names)
    with strategy.scope():
        best = BestWeights(model)
    # Variable lists rather than `Checkpoint(model=model)`: with Keras 3 the latter leaves out
    # the dropout layers' RNG state (`seed_generator_state`), which exact resume needs.
    # The optimizer's step counter and the training metrics' sums resume the schedule and the
    # epoch's figures exactly.
    checkpoint = tf.train.Checkpoint(
        model=list(model.variables),
        optimizer=list(optimizer.variables),
        step=parts.step_var,
        best=best.variables,
        metrics=[v for metric in parts.metrics for v in metric.variables],
    )
    store = CheckpointStore(paths.checkpoints, params.train.keep_checkpoints, paths.restore_from)
    store.prepare(checkpoint)  # its write traced at start-up, not at the first save
    # Small tabular data: every replica's copy of the training split, and the validation split
    # read once; else what the streaming pipeline holds.
    resident = resident_bytes(strategy, data)
    validation = validation_batches(data, plan.global_batch, in_memory=resident > 0)
    held = resident + data.split_bytes("validation") if resident else data.in_memory_bytes()
    held = held or preflight.data_bytes(
        data.spec.input_shape, plan.global_batch, pipeline.SHUFFLE_WINDOW
    )
    variables = [*model.variables, *optimizer.variables, *best.variables]  # what a checkpoint saves
    _say_findings(
        hooks, preflight.before_first_step(params, info, paths.restore_from, variables, held)
    )
    validate = functools.partial(validator.run, validation)
    fp = fingerprint.with_variables(expected, model.variables)
    return Run(params, info, data, paths, plan, parts, validate, best, checkpoint, store, fp, hooks)


def _restore(run: Run, fresh: bool) -> None:
    """Start over (--fresh) or restore the newest checkpoint: its variables and its state."""
    params, paths, plan, cfg = run.params, run.paths, run.plan, run.params.train
    if fresh and run.info.is_chief:  # delete the run's checkpoints and TensorBoard logs
        deleted = run.store.clear()
        shutil.rmtree(run.paths.tensorboard, ignore_errors=True)
        if deleted:
            many = len(deleted) > 1
            steps = f"steps {deleted[0]}..{deleted[-1]}" if many else f"step {deleted[0]}"
            say(
                f"--fresh: deleted {len(deleted)} checkpoint{'s' if many else ''} of run "
                f"'{params.run_name}' ({steps}) in {paths.checkpoints}, and its TensorBoard logs"
            )
    if run.info.is_chief:
        run.store.clean_partial()
    meta = None if fresh else run.store.restore(run.checkpoint, lambda m: _check_meta(run, m))
    saved = saved_state(meta["state"]) if meta else {}
    # Today's early-stopping settings, the run's progress so far (when it watched this metric).
    early = EarlyStopping.from_state(cfg.monitor, cfg.early_stopping_patience, saved.get("early"))
    saved.update(early=early, step=int(run.parts.step_var.numpy()))
    run.state = RunState(**saved)
    run.stopped_early = early.should_stop or bool(divergence(run))  # already complete
    if meta is None:
        _say(
            run, f"Starting run '{params.run_name}' from step 0; checkpoints in {paths.checkpoints}"
        )
        return
    run.state.resumes += 1
    run.last_saved = run.started_at_step = run.state.step
    epoch, batch = divmod(run.state.step, plan.per_epoch)
    # At an epoch's end (a complete run's last checkpoint too), not "epoch E+1, batch 0".
    where = f"epoch {epoch + 1}, batch {batch} of {plan.per_epoch}"
    if batch == 0 and epoch > 0:
        where = f"the end of epoch {epoch}"
    say(
        f"Resuming run '{params.run_name}' from its checkpoint at step {run.state.step} "
        f"({where}) in {paths.restore_from}"
    )


def saved_state(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's `state` as the run left it: meta.json is standard JSON, where a loss that
    went NaN (a diverged run) is null; back to NaN, so the run knows it diverged."""

    def number(value: float | None) -> float:
        return math.nan if value is None else value

    history = [{k: number(v) for k, v in row.items()} for row in state.get("history", [])]
    losses = {k: number(state[k]) for k in ("epoch_loss", "epoch_metric") if k in state}
    return {**state, **losses, "history": history}


def _check_meta(run: Run, meta: dict[str, Any]) -> None:
    """Refuse a checkpoint of an older version or of another run; note a resume under other code."""
    name, plan = run.params.run_name, run.plan
    new_name = f"{name}-{fingerprint.digest(run.fingerprint)[:8]}"
    if meta.get("format") != FORMAT:
        raise CheckpointMismatch(
            f"run '{name}' has checkpoints of an older version of this project, which this one "
            f"cannot resume; they are kept: train under another run_name (example: --set "
            f"run_name={new_name})"
        )
    changed = fingerprint.differences(meta["fingerprint"], run.fingerprint)
    if changed:
        raise CheckpointMismatch(
            f"run '{name}' was started with other settings or data ({'; '.join(changed)}); "
            + keep_it(name, new_name)
        )
    if meta["step"] > plan.total:
        need = -(-meta["step"] // plan.per_epoch)
        raise CheckpointMismatch(
            f"run '{name}' has trained {meta['step']} steps, more than the {plan.total} of "
            f"train.epochs={run.params.train.epochs}: set train.epochs to {need} or more to use "
            f"it; {keep_it(name, new_name)}"
        )
    if meta.get("code") != fingerprint.code_digest():
        say(
            f"Note: the package's code differs from the code that wrote this checkpoint of run "
            f"'{name}'; the run resumes with this code."
        )


def _save(run: Run) -> None:
    """A checkpoint of the run's whole state, once per step."""
    state, step = {**dataclasses.asdict(run.state), "seconds": run.elapsed()}, run.state.step
    meta = {"fingerprint": run.fingerprint, "code": fingerprint.code_digest(), "state": state}
    if step != run.last_saved and run.store.try_save(run.checkpoint, step, meta):
        run.last_saved = step


def _train_loop(run: Run, stopper: Stopper) -> str:
    """Chunks of steps until the end, a stop or early stopping; the stop reason ('' if none)."""
    cfg, plan, info, state = run.params.train, run.plan, run.info, run.state
    strategy, seed, augment = run.parts.strategy, run.params.seed, run.params.data.augment
    trains = state.step < plan.total and not run.stopped_early  # a run already complete: no file
    curves = Curves(run.paths.tensorboard, info.is_chief and trains, state.step)
    profiler = Profiler(cfg.profile_steps, run.paths.tensorboard, info.is_chief)
    reason, chunk, tuned = "", None, False
    # One feed for the whole run, from the run's step on (a resume continues exactly).
    feed = make_feed(strategy, run.data, plan.global_batch, seed, state.step, cfg.epochs, augment)
    bar = progress_bar(plan.total, initial=state.step, unit="step", disable=not info.is_chief)
    with bar:  # closed on a crash too, short of its total: red in Colab's widget
        while state.step < plan.total and not reason and not run.stopped_early:
            fine_tuning = bool(plan.phase_step) and state.step >= plan.phase_step
            if chunk is None or fine_tuning != tuned:  # also right after a resume
                if chunk is not None:
                    _say(run, f"Step {state.step}: fine-tuning the backbone's top layers")
                if plan.phase_step:  # trace the chunk for the variables this phase trains
                    unfreeze = cfg.fine_tune.unfreeze_layers if fine_tuning else None
                    set_backbone_trainable(run.parts.model, unfreeze)
                chunk = make_chunk_function(run.parts, cfg, feed.next_batch)
                tuned = fine_tuning
            # Chunks are counted from each epoch start, and a run stops only between chunks: a
            # resumed run cuts the same chunks as an uninterrupted one, bit for bit.
            n = min(cfg.steps_per_execution, plan.per_epoch - state.step % plan.per_epoch)
            with profiler.chunk(state.step):
                started = time.perf_counter()
                sums = chunk(feed.args(state.step), tf.constant(n, tf.int64)).numpy()  # waits on it
            elapsed = time.perf_counter() - started
            state.step += n
            profiler.after(state.step)
            _log_chunk(run, curves, n, float(sums[0]), float(sums[1]), elapsed)
            bar.update(n)
            bar.set_postfix(
                loss=f"{sums[0] / n:.4f}", ex_s=f"{n * plan.global_batch / elapsed:,.0f}"
            )
            if state.step % plan.per_epoch == 0:  # validate first: the checkpoint holds the best
                _end_epoch(run, curves)
            due = checkpoint_due(state.step, n, cfg.checkpoint_every_steps, plan.per_epoch)
            reason = stopper.check(strategy, info.workers, saving=due)
            if (due or reason) and stopper.may_write(strategy, info.workers):
                _save(run)
        # Else it ends at the run's step: early stopping, a pruned trial or a stop is no failure.
        bar.leave, bar.total = run.hooks.say_epochs, bar.n  # a sweep's trial leaves no bar
    profiler.after(state.step, last=True)
    curves.close(state.step)
    return reason


def _end_epoch(run: Run, curves: Curves) -> None:
    """Validation, the history row, TensorBoard, the best weights and early stopping."""
    plan, cfg, state, task = run.plan, run.params.train, run.state, run.parts.task
    val = run.validate()
    row = {
        "epoch": state.step // plan.per_epoch,
        "step": state.step,
        "loss": state.epoch_loss / plan.per_epoch,
        task.train_metric_name: state.epoch_metric / (plan.per_epoch * plan.global_batch),
        **metric_values(run.parts.metrics),
        **val,
        "seconds": round(run.elapsed(), 3),  # the run's wall time so far
    }
    for metric in run.parts.metrics:
        metric.reset_state()
    state.epoch_loss, state.epoch_metric = 0.0, 0.0
    state.history.append(row)
    curves.scalars(
        {f"val/{name.removeprefix('val_')}": value for name, value in val.items()}, state.step
    )
    if state.early.update(val, state.step):
        run.best.keep()
    # The lockstep rule: the verdict is agreed across workers, at the same step on each (the
    # validation metrics are the same numbers on every worker, but each decides on its own).
    diverged = divergence(run)  # a sweep's trial says it in its one line (TrainResult.reason)
    stop = state.early.should_stop or bool(diverged)
    run.stopped_early = agree(run.parts.strategy, stop, run.info.workers)
    shown = "  ".join(f"{k} {v:.4f}" for k, v in row.items() if k not in _NOT_METRICS)
    _say(run, f"epoch {row['epoch']}/{cfg.epochs}  step {state.step}/{plan.total}  {shown}")
    if diverged:
        _say(run, f"Stopped early: {diverged}; {lower_the_rate(run.params.train.learning_rate)}")
    elif run.stopped_early:
        why = "another worker stopped early"
        if state.early.should_stop:
            why = f"{cfg.monitor} has not improved for {state.early.patience} epochs"
        _say(run, f"Early stopping: {why}; the best was at step {state.early.best_step}")
    if run.hooks.on_epoch is not None:  # e.g. a sweep's report and pruner, on every worker
        last = run.stopped_early or state.step >= plan.total  # the run ends here anyway
        wish = run.hooks.on_epoch({**row, "last": last})
        if agree(run.parts.strategy, bool(wish), run.info.workers) and not last:
            run.stopped_early = True
            _say(run, f"Stopped early: {wish or 'another worker asked to'}")


def _say_findings(hooks: RunHooks, lines: list[str]) -> None:
    """Preflight's findings: its warnings and notes, its 'Preflight: ...' lines (nothing wrong)
    unless a sweep's later trial (`RunHooks.say_preamble`: its first said them)."""
    for line in filter(None, lines):
        if hooks.say_preamble or not line.startswith("Preflight:"):
            say(line)


def _say(run: Run, line: str) -> None:
    """A line of the run's progress, unless a sweep's trial (`RunHooks.say_epochs`)."""
    if run.hooks.say_epochs:
        say(line)


def divergence(run: Run) -> str:
    """Why the run stops once an epoch's val_loss is not a number (NaN weights, which no later
    epoch mends); '' while a number."""
    last = run.state.history[-1] if run.state.history else {"val_loss": 0.0}  # no epoch yet
    if math.isfinite(last["val_loss"]):
        return ""
    return f"val_loss is {last['val_loss']} at epoch {last['epoch']}: training diverged"


def lower_the_rate(rate: float) -> str:
    """What a run that diverged at train.learning_rate `rate` does next."""
    return f"lower train.learning_rate (example: --set train.learning_rate={rate / 10:g})"


def _finish(run: Run, digest: str, write: bool) -> dict[str, Any]:
    """The best weights into the model, final validation, results/models and train.json (unless
    not `write`); returns every number of the run (its record's)."""
    plan, info, params, state, model = run.plan, run.info, run.params, run.state, run.parts.model
    speed = state.step * plan.global_batch / state.train_seconds if state.train_seconds else 0.0
    if state.step == run.started_at_step:
        results = "writing its results" if write else "its results are there already"
        if not info.is_chief:  # it saves only into its scratch folder, deleted at the end
            results = "this worker leaves its results to the chief"
        say(
            f"Run '{params.run_name}' is already complete ({state.step} steps); {results}. Raise "
            "train.epochs to train it further, or set another run_name to train a new run."
        )
    if state.early.best_step >= 0:
        run.best.put_back()  # the saved model is the best one (train.monitor)
    final = run.validate()
    last = state.history[-1] if state.history else {}
    metrics = {
        "steps": state.step,
        # val_loss is weighted like the training loss (what picks the best model and drives
        # early stopping); evaluate's test_loss is not.
        **final,
        **{f"train_{k}": v for k, v in last.items() if k not in _NOT_METRICS and k not in final},
        "best_step": state.early.best_step,
        "stopped_early": int(run.stopped_early),  # 1 or 0: a metrics file holds numbers
        "examples_per_sec": round(speed, 1),
        "wall_time_s": round(run.elapsed(), 2),
        "history": state.history,
    }
    users = wrap_for_users(model, run.parts.task, run.data.vectorize)
    sidecar = user_sidecar(run.parts.task, run.data.spec, run.data.vectorize)
    # train.json (DVC's metrics): the numbers a user compares and the curves; the run record
    # keeps every number.
    compared = run.parts.task.compared(final, "val", "val_loss", params.train.monitor)
    numbers = {**compared, "history": state.history}
    if write:
        write_results(users, numbers, run.paths.model_file, run.paths.metrics_file, sidecar)
        if info.is_chief:
            _say(run, f"Saved {run.paths.model_file} and {run.paths.metrics_file}")
    monitor = params.train.monitor
    shown = f"{monitor} {final.get(monitor, float('nan')):.4f} (best, step {state.early.best_step})"
    if monitor != "val_loss":  # val_loss is said too, once
        shown += f", val_loss {final['val_loss']:.4f}"
    _say(
        run,
        f"Done: step {state.step}, {shown}, {speed:,.0f} examples/s; final weights sha256 {digest}",
    )
    return metrics


_NOT_METRICS = ("epoch", "step", "seconds")


def validation_batches(data: Prepared, global_batch: int, in_memory: bool = False) -> Any:
    """The validation split, streamed (one iterator for the run), or read once and held
    (`in_memory`). Vectors: big batches, few Python round trips; images: the training batch (a
    conv net's activations set the memory)."""
    batch = max(global_batch, 1024) if data.spec.kind == "vector" else global_batch
    batches = pipeline.eval_dataset(data, "validation", batch)
    if in_memory:
        return list(batches)
    return pipeline.Passes(batches, -(-data.count("validation") // batch))  # last one smaller


class Profiler:
    """`train.profile_steps: [from, to]`: a TensorBoard profile of those steps (whole chunks) in
    the chief's TensorBoard folder (docs/training.md)."""

    def __init__(self, window: list[int], logdir: Path, enabled: bool) -> None:
        self.window = list(window) if enabled and len(window) == 2 else []  # [] once traced
        self.logdir, self.running = str(logdir), False

    def chunk(self, step: int) -> Any:
        """A step marker for the chunk from `step` (a no-op while not tracing)."""
        if self.window and not self.running and step >= self.window[0]:
            tf.profiler.experimental.start(self.logdir)
            self.running = True
        return tf.profiler.experimental.Trace("train", step_num=step, _r=1)

    def after(self, step: int, last: bool = False) -> None:
        """Stop once the window's last step has run, or the run stops."""
        if self.running and (last or step >= self.window[1]):
            tf.profiler.experimental.stop()
            self.running, self.window = False, []


def weights_digest(model: Any) -> str:
    """SHA-256 of all weights: equal digests mean bit-identical models."""
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


def _log_chunk(
    run: Run, curves: Curves, n: int, loss: float, metric_sum: float, elapsed: float
) -> None:
    """The chunk of `n` steps just run: into the epoch's sums, and to TensorBoard."""
    state, batch = run.state, run.plan.global_batch
    state.epoch_loss += loss
    state.epoch_metric += metric_sum
    state.train_seconds += elapsed
    values = {
        "train/loss": loss / n,
        f"train/{run.parts.task.train_metric_name}": metric_sum / (n * batch),
        "perf/step_time_ms": 1000.0 * elapsed / n,
        "perf/examples_per_sec": n * batch / elapsed,
    }
    if run.info.device == "GPU":
        mem = tf.config.experimental.get_memory_info("GPU:0")
        values["perf/gpu_memory_mb"] = mem["current"] / 2**20
        values["perf/gpu_peak_memory_mb"] = mem["peak"] / 2**20
    curves.scalars(values, state.step)
