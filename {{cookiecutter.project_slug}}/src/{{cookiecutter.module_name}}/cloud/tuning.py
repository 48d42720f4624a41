"""`vertex --sweep`: the sweep's search as a Vertex AI hyperparameter tuning job.

`sweep:` becomes a HyperparameterTuningJob (Vertex AI v1): the space as its parameters,
`train.monitor` as its metric, `sweep.sampler` as its algorithm, `sweep.pruner: median` as its
median stopping (Vertex AI's rule: a trial's best value against the median of the completed
trials' running averages), and as each trial the custom job of `vertex`, which the command line
passes in. The trial runs `train --sweep-trial <name>` with Vertex AI's `--<key>=<value>`
arguments as the run `<name>-vertex-<trial id>` (checkpoints in the bucket: a restarted trial
resumes) and reports `train.monitor` after each epoch through cloudml-hypertune.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import hypertune  # type: ignore[import-not-found]
import yaml

from ..config import COMMAND, ConfigError, Dimension, Params, load_params, sweep_space, yaml_text
from ..core.storage import results_root
from ..training.early_stopping import mode_for
from ..training.policy import RunHooks
from ..training.sweep_study import searched
from ..training.trainer import train

ALGORITHMS = {"tpe": "ALGORITHM_UNSPECIFIED", "random": "RANDOM_SEARCH", "grid": "GRID_SEARCH"}


def tuning_job(params: Params, trial_job: dict[str, Any]) -> dict[str, Any]:
    """The HyperparameterTuningJob of `sweep:` whose trials run the CustomJobSpec `trial_job`."""
    dims, sweep, monitor = searched(params), params.sweep, params.train.monitor
    if params.vertex.parallel_trials > sweep.n_trials:
        raise ConfigError(
            f"vertex.parallel_trials: {params.vertex.parallel_trials} is more than sweep.n_trials "
            f"({sweep.n_trials}) (example: --set vertex.parallel_trials={sweep.n_trials})"
        )
    name = f"{{ cookiecutter.project_slug }}-sweep-{sweep.name}"
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
    return {
        "displayName": name,
        "studySpec": study,
        "maxTrialCount": sweep.n_trials,
        "parallelTrialCount": params.vertex.parallel_trials,
        "maxFailedTrialCount": 0,  # 0: Vertex AI decides
        "trialJobSpec": trial_job,
    }


def parameter_spec(dim: Dimension) -> dict[str, Any]:
    """One searched key as a StudySpec ParameterSpec (its parameterId is the dotted key); the
    space was checked when the params were read (ranges, log scales, the grid's choices)."""
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


# -- inside a trial ------------------------------------------------------------------------------
def trial_values(argv: list[str], dims: dict[str, Dimension]) -> dict[str, Any]:
    """Vertex AI's `--<key>=<value>` arguments as typed values (an integer key's discrete value
    arrives as `64.0`)."""
    values: dict[str, Any] = {}
    for arg in argv:
        key, eq, text = arg.removeprefix("--").partition("=")
        if not arg.startswith("--") or not eq or key not in dims:
            known = ", ".join(f"--{k}=..." for k in dims)
            raise ConfigError(f"train --sweep-trial: unexpected argument {arg!r} (known: {known})")
        value = yaml.safe_load(text) if text.strip() else text
        integral = dims[key].integer and isinstance(value, float) and value.is_integer()
        values[key] = int(value) if integral else value
    return values


def run_tuning_trial(
    params: Params,
    project_dir: Path,
    name: str,
    argv: list[str],
    overrides: list[str],
    params_file: Path,
) -> int:
    """`train --sweep-trial NAME` with Vertex AI's arguments: one ordinary run, reported."""
    if name != params.sweep.name:
        raise ConfigError(
            f"sweep.name: {params.sweep.name!r}, but the trial is of {name!r} "
            f"(example: --set sweep.name={name})"
        )
    if not os.environ.get("CLOUD_ML_TRIAL_ID"):  # Vertex AI's trial id
        raise ConfigError(
            "train --sweep-trial: CLOUD_ML_TRIAL_ID is not set; this runs as a trial of a Vertex "
            f"AI tuning job (`{COMMAND} vertex --sweep`) (example: CLOUD_ML_TRIAL_ID=1 to try it)"
        )
    dims = sweep_space(params)
    values = trial_values(argv, dims)
    run_name = f"{name}-vertex-{os.environ['CLOUD_ML_TRIAL_ID']}"
    sets = [dims[k].override(v) for k, v in values.items()]
    trial = load_params(params_file, [*overrides, *sets, f"run_name={run_name}"])
    print(f"Tuning trial {run_name}: {' '.join(sets)}", flush=True)
    hooks = RunHooks(
        results=results_root(project_dir) / "sweeps" / name / run_name.removeprefix(f"{name}-"),
        on_epoch=metric_reporter(params.train.monitor),
    )
    return train(trial, project_dir, hooks=hooks).exit_code


def metric_reporter(monitor: str) -> Any:
    """An epoch hook that reports `monitor` to Vertex AI (cloudml-hypertune writes it to a file
    on each replica; Vertex AI reads the chief's). It never stops the run: Vertex AI does."""
    reporter = hypertune.HyperTune()

    def on_epoch(record: dict[str, Any]) -> str:
        reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag=monitor,
            metric_value=float(record[monitor]),
            global_step=int(record["epoch"]),
        )
        return ""

    return on_epoch
