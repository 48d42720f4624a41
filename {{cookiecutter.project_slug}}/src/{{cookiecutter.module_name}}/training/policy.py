"""When the training loop saves, stops and keeps the best model: the checkpoint and stop policy.

THE LOCKSTEP RULE. Under MultiWorkerMirroredStrategy each step ends in collectives that wait for
every worker: a worker that saved (a collective too) or left the loop where another did not would
leave the others waiting forever. So every save and stop below happens at the same point of the
loop on every worker, decided from what all workers share: the step counter (the checkpoint
interval, epoch ends), or `agree`, an all-reduce of each worker's wish for what one worker sees
alone (a signal, its clock, a lost lease, early stopping). Keeping the best weights is a local
copy, which needs no agreement.
"""

from __future__ import annotations

import hashlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError
from .lease import EXIT_LEASE_LOST, Lease

# TensorFlow is imported where it is used: the notebooks and a sweep import this module for its
# names and exit codes before anything trains.

# Exit codes of `train` (documented in the README): 0 done; 3 stopped by the time budget;
# 128 + signal number when stopped by SIGINT (130) or SIGTERM (143). All stops are resumable.
# 4 / 5: another session holds / took over the run (lease.py); docs/training-faults.md.
EXIT_BUDGET = 3


@dataclass
class RunHooks:
    """What a caller that runs `train` as one part of a larger job (a sweep's trial) adds."""

    results: Path | None = None  # the model and train.json go here instead of results/
    # Called on every worker after each epoch's validation with the epoch's row (and `last`: the
    # run ends after it anyway): a reason to end the run as complete now (a pruned trial), or ''.
    on_epoch: Callable[[dict[str, Any]], str] | None = None
    deadline: float | None = None  # time.monotonic() at which to stop cleanly (resumable)
    # A sweep's trial says train's first lines only when the sweep's first, and no start, epoch
    # and saving lines (its one line instead) nor, once it ends, a progress bar; a resume, a
    # warning and a note are said either way (a sweep says each line once: `said_once`).
    say_preamble: bool = True
    say_epochs: bool = True


class Stopper:
    """Asks the loop to stop cleanly (a checkpoint, then exit) at the time budget, on SIGTERM /
    SIGINT (a notebook's interrupt; a second SIGINT stops at once), or when the lease is lost (no
    checkpoint: the run is another session's)."""

    def __init__(
        self, budget_minutes: float, lease: Lease | None = None, deadline: float | None = None
    ) -> None:
        self.lease = lease  # another session taking the run over also stops it
        self.start = time.monotonic()
        self.budget_s = budget_minutes * 60.0
        self.deadline = deadline  # a larger job's budget (a sweep's), as time.monotonic()
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

    def check(self, strategy: Any, workers: int, saving: bool = False) -> str:
        """The reason to stop now that all workers share (any worker's, `agree`), or ''.
        `saving`: a checkpoint is due, so the lease is read first: a session that took the run
        over is seen before this one writes, not at the next heartbeat."""
        if saving and self.lease is not None:
            self.lease.check()
        if not self.reason and self.budget_s > 0 and time.monotonic() - self.start > self.budget_s:
            self.reason = f"time budget of {self.budget_s / 60:g} minutes reached"
            self.exit_code = EXIT_BUDGET
        if not self.reason and self.deadline is not None and time.monotonic() > self.deadline:
            self.reason, self.exit_code = "the sweep's time budget reached", EXIT_BUDGET
        if not self.reason and self.lease is not None and self.lease.lost:
            self.reason, self.exit_code = self.lease.lost, EXIT_LEASE_LOST
        if agree(strategy, bool(self.reason), workers) and not self.reason:
            self.reason, self.exit_code = "another worker stopped", EXIT_BUDGET
        return self.reason

    def may_write(self, strategy: Any, workers: int) -> bool:
        """False on every worker once the run was taken over: its folder is another session's
        (a checkpoint is written by all workers together, so all skip it)."""
        return not agree(strategy, self.exit_code == EXIT_LEASE_LOST, workers)


def agree(strategy: Any, wish: bool, workers: int) -> bool:
    """True on every worker when any worker wishes it (an all-reduce; one worker: `wish`); call
    it at the same point of the loop on every worker (the lockstep rule)."""
    if workers <= 1:
        return wish
    import tensorflow as tf

    wants = strategy.run(lambda: tf.constant(1.0 if wish else 0.0))
    return float(strategy.reduce(tf.distribute.ReduceOp.SUM, wants, axis=None)) > 0


def alike(strategy: Any, text: str, workers: int) -> bool:
    """True on every worker when all pass the same `text` (an all-gather of its hash, 24 bits:
    exact in float32; one worker: True); call it at the same point on every worker."""
    if workers <= 1:
        return True
    import tensorflow as tf

    number = float(int(hashlib.sha256(text.encode()).hexdigest()[:6], 16))
    found = strategy.gather(strategy.run(lambda: tf.constant([number])), axis=0)
    return bool(tf.reduce_all(found == number))


def checkpoint_due(step: int, n: int, every: int, per_epoch: int) -> bool:
    """Save at epoch ends, and within an epoch at the first chunk end at or after each multiple
    of `every` steps from its start: a function of the step only, so every worker saves alike."""
    within = step % per_epoch  # 0: this chunk ended the epoch
    return within == 0 or within // every > (within - n) // every


# Metric names that get better as they go down (Keras's metrics whose direction is "down", and
# counts of false results); every other metric (accuracy, auc, r2...) goes up.
LOWER_IS_BETTER = (
    "loss",
    "error",
    "mae",
    "mse",  # rmse too
    "crossentropy",
    "hinge",
    "residual",
    "divergence",
    "poisson",
    "logcosh",
    "false_negatives",
    "false_positives",
)


def mode_for(monitor: str) -> str:
    """`min` for a loss or an error, `max` for the rest."""
    name = monitor.lower()
    return "min" if any(word in name for word in LOWER_IS_BETTER) else "max"


@dataclass
class EarlyStopping:
    """Tracks the best value of `monitor` and stops after `patience` epochs without progress
    (0: never stops early, but still tracks the best: the model users get)."""

    monitor: str = "val_loss"
    patience: int = 0
    best: float | None = None
    best_step: int = -1
    epochs_without_improvement: int = 0

    def check(self, names: Iterable[str]) -> None:
        """Refuse a `monitor` that is not one of the validation metrics `names`."""
        if self.monitor not in names:
            raise ConfigError(
                f"train.monitor: {self.monitor!r} is not a validation metric of this task "
                f"(known: {', '.join(sorted(names))}) (example: --set train.monitor=val_loss)"
            )

    def update(self, metrics: dict[str, float], step: int) -> bool:
        """Record one validation result; True when it is the best so far (save that model)."""
        self.check(metrics)
        value = float(metrics[self.monitor])
        lower = mode_for(self.monitor) == "min"
        better = self.best is None or (value < self.best if lower else value > self.best)
        if better and not math.isnan(value):
            self.best, self.best_step, self.epochs_without_improvement = value, step, 0
            return True
        self.epochs_without_improvement += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and self.epochs_without_improvement >= self.patience

    @classmethod
    def from_state(cls, monitor: str, patience: int, state: dict[str, Any] | None) -> EarlyStopping:
        """Today's settings, yesterday's progress (when it watched the same metric)."""
        kept = ("best", "best_step", "epochs_without_improvement")
        same = state and state.get("monitor") == monitor
        return cls(monitor, patience, **({k: state[k] for k in kept} if same else {}))


class BestWeights:
    """The model's weights at its best `train.monitor`, in variables the checkpoint saves."""

    def __init__(self, model: Any) -> None:
        import tensorflow as tf

        self.model = model
        self.variables = [
            tf.Variable(tf.zeros(w.shape, w.dtype), trainable=False, name=f"best_{i}")
            for i, w in enumerate(model.weights)
        ]

    def keep(self) -> None:
        """Copy the current weights in."""
        for best, weight in zip(self.variables, self.model.weights, strict=True):
            best.assign(weight.value)

    def put_back(self) -> None:
        """Load the kept weights into the model."""
        for best, weight in zip(self.variables, self.model.weights, strict=True):
            weight.assign(best.read_value())
