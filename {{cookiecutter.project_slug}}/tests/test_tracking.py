"""Experiment tracking logs for real: TensorBoard always
{%- if cookiecutter.tracking == "mlflow" %}, and an MLflow run in a local store{% elif cookiecutter.tracking == "wandb" %}, and an offline W&B run{% endif %}."""

from __future__ import annotations

import inspect
import json
{%- if cookiecutter.tracking == "mlflow" %}
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
{%- elif cookiecutter.tracking == "wandb" %}
import sys
import types
{%- endif %}
from pathlib import Path

import pytest
{% if cookiecutter.tracking == "mlflow" %}
from {{ cookiecutter.module_name }}.core.progress import said_once
{%- endif %}
from {{ cookiecutter.module_name }}.training.tracking import (
    Tracker,
    flatten,
    numeric,
)

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

SOURCE = Path(inspect.getfile(Tracker))  # training/tracking.py
PARAMS = {"seed": 7, "run_name": "r1", "train": {"epochs": 2, "learning_rate": 0.01}}
HISTORY = [{"step": 10, "val_accuracy": 0.5}, {"step": 20, "val_accuracy": 0.75}]


def log_a_run(project: Path, run_id: str = "20260101T000000Z-r1-abcd") -> Path:
    """What `record_run` does at the end of training, with small values."""
    tracker = Tracker(project, "r1", run_id)
    tracker.log_params(PARAMS)
    for record in HISTORY:
        tracker.log_metrics(record, step=record["step"])
    manifest = project / "manifest.json"
    manifest.write_text(json.dumps({"run_id": run_id, "token": "manifest-marker"}))
    tracker.log_artifact(manifest)
    tracker.close("completed")
    return manifest


def test_flatten_and_numeric():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": 1, "a.c": "[1, 2]", "d": "x"}
    assert numeric({"a": 1, "b": True, "c": "x", "d": 0.5}) == {"a": 1.0, "d": 0.5}


def test_only_the_chosen_tracker_is_in_the_code():
    source = SOURCE.read_text()
    imported = {name for name in ("mlflow", "wandb") if f"import {name}" in source}
    assert imported == {{ "set()" if cookiecutter.tracking == "tensorboard" else '{"' ~ cookiecutter.tracking ~ '"}' }}


@pytest.mark.slow
def test_tensorboard_gets_params_metrics_and_the_manifest(tmp_path{% if cookiecutter.tracking != "tensorboard" %}, monkeypatch{% endif %}):
{%- if cookiecutter.tracking == "mlflow" %}
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
{%- elif cookiecutter.tracking == "wandb" %}
    offline_wandb(tmp_path, monkeypatch)
{%- endif %}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    log_a_run(tmp_path)
    logdir = tmp_path / "results" / "tensorboard" / "r1"
    events = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    events.Reload()
    tags = events.Tags()["tensors"]
    assert "run/val_accuracy" in tags
    values = [make_ndarray(e.tensor_proto).item() for e in events.Tensors("run/val_accuracy")]
    assert values == [0.5, 0.75]
    assert "manifest.json" in tags  # the manifest, readable in the Text tab
    assert any(tag.startswith("_hparams_") for tag in tags)  # params in the HParams tab
{%- if cookiecutter.tracking == "mlflow" %}


@pytest.mark.slow
def test_mlflow_run_is_logged_to_the_local_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_LOGGING_LEVEL", raising=False)
    import mlflow

    said = logging.Handler()  # what MLflow's own handlers get: no INFO in a notebook's output
    said.emit = lambda record: pytest.fail(f"MLflow logged {record.getMessage()!r}")
    logging.getLogger("mlflow").addHandler(said)
    try:
        log_a_run(tmp_path)
    finally:
        logging.getLogger("mlflow").removeHandler(said)
    store = tmp_path / "results" / "mlruns"
    client = mlflow.MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("{{ cookiecutter.project_slug }}")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "20260101T000000Z-r1-abcd"
    assert run.info.status == "FINISHED"
    assert run.data.params["train.epochs"] == "2"
    assert run.data.params["seed"] == "7"
    history = client.get_metric_history(run.info.run_id, "val_accuracy")
    assert [(m.step, m.value) for m in history] == [(10, 0.5), (20, 0.75)]
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id)]
    assert "manifest.json" in artifacts
    stored = list((store / "artifacts").rglob("manifest.json"))
    assert stored and "manifest-marker" in stored[0].read_text()


# The README's command (and docs/reproducibility.md's), run from the project folder as they say.
MLFLOW_UI = "mlflow ui --backend-store-uri sqlite:///results/mlruns/mlflow.db"


def ask_mlflow_ui(server: subprocess.Popen, url: str, body: dict | None = None) -> dict:
    """The answer of the `mlflow ui` server to one REST call, once it has started."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    deadline = time.monotonic() + 300  # it starts in about half a minute on a busy 2-core machine
    while True:
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.load(answer)
        except urllib.error.HTTPError:
            raise  # it has started, and refused
        except (urllib.error.URLError, ConnectionError):
            if server.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(1)


@pytest.mark.slow
def test_the_readmes_mlflow_ui_lists_the_run(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow_command = Path(sys.executable).parent / "mlflow"  # the environment's, after `make setup`
    if not mlflow_command.exists():
        pytest.skip(f"mlflow is not installed beside {sys.executable}")
    project = tmp_path / "project"
    log_a_run(project)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    # One worker and no job runner: the same server, started in seconds rather than a minute.
    command = [str(mlflow_command), *MLFLOW_UI.split()[1:], "--port", str(port), "--workers", "1"]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(tmp_path / "ui.log", "wb") as log:
        server = subprocess.Popen(
            command, cwd=project, env=env, stdout=log, stderr=log, start_new_session=True
        )
    api = f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow"  # what the UI's pages ask
    try:
        found = ask_mlflow_ui(
            server, f"{api}/experiments/get-by-name?experiment_name={{ cookiecutter.project_slug }}"
        )
        experiment_id = found["experiment"]["experiment_id"]
        listed = ask_mlflow_ui(server, f"{api}/runs/search", {"experiment_ids": [experiment_id]})
    except Exception:
        print((tmp_path / "ui.log").read_text()[-3000:])
        raise
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its workers
        server.wait(timeout=60)
    runs = [(run["info"]["run_name"], run["info"]["status"]) for run in listed["runs"]]
    assert runs == [("20260101T000000Z-r1-abcd", "FINISHED")]


@pytest.mark.slow
def test_mlflow_tracking_uri_wins_over_the_local_store(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{shared / 'server.db'}")
    import mlflow

    log_a_run(tmp_path / "project")
    client = mlflow.MlflowClient(f"sqlite:///{shared / 'server.db'}")
    experiment = client.get_experiment_by_name("{{ cookiecutter.project_slug }}")
    assert len(client.search_runs([experiment.experiment_id])) == 1
    assert not (tmp_path / "project" / "results" / "mlruns").exists()


@pytest.mark.slow
def test_an_mlflow_server_that_does_not_answer_is_skipped_at_once(tmp_path, monkeypatch, capsys):
    """Not after minutes of MLflow's retries; TensorBoard still logs, and the URI (it may hold a
    password) is not printed. A sweep's trials (`said_once`) say it once."""
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://user:secret@127.0.0.1:{port}")
    with said_once():
        log_a_run(tmp_path)
        log_a_run(tmp_path, "20260101T000001Z-r1-abcd")
    said = "".join(capsys.readouterr())
    off = "mlflow tracking is off for this run: MLFLOW_TRACKING_URI does not answer"
    assert said.count(off) == 1, said
    assert "secret" not in said and "Retrying" not in said
    assert (tmp_path / "results" / "tensorboard" / "r1").is_dir()
{%- elif cookiecutter.tracking == "wandb" %}


def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No key anywhere, and every W&B folder inside tmp_path."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def read_offline_run(run_file: Path) -> dict:
    """Config keys, history values and artifacts from an offline run's transaction log."""
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.internal import datastore

    store = datastore.DataStore()
    store.open_for_scan(str(run_file))
    found: dict = {"config": set(), "history": [], "artifacts": [], "exit": None}
    while (data := store.scan_data()) is not None:
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found["config"] |= {item.key for item in record.run.config.update}
        elif kind == "config":
            found["config"] |= {item.key for item in record.config.update}
        elif kind == "history":
            for item in record.history.item:
                key = "/".join(item.nested_key) or item.key
                found["history"].append((key, item.value_json))
        elif kind == "artifact":
            found["artifacts"].append(record.artifact.type)
        elif kind == "exit":
            found["exit"] = record.exit.exit_code
    return found


@pytest.mark.slow
def test_wandb_offline_run_is_logged_without_a_key(tmp_path, monkeypatch):
    offline_wandb(tmp_path, monkeypatch)
    log_a_run(tmp_path)
    (run_dir,) = (tmp_path / "results" / "wandb").glob("offline-run-*")
    found = read_offline_run(next(run_dir.glob("run-*.wandb")))
    assert {"seed", "train.epochs", "train.learning_rate"} <= found["config"]
    assert ("val_accuracy", "0.5") in found["history"]
    assert ("val_accuracy", "0.75") in found["history"]
    assert "run-record" in found["artifacts"]
    assert found["exit"] == 0


def test_wandb_key_comes_from_colab_secrets_then_the_environment(monkeypatch):
    from {{ cookiecutter.module_name }}.training.tracking import wandb_api_key

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert wandb_api_key() is None
    monkeypatch.setenv("WANDB_API_KEY", "from-env")
    assert wandb_api_key() == "from-env"
    secrets = {"WANDB_API_KEY": "from-colab"}
    userdata = types.SimpleNamespace(get=secrets.get)
    colab = types.ModuleType("google.colab")
    colab.userdata = userdata
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab.userdata", userdata)
    assert wandb_api_key() == "from-colab"


def test_wandb_key_is_never_written_to_a_file():
    # `wandb.login(key=...)` saves the key in ~/.netrc; the tracker passes it in memory only.
    assert "wandb.login(" not in SOURCE.read_text()
{%- endif %}
