"""`vertex [--dry-run]`: the same training as a Vertex AI custom job (docs/scaling.md).

Writes a CustomJobSpec (Vertex AI v1 REST field names) from `vertex.*`, then submits it with
gcloud or prints the command. Pool 0 is the chief, pool 1 the workers: Vertex AI's `TF_CONFIG`
makes `distribute.strategy: auto` pick MultiWorkerMirroredStrategy."""

from __future__ import annotations

import copy
import hashlib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ..config import ConfigError, Params, VertexConfig
from ..core.files import atomic_write

PACKAGE = "{{ cookiecutter.module_name }}"
PROJECT_SLUG = "{{ cookiecutter.project_slug }}"
IMAGE_EXAMPLE = f"us-central1-docker.pkg.dev/my-gcp-project/ml/{PROJECT_SLUG}:0.1.0"


def _bad(key: str, problem: str, example: str) -> ConfigError:
    return ConfigError(f"vertex.{key}: {problem} (example: --set vertex.{key}={example})")


def validate(cfg: VertexConfig, run_name: str) -> None:
    """ConfigError on the job's shape, bucket or code source; machine, accelerator and region
    names are the service's to check (gcloud's error, on submission)."""
    if len(display_name(cfg, run_name)) > 128:
        raise _bad("display_name", "at most 128 characters", f"{PROJECT_SLUG}-baseline")
    if cfg.accelerator_type and cfg.accelerator_count < 1:
        raise _bad("accelerator_count", f"{cfg.accelerator_type} needs at least 1", "1")
    if not cfg.accelerator_type and cfg.accelerator_count:
        raise _bad("accelerator_count", "no accelerator_type is set, so it must be 0", "0")
    if cfg.chief_replicas != 1:
        raise _bad("chief_replicas", "worker pool 0 is the chief: exactly 1 replica", "1")
    if cfg.accelerator_type.startswith("TPU_") and cfg.worker_replicas:
        raise _bad("worker_replicas", "a TPU job runs on one TPU VM here, so it must be 0", "0")
    if not _gs_url(cfg.bucket):
        why = f"{cfg.bucket!r} is not a gs://bucket[/folder] URL (a bucket's name is lower case)"
        why = why if cfg.bucket else "required"
        raise _bad(
            "bucket", f"{why}: checkpoints and results go there", f"gs://my-bucket/{PROJECT_SLUG}"
        )
    if bool(cfg.image_uri) == bool(cfg.python_package_uri):
        both = "set it or vertex.python_package_uri, not both"
        why = both if cfg.image_uri else "required, or vertex.python_package_uri instead"
        raise _bad("image_uri", why, IMAGE_EXAMPLE)
    if cfg.image_uri and not _image_name(cfg.image_uri):
        raise _bad(
            "image_uri", f"{cfg.image_uri!r} is not a registry/path[:tag] image name", IMAGE_EXAMPLE
        )
    package = cfg.python_package_uri
    if package and not (_gs_url(package) and package.endswith((".tar.gz", ".whl"))):
        raise _bad(
            "python_package_uri",
            f"{package!r} is not a gs:// .tar.gz or .whl",
            f"gs://my-bucket/dist/{PACKAGE}-0.1.0.tar.gz",
        )
    if package and not _image_name(cfg.executor_image_uri):
        raise _bad(
            "executor_image_uri",
            "a Python package runs in a prebuilt training image; give its name",
            "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest",
        )


def _gs_url(text: str) -> bool:
    """`gs://bucket[/folder]`, the bucket named as Cloud Storage allows (lower case)."""
    bucket = re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]", text[5:].split("/")[0])
    return text.startswith("gs://") and bucket is not None and " " not in text


def _image_name(text: str) -> bool:
    """`registry/path[:tag]`, no spaces: the registry checks the rest."""
    return "/" in text.strip("/") and not any(c.isspace() for c in text)


def display_name(cfg: VertexConfig, run_name: str) -> str:
    """`vertex.display_name`, else `<project_slug>-<run_name>`."""
    return cfg.display_name or f"{PROJECT_SLUG}-{run_name}"


def job_spec(
    params: Params,
    forwarded: list[str] | None = None,
    command: list[str] | None = None,
    params_at: str = "",
) -> dict[str, Any]:
    """The CustomJobSpec running `command` (default `train`) with the `forwarded` `--set` items;
    a Python-package job reads params.yaml at `params_at`. Validate first."""
    cfg = params.vertex
    bucket = cfg.bucket.rstrip("/")
    args = list(command or ["train"])
    if not cfg.image_uri:
        # A prebuilt image has no params.yaml: the job reads ours through Vertex AI's /gcs mount.
        args += ["--params", "/gcs/" + params_at.removeprefix("gs://")]
    for item in forwarded or []:
        args += ["--set", item]
    env = [
        {"name": "PROJECT_STORAGE_DIR", "value": bucket},
        {"name": "PROJECT_RESULTS_DIR", "value": f"{bucket}/results"},
    ]
    machine: dict[str, Any] = {"machineType": cfg.machine_type}
    if cfg.accelerator_type:
        machine["acceleratorType"] = cfg.accelerator_type
        machine["acceleratorCount"] = cfg.accelerator_count
    run = {"args": args, "env": env}
    if cfg.image_uri:  # its ENTRYPOINT is `python -m <module>`; args pick the command
        program: dict[str, Any] = {"containerSpec": {"imageUri": cfg.image_uri, **run}}
    else:
        program = {
            "pythonPackageSpec": {
                "executorImageUri": cfg.executor_image_uri,
                "packageUris": [cfg.python_package_uri],
                "pythonModule": PACKAGE,
                **run,
            }
        }
    # Workers on the chief's machines: MultiWorkerMirroredStrategy waits for the slowest replica.
    # Each pool its own copies: YAML would write shared parts as &anchors and *aliases.
    replicas = [cfg.chief_replicas, *([cfg.worker_replicas] if cfg.worker_replicas else [])]
    pools = [
        {"machineSpec": copy.deepcopy(machine), "replicaCount": n, **copy.deepcopy(program)}
        for n in replicas
    ]
    spec: dict[str, Any] = {
        "workerPoolSpecs": pools,
        "baseOutputDirectory": {"outputUriPrefix": bucket},
    }
    scheduling: dict[str, Any] = {}
    if cfg.worker_replicas:
        # A replaced worker cannot rejoin; every replica resumes from the chief's checkpoint.
        scheduling["restartJobOnWorkerRestart"] = True
    if cfg.spot:
        scheduling["strategy"] = "SPOT"
    if scheduling:
        spec["scheduling"] = scheduling
    if cfg.service_account:
        spec["serviceAccount"] = cfg.service_account
    return spec


def params_uri(cfg: VertexConfig, content: bytes) -> str:
    """`<bucket>/params-<hash>.yaml`: a later upload never changes what a queued job reads."""
    return f"{cfg.bucket.rstrip('/')}/params-{hashlib.sha256(content).hexdigest()[:12]}.yaml"


def forwarded_overrides(overrides: list[str]) -> list[str]:
    """The `--set` items for training: not `vertex.*`, nor `sweep.storage` (a local database)."""
    return [o for o in overrides if not o.strip().startswith(("vertex.", "sweep.storage"))]


def run_vertex(
    params: Params,
    project_dir: Path,
    dry_run: bool = False,
    output: str | None = None,
    overrides: list[str] | None = None,
    params_file: Path | None = None,
    tuning_job: Callable[[Params, dict[str, Any]], dict[str, Any]] | None = None,
) -> int:
    """Validate, write the job file (`tuning_job`: tuning.py's, around it), print or run gcloud."""
    cfg = params.vertex
    validate(cfg, params.run_name)
    forwarded = forwarded_overrides(overrides or [])
    upload = Path(params_file or project_dir / "params.yaml")
    if cfg.image_uri and upload.name != "params.yaml":  # the job would train the image's own
        raise ConfigError(
            f"--params {upload}: a job of vertex.image_uri trains the params.yaml built into the "
            "image; pass what differs with --set (example: --set train.epochs=50)"
        )
    params_at = "" if cfg.image_uri else params_uri(cfg, upload.read_bytes())
    if tuning_job is None:
        job = job_spec(params, forwarded, params_at=params_at)
        group, kind, name = "custom-jobs", "CustomJobSpec", display_name(cfg, params.run_name)
        path = project_dir / (output or cfg.output)
    else:
        trial = job_spec(
            params, forwarded, ["train", "--sweep-trial", params.sweep.name], params_at
        )
        job = tuning_job(params, trial)
        group, kind, name = "hp-tuning-jobs", "HyperparameterTuningJob", job["displayName"]
        path = project_dir / (output or f"results/vertex/hpt-{params.sweep.name}.yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    header = f"# Vertex AI {kind} written by `python -m {PACKAGE} vertex`; submit with "
    header += f"`gcloud ai {group} create --config=...`.\n"
    atomic_write(path, header + yaml.safe_dump(job, sort_keys=False))
    project = [f"--project={cfg.project}"] if cfg.project else []
    create = ["gcloud", "ai", group, "create", f"--region={cfg.region}", f"--display-name={name}"]
    commands = [[*create, f"--config={path}", *project]]
    if params_at:  # first put params.yaml where a Python-package job reads it
        commands.insert(0, ["gcloud", "storage", "cp", str(upload), params_at, *project])
    print(f"Wrote {path}: {_summary(params, tuning_job is not None)}", flush=True)
    if dry_run:
        for cmd in commands:
            print(shlex.join(cmd), flush=True)
        return 0
    if shutil.which("gcloud") is None:
        raise ConfigError(
            "gcloud is not on PATH: install the Google Cloud CLI "
            "(https://cloud.google.com/sdk/docs/install) or print the command with --dry-run"
        )
    return submit(commands)


def _summary(params: Params, tuning: bool) -> str:
    cfg, sweep = params.vertex, params.sweep
    gear = f"{cfg.accelerator_count} x {cfg.accelerator_type}" if cfg.accelerator_type else ""
    trials = f"{sweep.n_trials} trials of '{sweep.name}', {cfg.parallel_trials} at once, each "
    return (
        f"{trials if tuning else ''}{1 + cfg.worker_replicas} replica(s) of {cfg.machine_type} "
        f"with {gear or 'no accelerator'} (1 chief + {cfg.worker_replicas} worker(s)); "
        f"checkpoints and results in {cfg.bucket}"
    )


def submit(commands: list[list[str]]) -> int:
    """Run the commands in turn; the first that fails stops them, its error in one line."""
    for cmd in commands:
        print(f"$ {shlex.join(cmd)}", flush=True)
        # No prompt (stdin is not a terminal): its default answer, and an error if that is no.
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if not done.returncode:
            sys.stderr.write(done.stderr)  # its progress and the job's name
            continue
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        said = [line for line in lines if line.startswith("ERROR:")] or lines[-1:] or ["(silent)"]
        print(f"error: {' '.join(cmd[:4])} failed: {said[0]}", file=sys.stderr, flush=True)
        return done.returncode
    return 0
