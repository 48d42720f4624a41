"""`python -m <module> vertex [--dry-run]`: the same training, as a Vertex AI custom job.

From `vertex.*` in params.yaml this writes a CustomJobSpec (the YAML file that
`gcloud ai custom-jobs create --config` reads), then submits it with gcloud, or with `--dry-run`
prints the exact gcloud command. Every field is checked first, so a typo costs a second here
instead of a failed job (and its queueing time) in the cloud.

How the job runs the same code: worker pool 0 is the chief (exactly one replica) and pool 1 the
workers. Vertex AI sets `TF_CONFIG` on each replica ({"cluster": {"chief": [...], "worker": [...]},
"task": {"type": "chief"|"worker", "index": i}}), so `distribute.strategy: auto` picks
MultiWorkerMirroredStrategy, and only the chief writes checkpoints and results. Those go to the
bucket: `PROJECT_STORAGE_DIR` and `PROJECT_RESULTS_DIR` are gs:// URLs, read through the
Cloud Storage FUSE mount that Vertex AI provides at /gcs/<bucket> (see storage.py).

Field names follow the Vertex AI v1 REST reference (CustomJobSpec, WorkerPoolSpec, MachineSpec,
ContainerSpec, PythonPackageSpec, GcsDestination).
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from ..config import ConfigError, Params, VertexConfig
from ..core.files import atomic_write

PACKAGE = "{{ cookiecutter.module_name }}"
PROJECT_SLUG = "{{ cookiecutter.project_slug }}"

# AcceleratorType values accepted by Vertex AI v1 (K80 has reached end of support).
GPU_TYPES = (
    "NVIDIA_TESLA_T4",
    "NVIDIA_L4",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
    "NVIDIA_GB200",
    "NVIDIA_RTX_PRO_6000",
)
TPU_TYPES = ("TPU_V2", "TPU_V3", "TPU_V4_POD", "TPU_V5_LITEPOD")
ACCELERATOR_TYPES = GPU_TYPES + TPU_TYPES

# Machine series -> the accelerators it can carry (an empty tuple: CPU only). The accelerator
# series come with their GPUs built in; N1 is the one general-purpose series that takes GPUs.
MACHINE_ACCELERATORS: dict[str, tuple[str, ...]] = {
    "n1": ("NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_P4"),
    "g2": ("NVIDIA_L4",),
    "g4": ("NVIDIA_RTX_PRO_6000",),
    "a2-highgpu": ("NVIDIA_TESLA_A100",),
    "a2-megagpu": ("NVIDIA_TESLA_A100",),
    "a2-ultragpu": ("NVIDIA_A100_80GB",),
    "a3-highgpu": ("NVIDIA_H100_80GB",),
    "a3-megagpu": ("NVIDIA_H100_MEGA_80GB",),
    "a3-ultragpu": ("NVIDIA_H200_141GB",),
    "a4-highgpu": ("NVIDIA_B200",),
    "a4x-highgpu": ("NVIDIA_GB200",),
    "cloud-tpu": ("TPU_V2", "TPU_V3"),
    "ct4p": ("TPU_V4_POD",),
    "ct5lp": ("TPU_V5_LITEPOD",),
    "n2": (),
    "n2d": (),
    "e2": (),
    "c2": (),
    "c2d": (),
    "c3": (),
    "m1": (),
}
# GPUs per G2 machine (the L4 count is fixed by the machine size).
G2_GPUS = {4: 1, 8: 1, 12: 1, 16: 1, 32: 1, 24: 2, 48: 4, 96: 8}

_PROJECT = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
_REGION = re.compile(r"[a-z]+(-[a-z]+)+[0-9]+")
_MACHINE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)+")
_BUCKET = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/[^\s]*)?")
_IMAGE = re.compile(
    r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)+"
    r"(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?"
)
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[a-z]+")


def _bad(key: str, problem: str, example: str) -> ConfigError:
    return ConfigError(f"vertex.{key}: {problem} (example: --set vertex.{key}={example})")


def machine_series(machine_type: str) -> str | None:
    """The key of MACHINE_ACCELERATORS that `machine_type` belongs to, or None."""
    for series in sorted(MACHINE_ACCELERATORS, key=len, reverse=True):
        if machine_type == series or machine_type.startswith(series + "-"):
            return series
    return None


def expected_accelerators(machine_type: str) -> int | None:
    """How many accelerators `machine_type` comes with, when its name fixes it."""
    if match := re.fullmatch(r"a[0-9]x?-[a-z]+gpu-([0-9]+)g(-[a-z]+)?", machine_type):
        return int(match.group(1))
    if match := re.fullmatch(r"g2-standard-([0-9]+)", machine_type):
        return G2_GPUS.get(int(match.group(1)))
    if match := re.fullmatch(r"ct5lp-hightpu-([0-9]+)t", machine_type):
        return int(match.group(1))
    return None


def validate(cfg: VertexConfig, run_name: str) -> None:
    """Raise ConfigError naming the first bad `vertex.*` key; return None when all are good."""
    _check_names(cfg, run_name)
    _check_machine(cfg)
    _check_pools(cfg)
    _check_code(cfg)
    _check_bucket(cfg)


def _check_names(cfg: VertexConfig, run_name: str) -> None:
    """vertex.project, region and the job's display name."""
    if cfg.project and not _PROJECT.fullmatch(cfg.project):
        raise _bad("project", f"{cfg.project!r} is not a Google Cloud project ID", "my-gcp-project")
    if not _REGION.fullmatch(cfg.region):
        raise _bad("region", f"{cfg.region!r} is not a region name", "us-central1")
    name = display_name(cfg, run_name)
    if len(name) > 128:
        raise _bad(
            "display_name", f"{len(name)} characters, at most 128", f"{PROJECT_SLUG}-baseline"
        )


def _check_machine(cfg: VertexConfig) -> None:
    """vertex.machine_type with its accelerator type and count."""
    if not _MACHINE.fullmatch(cfg.machine_type):
        raise _bad("machine_type", f"{cfg.machine_type!r} is not a machine type", "g2-standard-8")
    series = machine_series(cfg.machine_type)
    if series is None:
        known = ", ".join(sorted(MACHINE_ACCELERATORS))
        raise _bad(
            "machine_type",
            f"unknown series in {cfg.machine_type!r} (known: {known})",
            "n1-standard-8",
        )
    allowed = MACHINE_ACCELERATORS[series]
    acc, count = cfg.accelerator_type, cfg.accelerator_count
    if acc == "NVIDIA_TESLA_K80":
        raise _bad("accelerator_type", "the K80 has reached end of support", "NVIDIA_TESLA_T4")
    if acc and acc not in ACCELERATOR_TYPES:
        raise _bad(
            "accelerator_type",
            f"{acc!r} is not a Vertex AI accelerator (one of {', '.join(ACCELERATOR_TYPES)}; "
            "empty for CPU only)",
            "NVIDIA_TESLA_T4",
        )
    if acc and not allowed:
        raise _bad(
            "accelerator_type",
            f"{cfg.machine_type} takes no accelerator; leave it empty or pick a GPU machine",
            "''",
        )
    if allowed and not acc and series != "n1":
        raise _bad("accelerator_type", f"{cfg.machine_type} comes with {allowed[0]}", allowed[0])
    if acc and acc not in allowed:
        raise _bad(
            "accelerator_type",
            f"{cfg.machine_type} takes {' / '.join(allowed)}, not {acc}",
            allowed[0],
        )
    if acc and count < 1:
        raise _bad("accelerator_count", f"{acc} needs a count of at least 1", "1")
    if not acc and count:
        raise _bad("accelerator_count", "no accelerator_type is set, so it must be 0", "0")
    fixed = expected_accelerators(cfg.machine_type)
    if acc and fixed is not None and count != fixed:
        raise _bad(
            "accelerator_count",
            f"{cfg.machine_type} has {fixed} {acc}, got {count}",
            str(fixed),
        )
    if series == "n1" and acc and count not in (1, 2, 4, 8):
        raise _bad("accelerator_count", f"N1 machines take 1, 2, 4 or 8 GPUs, got {count}", "1")


def _check_pools(cfg: VertexConfig) -> None:
    """The worker pools: one chief; no extra workers on a TPU VM."""
    acc = cfg.accelerator_type
    if cfg.chief_replicas != 1:
        raise _bad(
            "chief_replicas",
            f"worker pool 0 is the chief and needs exactly 1 replica, got {cfg.chief_replicas}",
            "1",
        )
    if acc in TPU_TYPES and cfg.worker_replicas:
        raise _bad(
            "worker_replicas",
            "a TPU job here runs on one TPU VM (TPUStrategy on the local TPU), so it must be 0",
            "0",
        )


def _check_code(cfg: VertexConfig) -> None:
    """Where the code comes from: a container image or a Python package with its image."""
    if bool(cfg.image_uri) == bool(cfg.python_package_uri):
        what = "both are set" if cfg.image_uri else "neither is set"
        raise _bad(
            "image_uri",
            f"set the container image or vertex.python_package_uri, not both ({what})",
            f"{cfg.region}-docker.pkg.dev/my-gcp-project/ml/{PROJECT_SLUG}:0.1.0",
        )
    if cfg.image_uri and not _IMAGE.fullmatch(cfg.image_uri):
        raise _bad(
            "image_uri",
            f"{cfg.image_uri!r} is not a registry/path[:tag] image name",
            f"{cfg.region}-docker.pkg.dev/my-gcp-project/ml/{PROJECT_SLUG}:0.1.0",
        )
    if cfg.python_package_uri:
        if not _BUCKET.fullmatch(cfg.python_package_uri) or not cfg.python_package_uri.endswith(
            (".tar.gz", ".whl")
        ):
            raise _bad(
                "python_package_uri",
                f"{cfg.python_package_uri!r} is not a gs:// .tar.gz or .whl",
                f"gs://my-bucket/dist/{PACKAGE}-0.1.0.tar.gz",
            )
        if not cfg.executor_image_uri or not _IMAGE.fullmatch(cfg.executor_image_uri):
            raise _bad(
                "executor_image_uri",
                "a Python package runs in a prebuilt training image; give its name",
                "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest",
            )


def _check_bucket(cfg: VertexConfig) -> None:
    """vertex.bucket and the service account."""
    if not cfg.bucket:
        raise _bad(
            "bucket", "required: checkpoints and results go there", f"gs://my-bucket/{PROJECT_SLUG}"
        )
    if not _BUCKET.fullmatch(cfg.bucket):
        raise _bad(
            "bucket",
            f"{cfg.bucket!r} is not a gs://bucket[/folder] URL",
            f"gs://my-bucket/{PROJECT_SLUG}",
        )
    if cfg.service_account and not _EMAIL.fullmatch(cfg.service_account):
        raise _bad(
            "service_account",
            f"{cfg.service_account!r} is not a service account email",
            "trainer@my-gcp-project.iam.gserviceaccount.com",
        )


def display_name(cfg: VertexConfig, run_name: str) -> str:
    """The job's name in the console: `vertex.display_name`, else `<project_slug>-<run_name>`."""
    return cfg.display_name or f"{PROJECT_SLUG}-{run_name}"


def job_spec(
    params: Params, forwarded: list[str] | None = None, command: list[str] | None = None
) -> dict[str, Any]:
    """The CustomJobSpec for `params` (validate first). `forwarded` are `--set` overrides that
    the job's `train` gets too, so `vertex --set train.epochs=50` trains 50 epochs there.
    `command`: the package's command and its options (default `train`)."""
    cfg = params.vertex
    bucket = cfg.bucket.rstrip("/")
    args = list(command or ["train"])
    if not cfg.image_uri:
        # A prebuilt training image has no params.yaml: `run_vertex` uploads ours to the bucket.
        args += ["--params", fuse_path(params_uri(cfg))]
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
    if cfg.image_uri:
        # The image's ENTRYPOINT is `python -m <module>`; args pick the command.
        program: dict[str, Any] = {
            "containerSpec": {"imageUri": cfg.image_uri, "args": args, "env": env}
        }
    else:
        program = {
            "pythonPackageSpec": {
                "executorImageUri": cfg.executor_image_uri,
                "packageUris": [cfg.python_package_uri],
                "pythonModule": PACKAGE,
                "args": args,
                "env": env,
            }
        }
    pools = [{"machineSpec": machine, "replicaCount": cfg.chief_replicas, **program}]
    if cfg.worker_replicas:
        # Same machines as the chief: MultiWorkerMirroredStrategy keeps one full copy of the
        # model per replica and waits for the slowest, so unequal workers only waste money.
        # (Deep copies: YAML would otherwise write the shared parts as &anchors and *aliases.)
        pools.append(
            {
                "machineSpec": copy.deepcopy(machine),
                "replicaCount": cfg.worker_replicas,
                **copy.deepcopy(program),
            }
        )
    spec: dict[str, Any] = {
        "workerPoolSpecs": pools,
        # Vertex AI also exports AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR
        # under this prefix; our checkpoints land in <bucket>/checkpoints/<run_name> either way.
        "baseOutputDirectory": {"outputUriPrefix": bucket},
    }
    scheduling: dict[str, Any] = {}
    if cfg.worker_replicas:
        # MultiWorkerMirroredStrategy cannot continue with a replaced worker; restarting the
        # whole job is safe because every replica resumes from the chief's last checkpoint.
        scheduling["restartJobOnWorkerRestart"] = True
    if cfg.spot:
        scheduling["strategy"] = "SPOT"
    if scheduling:
        spec["scheduling"] = scheduling
    if cfg.service_account:
        spec["serviceAccount"] = cfg.service_account
    return spec


def params_uri(cfg: VertexConfig) -> str:
    """Where a Python-package job reads params.yaml: `<bucket>/params.yaml`."""
    return f"{cfg.bucket.rstrip('/')}/params.yaml"


def fuse_path(uri: str) -> str:
    """`gs://bucket/x` as Vertex AI's Cloud Storage FUSE mount shows it: `/gcs/bucket/x`."""
    return "/gcs/" + uri[len("gs://") :]


def upload_command(cfg: VertexConfig, params_file: Path) -> list[str]:
    """The `gcloud storage cp` that puts params.yaml where a Python-package job reads it."""
    cmd = ["gcloud", "storage", "cp", str(params_file), params_uri(cfg)]
    return cmd + ([f"--project={cfg.project}"] if cfg.project else [])


def gcloud_command(cfg: VertexConfig, run_name: str, config_path: Path) -> list[str]:
    """The `gcloud ai custom-jobs create` command that submits the spec at `config_path`."""
    cmd = [
        "gcloud",
        "ai",
        "custom-jobs",
        "create",
        f"--region={cfg.region}",
        f"--display-name={display_name(cfg, run_name)}",
        f"--config={config_path}",
    ]
    if cfg.project:
        cmd.append(f"--project={cfg.project}")
    return cmd


def write_spec(spec: dict[str, Any], path: Path, what: str = "") -> None:
    """Write `spec` as YAML, atomically (temp file + rename); `what` replaces the first line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        (
            what
            or "# Vertex AI CustomJobSpec written by `python -m "
            f"{PACKAGE} vertex`; submit with `gcloud ai custom-jobs create --config=...`."
        )
        + "\n"
        + yaml.safe_dump(spec, sort_keys=False, default_flow_style=False)
    )
    atomic_write(path, text)


def forwarded_overrides(overrides: list[str]) -> list[str]:
    """The `--set` items meant for training (every key outside `vertex.`)."""
    return [o for o in overrides if not o.strip().startswith("vertex.")]


def run_vertex(
    params: Params,
    project_dir: Path,
    dry_run: bool = False,
    output: str | None = None,
    overrides: list[str] | None = None,
    params_file: Path | None = None,
    sweep: bool = False,
) -> int:
    """Validate, write the spec, then print (dry run) or run the gcloud commands. `sweep`: a
    hyperparameter tuning job for `sweep:` (tuning.py) instead of one custom job."""
    cfg = params.vertex
    validate(cfg, params.run_name)
    forwarded = forwarded_overrides(overrides or [])
    if sweep:
        from .tuning import tuning_spec

        path, job, commands = tuning_spec(params, project_dir, output, forwarded)
        spec = job["trialJobSpec"]
    else:
        path = Path(output or cfg.output)
        if not path.is_absolute():
            path = project_dir / path
        spec = job_spec(params, forwarded)
        write_spec(spec, path)
        commands = [gcloud_command(cfg, params.run_name, path)]
    if not cfg.image_uri:
        commands.insert(0, upload_command(cfg, params_file or project_dir / "params.yaml"))
    pools = spec["workerPoolSpecs"]
    machine = pools[0]["machineSpec"]
    gear = (
        f"{machine['acceleratorCount']} x {machine['acceleratorType']}"
        if "acceleratorType" in machine
        else "no accelerator"
    )
    replicas = sum(p["replicaCount"] for p in pools)
    trials = (
        f"{params.sweep.n_trials} trials of '{params.sweep.name}', "
        f"{cfg.parallel_trials} at once, each "
        if sweep
        else ""
    )
    print(
        f"Wrote {path}: {trials}{replicas} replica(s) of {cfg.machine_type} with {gear} "
        f"(1 chief + {cfg.worker_replicas} worker(s)); checkpoints and results in {cfg.bucket}",
        flush=True,
    )
    if dry_run:
        for cmd in commands:
            print(shlex.join(cmd), flush=True)
        return 0
    if shutil.which("gcloud") is None:
        raise ConfigError(
            "gcloud is not on PATH: install the Google Cloud CLI "
            "(https://cloud.google.com/sdk/docs/install) or print the command with --dry-run"
        )
    for cmd in commands:
        print(f"$ {shlex.join(cmd)}", flush=True)
        code = subprocess.run(cmd, check=False).returncode
        if code:
            return code
    return 0
