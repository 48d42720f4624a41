"""`vertex --sweep`: the sweep's search as a Vertex AI hyperparameter tuning job (Vertex AI v1),
whose trials run `train --sweep-trial <name>` and report `train.monitor` through
cloudml-hypertune (docs/training.md, "Beyond one machine: Vertex AI").
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import hypertune  # type: ignore[import-not-found]
import yaml
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from ..config import COMMAND, ConfigError, Params, load_params, sweep_space, yaml_text
from ..core.storage import results_root
from ..training.policy import RunHooks, mode_for
from ..training.sweep_study import numbers_sorted, searched
from ..training.trainer import train

ALGORITHMS = {"tpe": "ALGORITHM_UNSPECIFIED", "random": "RANDOM_SEARCH", "grid": "GRID_SEARCH"}
JOB_STAMP = "SWEEP_JOB_STAMP"  # set in each trial: when its tuning job was written


def tuning_job(params: Params, trial_job: dict[str, Any]) -> dict[str, Any]:
    """The HyperparameterTuningJob of `sweep:` whose trials run the CustomJobSpec `trial_job`."""
    space, sweep, monitor = searched(params), params.sweep, params.train.monitor
    if params.vertex.parallel_trials > sweep.n_trials:
        raise ConfigError(
            f"vertex.parallel_trials: {params.vertex.parallel_trials} is more than sweep.n_trials "
            f"({sweep.n_trials}) (example: --set vertex.parallel_trials={sweep.n_trials})"
        )
    goal = "MINIMIZE" if mode_for(monitor) == "min" else "MAXIMIZE"
    study: dict[str, Any] = {
        "metrics": [{"metricId": monitor, "goal": goal}],
        "parameters": [parameter_spec(key, dist) for key, dist in space.items()],
        "algorithm": ALGORITHMS[sweep.sampler],
        # The trial's result is its best epoch, as locally: train keeps the best weights.
        "measurementSelectionType": "BEST_MEASUREMENT",
    }
    if sweep.pruner == "median":
        study["medianAutomatedStoppingSpec"] = {"useElapsedDuration": False}  # by epoch
    # Vertex AI numbers every job's trials from 1: the stamp in the run's name keeps a later job's
    # trial 1 from taking up (or being refused by) an earlier job's run in the same bucket.
    stamp = {"name": JOB_STAMP, "value": time.strftime("%Y%m%d-%H%M%S", time.gmtime())}
    for pool in trial_job["workerPoolSpecs"]:
        (pool.get("containerSpec") or pool["pythonPackageSpec"])["env"].append(stamp)
    return {
        # Vertex AI checks the name's length when the job is submitted.
        "displayName": f"{{ cookiecutter.project_slug }}-sweep-{sweep.name}",
        "studySpec": study,
        "maxTrialCount": sweep.n_trials,
        "parallelTrialCount": params.vertex.parallel_trials,
        "trialJobSpec": trial_job,
    }


def parameter_spec(key: str, dist: BaseDistribution) -> dict[str, Any]:
    """One searched key as a StudySpec ParameterSpec (its parameterId is the dotted key)."""
    if isinstance(dist, CategoricalDistribution):
        if numbers := numbers_sorted(dist.choices):
            values = [float(c) for c in numbers]
            spec = {"discreteValueSpec": {"values": values}, "scaleType": "UNIT_LINEAR_SCALE"}
            return {"parameterId": key, **spec}
        texts = [c if isinstance(c, str) else yaml_text(c) for c in dist.choices]
        return {"parameterId": key, "categoricalValueSpec": {"values": texts}}
    scale = "UNIT_LOG_SCALE" if dist.log else "UNIT_LINEAR_SCALE"
    kind = "integerValueSpec" if isinstance(dist, IntDistribution) else "doubleValueSpec"
    bounds = {"minValue": dist.low, "maxValue": dist.high}
    return {"parameterId": key, kind: bounds, "scaleType": scale}


# -- inside a trial ------------------------------------------------------------------------------
def trial_values(argv: list[str], space: dict[str, BaseDistribution]) -> dict[str, Any]:
    """Vertex AI's `--<key>=<value>` arguments as typed values."""
    values: dict[str, Any] = {}
    for arg in argv:
        key, eq, text = arg.removeprefix("--").partition("=")
        if not arg.startswith("--") or not eq or key not in space:
            known = ", ".join(f"--{k}=..." for k in space)
            raise ConfigError(f"train --sweep-trial: unexpected argument {arg!r} (known: {known})")
        value = yaml.safe_load(text) if text.strip() else text
        choices = getattr(space[key], "choices", ())
        if value in choices:  # a discrete value arrives as 64.0: take the choice as written
            value = choices[choices.index(value)]
        elif isinstance(space[key], IntDistribution) and isinstance(value, float):
            value = int(value) if value.is_integer() else value
        values[key] = value
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
    values = trial_values(argv, sweep_space(params))
    job = [os.environ[JOB_STAMP]] if os.environ.get(JOB_STAMP) else []  # none: a trial by hand
    run_name = "-".join([name, "vertex", *job, os.environ["CLOUD_ML_TRIAL_ID"]])
    sets = [f"{k}={yaml_text(v)}" for k, v in values.items()]
    trial = load_params(params_file, [*overrides, *sets, f"run_name={run_name}"])
    print(f"Tuning trial {run_name}: {' '.join(sets)}", flush=True)
    reporter = hypertune.HyperTune()
    monitor, reported = params.train.monitor, []

    def on_epoch(record: dict[str, Any]) -> str:
        """Report `monitor` to Vertex AI (cloudml-hypertune writes it to a file on each replica;
        Vertex AI reads the chief's). It never stops the run: Vertex AI does."""
        reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag=monitor,
            metric_value=float(record[monitor]),
            global_step=int(record["epoch"]),
        )
        reported.append(record["epoch"])
        return ""

    results = results_root(project_dir) / "sweeps" / name / run_name.removeprefix(f"{name}-")
    result = train(trial, project_dir, hooks=RunHooks(results=results, on_epoch=on_epoch))
    if not reported and monitor in result.metrics:  # complete before Vertex AI restarted it
        on_epoch({monitor: result.metrics[monitor], "epoch": len(result.metrics["history"])})
    return result.exit_code
