"""`python -m <module> sweep --best`: the best trial becomes the project's model and settings.

It copies the trial's model and train.json to `results/models/` and `results/metrics/`, and
writes the trial's settings into the params file (comments and layout kept), `run_name`
included: the params, the model and the metrics then agree, so `dvc commit train` records them as
the `train` stage and `dvc repro` does not train again. A trial trained on another machine (its
results were on that VM's disk) gets its results written again from its checkpoint first, without
training.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from ..config import COMMAND, ConfigError, Params, load_params, yaml_text
from ..core.files import atomic_write, temp_file
from ..core.storage import MODEL_FILE, SIDECAR_FILE, TRAIN_METRICS, results_root
from .policy import RunHooks
from .sweep import Sweep, direction, flat_params, open_storage, open_study, trial_params
from .sweep_study import JOURNAL, quiet_optuna, study_folder, trials_table, values_of, write_trials
from .trainer import train

PROMOTED = (MODEL_FILE, SIDECAR_FILE, TRAIN_METRICS)
NOT_PROMOTED = ("sweep.",{% if cookiecutter.vertex_ai == "yes" %} "vertex."{% endif %})  # how the trial was searched or submitted, not what it is


def promote_best(params: Params, project_dir: Path, params_file: Path) -> int:
    """Promote the best complete trial of `sweep.name`; one line of error when there is none."""
    name = params.sweep.name
    none_yet = ConfigError(
        f"sweep.name: the study '{name}' has no complete trial yet; run `{COMMAND} sweep` first "
        "(example: --set sweep.name=lr-dropout)"
    )
    if not params.sweep.storage and not (study_folder(project_dir, name) / JOURNAL).is_file():
        raise none_yet
    with quiet_optuna():
        storage = open_storage(params, project_dir)
        study = open_study(params, storage)
        if not any(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)):
            raise none_yet
        best = study.best_trial
        sweep = Sweep(
            params, params_file, project_dir, best.user_attrs["overrides"], study, storage
        )
        run = best.user_attrs["run"]
        trial = trial_params(sweep, values_of(sweep.dims, best.params), run)
        source = sweep.results / run.rsplit("-", 1)[1]
        if not all((source / name).is_file() for name in PROMOTED):
            _results_from_checkpoint(trial, project_dir, source)
        target = results_root(project_dir)
        for name in PROMOTED:
            atomic_write(target / name, (source / name).read_bytes())
        table = trials_table(study, sweep.dims, sweep.monitor)
        write_trials(table, sweep.dims, direction(params), sweep.results)
    changed = write_params(params_file, trial)
    print(
        f"Promoted trial {best.number} ({run}, {sweep.monitor} {best.value:.4g}): "
        f"{', '.join(str(target / n) for n in PROMOTED)}",
        flush=True,
    )
    shown = "; ".join(f"{k}: {yaml_text(a)} -> {yaml_text(b)}" for k, (a, b) in changed.items())
    print(f"{params_file.name}: {shown or 'already has the trial settings'}", flush=True)
    print(
        "Record it as the `train` stage without training again: `dvc commit train`, then commit "
        f"{params_file.name}, dvc.lock and {TRAIN_METRICS.join(['results/', ''])}.",
        flush=True,
    )
    return 0


def _results_from_checkpoint(trial: Params, project_dir: Path, source: Path) -> None:
    """The trial's model and train.json from its checkpoint (`train` of a complete run trains no
    step; it restores the best weights and writes the results)."""
    print(f"Writing {source} from the checkpoints of run '{trial.run_name}'", flush=True)
    result = train(trial, project_dir, hooks=RunHooks(results=source))
    if result.status != "completed":
        raise ConfigError(f"run_name: the run '{trial.run_name}' is not complete; run the sweep")


def write_params(path: Path, trial: Params) -> dict[str, tuple[Any, Any]]:
    """Write the keys in which `trial` differs from the params file into it (ruamel.yaml keeps
    its comments and layout); returns {key: (old, new)}."""
    current = flat_params(load_params(path).to_dict())
    wanted = flat_params(trial.to_dict())
    changed = {
        k: (current.get(k), v)
        for k, v in wanted.items()
        if current.get(k) != v and not k.startswith(NOT_PROMOTED)
    }
    if not changed:
        return {}
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    doc = yaml.load(path.read_text())
    for key, (_, value) in changed.items():
        *sections, leaf = key.split(".")
        node = doc
        for part in sections:
            node = node.setdefault(part, {})
        node[leaf] = value
    out = io.StringIO()
    yaml.dump(doc, out)
    tmp = Path(temp_file(path))
    try:  # checked before it replaces the file: never a params file that says otherwise
        tmp.write_text(out.getvalue())
        written = flat_params(load_params(tmp).to_dict())
        if any(written.get(k) != v for k, (_, v) in changed.items()):
            raise ConfigError(
                f"{path}: could not write the trial's settings; set them by hand: "
                + ", ".join(f"{k}={yaml_text(v)}" for k, (_, v) in changed.items())
            )
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return changed
