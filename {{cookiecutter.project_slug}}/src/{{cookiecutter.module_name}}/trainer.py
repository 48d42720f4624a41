"""Training: one custom loop for every strategy (default, mirrored, multi-worker, TPU).

Why not `model.fit`: in Keras 3 it fails under MultiWorkerMirroredStrategy, and its
`BackupAndRestore` resumes only at an epoch start. This loop runs `train.steps_per_execution`
steps per `tf.function` call (one Python round trip per chunk, not per step), checkpoints model,
optimizer, RNG state and step atomically, and resumes at the very next batch.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import manifest, preflight
from .checkpoints import CheckpointMismatch, CheckpointStore, write_results
from .config import ConfigError, Params
from .environment import utc_now
from .lease import EXIT_LEASE_LOST, Lease
from .model import build_model
from .pipeline import SHUFFLE_WINDOW, Prepared, eval_dataset, load_prepared, train_dataset
from .prepare import PROCESSED, bundled_digits
from .run_record import record_run
from .seeding import seed_everything
from .storage import RunPaths, run_paths
from .strategy import StrategyInfo, make_strategy, mixed_precision_policy

# Exit codes of `train` (documented in the README): 0 done; 3 stopped by the time budget;
# 128 + signal number when stopped by SIGINT (130) or SIGTERM (143). All stops are resumable.
# 4 / 5: another session holds / took over the run (lease.py); docs/training-faults.md.
EXIT_BUDGET = 3


@dataclass
class TrainResult:
    """How a call to `fit` ended."""

    status: str  # "completed" | "stopped"
    step: int
    total_steps: int
    exit_code: int = 0
    reason: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)


class Stopper:
    """Asks the loop to stop cleanly: at the time budget, or on SIGTERM / SIGINT.

    Colab kills a session after its limit and a notebook's "interrupt" sends SIGINT; both should
    cost at most the steps since the last chunk, not the run. A second SIGINT stops at once.
    """

    def __init__(self, budget_minutes: float, lease: Lease | None = None) -> None:
        self.lease = lease  # issue 9: another session taking the run over also stops it
        self.start = time.monotonic()
        self.budget_s = budget_minutes * 60.0
        self.reason = ""
        self.exit_code = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Stopper:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        print(f"\nReceived {name}: stopping after the current steps...", flush=True)
        self.reason = f"{name} received"
        self.exit_code = 128 + signum
        if signum == signal.SIGINT:  # a second Ctrl-C / interrupt stops without waiting
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def check(self) -> str:
        """The reason to stop now, or ''."""
        if not self.reason and self.budget_s > 0 and time.monotonic() - self.start > self.budget_s:
            self.reason = f"time budget of {self.budget_s / 60:g} minutes reached"
            self.exit_code = EXIT_BUDGET
        if not self.reason and self.lease is not None and self.lease.lost:
            self.reason, self.exit_code = self.lease.lost, EXIT_LEASE_LOST
        return self.reason


def train(
    params: Params,
    project_dir: Path,
    fresh: bool = False,
    resume_command: str = "",
    take_over: bool = False,
) -> TrainResult:
    """`python -m <module> train`: strategy, seeds, data, then `fit`."""
    # The data first (issue 4): a file that differs from data/manifest.json stops the run here,
    # before any time is spent. Without a manifest (`prepare` never ran) the bundled digits are
    # split and sharded into a temporary folder instead.
    prepared = manifest.load(project_dir) is not None
    if prepared:
        manifest.check(project_dir, module=__package__ or "")
    elif params.data.source != "digits":  # issue 9: never train on the example by surprise
        raise ConfigError(
            f"data.source: {params.data.source}, but {manifest.MANIFEST} is missing: run "
            f"`python -m {__package__} prepare` (or `dvc repro prepare`) first"
        )
    else:
        print(
            f"Note: {manifest.MANIFEST} not found, so training on the bundled digits (a "
            f"temporary train/validation split); `python -m {__package__} prepare` (or "
            "`dvc repro`) prepares and versions the data that train and evaluate share.",
            flush=True,
        )
    # The strategy comes first: device setup and MultiWorkerMirroredStrategy need a TensorFlow
    # that has not run any op yet.
    strategy, info = make_strategy(params.distribute)
    seeded = seed_everything(params.seed, params.repro.deterministic)
    print(
        f"Seed {params.seed} ({', '.join(seeded)}); deterministic ops "
        f"{'on' if params.repro.deterministic else 'off'}",
        flush=True,
    )
    paths = run_paths(project_dir, params.run_name, info.is_chief)
    # Issue 9: preflight, then one writer per run (the chief holds the lease) before any write.
    preflight.before_training(params, info, paths.restore_from.parents[1])
    lease = Lease.acquire(paths.checkpoints, params.run_name, take_over) if info.is_chief else None
    started_at = utc_now()
    try:
        if lease is not None:
            lease.start_heartbeat()
        with tempfile.TemporaryDirectory(prefix="digits-") as tmp:
            data = (
                load_prepared(project_dir / PROCESSED)
                if prepared
                else Prepared(bundled_digits(Path(tmp), params), Path(tmp))
            )
            result = fit(
                params,
                strategy,
                info,
                data,
                paths,
                fresh=fresh,
                resume_command=resume_command,
                lease=lease,
            )
    finally:
        if lease is not None:
            lease.release()
        paths.cleanup()
    if info.is_chief:  # results/runs/<run_id>/manifest.json, and the experiment tracker
        record_run(params, project_dir, paths, result, started_at, resume_command)
    return result


def fit(
    params: Params,
    strategy: Any,
    info: StrategyInfo,
    data: Prepared,
    paths: RunPaths,
    fresh: bool = False,
    resume_command: str = "",
    progress: bool = True,
    lease: Lease | None = None,
) -> TrainResult:
    """Train `params.model` on `data` under `strategy`, resuming from `paths.checkpoints`."""
    import keras
    import tensorflow as tf
    from tqdm.auto import tqdm

    run_start = time.monotonic()
    cfg = params.train
    global_batch = cfg.batch_size * info.replicas
    lr = cfg.learning_rate * (info.replicas if cfg.lr_scaling == "linear" else 1)
    n_train = data.count("train")
    # Full global batches only: every step has the same shape (XLA, TPUs), and the dropped
    # examples change every epoch.
    per_epoch = n_train // global_batch
    if per_epoch == 0:
        raise ConfigError(
            f"train.batch_size: {cfg.batch_size} x {info.replicas} replicas is more than the "
            f"{n_train} training examples (example: --set train.batch_size=32)"
        )
    total = per_epoch * cfg.epochs
    policy, notice = mixed_precision_policy(info.device, cfg.mixed_precision)
    if notice:
        print(f"Note: {notice}", flush=True)
    keras.mixed_precision.set_global_policy(policy)
    print(
        f"Global batch {global_batch} = {cfg.batch_size} per replica x {info.replicas} "
        f"replica{'s' if info.replicas != 1 else ''}; "
        f"learning rate {lr:g} (train.learning_rate {cfg.learning_rate:g}, "
        f"train.lr_scaling={cfg.lr_scaling}); {per_epoch} steps per epoch, {total} in all; "
        f"precision {policy}{', XLA' if cfg.xla else ''}",
        flush=True,
    )

    with strategy.scope():
        model = build_model(data.spec, len(data.spec.names), params.model)
        optimizer = keras.optimizers.Adam(lr)
        if policy == "mixed_float16":  # float16 gradients underflow without loss scaling
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # Per-replica sums, added up across replicas only when read (once per chunk).
        on_read = dict(
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
            trainable=False,
        )
        loss_sum = tf.Variable(0.0, **on_read)
        correct_sum = tf.Variable(0.0, **on_read)
    # Variable lists rather than `Checkpoint(model=model)`: with Keras 3 the latter leaves out
    # the dropout layers' RNG state (`seed_generator_state`), which exact resume needs.
    checkpoint = tf.train.Checkpoint(
        model=list(model.variables), optimizer=list(optimizer.variables), step=step_var
    )
    store = CheckpointStore(paths.checkpoints, cfg.keep_checkpoints, paths.restore_from)
    held = preflight.data_bytes(data.spec.input_shape, global_batch, SHUFFLE_WINDOW)
    preflight.before_first_step(
        params, info, paths.restore_from, [*model.variables, *optimizer.variables], held
    )
    meta_expected = {
        "global_batch": global_batch,
        "train_examples": n_train,
        "seed": params.seed,
    }
    if fresh and info.is_chief:
        store.clear()
        shutil.rmtree(paths.tensorboard, ignore_errors=True)
    if info.is_chief:
        store.clean_partial()
    meta = None if fresh else store.restore(checkpoint)
    step = int(step_var.numpy())
    if meta is not None:
        changed = {k: (meta.get(k), v) for k, v in meta_expected.items() if meta.get(k) != v}
        if changed:
            what = ", ".join(f"{k} was {old}, now {new}" for k, (old, new) in changed.items())
            raise CheckpointMismatch(
                f"run '{params.run_name}' was started with other settings ({what}); "
                "start over with --fresh or use another run_name"
            )
        print(
            f"Resuming run '{params.run_name}' from its checkpoint at step {step} "
            f"(epoch {step // per_epoch + 1}, batch {step % per_epoch} of {per_epoch}) "
            f"in {paths.restore_from}",
            flush=True,
        )
    else:
        print(
            f"Starting run '{params.run_name}' from step 0; checkpoints in {paths.checkpoints}",
            flush=True,
        )

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    scale_loss = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def gradients(x: tf.Tensor, y: tf.Tensor):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            # Divide by the GLOBAL batch: the replicas' gradients are summed across replicas.
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            scaled = optimizer.scale_loss(loss) if scale_loss else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        hits = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=y.dtype), y), tf.float32)
        return loss, tf.reduce_sum(hits), grads

    if cfg.xla:
        # Compile the forward and backward pass; the optimizer update stays outside XLA because
        # under a distribution strategy it synchronises replicas.
        gradients = tf.function(gradients, jit_compile=True)

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> None:
        loss, hits, grads = gradients(x, y)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        loss_sum.assign_add(loss)
        correct_sum.assign_add(hits)

    @tf.function
    def run_chunk(iterator: Any, n: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # `n` steps per call: the Python round trip is paid once per chunk, not once per step.
        # Each dataset element is one step's batch, so memory depends on the batch size only.
        loss_sum.assign(0.0)
        correct_sum.assign(0.0)
        for _ in tf.range(n):
            strategy.run(replica_step, args=next(iterator))
        step_var.assign_add(n)
        return loss_sum.read_value(), correct_sum.read_value()  # summed over replicas

    @tf.function(reduce_retracing=True)
    def predict(x: tf.Tensor) -> tf.Tensor:
        return model(x, training=False)

    writer = (
        tf.summary.create_file_writer(str(paths.tensorboard))
        if info.is_chief
        else tf.summary.create_noop_writer()
    )
    multiworker = info.workers > 1
    history: list[dict[str, float]] = []
    epoch_loss = epoch_hits = epoch_steps = 0.0
    train_time = 0.0
    trained_steps = 0
    last_saved = step if meta is not None else -1
    result_reason = ""

    def save(at: int) -> None:
        nonlocal last_saved
        # A storage fault is reported by try_save and the run goes on (issue 9).
        if at != last_saved and store.try_save(
            checkpoint, at, {**meta_expected, "epoch": at // per_epoch}
        ):
            last_saved = at

    bar = tqdm(
        total=total,
        initial=step,
        unit="step",
        disable=not (progress and info.is_chief),
        dynamic_ncols=True,
    )
    say = bar.write if not bar.disable else (lambda s: print(s, flush=True))
    with Stopper(cfg.time_budget_minutes, lease) as stopper, writer.as_default():
        # Chunks of train.steps_per_execution steps, counted from each epoch start. A run only
        # stops (and so resumes) between chunks, so a resumed run cuts the same chunks as an
        # uninterrupted one: the same computation, bit for bit.
        chunk = cfg.steps_per_execution
        # One distributed iterator for the whole run (creating one costs about half a second).
        iterator = iter(
            strategy.distribute_datasets_from_function(
                lambda ctx: train_dataset(
                    ctx, data, global_batch, params.seed, step, cfg.epochs, params.data.augment
                )
            )
        )
        while step < total and not result_reason:
            epoch, in_epoch = divmod(step, per_epoch)
            while in_epoch < per_epoch:
                n = min(chunk, per_epoch - in_epoch)
                started = time.perf_counter()
                chunk_loss, chunk_hits = (
                    float(v) for v in run_chunk(iterator, tf.constant(n, tf.int64))
                )  # waits for it
                elapsed = time.perf_counter() - started
                step += n
                in_epoch += n
                trained_steps += n
                train_time += elapsed
                epoch_loss += chunk_loss
                epoch_hits += chunk_hits
                epoch_steps += n
                _log_chunk(tf, step, n, chunk_loss, chunk_hits, elapsed, global_batch, info.device)
                bar.update(n)
                bar.set_postfix(
                    loss=f"{chunk_loss / n:.4f}", ex_s=f"{n * global_batch / elapsed:,.0f}"
                )
                every = cfg.checkpoint_every_steps
                # At the first chunk end at or after each multiple of `every`, and epoch ends.
                if step // every > (step - n) // every or in_epoch == per_epoch:
                    save(step)
                result_reason = stopper.check()
                if multiworker:
                    result_reason = _agree_to_stop(tf, strategy, result_reason, stopper)
                if result_reason:
                    break
            if in_epoch == per_epoch:
                val = _validate(predict, data, global_batch)
                record = {
                    "epoch": epoch + 1,
                    "step": step,
                    "loss": epoch_loss / max(epoch_steps, 1),
                    "accuracy": epoch_hits / max(epoch_steps * global_batch, 1),
                    **val,
                    "seconds": round(time.monotonic() - run_start, 3),  # since `fit` started
                }
                history.append(record)
                tf.summary.scalar("val/loss", val["val_loss"], step=step)
                tf.summary.scalar("val/accuracy", val["val_accuracy"], step=step)
                say(
                    f"epoch {epoch + 1}/{cfg.epochs}  step {step}/{total}  "
                    f"loss {record['loss']:.4f}  accuracy {record['accuracy']:.4f}  "
                    f"val_loss {val['val_loss']:.4f}  val_accuracy {val['val_accuracy']:.4f}"
                )
                epoch_loss = epoch_hits = epoch_steps = 0.0
        if result_reason:
            save(step)
        writer.flush()
    bar.close()

    speed = trained_steps * global_batch / train_time if train_time else 0.0
    if result_reason:
        saved = (
            f"checkpoint saved in {paths.checkpoints}"
            if last_saved == step
            else f"its checkpoint could not be saved, the newest is at step {max(last_saved, 0)}"
        )
        print(
            f"Stopped at step {step} of {total} ({result_reason}); {saved}.\n"
            f"Continue with: {resume_command or 'the same train command'}",
            flush=True,
        )
        return TrainResult("stopped", step, total, stopper.exit_code, result_reason)

    if trained_steps == 0:
        print(
            f"Run '{params.run_name}' is already complete ({step} steps); writing its results. "
            "Raise train.epochs to train further, or use --fresh to start over.",
            flush=True,
        )
    final = _validate(predict, data, global_batch)
    digest = weights_digest(model)
    metrics = {
        "status": "completed",
        "run_name": params.run_name,
        "steps": step,
        "epochs": cfg.epochs,
        "val_loss": final["val_loss"],
        "val_accuracy": final["val_accuracy"],
        "train_loss": history[-1]["loss"] if history else None,
        "train_accuracy": history[-1]["accuracy"] if history else None,
        "examples_per_sec": round(speed, 1),
        "wall_time_s": round(time.monotonic() - run_start, 2),
        "global_batch": global_batch,
        "replicas": info.replicas,
        "workers": info.workers,
        "strategy": info.name,
        "device": info.device,
        "learning_rate": lr,
        "precision": policy,
        "seed": params.seed,
        "deterministic": params.repro.deterministic,
        "weights_sha256": digest,
        "history": history,
    }
    write_results(model, metrics, paths.model_file, paths.metrics_file)  # one line if it fails
    if info.is_chief:
        print(f"Saved {paths.model_file} and {paths.metrics_file}", flush=True)
    print(
        f"Done: step {step}, val_accuracy {final['val_accuracy']:.4f}, {speed:,.0f} examples/s; "
        f"final weights sha256 {digest}",
        flush=True,
    )
    return TrainResult("completed", step, total, 0, "", metrics)


def weights_digest(model: Any) -> str:
    """SHA-256 of all weights: equal digests mean bit-identical models."""
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


def _validate(predict: Any, data: Prepared, batch: int) -> dict[str, float]:
    """Loss and accuracy on the validation split, streamed from its shards batch by batch."""
    import keras

    # Vectors: big batches, few Python round trips. Images: the training batch, because a conv
    # net's activations, not the inputs, set the memory (measured: 600 96x96 images, +700 MB).
    if data.spec.kind == "vector":
        batch = max(batch, 1024)

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    mean_loss = keras.metrics.Mean()
    accuracy = keras.metrics.SparseCategoricalAccuracy()
    for x, y in eval_dataset(data, "validation", batch):
        logits = predict(x)
        mean_loss.update_state(loss_fn(y, logits))
        accuracy.update_state(y, logits)
    return {"val_loss": float(mean_loss.result()), "val_accuracy": float(accuracy.result())}


def _log_chunk(
    tf: Any, step: int, n: int, loss: float, hits: float, elapsed: float, batch: int, device: str
) -> None:
    """Step time, throughput, loss (and GPU memory) to TensorBoard."""
    tf.summary.scalar("train/loss", loss / n, step=step)
    tf.summary.scalar("train/accuracy", hits / (n * batch), step=step)
    tf.summary.scalar("perf/step_time_ms", 1000.0 * elapsed / n, step=step)
    tf.summary.scalar("perf/examples_per_sec", n * batch / elapsed, step=step)
    if device == "GPU":
        mem = tf.config.experimental.get_memory_info("GPU:0")
        tf.summary.scalar("perf/gpu_memory_mb", mem["current"] / 2**20, step=step)
        tf.summary.scalar("perf/gpu_peak_memory_mb", mem["peak"] / 2**20, step=step)


def _agree_to_stop(tf: Any, strategy: Any, reason: str, stopper: Stopper) -> str:
    """Workers must stop at the same step, or the others wait forever in an all-reduce: stop
    when any worker wants to."""
    wants = strategy.run(lambda: tf.constant(1.0 if reason else 0.0))
    total = float(strategy.reduce(tf.distribute.ReduceOp.SUM, wants, axis=None))
    if total > 0 and not reason:
        stopper.reason = "another worker stopped"
        stopper.exit_code = stopper.exit_code or EXIT_BUDGET
        return stopper.reason
    return reason
