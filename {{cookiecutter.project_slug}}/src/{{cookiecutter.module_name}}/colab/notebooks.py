"""The notebooks' side: a session's start, advice on an exit code, DVC records, headless runs."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from ..config import ConfigError, flat, load_params, parse_assignment
from ..core.environment import log_environment
from ..core.storage import on_colab, results_root, storage_root
from ..training.lease import EXIT_LEASE_HELD, EXIT_LEASE_LOST
from ..training.policy import EXIT_BUDGET
from ..training.run_record import runs_dir
from ..training.seeding import seed_everything
from ..training.strategy import detect_hardware
from .githooks import install
from .restore import keep_model
from .runtime_check import NotebookStop

REPORTS = Path("results") / "reports"
PATTERN = "[0-9][0-9]_*.ipynb"
# `-p NAME=VALUE`: reader, words and example per declared type (`str` keeps 0123, on, 1.10).
PARAMETER_TYPES = {
    "str": (str, "text", "baseline"),
    "int": (int, "an integer", "2"),
    "float": (float, "a number", "0.5"),
    "bool": (lambda text: {"true": True, "false": False}[text.lower()], "true or false", "true"),
}


class NotebookError(RuntimeError):
    """A notebook failed; the message names it and its report (a bad `-p` is a ConfigError)."""


def start_session(project_dir: Path, seed: int | None = None) -> Any:
    """Hooks, environment log, seeds; return the params (`seed`: None keeps params.yaml's)."""
    project_dir = Path(project_dir)
    params = load_params(project_dir / "params.yaml", [f"seed={seed}"] if seed is not None else [])
    done = keep_state_on_storage(project_dir, storage_root(project_dir)) if on_colab() else []
    try:
        done += install(project_dir)
    except (subprocess.CalledProcessError, OSError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        done.append(f"WARNING: git hooks not registered ({detail}); run `make hooks`")
    for line in done:  # nothing done: no line, not an empty one
        print(line)
    log_environment(project_dir)
    seeded = seed_everything(params.seed, params.repro.deterministic)
    print(f"Seed {params.seed} ({', '.join(seeded)})")
    return params


def check_accelerator() -> str:
    """Stop (NotebookStop) when TensorFlow finds no GPU or TPU here; else say which it found."""
    hw = detect_hardware()
    if not (hw.gpus or hw.tpu):
        raise NotebookStop(
            "No GPU or TPU on this runtime, only the CPU: Runtime > Change runtime type > T4 GPU, "
            "then run the notebook again; to train on the CPU anyway, set "
            "require_accelerator = False in the parameters cell."
        )
    found = f"{hw.gpus} GPU(s)" if hw.gpus else "a TPU"
    print(f"Accelerator: {found}", flush=True)
    return found


def keep_state_on_storage(project_dir: Path, storage: Path) -> list[str]:
    """Link the TensorBoard logs into `storage`, sync run records both ways, keep the model there
    and point the DVC remote at it; what was done, one line each. Safe to run again."""
    project_dir, storage = Path(project_dir), Path(storage)
    if project_dir.resolve() == storage.resolve():
        return []
    done = []
    logs, kept_logs = results_root(project_dir) / "tensorboard", storage / "tensorboard"
    kept_logs.mkdir(parents=True, exist_ok=True)
    if not logs.is_symlink() and not logs.exists():
        logs.parent.mkdir(parents=True, exist_ok=True)
        logs.symlink_to(kept_logs, target_is_directory=True)
        done.append(f"TensorBoard logs: {kept_logs}")
    try:
        copied = sync_run_records(runs_dir(project_dir), storage / "runs")
        done.append(f"Run records: {storage / 'runs'} ({copied} copied)")
        done += [kept] if (kept := keep_model(project_dir, storage)) else []
    except OSError as exc:  # Drive full (shutil.Error too): what was copied whole is kept
        why = exc.strerror or str(exc)
        if isinstance(exc, shutil.Error):  # copytree's [(src, dst, "[Errno 28] No space...: 'x'")]
            why = re.sub(r"^\[Errno \d+\] |: '[^']*'$", "", str(exc.args[0][0][2]))
        done.append(
            f"WARNING: run records or the model not copied to {storage} ({why}); free space on "
            "Drive (docs/troubleshooting.md), then run this cell again"
        )
{%- if cookiecutter.dvc_remote == "drive" %}
    from dvc.config import Config  # DVC's config alone (0.5 s), here only

    remote = storage / "dvc-storage"
    try:  # what `dvc remote modify --local storage url <remote>` writes, in .dvc/config.local
        with Config(dvc_dir=str(project_dir / ".dvc")).edit("local") as conf:
            conf.setdefault("remote", {}).setdefault("storage", {})["url"] = str(remote)
        done.append(f"DVC remote: {remote} (the cache stays in .dvc/cache, on this VM's disk)")
    except Exception as exc:  # not a DVC project, a config DVC cannot read
        done.append(f"WARNING: DVC remote not moved to {remote}: {exc}")
{%- endif %}
    return done


def stop_unless_trained(exit_code: int, run_name: str) -> None:
    """Stop the cell unless `train` exited 0, saying what to do (docs/training-faults.md)."""
    run = f"run '{run_name}'"
    advice = {
        2: f"a setting or the data is not valid, or differs from what {run} was started with "
        "(the error above names it); put it back to resume the run, or set run_name to a new "
        "name to train another run (this one keeps its checkpoints)",
        EXIT_BUDGET: f"train.time_budget_minutes ran out; run this cell again to continue {run} "
        "from its newest checkpoint",
        EXIT_LEASE_HELD: f"another session is training {run} (the error above names it); let it "
        "finish, or set run_name to train another run; if that session is gone, run this cell "
        "again: its lease is taken over once its heartbeats have stopped",
        EXIT_LEASE_LOST: f"another session took {run} over while this one trained; this one "
        "stopped and wrote nothing more. Follow the run in that session",
    }
    _stop("Training", exit_code, run, advice)


def stop_unless_swept(exit_code: int, sweep_name: str) -> None:
    """Stop the cell unless `sweep` exited 0, saying what to do; every stop keeps the study."""
    sweep = f"sweep '{sweep_name}'"
    advice = {
        1: "the hardware or the storage failed (the error above says which); fix it, then run "
        "this cell again: the study goes on where it stopped",
        2: "a setting, the search space or the data is not valid (the error above names it); "
        "fix it and run this cell again, or set sweep_name to start another study",
        EXIT_BUDGET: f"sweep.time_budget_minutes ran out; {sweep} keeps its trials: run this "
        "cell again to go on",
        EXIT_LEASE_HELD: f"another session holds {sweep} or a run of its trials (the error above "
        "names it); let it finish, or set sweep_storage to a database URL to share the study; "
        "only if that session is gone, set take_over = True and run this cell again",
        EXIT_LEASE_LOST: f"another session took {sweep} over; this one saved its trial's "
        "checkpoint and stopped. Follow the sweep in that session",
    }
    _stop("Sweep", exit_code, f"the trial of {sweep}", advice)


def _stop(what: str, exit_code: int, saver: str, advice: dict[int, str]) -> None:
    advice = {
        1: "the hardware or the storage failed (the error above says which); fix it, then run "
        "this cell again",
        # Whether the stop's checkpoint was saved (a full Drive) is the line above's to say.
        130: f"interrupted; run this cell again to resume {saver} from its newest checkpoint",
        143: f"stopped (SIGTERM); run this cell again to resume {saver} from its newest checkpoint",
        **advice,
    }
    if exit_code:
        said = advice.get(exit_code, "see the message above")
        raise NotebookStop(f"{what} stopped (exit code {exit_code}): {said}.")


def sync_run_records(runs: Path, kept: Path) -> int:
    """Copy each run folder that one side lacks to the other; return how many were copied."""
    runs.mkdir(parents=True, exist_ok=True)
    kept.mkdir(parents=True, exist_ok=True)
    copied = 0
    for src, dst in ((runs, kept), (kept, runs)):
        for run in sorted(p for p in src.iterdir() if (p / "manifest.json").is_file()):
            if not (dst / run.name).exists():
                # Renamed when whole: a half-copied run never looks like a run record.
                partial = dst / f".{run.name}.partial"
                shutil.rmtree(partial, ignore_errors=True)
                try:
                    shutil.copytree(run, partial)
                except OSError:
                    shutil.rmtree(partial, ignore_errors=True)
                    raise
                partial.rename(dst / run.name)
                copied += 1
    return copied


def push_stage(project_dir: Path, stage: str, overrides: dict[str, Any] | None = None) -> bool:
    """Commit `stage` to dvc.lock and push it with its run cache; True when pushed. A run whose
    `overrides` differ from params.yaml is not the stage: a note says which. With no default
    remote (`dvc remote default` exits 1) the stage is only committed, and a note says so."""
    project_dir = Path(project_dir)
    saved = flat(yaml.safe_load((project_dir / "params.yaml").read_text(encoding="utf-8")))
    differ = [
        f"{key}={value!r} (params.yaml: {saved.get(key)!r})"
        for key, value in (overrides or {}).items()
        if saved.get(key) != value
    ]
    if differ:
        print(
            f"NOTE: not recorded in DVC: this run used {', '.join(differ)}; put the values in "
            f"params.yaml to make it the `{stage}` stage"
        )
        return False
    for args in (["commit", "--force", "--quiet", stage], ["push", "--run-cache", stage]):
        run = _dvc(project_dir, *args)
        if run.returncode == 0:
            continue
        if args[0] == "push" and _dvc(project_dir, "remote", "default").returncode == 1:
            print(  # a project baked without one (dvc_remote=none): nothing went wrong
                f"DVC: `{stage}` recorded in dvc.lock (commit dvc.lock); the project has no "
                "default DVC remote to push it to (docs/data.md, Remote storage for data and "
                "models)"
            )
            return False
        lines = run.stderr.strip().splitlines() or ["no message"]
        # DVC's error is its last ERROR line and the lines under it (a hint), up to a blank line
        # (then DVC's "Having any troubles?" footer).
        errors = (i for i, line in enumerate(lines) if line.startswith("ERROR:"))
        error = itertools.takewhile(bool, lines[max(errors, default=-1) :])
        reason = " ".join(line.strip() for line in error)
        print(f"WARNING: `dvc {' '.join(args)}` failed: {reason}")
        return False
    print(f"DVC: `{stage}` recorded in dvc.lock and pushed with its run cache (commit dvc.lock)")
    return True


def _dvc(project_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """DVC's command line in `project_dir`, with its output captured."""
    command = [sys.executable, "-m", "dvc", *args]
    return subprocess.run(command, cwd=project_dir, capture_output=True, text=True)


def run_notebooks(
    project_dir: Path,
    parameters: list[str] | None = None,
    only: list[str] | None = None,
    timeout_s: int = 1800,
) -> list[Path]:
    """Run the numbered notebooks (`only`: by prefix) with the `-p` they declare; the reports."""
    # About 2 s to import, for this command only.
    import papermill
    from nbconvert import HTMLExporter

    # The kernels' debugger would warn about frozen modules at each start, on this terminal.
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    project_dir = Path(project_dir).resolve()
    notebooks = sorted((project_dir / "notebooks").glob(PATTERN))
    if not notebooks:
        raise NotebookError(f"no notebooks matching {PATTERN} in {project_dir / 'notebooks'}")
    chosen = [nb for nb in notebooks if not only or nb.name.startswith(tuple(only))]
    if not chosen:
        raise ConfigError(
            f"--only {' '.join(only or [])}: no notebook starts with it (they are: "
            f"{', '.join(nb.name for nb in notebooks)}; example: --only 01 02)"
        )
    declared = {nb: papermill.inspect_notebook(str(nb)) for nb in chosen}
    every = {name: found for names in declared.values() for name, found in names.items()}
    parameters = typed_parameters(parameters or [], every)
    out_dir = project_dir / REPORTS
    out_dir.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter()
    reports = []
    for nb in chosen:
        executed = out_dir / nb.name
        started = time.monotonic()
        print(f"Running {nb.relative_to(project_dir)} ...", flush=True)
        try:
            papermill.execute_notebook(
                str(nb),
                str(executed),
                parameters={k: v for k, v in parameters.items() if k in declared[nb]},
                cwd=str(nb.parent),
                kernel_name="python3",
                progress_bar=False,
                execution_timeout=timeout_s,
            )
            failed = None
        except papermill.PapermillExecutionError as exc:
            failed = exc
        html, _ = exporter.from_filename(str(executed))
        report = executed.with_suffix(".html")
        report.write_text(html, encoding="utf-8")
        reports.append(report)
        if failed is not None:
            raise NotebookError(
                f"{nb.name} failed in cell {failed.exec_count}: {failed.ename}: {failed.evalue} "
                f"(see {report})"
            )
        print(f"  {time.monotonic() - started:.0f} s -> {report.relative_to(project_dir)}")
    return reports


def typed_parameters(items: list[str], declared: dict[str, Any]) -> dict[str, Any]:
    """`-p NAME=VALUE` items typed as papermill's `declared` says; a typo is a ConfigError."""
    typed = {}
    for item in items:
        name, value = parse_assignment(item, "-p", "epochs=1")
        if name not in declared:
            raise ConfigError(
                f"-p {name}: no notebook has this parameter (they have: "
                f"{', '.join(sorted(declared))}; example: -p epochs=1)"
            )
        kind = declared[name]["inferred_type_name"]
        if kind in PARAMETER_TYPES:
            text = item.partition("=")[2].strip()
            read, words, example = PARAMETER_TYPES[kind]
            try:
                value = read(text)
            except (KeyError, ValueError):
                raise ConfigError(
                    f"-p {name}={text}: {name} takes {words} (example: -p {name}={example})"
                ) from None
        typed[name] = value
    return typed
