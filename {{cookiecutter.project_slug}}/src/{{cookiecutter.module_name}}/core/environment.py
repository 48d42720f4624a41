"""What a result was computed with: interpreter, packages, TensorFlow build, devices, git, data.

`python -m <module> env` prints a summary and saves it all to `results/environment.json`; every
run record embeds the same dictionary, so two runs that disagree can be compared field by field.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

from .files import file_sha256, save_json
from .hardware import tpu_signals
from .storage import on_colab, results_root

DATA_MANIFEST = "data/manifest.json"


def collect_environment(project_dir: Path, devices: bool = True) -> dict[str, Any]:
    """Everything about this runtime that can change a result, as a JSON-ready dictionary
    (`devices=False`: without TensorFlow, whose import costs seconds)."""
    tf_info = tensorflow_info() if devices else {"skipped": True}
    gpus = nvidia_gpus() or [{"name": name} for name in tf_info.get("gpus", [])]
    return {
        "collected_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        },
        "colab": {"on_colab": on_colab(), "accelerator": accelerator(gpus, tf_info)},
        "tensorflow": tf_info,
        "gpus": gpus,
        "tpu": tpu_info(tf_info),
        "git": git_info(project_dir),
        "data": data_hashes(project_dir),
        "packages": installed_packages(),
    }


def installed_packages() -> dict[str, str]:
    """Every installed distribution and its version, sorted by name (like `pip freeze`); of one
    installed twice, the copy Python imports: the first on sys.path."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():  # in sys.path's order
        if dist.metadata["Name"]:
            found.setdefault(dist.metadata["Name"].lower().replace("_", "-"), dist.version)
    return dict(sorted(found.items()))


def tensorflow_info() -> dict[str, Any]:
    """TensorFlow and Keras versions, the CUDA/cuDNN TensorFlow was built with, and its devices."""
    try:
        import keras  # here, not at the top: `env` and the run record work without TensorFlow
        import tensorflow as tf
    except ModuleNotFoundError as exc:
        return {"installed": False, "error": str(exc)}
    build = tf.sysconfig.get_build_info()
    return {
        "installed": True,
        "version": tf.__version__,
        "keras_version": keras.__version__,
        "built_with_cuda": bool(build.get("is_cuda_build", False)),
        "cuda_version": build.get("cuda_version"),
        "cudnn_version": build.get("cudnn_version"),
        "devices": [d.name for d in tf.config.list_physical_devices()],
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
    }


def nvidia_gpus() -> list[dict[str, Any]]:
    """Each GPU's name, memory (MB), driver and compute capability, from `nvidia-smi` (or [])."""
    query = "name,memory.total,driver_version,compute_cap"
    command = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20, check=True)
    except (subprocess.SubprocessError, OSError):
        return []
    keys = ("name", "memory_mb", "driver", "compute_capability")
    lines = out.stdout.strip().splitlines()
    gpus = [dict(zip(keys, (p.strip() for p in line.split(",")), strict=True)) for line in lines]
    for gpu in gpus:
        memory = gpu["memory_mb"]
        gpu["memory_mb"] = int(float(memory)) if memory.replace(".", "").isdigit() else None
    return gpus


def tpu_info(tf_info: dict[str, Any]) -> dict[str, Any] | None:
    """The TPU this VM sees (its variables, device files, TensorFlow devices); else None."""
    variables, files = tpu_signals()
    tf_tpus = [d for d in tf_info.get("devices", []) if "TPU" in d]
    if not (variables or files or tf_tpus):
        return None
    return {"env": variables, "device_files": files, "tensorflow_devices": tf_tpus}


def accelerator(gpus: list[dict[str, Any]], tf_info: dict[str, Any]) -> str:
    """'GPU: Tesla T4', 'TPU: v5litepod-1' or 'CPU': what this runtime computes on."""
    if gpus:
        names = sorted({g["name"] for g in gpus})
        return f"GPU: {', '.join(names)}" + (f" x{len(gpus)}" if len(gpus) > 1 else "")
    tpu = tpu_info(tf_info)
    if tpu:
        return "TPU: " + tpu["env"].get("TPU_ACCELERATOR_TYPE", "present")
    return "CPU"


def git_info(project_dir: Path) -> dict[str, Any]:
    """Commit, branch, and whether tracked files differ from it (a dirty tree)."""

    def git(*args: str) -> str | None:
        # --no-optional-locks: `status` does not write the index back, so a status stopped by the
        # timeout (a slow clean filter on a fresh clone) leaves no .git/index.lock behind.
        try:
            run = subprocess.run(
                ["git", "--no-optional-locks", *args],
                cwd=project_dir,
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return run.stdout.rstrip() if run.returncode == 0 else None  # porcelain starts with " "

    commit = git("rev-parse", "HEAD")
    if commit is None:  # not a git clone: in a container, the commit it was built from
        return {
            "commit": os.environ.get("PROJECT_GIT_COMMIT") or None,
            "branch": None,
            "dirty": None,
        }
    status = git("status", "--porcelain", "--untracked-files=no") or ""
    return {
        "commit": commit,
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(status),
        "changed_files": [line[3:] for line in status.splitlines()][:50],
    }


def data_hashes(project_dir: Path) -> dict[str, Any]:
    """The data version: DVC's hashes of every tracked output, and the data manifest's sha256."""
    hashes: dict[str, str] = {}
    lock = project_dir / "dvc.lock"
    if lock.is_file():
        stages = _dvc_file(project_dir, lock, hashes).get("stages", {})
        for stage in stages.values():
            for out in stage.get("outs", []):
                hashes[out["path"]] = out.get("md5") or out.get("hash") or ""
    # `dvc add` files sit beside what they track: look where they go, not through every data file.
    patterns = ("*.dvc", "data/*.dvc", "data/*/*.dvc", "models/*.dvc")
    found = {p for pattern in patterns for p in project_dir.glob(pattern) if p.is_file()}
    for dvc_file in sorted(found):
        for out in _dvc_file(project_dir, dvc_file, hashes).get("outs", []):
            rel = (dvc_file.parent / out["path"]).relative_to(project_dir)
            hashes[str(rel)] = out.get("md5") or out.get("hash") or ""
    manifest = project_dir / DATA_MANIFEST  # what `prepare` writes; None before it ran
    found = {"path": DATA_MANIFEST, "sha256": file_sha256(manifest)} if manifest.is_file() else None
    return {"dvc": hashes, "manifest": found}


def _dvc_file(project_dir: Path, path: Path, hashes: dict[str, str]) -> dict[str, Any]:
    """A DVC file's content; {} and a note in `hashes` when it is no YAML (a git merge left its
    conflict markers there): the run that reads it goes on."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        hashes[str(path.relative_to(project_dir))] = f"unreadable: {str(exc).splitlines()[0]}"
        return {}
    return doc if isinstance(doc, dict) else {}


def summary(env: dict[str, Any]) -> str:
    """A few readable lines: what a reviewer checks first when two results disagree."""
    tf, git, manifest = env["tensorflow"], env["git"], env["data"]["manifest"]
    machine, colab = env["platform"], env["colab"]
    cpus = f"{machine['cpu_count']} CPUs, {machine['memory_gb']} GB RAM"
    lines = [
        ("Python", f"{env['python']['version']} ({env['python']['executable']})"),
        ("Platform", f"{machine['platform']}, {cpus}"),
        ("Colab", f"{'yes' if colab['on_colab'] else 'no'}; accelerator {colab['accelerator']}"),
    ]
    if tf.get("installed"):
        build = f"built with CUDA {tf['cuda_version'] or '-'}, cuDNN {tf['cudnn_version'] or '-'}"
        lines.append(("TensorFlow", f"{tf['version']}, Keras {tf['keras_version']}; {build}"))
        lines.append(("Devices", ", ".join(tf["devices"])))
    elif not tf.get("skipped"):
        lines.append(("TensorFlow", "not installed"))
    for gpu in env["gpus"]:
        capability = gpu.get("compute_capability") or "?"
        memory = f"{gpu.get('memory_mb') or '?'} MB"
        lines.append(("GPU", f"{gpu['name']}, {memory}, compute capability {capability}"))
    if env["tpu"]:
        lines.append(("TPU", str(env["tpu"])))
    state = " (DIRTY: uncommitted changes)" if git["dirty"] else " (clean)"
    commit = f"{git['commit'][:12]} on {git['branch']}{state}" if git["commit"] else "no commit yet"
    lines.append(("Git", commit))
    lines.append(
        ("Data", f"manifest {manifest['path']} sha256 {manifest['sha256'][:12]}")
        if manifest
        else ("Data", "no data manifest yet (run `prepare`)")
    )
    lines += [("", f"{path}: {md5}") for path, md5 in env["data"]["dvc"].items()]
    lines.append(("Packages", f"{len(env['packages'])} installed (every one in the saved file)"))
    return "\n".join(f"{name:<12}{value}" for name, value in lines)


def log_environment(project_dir: Path, output: Path | None = None) -> dict:
    """Collect, print the summary (packages: their count; the list is in the file), save; return
    the dictionary."""
    env = collect_environment(project_dir)
    output = Path(output) if output else results_root(Path(project_dir)) / "environment.json"
    print(summary(env))
    save_json(env, output)
    print(f"Saved {output}")
    return env
