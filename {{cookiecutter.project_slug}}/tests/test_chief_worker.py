"""A chief and a worker, as {% if cookiecutter.vertex_ai %}Vertex AI{% else %}a cloud cluster{% endif %} runs them: TF_CONFIG in the chief/worker form.
{%- if cookiecutter.vertex_ai %}

Each replica gets its own copy of the project (on Vertex AI every replica has its own container)
and shares only the bucket, here a folder standing in for the Cloud Storage FUSE mount at /gcs.
{%- else %}

Each replica gets its own copy of the project (one machine or container each) and shares only
the bucket, here a folder standing in for a Cloud Storage FUSE mount at /gcs.
{%- endif %}
The chief writes checkpoints and results to gs://...; the worker writes nothing it keeps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PARAMS

from {{ cookiecutter.module_name }}.colab.runtime_check import storage_folder
from {{ cookiecutter.module_name }}.config import ConfigError
from {{ cookiecutter.module_name }}.core import storage
from {{ cookiecutter.module_name }}.training.run_record import find_run
from {{ cookiecutter.module_name }}.training.strategy import cluster_role

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]
BUCKET = "gs://test-bucket/runs"
# A tiny run: 1438 training digits / (32 per replica x 2 replicas) = 22 steps per epoch,
# checkpoints at steps 11, 22, 33 and 44, every one of them kept.
TINY = [
    "--set", "train.batch_size=32",
    "--set", "train.checkpoint_every_steps=11",
    "--set", "train.steps_per_execution=11",
    "--set", "train.keep_checkpoints=10",
    "--set", "model.hidden_units=[16]",
]  # fmt: skip


# --- storage: relative and gs:// locations --------------------------------------------------


def test_a_relative_location_is_in_the_project_from_any_folder(tmp_path, monkeypatch):
    """As `data.path`: a command run from notebooks/ (papermill's folder) finds the checkpoints a
    command run from the project folder wrote, and the results."""
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    monkeypatch.chdir(project / "notebooks")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", "storage")
    monkeypatch.setenv("PROJECT_RESULTS_DIR", "out")
    paths = storage.run_paths(project, "r1")
    assert paths.checkpoints == project / "storage/checkpoints/r1"
    assert paths.model_file == project / "out/models/model.keras"
    assert storage_folder(project, {"PROJECT_STORAGE_DIR": "storage"}) == project / "storage"


def test_gs_location_maps_to_the_fuse_mount(tmp_path, monkeypatch):
    monkeypatch.setenv("PROJECT_GCS_MOUNT", str(tmp_path))
    monkeypatch.setenv("PROJECT_STORAGE_DIR", "gs://my-bucket/proj/")
    monkeypatch.setenv("PROJECT_RESULTS_DIR", "gs://my-bucket/proj/results")
    paths = storage.run_paths(tmp_path / "project", "r1", is_chief=True)
    assert paths.checkpoints == tmp_path / "my-bucket/proj/checkpoints/r1"
    assert paths.model_file == tmp_path / "my-bucket/proj/results/models/model.keras"
    assert paths.metrics_file == tmp_path / "my-bucket/proj/results/metrics/train.json"


def test_non_chief_saves_to_scratch_and_restores_from_the_chief(tmp_path, monkeypatch):
    monkeypatch.setenv("PROJECT_GCS_MOUNT", str(tmp_path))
    monkeypatch.setenv("PROJECT_STORAGE_DIR", "gs://my-bucket/proj")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    paths = storage.run_paths(tmp_path / "project", "r1", is_chief=False)
    try:
        assert paths.restore_from == tmp_path / "my-bucket/proj/checkpoints/r1"
        assert paths.checkpoints.is_relative_to(tmp_path / "tmp")
        assert paths.model_file.is_relative_to(tmp_path / "tmp")
    finally:
        paths.cleanup()
    assert not paths.scratch.exists()


def test_gs_location_without_a_mount_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PROJECT_GCS_MOUNT", str(tmp_path / "absent"))
    monkeypatch.setenv("PROJECT_STORAGE_DIR", "gs://my-bucket/proj")
    with pytest.raises(ConfigError) as err:
        storage.storage_root(tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("PROJECT_STORAGE_DIR=gs://my-bucket/proj:")
    assert "example: PROJECT_STORAGE_DIR=" in message


# --- who is the chief -----------------------------------------------------------------------


class _Resolver:
    def __init__(self, task_type: str, task_id: int, cluster: dict) -> None:
        self.task_type, self.task_id, self._cluster = task_type, task_id, cluster

    def cluster_spec(self):
        cluster = self._cluster

        class Spec:
            def as_dict(self):
                return cluster

        return Spec()


def _strategy(class_name: str, task_type: str, task_id: int, cluster: dict) -> object:
    # tf.distribute.MultiWorkerMirroredStrategy objects are of class CollectiveAllReduceStrategy.
    strategy = type(class_name, (), {})()
    strategy.cluster_resolver = _Resolver(task_type, task_id, cluster)
    return strategy


@pytest.mark.parametrize(
    "class_name", ["CollectiveAllReduceStrategy", "MultiWorkerMirroredStrategy"]
)
def test_chief_worker_roles(class_name):
    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"]}
    assert cluster_role(_strategy(class_name, "chief", 0, cluster)) == (True, 3)
    assert cluster_role(_strategy(class_name, "worker", 0, cluster)) == (False, 3)  # a chief exists
    assert cluster_role(_strategy(class_name, "worker", 1, cluster)) == (False, 3)
    workers_only = {"worker": ["b:1", "c:1"]}
    assert cluster_role(_strategy(class_name, "worker", 0, workers_only))[0]  # TF's convention
    assert not cluster_role(_strategy(class_name, "worker", 1, workers_only))[0]


# --- a real chief and worker on 127.0.0.1 ---------------------------------------------------


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _replica_dir(root: Path, name: str) -> Path:
    """A replica's own copy of the project: what the container holds (params.yaml, the code)."""
    folder = root / name
    folder.mkdir()
    shutil.copy(PARAMS, folder / "params.yaml")
    return folder


def _cluster_train(root: Path, run_name: str, epochs: int) -> dict[str, str]:
    """Train with a chief and a worker; return each one's output (both must succeed)."""
    chief_port, worker_port = _free_ports(2)
    cluster = {"chief": [f"127.0.0.1:{chief_port}"], "worker": [f"127.0.0.1:{worker_port}"]}
    procs = {}
    for role in ("chief", "worker"):
        # The form a cloud cluster sets{% if cookiecutter.vertex_ai %} (Vertex AI's){% endif %}, extra keys included.
        tf_config = {
            "cluster": cluster,
            "task": {"type": role, "index": 0},
            "job": {"worker_pool_specs": []},
            "environment": "cloud",
        }
        env = {
            **os.environ,
            "TF_CONFIG": json.dumps(tf_config),
            "PYTHONPATH": os.pathsep.join([str(PROJECT / "src"), os.environ.get("PYTHONPATH", "")]),
            "PROJECT_STORAGE_DIR": BUCKET,
            "PROJECT_RESULTS_DIR": f"{BUCKET}/results",
            "PROJECT_GCS_MOUNT": str(root / "gcs"),
            "TMPDIR": str(root / f"tmp-{role}"),
            "CUDA_VISIBLE_DEVICES": "",
            "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ appearing in the project
        }
        cmd = [sys.executable, "-m", MODULE, "train", *TINY]
        cmd += ["--set", f"run_name={run_name}", "--set", f"train.epochs={epochs}"]
        procs[role] = subprocess.Popen(
            cmd,
            cwd=root / role,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    out = {}
    try:
        for role, proc in procs.items():
            out[role] = proc.communicate(timeout=300)[0]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for role, proc in procs.items():
        assert proc.returncode == 0, f"{role} failed:\n{out.get(role, '')[-3000:]}"
    return out


def _digest(output: str) -> str:
    found = re.findall(r"final weights sha256 ([0-9a-f]{64})", output)
    assert found, output[-2000:]
    return found[-1]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.slow
def test_chief_writes_worker_does_not_and_resume_matches(tmp_path):
    for name in ("gcs", "tmp-chief", "tmp-worker"):
        (tmp_path / name).mkdir()
    for role in ("chief", "worker"):
        _replica_dir(tmp_path, role)
    project_before = _files(PROJECT)
    bucket = tmp_path / "gcs" / "test-bucket" / "runs"
    run_dir = bucket / "checkpoints" / "r1"

    # 1. Two epochs in one go.
    straight = _cluster_train(tmp_path, "r1", epochs=2)
    digest = _digest(straight["chief"])
    assert _digest(straight["worker"]) == digest
    ckpts = sorted(p.name for p in run_dir.iterdir())
    assert ckpts == [f"step-{s:09d}" for s in (11, 22, 33, 44)], ckpts
    record = find_run(bucket / "results")  # train.json's run: its facts and every number
    facts, metrics = record["facts"], record["metrics"]
    assert facts["workers"] == 2 and metrics["steps"] == 44 and facts["weights_sha256"] == digest
    assert (bucket / "results" / "models" / "model.keras").is_file()
    assert list((bucket / "results" / "tensorboard" / "r1").iterdir())

    # The worker kept nothing: its project copy is untouched, its scratch folder is gone, and
    # it never wrote into the bucket (no second writer's temp folders there).
    assert _files(tmp_path / "worker") == {"params.yaml"}
    assert _files(tmp_path / "chief") == {"params.yaml"}  # results went to the bucket
    assert _files(tmp_path / "tmp-worker") == set()
    assert "checkpoints in " + str(tmp_path / "tmp-worker") in straight["worker"]
    assert not list(bucket.rglob(".tmp-*"))

    # 2. As if the job had been stopped at step 22 (preempted, or killed by its time limit):
    #    only the checkpoints up to it are left. The same command resumes both replicas from
    #    the chief's checkpoint in the bucket, and they end with the same weights as before.
    for late in ("step-000000033", "step-000000044"):
        shutil.rmtree(run_dir / late)
    resumed = _cluster_train(tmp_path, "r1", epochs=2)
    for role in ("chief", "worker"):
        assert "Resuming run 'r1' from its checkpoint at step 22" in resumed[role], role
        assert _digest(resumed[role]) == digest, role
    assert _files(tmp_path / "worker") == {"params.yaml"}
    assert _files(tmp_path / "tmp-worker") == set()
    assert _files(PROJECT) == project_before  # nothing written into the real project either
