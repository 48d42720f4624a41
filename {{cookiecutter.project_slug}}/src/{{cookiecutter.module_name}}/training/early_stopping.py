"""Early stopping and the best model: which epoch was best by `train.monitor`, and when to stop.

A pure function of the validation metrics, alike on every worker; the trainer still agrees
`should_stop` across workers before acting on it (the lockstep rule, policy.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ..config import ConfigError

# Metric names that get better as they go down; every other metric (accuracy, auc, r2...) goes up.
LOWER_IS_BETTER = ("loss", "error", "mae", "mse", "rmse", "crossentropy", "hinge", "residual")


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

    def update(self, metrics: dict[str, float], step: int) -> bool:
        """Record one validation result; True when it is the best so far (save that model)."""
        if self.monitor not in metrics:
            known = ", ".join(sorted(metrics))
            raise ConfigError(
                f"train.monitor: {self.monitor!r} is not a validation metric of this task "
                f"(known: {known}) (example: --set train.monitor=val_loss)"
            )
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

    def state(self) -> dict[str, Any]:
        """What a checkpoint's meta.json keeps, so a resumed run remembers the best so far."""
        return asdict(self)

    @classmethod
    def from_state(cls, monitor: str, patience: int, state: dict[str, Any] | None) -> EarlyStopping:
        """Today's settings, yesterday's progress (when it watched the same metric)."""
        kept = ("best", "best_step", "epochs_without_improvement")
        same = state and state.get("monitor") == monitor
        return cls(monitor, patience, **({k: state[k] for k in kept} if same else {}))
