"""The record of a run (`kind` "train" or "speed"), stopped ones too: `results/runs/<run_id>/`
`manifest.json` (what traces a result back and runs it again) and `params.yaml`.
"""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ..config import COMMAND
from ..core.environment import collect_environment
from ..core.files import atomic_write, file_sha256, save_json
from ..core.storage import TRAIN_METRICS, results_root
from .checkpoints import ResultsWriteError
from .tracking import Tracker


def new_run_id(run_name: str, started_at: datetime) -> str:
    """`20260101T120000Z-<run_name>-<4 hex>`: sorts by time, names the run, never collides."""
    return f"{started_at:%Y%m%dT%H%M%SZ}-{run_name}-{secrets.token_hex(2)}"


def artifact_entry(project_dir: Path, path: Path) -> dict[str, Any]:
    """Path (relative to the project when inside it), size and sha256 of one output file."""
    try:
        shown = str(path.resolve().relative_to(project_dir.resolve()))
    except ValueError:
        shown = str(path)
    if not path.is_file():
        return {"path": shown, "exists": False}
    return {"path": shown, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def build_record(
    project_dir: Path,
    *,
    run_id: str,
    params: dict[str, Any],
    status: str,
    metrics: dict[str, Any],
    artifacts: list[Path],
    checkpoints: Path,
    started_at: datetime,
    finished_at: datetime,
    reason: str = "",
    command: str = "",
    tracking: dict[str, str] | None = None,
    environment: dict[str, Any] | None = None,
    kind: str = "train",
    class_weight: dict[str, float] | None = None,
    facts: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest of one run as a dictionary."""
    env = environment if environment is not None else collect_environment(project_dir)
    run_dir = runs_dir(project_dir) / run_id
    if run_dir.is_relative_to(project_dir):  # else results are elsewhere ($PROJECT_RESULTS_DIR)
        run_dir = run_dir.relative_to(project_dir)
    run_name = params.get("run_name", "")
    return {
        "run_id": run_id,
        "kind": kind,
        "run_name": run_name,
        "status": status,
        "reason": reason,
        "params": params,
        "seed": params.get("seed"),
        "environment": env,
        "git": {k: env["git"].get(k) for k in ("commit", "branch", "dirty")},
        "data": {"manifest": env["data"]["manifest"], "dvc": env["data"]["dvc"]},
        # train.class_weight resolved from the training split's counts: the loss's weights
        "class_weight": class_weight,
        "checkpoints": str(checkpoints),
        "metrics": metrics,
        "facts": facts or {},
        "artifacts": [artifact_entry(project_dir, p) for p in artifacts],
        "timing": {
            "started_at": started_at.isoformat(timespec="seconds"),
            "finished_at": finished_at.isoformat(timespec="seconds"),
            "duration_s": round((finished_at - started_at).total_seconds(), 2),
        },
        "tracking": tracking or {},
        "command": command or f"{COMMAND} {kind}",
        "reproduce": reproduce_commands(env, run_dir, run_name, kind),
    }


def reproduce_commands(env: dict[str, Any], run_dir: Path, run_name: str, kind: str) -> list[str]:
    """The shell commands that rerun this run from scratch (README: "Reproducing a run")."""
    git = env["git"]
    commit = git.get("commit") or "<unknown: not a git clone, or before the first commit>"
    warning = ["# WARNING: the tree had uncommitted changes; the commit lacks them"]
    data = "dvc pull prepare  # the data version of that commit (checked against data.manifest)"
    if env["data"]["manifest"] is None:  # `train` splits the bundled digits again, alike
        data = "# no data/manifest.json at that commit: the run trained on the bundled digits"
    return [
        *(warning if git.get("dirty") else []),
        f"git checkout {commit}",
        data,
        f"cp {shlex.quote(str(run_dir / 'params.yaml'))} params.yaml",  # a path with spaces
        f"{COMMAND} speed"
        if kind == "speed"
        else f"{COMMAND} train --set run_name={run_name}-repro",
    ]


def runs_dir(project_dir: Path) -> Path:
    """`results/runs/` (under `$PROJECT_RESULTS_DIR` when that is set)."""
    return results_root(project_dir) / "runs"


def write_run_record(project_dir: Path, record: dict[str, Any]) -> Path:
    """Write `results/runs/<run_id>/manifest.json` and `params.yaml` beside it (atomically)."""
    run_dir = runs_dir(project_dir) / record["run_id"]
    params_text = yaml.safe_dump(record["params"], sort_keys=False)
    try:
        atomic_write(run_dir / "params.yaml", f"# params of run {record['run_id']}\n{params_text}")
        return save_json(record, run_dir / "manifest.json")
    except OSError:  # no half record: the run id is new, its folder this call's
        shutil.rmtree(run_dir, ignore_errors=True)
        raise


def read_runs(folder: Path, newest_first: bool = False) -> Iterator[dict[str, Any]]:
    """The run records in a `runs/` folder, oldest first (run ids sort by start time); one that
    cannot be read (a write that Drive lost with its VM) is skipped, said in one line."""
    for path in sorted(Path(folder).glob("*/manifest.json"), reverse=newest_first):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            print(f"WARNING: run record {path} skipped, unreadable ({exc})", flush=True)
            continue
        yield record


def list_runs(project_dir: Path) -> list[dict[str, Any]]:
    """Every run record of this project, oldest first."""
    return list(read_runs(runs_dir(project_dir)))


# The facts by which two sessions ended the same run the same way (is_recorded, find_run).
SAME_SESSION_END = ("run_name", "status", "weights_sha256")


def is_recorded(project_dir: Path, facts: dict[str, Any], artifacts: list[Path]) -> bool:
    """True when a run record holds a session that ended as `facts` say (run, status, weights)
    and wrote `artifacts` as they are now, byte for byte."""
    now = [artifact_entry(project_dir, path) for path in artifacts]
    runs = (run.get("facts") or {} for run in list_runs(project_dir) if run["artifacts"] == now)
    return any(all(found.get(key) == facts[key] for key in SAME_SESSION_END) for found in runs)


def runs_table(runs: list[dict[str, Any]], keys: tuple[str, ...] = ()) -> str:
    """A Markdown table comparing runs: id, status, commit (`*`: a dirty tree), seed, chosen
    params, metrics and the accelerator."""
    keys = keys or ("train.epochs", "train.batch_size", "train.learning_rate")
    scores = ("val_accuracy", "val_loss", "examples_per_sec")
    columns = {
        "run_id": "run",
        "status": "status",
        "git.commit": "commit",
        "seed": "seed",
        **{f"params.{key}": key for key in keys},
        **{f"metrics.{key}": key for key in scores},
        "environment.colab.accelerator": "accelerator",
    }
    frame = pd.json_normalize(runs).reindex(columns=[*columns, "git.dirty"])
    dirty = frame.pop("git.dirty").map({True: "*"}).fillna("")
    commits = frame["git.commit"].fillna("-").astype(str)  # a column of text, even with no runs
    frame["git.commit"] = commits.str[:8] + dirty
    frame = frame.rename(columns=columns).astype(object)
    table = frame.where(frame.notna(), None)
    return table.to_markdown(index=False, floatfmt=".4g", missingval="-")


def find_run(
    results: Path, artifact: str = TRAIN_METRICS, elsewhere: tuple[Path, ...] = ()
) -> dict[str, Any] | None:
    """The newest run record in `<results>/runs/`, then in `elsewhere`, that wrote
    `<results>/<artifact>` as it is now (by its sha256), or None. When that session trained no
    step (it wrote a complete run's results again, as after `dvc repro`), the newest record in
    its folder of the session that trained those weights (same run_name, status, weights)."""
    file = Path(results) / artifact
    if not file.is_file():
        return None
    digest = file_sha256(file)
    for folder in (Path(results) / "runs", *elsewhere):
        records = list(read_runs(folder, newest_first=True))
        for record in records:
            for entry in record.get("artifacts", []):
                if entry.get("sha256") == digest and entry["path"].endswith(file.name):
                    return next((r for r in records if _trained(r, record)), record)
    return None


def _trained(record: dict[str, Any], rewrote: dict[str, Any]) -> bool:
    """True when `record`'s session trained a step and ended as `rewrote`'s, which trained none
    (else `rewrote` is its own run's record)."""
    facts, theirs = record.get("facts") or {}, rewrote.get("facts") or {}
    same = all(facts.get(key) == theirs.get(key) for key in SAME_SESSION_END)
    return same and _steps_trained(rewrote) == 0 and (_steps_trained(record) or 0) > 0


def _steps_trained(record: dict[str, Any]) -> int | None:
    """How many steps a record's session trained; None when the record does not say (one a test
    or an older version wrote)."""
    facts, metrics = record.get("facts") or {}, record.get("metrics") or {}
    if "started_at_step" not in facts or "steps" not in metrics:
        return None
    return metrics["steps"] - facts["started_at_step"]


def record_run(
    params: Any,
    project_dir: Path,
    paths: Any,
    result: Any,
    started_at: datetime,
    command: str = "",
) -> Path:
    """Write a finished run's record (`paths`: RunPaths, `result`: TrainResult), then send it to
    the tracker; returns the record's path (train says it)."""
    flat_params = params.to_dict()
    run_id = new_run_id(params.run_name, started_at)
    tracker = Tracker(project_dir, params.run_name, run_id)
    metrics = dict(result.metrics) if result.metrics else {"steps": result.step}
    artifacts = [paths.model_file, paths.metrics_file] if result.status == "completed" else []
    record = build_record(
        project_dir,
        run_id=run_id,
        params=flat_params,
        status=result.status,
        reason=result.reason,
        metrics=metrics,
        artifacts=artifacts,
        checkpoints=paths.checkpoints,
        started_at=started_at,
        finished_at=datetime.now(UTC),
        command=command,
        tracking=tracker.locations,
        class_weight=result.class_weight,
        facts=result.facts,
    )
    try:
        manifest = write_run_record(project_dir, record)
    except OSError as exc:  # a full or dropped disk, after the results were written
        raise ResultsWriteError(
            f"{runs_dir(project_dir) / run_id}: the run record could not be written "
            f"({exc.strerror or exc}); the run is kept in its checkpoints: free some space and "
            "run the same train command again to write it"
        ) from None
    tracker.log_params(flat_params)
    for epoch in metrics.get("history") or []:
        tracker.log_metrics(epoch, step=int(epoch.get("step", 0)))
    tracker.log_metrics(metrics, step=int(result.step))  # every number of the run
    for path in [*artifacts, manifest]:
        tracker.log_artifact(path)
    tracker.close(result.status)
    return manifest
