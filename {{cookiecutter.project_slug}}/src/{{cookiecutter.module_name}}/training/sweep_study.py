"""A sweep's Optuna study: where it is stored (a journal on the storage root, or a database),
how it samples and prunes. docs/training.md says which storage to pick when.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import random
import shlex
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
import yaml
from optuna.distributions import BaseDistribution

from ..config import COMMAND, ConfigError, Params, load_params, sweep_space, yaml_text
from ..core.storage import results_root, storage_root
from .lease import HEARTBEAT_S, STALE_AFTER, Lease
from .policy import mode_for

JOURNAL = "journal.log"
PASSWORD = "SWEEP_STORAGE_PASSWORD"
URL_EXAMPLE = "postgresql://user@host:5432/db"


class Sweep:
    """A session's sweep: its settings, its study, where things go."""

    def __init__(
        self,
        params: Params,
        params_file: Path,
        project_dir: Path,
        overrides: list[str],
        lease: Lease | None = None,
    ) -> None:
        self.params, self.params_file, self.project_dir = params, params_file, project_dir
        self.overrides = overrides  # the command's `--set` items: the base of every trial
        self.lease = lease  # one session's sweep: it writes the journal; None: a database
        self.cfg, self.monitor, self.space = params.sweep, params.train.monitor, searched(params)
        self.direction = "minimize" if mode_for(self.monitor) == "min" else "maximize"
        self.results = results_root(project_dir) / "sweeps" / self.cfg.name
        median = optuna.pruners.MedianPruner(
            self.cfg.startup_trials, n_warmup_steps=self.cfg.warmup_epochs
        )
        with quiet_optuna():
            if self.cfg.storage:
                self.storage: Any = database_storage(self.cfg.storage)
            else:
                folder = study_folder(project_dir, self.cfg.name)
                self.storage = journal_storage(folder, mend=lease is not None)
            self.study = optuna.create_study(
                storage=self.storage,
                study_name=self.cfg.name,
                direction=self.direction,
                sampler=make_sampler(params, self.space),
                pruner=median if self.cfg.pruner == "median" else optuna.pruners.NopPruner(),
                load_if_exists=True,
            )

    def command(self, *flags: str) -> str:
        """`sweep` with `flags` and this session's `--set` items: one line to paste in a shell."""
        sets = [f"--set={item}" for item in self.overrides]
        return shlex.join([*COMMAND.split(), "sweep", *flags, *sets])

    def trial_params(self, values: dict[str, Any], run: str, overrides: list[str]) -> Params:
        """A trial's params: the params file, `overrides`, the trial's values, its run name."""
        sets = [f"{k}={yaml_text(v)}" for k, v in values.items()]
        return load_params(self.params_file, [*overrides, *sets, f"run_name={run}"])

    def values(self, chosen: dict[str, Any]) -> dict[str, Any]:
        """A trial's Optuna params as the params file takes them (Optuna holds choices that are
        lists or mappings as their YAML text)."""
        encoded = {
            key
            for key, spec in self.cfg.space.items()
            if any(isinstance(c, (list, dict)) for c in spec.get("choices", []))
        }
        return {k: yaml.safe_load(v) if k in encoded else v for k, v in chosen.items()}


def shown(values: dict[str, Any]) -> str:
    """`key=value ...` to read: numbers to 4 significant digits (`Sweep.command` pastes exact)."""
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={yaml_text(v)}" for k, v in values.items()
    )


def numbers_sorted(choices: Sequence[Any]) -> list[Any] | None:
    """Choices that are all numbers, sorted; None when one is not (a string, a bool)."""
    numbers = all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices)
    return sorted(choices) if numbers else None


def searched(params: Params) -> dict[str, BaseDistribution]:
    """The keys `sweep.space` searches; an empty space is one ConfigError line."""
    if space := sweep_space(params):
        return space
    raise ConfigError(
        "sweep.space: empty, nothing to search "
        "(example: train.learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true})"
    )


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """No INFO lines, and none of the warnings about what is used here on purpose: the heartbeat,
    its retry and `fail_stale_trials` are marked experimental; `ask` with a heartbeat outside
    `optimize` (the loop beats itself); an epoch reported again after a resume (the first stays)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used")
        warnings.filterwarnings("ignore", "The reported value is ignored")
        yield


def study_folder(project_dir: Path, name: str) -> Path:
    """`<storage>/sweeps/<name>`: the journal and the sweep's lease; one that an older version
    wrote (event files) is refused and kept."""
    folder = storage_root(project_dir) / "sweeps" / name
    if (folder / "sessions").is_dir():
        raise ConfigError(
            f"sweep.name: the study in {folder} was written by an older version of this project "
            f"(its files are kept); start a new one (example: --set sweep.name={name}-2)"
        )
    return folder


def journal_storage(folder: Path, mend: bool) -> optuna.storages.JournalStorage:
    """The one-session study in `folder`; `mend` (the lease holder) drops a cut last line."""
    path = folder / JOURNAL
    data = path.read_bytes() if path.is_file() else b""
    if mend and not data.endswith(b"\n") and data:
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
            os.fsync(f.fileno())
        print(f"{path}: its last line was cut off (a write lost with a VM); dropped.", flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    # No file lock (Optuna's is a symlink, which Drive lacks): the lease keeps other sessions
    # away, and this one only serialises the process's own threads.
    backend = optuna.storages.journal.JournalFileBackend(str(path), lock_obj=threading.Lock())
    return optuna.storages.journal.JournalStorage(backend)


def database_url(text: str) -> sqlalchemy.URL:
    """`sweep.storage` checked: a URL without a password; `postgresql://` (or `postgres://`, as
    hosted services write it) gets Colab's psycopg2 where it is installed, else psycopg 3 (a
    wheel in requirements.txt)."""
    try:
        url = sqlalchemy.make_url(text)
    except sqlalchemy.exc.ArgumentError:
        raise ConfigError(f"sweep.storage: not a database URL (example: {URL_EXAMPLE})") from None
    if url.password is not None:
        raise ConfigError(
            f"sweep.storage: {url.render_as_string()} holds a password; leave it out and set "
            f"{PASSWORD} or ~/.pgpass (example: {URL_EXAMPLE})"
        )
    if url.drivername in ("postgresql", "postgres"):
        found = importlib.util.find_spec("psycopg2") is not None
        url = url.set(drivername="postgresql+psycopg2" if found else "postgresql+psycopg")
    return url


def storage_password() -> str | None:
    """`$SWEEP_STORAGE_PASSWORD`, else Colab's secret of that name, else None: ~/.pgpass."""
    if os.environ.get(PASSWORD) or importlib.util.find_spec("google.colab") is None:
        return os.environ.get(PASSWORD) or None
    from google.colab import userdata  # only on Colab

    with contextlib.suppress(userdata.SecretNotFoundError, userdata.NotebookAccessError):
        return userdata.get(PASSWORD)
    return None


@quiet_optuna()  # the heartbeat and its retry are marked experimental
def database_storage(text: str) -> optuna.storages.RDBStorage:
    """The database of `sweep.storage`, its tables made if it is empty. A bad URL, an unreachable
    server or a refused login is one ConfigError line naming sweep.storage."""
    url, password = database_url(text), storage_password()
    connect: dict[str, Any] = {"password": password} if password else {}  # else ~/.pgpass
    if url.get_backend_name() == "postgresql":
        connect["connect_timeout"] = 10
    rdb = functools.partial(
        optuna.storages.RDBStorage,
        url.render_as_string(hide_password=False),
        engine_kwargs={"connect_args": connect},
        heartbeat_interval=HEARTBEAT_S,
        grace_period=STALE_AFTER * HEARTBEAT_S,  # the run lease's rule
        heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
            max_retry=3,  # a trial that kills its worker each time is given up
            inherit_intermediate_values=True,  # its earlier epochs, for the pruner
        ),
    )
    racing = (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError)
    try:
        for _ in range(4):  # workers that start on an empty database race to make its tables
            with contextlib.suppress(*racing):  # (optuna#1092): the losers try again
                return rdb()
            time.sleep(random.uniform(0.2, 1.0))
        return rdb()
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as exc:
        why = " ".join(str(getattr(exc, "orig", None) or exc).split())
        if "password" in why:
            why += f" (the password: {PASSWORD} or ~/.pgpass)"
        raise ConfigError(
            f"sweep.storage: cannot open {text}: {why} (example: {URL_EXAMPLE})"
        ) from None


# -- the sampler -------------------------------------------------------------------------------
class PerTrialSeed(optuna.samplers.BaseSampler):
    """A sampler seeded by each trial's number: workers that ask at once get different values,
    and a sweep started again proposes what an uninterrupted one would. The inner sampler's
    `after_trial` is not called: the grid's would stop `optimize`, which is not used here."""

    def __init__(self, make: Callable[[int], optuna.samplers.BaseSampler], seed: int) -> None:
        self.make, self.seed, self.inner = make, seed, make(seed)

    def before_trial(self, study: optuna.Study, trial: Any) -> None:
        self.inner = self.make(self.seed * 100_003 + trial.number)
        self.inner.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: Any, space: dict) -> dict[str, Any]:
        return self.inner.sample_relative(study, trial, space)

    def sample_independent(self, study: optuna.Study, trial: Any, name: str, dist: Any) -> Any:
        return self.inner.sample_independent(study, trial, name, dist)


def make_sampler(params: Params, space: dict[str, BaseDistribution]) -> PerTrialSeed:
    """`sweep.sampler`: tpe (Optuna's TPESampler), random or grid."""
    cfg = params.sweep
    if cfg.sampler == "grid":  # shuffled once by the seed; trial n takes the grid's point n
        points = {k: list(d.choices) for k, d in space.items()}
        grid = optuna.samplers.GridSampler(points, seed=params.seed)
        return PerTrialSeed(lambda seed: grid, params.seed)
    if cfg.sampler == "random":
        return PerTrialSeed(lambda seed: optuna.samplers.RandomSampler(seed=seed), params.seed)
    return PerTrialSeed(
        lambda seed: optuna.samplers.TPESampler(
            seed=seed, constant_liar=True, n_startup_trials=cfg.startup_trials
        ),
        params.seed,
    )
