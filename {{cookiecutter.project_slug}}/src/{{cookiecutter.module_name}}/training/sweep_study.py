"""Where a sweep's Optuna study lives, and what it holds.

- `sweep.storage` empty: one session at a time, on Optuna's JournalStorage in
  `<storage>/sweeps/<name>/journal.log` (Drive on Colab, so a new VM goes on where the last one
  stopped). The sweep's lease (`lease.json` beside it) makes that session the journal's only
  writer, so the journal takes no file lock (Optuna's default lock is a symlink, which Drive
  lacks). Drive can lose or cut a VM's last writes: a cut last line is dropped before the next
  append, since Optuna's reader fails on a line that follows one.
- `sweep.storage` a database URL (`postgresql://user@host:5432/db`): every session is a worker of
  one study in Optuna's RDBStorage, its trials kept alive by Optuna's heartbeat. The password comes
  from `SWEEP_STORAGE_PASSWORD`, Colab's secrets or `~/.pgpass`, never from the URL.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import random
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import sqlalchemy
import yaml
from matplotlib.figure import Figure
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from ..config import ConfigError, Dimension, Params, yaml_text
from ..core.files import atomic_write
from ..core.storage import storage_root
from .lease import HEARTBEAT_S, STALE_AFTER

JOURNAL = "journal.log"
PASSWORD_VARIABLE = "SWEEP_STORAGE_PASSWORD"
URL_EXAMPLE = "postgresql://user@host:5432/db"
MARKERS = {"COMPLETE": ("o", "C0"), "PRUNED": ("x", "C3")}


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """Optuna's INFO lines and the warnings of what this module uses on purpose: the heartbeat,
    its retry callback and `fail_stale_trials` are marked experimental; `ask` outside `optimize`
    with a heartbeat (the loop beats itself); a resumed epoch reported again (the first stands)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used")
        warnings.filterwarnings("ignore", "The reported value is ignored")
        yield


def study_folder(project_dir: Path, name: str) -> Path:
    """`<storage>/sweeps/<name>`: the journal and the sweep's lease."""
    return storage_root(project_dir) / "sweeps" / name


class _LeaseIsTheLock:
    """The journal's file lock: none, the sweep's lease keeps every other writer away."""

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        pass


def journal_storage(folder: Path, mend: bool) -> optuna.storages.JournalStorage:
    """The one-session study in `folder`; `mend` (the lease holder only) drops a cut last line."""
    if (folder / "sessions").is_dir():
        raise ConfigError(
            f"sweep.name: the study in {folder} was written by an older version of this project "
            "(its event files are kept); start a new study under another name "
            f"(example: --set sweep.name={folder.name}-2)"
        )
    path = folder / JOURNAL
    data = path.read_bytes() if path.is_file() else b""
    if mend and data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
            os.fsync(f.fileno())
        print(f"{path}: its last line was cut off (a write lost with a VM); dropped.", flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    backend = optuna.storages.journal.JournalFileBackend(str(path), lock_obj=_LeaseIsTheLock())
    return optuna.storages.journal.JournalStorage(backend)


def database_url(text: str) -> sqlalchemy.URL:
    """`sweep.storage` checked: a SQLAlchemy URL without a password, with a driver that
    installs from a wheel (Colab's psycopg2 where present, else psycopg 3)."""
    try:
        url = sqlalchemy.make_url(text)
    except sqlalchemy.exc.ArgumentError:
        raise ConfigError(f"sweep.storage: not a database URL (example: {URL_EXAMPLE})") from None
    if url.password is not None:
        raise ConfigError(
            f"sweep.storage: {url.render_as_string()} holds a password; leave it out of the URL "
            f"and set {PASSWORD_VARIABLE} or ~/.pgpass (example: {URL_EXAMPLE})"
        )
    if url.drivername == "postgresql":
        psycopg2 = importlib.util.find_spec("psycopg2") is not None
        url = url.set(drivername="postgresql+psycopg2" if psycopg2 else "postgresql+psycopg")
    return url


def storage_password() -> str | None:
    """`$SWEEP_STORAGE_PASSWORD`, else Colab's secret of that name; None leaves it to libpq
    (`~/.pgpass`)."""
    if os.environ.get(PASSWORD_VARIABLE):
        return os.environ[PASSWORD_VARIABLE]
    if importlib.util.find_spec("google.colab") is None:
        return None
    from google.colab import userdata  # only on Colab

    try:
        return userdata.get(PASSWORD_VARIABLE)
    except (userdata.SecretNotFoundError, userdata.NotebookAccessError):
        return None


def database_storage(text: str) -> optuna.storages.RDBStorage:
    """The study's database (`sweep.storage`), its tables made if it is empty; a wrong URL, an
    unreachable server or a refused login is one ConfigError line naming sweep.storage."""
    url = database_url(text)
    password = storage_password()
    connect: dict[str, Any] = {"password": password} if password else {}
    if url.get_backend_name() == "postgresql":
        connect["connect_timeout"] = 10
    for attempt in range(1, 6):
        try:
            with quiet_optuna():
                retry = optuna.storages.RetryHeartbeatStaleTrialCallback(
                    inherit_intermediate_values=True  # its earlier epochs, for the pruner
                )
                return optuna.storages.RDBStorage(
                    url.render_as_string(hide_password=False),
                    engine_kwargs={"connect_args": connect},
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=STALE_AFTER * HEARTBEAT_S,  # the run lease's rule
                    heartbeat_stale_trial_callback=retry,
                )
        except (sqlalchemy.exc.SQLAlchemyError, ImportError) as exc:
            # Workers starting together on an empty database race to create its tables
            # (optuna#1092): the losers try again once the winner's tables are there.
            racing = (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError)
            if not isinstance(exc, racing) or attempt == 5:
                why = " ".join(str(getattr(exc, "orig", None) or exc).split())
                where = url.render_as_string()
                raise ConfigError(f"sweep.storage: cannot open {where}: {why}") from None
            time.sleep(random.uniform(0.2, 1.0))
    raise AssertionError("five attempts, each returns or raises")


# -- the search space in Optuna's terms -------------------------------------------------------
def _encoded(dim: Dimension) -> bool:
    """Choices that Optuna cannot store (lists, mappings) go to it as their YAML text."""
    return any(isinstance(c, (list, dict)) for c in dim.choices)


def distributions(dims: dict[str, Dimension]) -> dict[str, Any]:
    """Optuna's distribution for each searched key."""
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


def values_of(dims: dict[str, Dimension], params: dict[str, Any]) -> dict[str, Any]:
    """A trial's params as the params file takes them (encoded choices decoded)."""
    return {k: yaml.safe_load(v) if _encoded(dims[k]) else v for k, v in params.items()}


class PerTrialSeed(optuna.samplers.BaseSampler):
    """`sweep.sampler` seeded by each trial's number: workers that ask at the same moment get
    different values, and a sweep started again proposes what an uninterrupted one would."""

    def __init__(self, make: Callable[[int], optuna.samplers.BaseSampler], seed: int) -> None:
        self.make, self.seed = make, seed
        self.inner = make(seed)

    def before_trial(self, study: optuna.Study, trial: Any) -> None:
        self.inner = self.make(self.seed * 100_003 + trial.number)
        self.inner.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: Any, space: dict) -> dict[str, Any]:
        return self.inner.sample_relative(study, trial, space)

    def sample_independent(self, study: optuna.Study, trial: Any, name: str, dist: Any) -> Any:
        return self.inner.sample_independent(study, trial, name, dist)

    def after_trial(self, study: optuna.Study, trial: Any, state: Any, values: Any) -> None:
        pass  # the grid's only use of it is to stop `optimize`; the loop counts trials itself


def make_sampler(params: Params, dims: dict[str, Dimension]) -> PerTrialSeed:
    """`sweep.sampler`: tpe (Optuna's TPESampler), random or grid, seeded per trial."""
    cfg = params.sweep
    if cfg.sampler == "random":
        return PerTrialSeed(lambda seed: optuna.samplers.RandomSampler(seed=seed), params.seed)
    if cfg.sampler == "grid":  # shuffled once by the seed; trial n takes point n of it
        points = {k: list(d.choices) for k, d in distributions(dims).items()}
        grid = optuna.samplers.GridSampler(points, seed=params.seed)
        return PerTrialSeed(lambda seed: grid, params.seed)
    return PerTrialSeed(
        lambda seed: optuna.samplers.TPESampler(
            seed=seed, constant_liar=True, n_startup_trials=cfg.startup_trials
        ),
        params.seed,
    )


def make_pruner(params: Params) -> optuna.pruners.BasePruner:
    """`sweep.pruner`: median (Optuna's MedianPruner) or none."""
    cfg = params.sweep
    if cfg.pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(
        n_startup_trials=cfg.startup_trials, n_warmup_steps=cfg.warmup_epochs
    )


# -- what the study shows -------------------------------------------------------------------------
def trials_table(study: optuna.Study, dims: dict[str, Dimension], monitor: str) -> pd.DataFrame:
    """One row per trial of the whole study: number, state, the searched values, `monitor`."""
    frame = study.trials_dataframe(attrs=("number", "state", "value", "params"))
    frame = frame.rename(columns={f"params_{k}": k for k in dims} | {"value": monitor})
    return frame.reindex(columns=["number", "state", *dims, monitor])


def write_trials(table: pd.DataFrame, dims: dict[str, Dimension], direction: str, folder: Path):
    """trials.csv and trials.png in `folder` (atomic writes); returns the table's path."""
    path = atomic_write(folder / "trials.csv", table.to_csv(index=False))
    buffer = io.BytesIO()
    plot_trials(table, dims, direction).savefig(buffer, format="png", dpi=100)
    atomic_write(folder / "trials.png", buffer.getvalue())
    return path


def plot_trials(table: pd.DataFrame, dims: dict[str, Dimension], direction: str) -> Figure:
    """The value per trial with the best so far, then the value against each searched key
    (circles complete, crosses pruned). A Figure, no pyplot: no window, any backend."""
    monitor = table.columns[-1]
    dists = distributions(dims)
    choices = {
        k: list(d.choices) for k, d in dists.items() if isinstance(d, CategoricalDistribution)
    }
    figure = Figure(figsize=(4.2 * (1 + len(dims)), 3.6), layout="constrained")
    axes = figure.subplots(1, 1 + len(dims), squeeze=False)[0]
    for state, (marker, color) in MARKERS.items():
        rows = table[(table.state == state) & table[monitor].notna()]
        axes[0].scatter(rows.number, rows[monitor], marker=marker, color=color, label=state.lower())
        for ax, (key, dim) in zip(axes[1:], dims.items(), strict=True):
            xs = [choices[key].index(v) for v in rows[key]] if dim.choices else rows[key]
            ax.scatter(xs, rows[monitor], marker=marker, color=color)
    done = table[table.state == "COMPLETE"].dropna(subset=[monitor])
    if len(done):
        best = done[monitor].cummin() if direction == "minimize" else done[monitor].cummax()
        axes[0].step(done.number, best, where="post", color="C2", marker=".", label="best so far")
    axes[0].set(xlabel="trial", ylabel=monitor, title=f"{direction} {monitor}")
    axes[0].xaxis.get_major_locator().set_params(integer=True)
    axes[0].legend(fontsize="small")
    for ax, (key, dim) in zip(axes[1:], dims.items(), strict=True):
        if dim.choices:
            ax.set_xticks(range(len(dim.choices)), [yaml_text(c) for c in dim.choices])
            ax.set_xlim(-0.5, len(dim.choices) - 0.5)
        else:
            ax.set_xscale("log" if dim.log else "linear")
            ax.set_xlim(dim.low, dim.high)  # the whole range searched
        ax.set(xlabel=key, ylabel=monitor)
    return figure
