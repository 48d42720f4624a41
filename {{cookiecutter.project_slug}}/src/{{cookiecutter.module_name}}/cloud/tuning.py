"""`vertex --dry-run --sweep`: the sweep's search as a Vertex AI hyperparameter tuning job.

The same `sweep:` section becomes a HyperparameterTuningJob (Vertex AI v1): the space as its
StudySpec parameters, `train.monitor` as its metric, `sweep.sampler` as its algorithm (tpe: Vertex
AI's default Bayesian search, random, grid), `sweep.pruner: median` as its median automated
stopping, and as the trial job the custom job of `vertex` with `train --sweep-trial <name>`.

Vertex AI appends one `--<key>=<value>` per parameter to each trial's arguments;
`train --sweep-trial` turns them into `--set` overrides, names the run
`<name>-vertex-<CLOUD_ML_TRIAL_ID>` (its checkpoints in the bucket: a restarted trial resumes) and
reports `train.monitor` after each epoch through cloudml-hypertune, which Vertex AI reads.
Vertex AI's median rule is not Optuna's: it stops a trial whose best value is worse than the
median of the completed trials' running averages; `sweep.startup_trials` and
`sweep.warmup_epochs` have no counterpart there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from ..config import (
    CHOICES_EXAMPLE,
    COMMAND,
    RANGE_EXAMPLE,
    ConfigError,
    Dimension,
    Params,
    load_params,
    sweep_space,
    yaml_text,
)
from ..core.storage import results_root
from ..training.early_stopping import mode_for
from ..training.policy import RunHooks
from .vertex import PROJECT_SLUG, job_spec, write_spec

ALGORITHMS = {"tpe": "ALGORITHM_UNSPECIFIED", "random": "RANDOM_SEARCH", "grid": "GRID_SEARCH"}


def display_name(params: Params) -> str:
    """`<project_slug>-sweep-<sweep.name>`."""
    return f"{PROJECT_SLUG}-sweep-{params.sweep.name}"


def tuning_job(params: Params, forwarded: list[str] | None = None) -> dict[str, Any]:
    """The HyperparameterTuningJob for `params` (check `vertex.*` first with vertex.validate)."""
    dims, sweep, monitor = sweep_space(params), params.sweep, params.train.monitor
    if not dims:
        raise ConfigError(
            "sweep.space: empty, nothing to search "
            "(example: train.learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true})"
        )
    if params.vertex.parallel_trials > sweep.n_trials:
        raise ConfigError(
            f"vertex.parallel_trials: {params.vertex.parallel_trials} is more than sweep.n_trials "
            f"({sweep.n_trials}) (example: --set vertex.parallel_trials={sweep.n_trials})"
        )
    name = display_name(params)
    if len(name) > 128:
        raise ConfigError(
            f"sweep.name: the job's name {name!r} has {len(name)} characters, at most 128 "
            "(example: --set sweep.name=lr-dropout)"
        )
    goal = "MINIMIZE" if mode_for(monitor) == "min" else "MAXIMIZE"
    study: dict[str, Any] = {
        "metrics": [{"metricId": monitor, "goal": goal}],
        "parameters": [parameter_spec(dim) for dim in dims.values()],
        "algorithm": ALGORITHMS[sweep.sampler],
        # The trial's result is its best epoch, as locally: train keeps the best weights.
        "measurementSelectionType": "BEST_MEASUREMENT",
    }
    if sweep.pruner == "median":
        study["medianAutomatedStoppingSpec"] = {"useElapsedDuration": False}  # by epoch
    command = ["train", "--sweep-trial", sweep.name]
    return {
        "displayName": name,
        "studySpec": study,
        "maxTrialCount": sweep.n_trials,
        "parallelTrialCount": params.vertex.parallel_trials,
        "maxFailedTrialCount": 0,  # 0: Vertex AI decides
        "trialJobSpec": job_spec(params, forwarded, command),
    }


def parameter_spec(dim: Dimension) -> dict[str, Any]:
    """One searched key as a StudySpec ParameterSpec (its parameterId is the dotted key)."""
    if dim.choices:
        numbers = all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in dim.choices)
        if numbers:
            values = sorted(float(c) for c in dim.choices)
            return {
                "parameterId": dim.key,
                "discreteValueSpec": {"values": values},
                "scaleType": "UNIT_LINEAR_SCALE",
            }
        texts = [c if isinstance(c, str) else yaml_text(c) for c in dim.choices]
        return {"parameterId": dim.key, "categoricalValueSpec": {"values": texts}}
    scale = "UNIT_LOG_SCALE" if dim.log else "UNIT_LINEAR_SCALE"
    if dim.integer:
        bounds = {"minValue": int(dim.low), "maxValue": int(dim.high)}
        return {"parameterId": dim.key, "integerValueSpec": bounds, "scaleType": scale}
    bounds = {"minValue": float(dim.low), "maxValue": float(dim.high)}
    return {"parameterId": dim.key, "doubleValueSpec": bounds, "scaleType": scale}


def check_tuning_job(job: dict[str, Any]) -> None:
    """Rules of the API that its schema cannot say (the tests check the fields against the v1
    schema): ranges, log scales, grid search, trial counts. A one-line error."""
    study = job["studySpec"]
    for p in study["parameters"]:
        spec = p.get("doubleValueSpec") or p.get("integerValueSpec")
        where = f"sweep.space.{p['parameterId']}"
        if spec and not float(spec["minValue"]) < float(spec["maxValue"]):
            raise ConfigError(f"{where}: low must be below high (example: {RANGE_EXAMPLE})")
        if spec and p["scaleType"] == "UNIT_LOG_SCALE" and float(spec["minValue"]) <= 0:
            raise ConfigError(f"{where}: a log scale needs low > 0 (example: {RANGE_EXAMPLE})")
        if study["algorithm"] == "GRID_SEARCH" and "doubleValueSpec" in p:
            raise ConfigError(f"{where}: grid search needs choices (example: {CHOICES_EXAMPLE})")
    if not 1 <= job["parallelTrialCount"] <= job["maxTrialCount"]:
        raise ConfigError(
            "vertex.parallel_trials: from 1 to sweep.n_trials "
            "(example: --set vertex.parallel_trials=2)"
        )


def tuning_spec(
    params: Params, project_dir: Path, output: str | None, forwarded: list[str]
) -> tuple[Path, dict[str, Any], list[list[str]]]:
    """Build, check and write the tuning job; (its file, the job, the gcloud command)."""
    job = tuning_job(params, forwarded)
    check_tuning_job(job)
    path = Path(output or f"results/vertex/hpt-{params.sweep.name}.yaml")
    path = path if path.is_absolute() else project_dir / path
    write_spec(
        job,
        path,
        f"# Vertex AI HyperparameterTuningJob written by `{COMMAND} vertex --sweep`; submit with "
        "`gcloud ai hp-tuning-jobs create --config=...`.",
    )
    return path, job, [tuning_command(params, path)]


def tuning_command(params: Params, config_path: Path) -> list[str]:
    """The `gcloud ai hp-tuning-jobs create` command for the job file at `config_path`."""
    cfg = params.vertex
    cmd = [
        "gcloud",
        "ai",
        "hp-tuning-jobs",
        "create",
        f"--region={cfg.region}",
        f"--display-name={display_name(params)}",
        f"--config={config_path}",
    ]
    return cmd + ([f"--project={cfg.project}"] if cfg.project else [])


# -- inside a trial ------------------------------------------------------------------------------
def trial_values(argv: list[str], dims: dict[str, Dimension]) -> dict[str, Any]:
    """The `--<key>=<value>` (or `--<key> <value>`) arguments Vertex AI appends, as typed values;
    a discrete value of an integer key arrives as `64.0`."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        key, eq, text = argv[i].removeprefix("--").partition("=")
        if not argv[i].startswith("--") or key not in dims:
            known = ", ".join(f"--{k}=..." for k in dims)
            raise ConfigError(
                f"train --sweep-trial: unexpected argument {argv[i]!r} (known: {known})"
            )
        if not eq:
            i += 1
            text = argv[i] if i < len(argv) else ""
        value = yaml.safe_load(text) if text.strip() else text
        if dims[key].integer and isinstance(value, float) and value.is_integer():
            value = int(value)
        values[key] = value
        i += 1
    return values


def trial_id() -> str:
    """Vertex AI's trial id: `$CLOUD_ML_TRIAL_ID`, else the trial folder of `$AIP_MODEL_DIR`."""
    found = os.environ.get("CLOUD_ML_TRIAL_ID", "")
    if not found and os.environ.get("AIP_MODEL_DIR"):
        found = Path(os.environ["AIP_MODEL_DIR"].rstrip("/")).parent.name
    if not found:
        raise ConfigError(
            "train --sweep-trial: CLOUD_ML_TRIAL_ID is not set; this runs as a trial of a Vertex "
            f"AI tuning job (`{COMMAND} vertex --sweep`) (example: CLOUD_ML_TRIAL_ID=1 to try it)"
        )
    return found


def run_tuning_trial(
    params: Params,
    project_dir: Path,
    name: str,
    argv: list[str],
    overrides: list[str],
    params_file: Path,
) -> int:
    """`train --sweep-trial NAME` with Vertex AI's arguments: one ordinary run, reported."""
    from ..training.trainer import train

    if name != params.sweep.name:
        raise ConfigError(
            f"sweep.name: {params.sweep.name!r}, but the trial is of {name!r} "
            f"(example: --set sweep.name={name})"
        )
    dims = sweep_space(params)
    values = trial_values(argv, dims)
    run_name = f"{name}-vertex-{trial_id()}"
    sets = [dims[k].override(v) for k, v in values.items()]
    trial = load_params(params_file, [*overrides, *sets, f"run_name={run_name}"])
    print(f"Tuning trial {run_name}: {' '.join(sets)}", flush=True)
    hooks = RunHooks(
        results=results_root(project_dir) / "sweeps" / name / run_name.removeprefix(f"{name}-"),
        on_epoch=metric_reporter(params.train.monitor),
    )
    return train(trial, project_dir, hooks=hooks).exit_code


def metric_reporter(monitor: str) -> Any:
    """An epoch hook that reports `monitor` to Vertex AI with cloudml-hypertune (chief only);
    it never stops the run itself: Vertex AI stops a trial from outside."""
    try:
        import hypertune  # type: ignore[import-not-found]
    except ModuleNotFoundError:
        raise ConfigError(
            "train --sweep-trial: cloudml-hypertune is not installed; the image installs "
            "requirements.txt (example: pip install -r requirements.txt)"
        ) from None
    reporter = hypertune.HyperTune() if _chief() else None

    def on_epoch(record: dict[str, Any]) -> str:
        if reporter is not None:
            reporter.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag=monitor,
                metric_value=float(record[monitor]),
                global_step=int(record["epoch"]),
            )
        return ""

    return on_epoch


def _chief() -> bool:
    """Whether this replica is the chief (TF_CONFIG), the one that reports."""
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except ValueError:
        return True
    task, cluster = config.get("task", {}), config.get("cluster", {})
    if task.get("type") in (None, "chief", "master"):
        return True
    return (
        task.get("type") == "worker"
        and task.get("index", 0) == 0
        and not (cluster.get("chief") or cluster.get("master"))
    )
