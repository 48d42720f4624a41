"""`sweep.storage`: one study in a real PostgreSQL, shared by worker processes; its URL, password
and errors. The server runs from a temporary folder (`make postgres` installs it)."""

from __future__ import annotations

import glob
import importlib.machinery
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import pandas as pd
import pytest
import sqlalchemy
from conftest import cli, cli_env, copy_checkout, sets

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.training import sweep as sweep_module
from {{ cookiecutter.module_name }}.training.checkpoints import list_checkpoints
from {{ cookiecutter.module_name }}.training.sweep_study import (
    database_storage,
    database_url,
    quiet_optuna,
    storage_password,
)

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]


def _server_binaries() -> Path | None:
    """The newest PostgreSQL's bin folder (Debian keeps it off PATH), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4])
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server() -> Iterator[dict]:
    """A PostgreSQL server on a free port of 127.0.0.1 that asks for a password (user `sweeper`);
    as root it runs as an unprivileged user (initdb and postgres refuse root), in a folder of its
    own (pytest's tmp_path is 0700)."""
    bindir = _server_binaries()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (`make postgres` installs them)")
    user = None
    if os.geteuid() == 0:
        names = {p.pw_name for p in pwd.getpwall()}
        user = "postgres" if "postgres" in names else "nobody"
    folder = Path(tempfile.mkdtemp(prefix="sweep-pg-"))
    folder.chmod(0o755)
    (folder / "pw").write_text(PASSWORD)
    if user:
        for path in (folder, folder / "pw"):
            shutil.chown(path, user)
    run = {"user": user, "capture_output": True, "text": True, "cwd": folder}
    init = [
        str(bindir / "initdb"),
        "-D",
        str(folder / "data"),
        "-U",
        "sweeper",
        "-A",
        "scram-sha-256",
    ]
    done = subprocess.run([*init, f"--pwfile={folder / 'pw'}"], **run)
    assert done.returncode == 0, done.stderr
    port = _free_port()
    proc = subprocess.Popen(
        [
            str(bindir / "postgres"),
            "-D",
            str(folder / "data"),
            "-p",
            str(port),
            "-k",
            str(folder),
            "-h",
            "127.0.0.1",
        ],
        user=user,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ready = [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)]
    deadline = time.monotonic() + 60
    while subprocess.run(ready, capture_output=True).returncode != 0:
        assert proc.poll() is None and time.monotonic() < deadline, "PostgreSQL did not start"
        time.sleep(0.2)
    try:
        yield {"host": "127.0.0.1", "port": port, "bindir": bindir}
    finally:
        proc.send_signal(signal.SIGINT)  # fast shutdown: it closes the clients' connections
        proc.wait(timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def database(server: dict, monkeypatch) -> str:
    """A new, empty database on the server; its URL (no password: it comes from the variable)."""
    name = "sweeps_" + uuid.uuid4().hex[:8]
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    create = [str(server["bindir"] / "createdb"), "-h", server["host"], "-p", str(server["port"])]
    done = subprocess.run([*create, "-U", "sweeper", name], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("SWEEP_STORAGE_PASSWORD", PASSWORD)
    return f"postgresql://sweeper@{server['host']}:{server['port']}/{name}"


def test_workers_that_start_together_on_an_empty_database_all_open_it(database: str) -> None:
    """Optuna creates the tables on first use, and two creators race (optuna#1092)."""
    opened, errors = [], []

    def open_it() -> None:
        try:
            opened.append(database_storage(database))
        except Exception as exc:  # noqa: BLE001 - the test reports whatever went wrong
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    # The threads stand in for worker processes, but warning filters are one per process:
    # `quiet_optuna` in one thread puts them back while another is inside. Held around all of
    # them, each thread's exit puts back quiet filters.
    with quiet_optuna():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and len(opened) == 4, errors


def test_a_refused_login_is_one_line_naming_the_key(database: str, monkeypatch) -> None:
    monkeypatch.setenv("SWEEP_STORAGE_PASSWORD", "wrong")
    with pytest.raises(ConfigError) as err:
        database_storage(database)
    text = str(err.value)
    assert text.startswith(f"sweep.storage: cannot open {database}: ") and "\n" not in text
    assert "password authentication failed" in text and "wrong" not in text


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://sweeper:hunter2@db.example.com/sweeps", "holds a password"),
        ("not a url", "not a database URL"),
        ("postgresql://sweeper@127.0.0.1:{port}/sweeps", "cannot open"),
    ],
)
def test_a_bad_storage_stops_the_sweep_before_anything_is_written(
    url: str, message: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    project = copy_checkout(tmp_path / "project")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("SWEEP_STORAGE_PASSWORD", PASSWORD)
    url = url.format(port=_free_port())  # nothing listens there
    code = main(
        ["sweep", "--params", str(project / "params.yaml"), "--set", f"sweep.storage={url}"]
    )
    err = capsys.readouterr()
    assert code == 2, err
    assert err.err.startswith("error: sweep.storage: ") and message in err.err
    assert len(err.err.splitlines()) == 1 and "Traceback" not in err.err
    assert "hunter2" not in err.err + err.out and PASSWORD not in err.err + err.out
    assert not (tmp_path / "storage").exists() and not (project / "results" / "sweeps").exists()


def test_the_password_from_pgpass(database: str, tmp_path: Path, monkeypatch) -> None:
    """Without SWEEP_STORAGE_PASSWORD, libpq reads ~/.pgpass (here PGPASSFILE); without either,
    the refusal says where the password comes from."""
    monkeypatch.delenv("SWEEP_STORAGE_PASSWORD")
    url = database_url(database)
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"{url.host}:{url.port}:*:{url.username}:{PASSWORD}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    database_storage(database)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match=r"no password supplied.*SWEEP_STORAGE_PASSWORD or"):
        database_storage(database)


def test_the_password_from_colab_secrets(monkeypatch) -> None:
    """On Colab (google.colab importable) the secret SWEEP_STORAGE_PASSWORD, when the notebook
    may read it; the environment variable first."""
    userdata = types.ModuleType("google.colab.userdata")
    userdata.SecretNotFoundError = type("SecretNotFoundError", (Exception,), {})
    userdata.NotebookAccessError = type("NotebookAccessError", (Exception,), {})
    secrets = {"SWEEP_STORAGE_PASSWORD": "from-colab"}

    def get(key: str) -> str:
        if key not in secrets:
            raise userdata.SecretNotFoundError(key)
        return secrets[key]

    userdata.get = get
    for name, module in (
        ("google", None),
        ("google.colab", None),
        ("google.colab.userdata", userdata),
    ):
        module = module or types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(sys.modules["google.colab"], "userdata", userdata, raising=False)
    monkeypatch.delenv("SWEEP_STORAGE_PASSWORD", raising=False)
    assert storage_password() == "from-colab"
    monkeypatch.setenv("SWEEP_STORAGE_PASSWORD", "from-env")
    assert storage_password() == "from-env"
    monkeypatch.delenv("SWEEP_STORAGE_PASSWORD")
    secrets.clear()
    assert storage_password() is None  # libpq then reads ~/.pgpass


def test_a_connection_the_server_ends_costs_a_beat_not_the_heartbeat(database: str) -> None:
    """The server ends a worker's connection (a restart, an idle timeout): that beat fails, as
    Optuna's StorageInternalError, and the heartbeat goes on; the next beat connects again."""
    storage = database_storage(database)
    with quiet_optuna():
        trial_id = optuna.create_study(storage=storage).ask()._trial_id
    storage.record_heartbeat(trial_id)  # the worker's connection, kept in the pool
    admin = sqlalchemy.create_engine(database_url(database).set(password=PASSWORD))
    with admin.connect() as connection:
        ended = connection.execute(
            sqlalchemy.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).scalar()
    admin.dispose()
    stop, failed = threading.Event(), []

    def last_beat(trial_id: int) -> None:
        stop.set()  # the heartbeat ends after this beat
        try:
            storage.record_heartbeat(trial_id)
        except Exception as exc:
            failed.append(exc)
            raise

    beating = types.SimpleNamespace(storage=types.SimpleNamespace(record_heartbeat=last_beat))
    sweep_module._beat(beating, trial_id, stop)
    assert ended and failed, "the connection was not ended"
    storage.record_heartbeat(trial_id)


def test_a_postgresql_url_gets_a_driver_that_installs_from_a_wheel() -> None:
    url = database_url("postgresql://me@host:5432/db")
    assert url.drivername in ("postgresql+psycopg2", "postgresql+psycopg")
    assert database_url("postgresql+psycopg://me@host/db").drivername == "postgresql+psycopg"
    assert database_url("postgres://me@host/db").drivername == url.drivername  # a hosted one's


# Six trials of 3 epochs x 179 steps (batch 8), a checkpoint every 20 steps; no pruning.
SHARED = [
    "sweep.n_trials=6",
    "sweep.pruner=none",
    "sweep.sampler=random",
    "sweep.name=team",
    "train.epochs=3",
    "train.batch_size=8",
    "train.steps_per_execution=10",
    "train.checkpoint_every_steps=20",
    "model.hidden_units=[16]",
]


def test_two_workers_one_killed_and_started_again_finish_the_study(
    database: str, tmp_path: Path
) -> None:
    """Two `sweep` processes on one new database; the second is SIGKILLed in the middle of its
    first trial and started again. Optuna's heartbeat marks that trial failed and queues its
    retry, which trains on from the killed run's checkpoint (one storage root here)."""
    project = copy_checkout(tmp_path / "project")
    storage = tmp_path / "storage"
    env = cli_env(storage, PROJECT_LEASE_HEARTBEAT_S="1", SWEEP_STORAGE_PASSWORD=PASSWORD)
    args = ["sweep", *sets([*SHARED, f"sweep.storage={database}"])]
    a, b = cli(args, project, env), cli(args, project, env)
    killed_run, deadline = None, time.monotonic() + 600
    while killed_run is None and time.monotonic() < deadline:
        assert b.poll() is None, b.communicate()[0]
        for folder in storage.glob("checkpoints/team-*"):
            lease = folder / "lease.json"
            steps = [s for s, _ in list_checkpoints(folder)]
            if (
                lease.is_file()
                and f'"pid": {b.pid}' in lease.read_text()
                and steps
                and max(steps) >= 200
            ):
                killed_run = folder.name
        time.sleep(0.02)
    b.send_signal(signal.SIGKILL)
    first_b = b.communicate(timeout=60)[0]
    killed_at = max(s for s, _ in list_checkpoints(storage / "checkpoints" / killed_run))
    b = cli(args, project, env)
    out_a, out_b = a.communicate(timeout=900)[0], b.communicate(timeout=900)[0]
    both = first_b + out_a + out_b
    assert a.returncode == 0 and b.returncode == 0, both
    assert PASSWORD not in both
    resumed = re.search(rf"Resuming run '{killed_run}' from its checkpoint at step (\d+)", both)
    assert resumed and int(resumed.group(1)) == killed_at, both
    assert re.search(rf"Trial \d+ \({killed_run}\), the retry of trial \d+", both), both

    study = optuna.load_study(study_name="team", storage=database_storage(database))
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) >= 6, [(t.number, t.state.name) for t in trials]
    values = [tuple(sorted(t.params.items())) for t in complete]
    assert len(set(values)) == len(values), "two complete trials with the same values"
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert [t.user_attrs["run"] for t in failed] == [killed_run]
    table = pd.read_csv(project / "results" / "sweeps" / "team" / "trials.csv")
    assert list(table.columns) == [
        "number",
        "state",
        "train.learning_rate",
        "model.dropout",
        "train.optimizer",
        "val_loss",
    ]
    assert sorted(table.number) == [t.number for t in trials]
    print(
        table.to_string(index=False),
        *re.findall(rf".*(?:Trial|Resuming).*{killed_run}\b.*", both),
        sep="\n",
    )

    best = min(complete, key=lambda t: t.value)
    promote = cli(
        ["sweep", "--best", *sets([f"sweep.storage={database}", "sweep.name=team"])], project, env
    )
    out = promote.communicate(timeout=300)[0]
    assert promote.returncode == 0, out
    promoted = load_params(project / "params.yaml")
    assert promoted.run_name == best.user_attrs["run"]
    assert promoted.train.learning_rate == best.params["train.learning_rate"]
    assert promoted.sweep.storage == "" and PASSWORD not in (project / "params.yaml").read_text()
