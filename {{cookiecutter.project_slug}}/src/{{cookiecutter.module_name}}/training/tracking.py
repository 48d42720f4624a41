"""Experiment tracking: TensorBoard always
{%- if cookiecutter.tracking == "mlflow" %}, plus MLflow{% elif cookiecutter.tracking == "wandb" %}, plus Weights & Biases{% endif %}.

- TensorBoard: `results/tensorboard/<run_name>/` (the trainer's curves, plus the run's params
  and final metrics in the HParams tab, which compares runs side by side).
{%- if cookiecutter.tracking == "mlflow" %}
- MLflow: `$MLFLOW_TRACKING_URI` when set (a shared server), else a local store in
  `results/mlruns/` (`mlflow ui --backend-store-uri sqlite:///results/mlruns/mlflow.db`).
{%- elif cookiecutter.tracking == "wandb" %}
- Weights & Biases: online when an API key is found (Colab's secret `WANDB_API_KEY` in
  `google.colab.userdata`, or the environment variable), else offline in `results/wandb/`
  (`wandb sync results/wandb/offline-run-*` uploads later). The key is passed in memory only;
  it is never written to a file.
{%- endif %}

A run's params, metrics and its manifest (results/runs/<run_id>/manifest.json) go to every
backend. A tracker that fails never stops training: it prints a warning and is skipped.
"""

from __future__ import annotations

import contextlib
import json
{%- if cookiecutter.tracking == "mlflow" %}
import logging
{%- endif %}
{%- if cookiecutter.tracking != "tensorboard" %}
import os
{%- endif %}
from collections.abc import Iterator
from pathlib import Path
from typing import Any
{%- if cookiecutter.tracking == "mlflow" %}

import requests
{%- endif %}

from ..config import flat
from ..core.progress import say
from ..core.storage import results_root
from .checkpoints import first_line, is_storage_fault
{%- if cookiecutter.tracking != "tensorboard" %}

EXPERIMENT = "{{ cookiecutter.project_slug }}"
{%- endif %}


def flatten(params: dict[str, Any]) -> dict[str, Any]:
    """{'train': {'epochs': 3}} -> {'train.epochs': 3}; lists become text."""
    return {k: json.dumps(v) if isinstance(v, list | tuple) else v for k, v in flat(params).items()}


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric scalars of `metrics` (trackers take numbers only)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def why(exc: Exception) -> str:
    """Why a tracker failed, in one line: TensorFlow's errors (four lines on a full disk) as
    `ErrorType: cause`, any other as it was raised."""
    return first_line(exc) if type(exc).__module__.startswith("tensorflow") else str(exc)


class Curves:
    """The trainer's curves in TensorBoard (`results/tensorboard/<run_name>/`). A full or dropped
    disk stops them with one warning and the run goes on: curves are not worth a run."""

    # The folders whose curves stopped in this process: the tracker leaves TensorBoard out of
    # such a run at its end (the same folder, the same disk) rather than warn a second time.
    stopped: set[Path] = set()

    def __init__(self, logdir: Path, enabled: bool, step: int) -> None:
        """`enabled`: this worker writes them (the chief); `step`: the run's first (a resume's)."""
        import tensorflow as tf  # here: the notebooks import the run records for their table only

        self.tf, self.logdir, self.writer = tf, logdir, None
        Curves.stopped.discard(logdir)  # a new run here (space freed since) tries again
        if enabled:
            with self._stop_on_storage_fault(step):
                self.writer = tf.summary.create_file_writer(str(logdir))

    def scalars(self, values: dict[str, float], step: int) -> None:
        """`values` ({tag: number}) at `step`; nothing once the curves stopped."""
        if self.writer is None:
            return
        with self._stop_on_storage_fault(step), self.writer.as_default():
            for tag, value in values.items():
                self.tf.summary.scalar(tag, value, step=step)

    def close(self, step: int) -> None:
        """Write what is queued and close the file: a mount that reports a failed write only when
        its file is closed says it here."""
        if self.writer is not None:
            with self._stop_on_storage_fault(step):
                self.writer.close()

    @contextlib.contextmanager
    def _stop_on_storage_fault(self, step: int) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            if not is_storage_fault(exc):
                raise
            self.writer = None  # it would fail again at every later value, each said again
            Curves.stopped.add(self.logdir)
            say(
                f"WARNING: TensorBoard curves in {self.logdir} stopped at step {step} "
                f"({why(exc)}); the run goes on without them"
            )


class TensorBoardBackend:
    """Params and final metrics in TensorBoard's HParams tab, beside the trainer's curves."""

    name = "tensorboard"

    def __init__(self, project_dir: Path, run_name: str, run_id: str) -> None:
        import tensorflow as tf  # here: the notebooks import the run records for their table only

        self.tf = tf
        self.location = str(results_root(project_dir) / "tensorboard" / run_name)
        self.writer = tf.summary.create_file_writer(self.location)
        self.run_id = run_id

    def log_params(self, params: dict[str, Any]) -> None:
        from tensorboard.plugins.hparams import api as hp

        simple = (bool, int, float, str)
        values = {k: v if isinstance(v, simple) else str(v) for k, v in params.items()}
        with self.writer.as_default():
            hp.hparams(values, trial_id=self.run_id)
            self.tf.summary.text("params", json.dumps(params, indent=1), step=0)
        self.writer.flush()

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        with self.writer.as_default():
            for key, value in metrics.items():
                self.tf.summary.scalar(f"run/{key}", value, step=step)
        self.writer.flush()

    def log_artifact(self, path: Path) -> None:
        if path.suffix == ".json":  # the manifest: readable in the Text tab
            with self.writer.as_default():
                self.tf.summary.text(path.name, path.read_text(), step=0)
            self.writer.flush()

    def close(self, status: str) -> None:
        self.writer.close()
{%- if cookiecutter.tracking == "mlflow" %}


def answers(uri: str) -> None:
    """Raise when the tracking server does not answer at all. One try: MLflow retries a request
    for minutes (to wait out a server's rate limit), which a server that is down turns into
    minutes of warnings after every run. The URI is not shown: it may hold a password."""
    try:
        requests.head(uri, timeout=10)  # any answer will do, even 401 or 404
    except requests.RequestException as exc:
        why = type(exc).__name__
        raise ConnectionError(f"MLFLOW_TRACKING_URI does not answer ({why})") from None


class MlflowBackend:
    """An MLflow run per training run: `MLFLOW_TRACKING_URI`, else `results/mlruns/`."""

    name = "mlflow"

    def __init__(self, project_dir: Path, run_name: str, run_id: str) -> None:
        import mlflow

        if not os.environ.get("MLFLOW_LOGGING_LEVEL"):  # its INFO lines are noise in a notebook
            logging.getLogger("mlflow").setLevel(logging.WARNING)
        self.mlflow = mlflow
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        experiment_id = None
        if uri:
            if uri.startswith(("http://", "https://")):
                answers(uri)
            mlflow.set_tracking_uri(uri)
            experiment_id = mlflow.set_experiment(EXPERIMENT).experiment_id
        else:
            # MLflow 3 refuses a plain-folder store; SQLite in one file is its local default.
            store = (results_root(project_dir) / "mlruns").resolve()
            store.mkdir(parents=True, exist_ok=True)
            uri = f"sqlite:///{store / 'mlflow.db'}"
            mlflow.set_tracking_uri(uri)
            client = mlflow.MlflowClient()
            found = client.get_experiment_by_name(EXPERIMENT)
            experiment_id = (
                found.experiment_id
                if found
                else client.create_experiment(
                    EXPERIMENT, artifact_location=(store / "artifacts").as_uri()
                )
            )
        self.run = mlflow.start_run(
            run_name=run_id, experiment_id=experiment_id, tags={"run_name": run_name}
        )
        self.location = f"{uri} (experiment {EXPERIMENT}, run {self.run.info.run_id})"

    def log_params(self, params: dict[str, Any]) -> None:
        self.mlflow.log_params({k: str(v)[:6000] for k, v in params.items()})

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics(metrics, step=step)

    def log_artifact(self, path: Path) -> None:
        self.mlflow.log_artifact(str(path))

    def close(self, status: str) -> None:
        self.mlflow.end_run("FINISHED" if status == "completed" else "KILLED")
{%- elif cookiecutter.tracking == "wandb" %}


def wandb_api_key() -> str | None:
    """The W&B key from Colab's secrets, else from `WANDB_API_KEY`; None means offline."""
    try:
        from google.colab import userdata  # type: ignore[import-not-found]

        key = userdata.get("WANDB_API_KEY")
        if key:
            return key
    except Exception:  # not on Colab, no such secret, or access to it not granted
        pass
    return os.environ.get("WANDB_API_KEY") or None


class WandbBackend:
    """A W&B run per training run: online with a key, else offline (sync it later)."""

    name = "wandb"

    def __init__(self, project_dir: Path, run_name: str, run_id: str) -> None:
        import wandb

        self.wandb = wandb
        key = wandb_api_key()
        if key:
            # In this process's memory only: `wandb.login` would write it to ~/.netrc.
            os.environ["WANDB_API_KEY"] = key
        mode = "online" if key else "offline"
        self.run = wandb.init(
            project=EXPERIMENT,
            name=run_id,
            group=run_name,
            mode=mode,
            # results/wandb/ (under $PROJECT_RESULTS_DIR when set, like every other result)
            dir=os.environ.get("WANDB_DIR") or str(results_root(project_dir)),
            reinit="finish_previous",
        )
        self.location = f"{mode}: {self.run.dir}"

    def log_params(self, params: dict[str, Any]) -> None:
        self.run.config.update(params, allow_val_change=True)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def log_artifact(self, path: Path) -> None:
        path = Path(path)
        artifact = self.wandb.Artifact(f"{path.stem}-{self.run.id}", type="run-record")
        artifact.add_file(str(path))
        self.run.log_artifact(artifact)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "completed" else 1)
{%- endif %}


class Tracker:
    """Every backend of this project behind one small interface."""

    def __init__(self, project_dir: Path, run_name: str, run_id: str) -> None:
        kinds: list[type] = [TensorBoardBackend
{%- if cookiecutter.tracking == "mlflow" %}, MlflowBackend{% elif cookiecutter.tracking == "wandb" %}, WandbBackend{% endif %}]
        self.backends: list[Any] = []
        curves = results_root(Path(project_dir)) / "tensorboard" / run_name
        for kind in kinds:
            if kind is TensorBoardBackend and curves in Curves.stopped:
                continue  # the curves' warning said why; one line is enough
            try:
                self.backends.append(kind(Path(project_dir), run_name, run_id))
            except Exception as exc:  # a tracker must never cost a training run
                say(f"WARNING: {kind.name} tracking is off for this run: {why(exc)}")

    @property
    def locations(self) -> dict[str, str]:
        """Where each backend keeps this run (for the run record and the log)."""
        return {b.name: b.location for b in self.backends}

    def log_params(self, params: dict[str, Any]) -> None:
        self._each("log_params", flatten(params))

    def log_metrics(self, metrics: dict[str, Any], step: int = 0) -> None:
        values = numeric(metrics)
        if values:
            self._each("log_metrics", values, step)

    def log_artifact(self, path: Path) -> None:
        if Path(path).exists():
            self._each("log_artifact", Path(path))

    def close(self, status: str = "completed") -> None:
        self._each("close", status)

    def _each(self, method: str, *args: Any) -> None:
        for backend in list(self.backends):
            try:
                getattr(backend, method)(*args)
            except Exception as exc:
                say(f"WARNING: {backend.name} {method} failed, skipping it: {why(exc)}")
                self.backends.remove(backend)
