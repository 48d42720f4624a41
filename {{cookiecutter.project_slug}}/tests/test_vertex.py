"""`vertex`: the Vertex AI CustomJobSpec written from params, its checks and the gcloud command."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import shlex
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import PARAMS, TINY
from optuna.distributions import CategoricalDistribution

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.cloud import tuning, vertex
from {{ cookiecutter.module_name }}.cloud.tuning import parameter_spec, trial_values, tuning_job
from {{ cookiecutter.module_name }}.cloud.vertex import (
    forwarded_overrides,
    job_spec,
    run_vertex,
    validate,
)
from {{ cookiecutter.module_name }}.config import ConfigError, load_params, sweep_space

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

MODULE = "{{ cookiecutter.module_name }}"
SLUG = "{{ cookiecutter.project_slug }}"
PROJECT = Path(__file__).resolve().parents[1]
IMAGE = "us-central1-docker.pkg.dev/my-proj/ml/app:0.1.0"
GOOD = [
    "vertex.project=my-proj",
    "vertex.bucket=gs://my-bucket/exp",
    f"vertex.image_uri={IMAGE}",
]

# Field names of the Vertex AI v1 REST reference: CustomJobSpec, WorkerPoolSpec, MachineSpec,
# ContainerSpec, PythonPackageSpec, EnvVar, GcsDestination. A typo here would make gcloud reject
# the file (or, worse, silently ignore a field).
SPEC_KEYS = {"workerPoolSpecs", "baseOutputDirectory", "serviceAccount", "scheduling"}
SCHEDULING_KEYS = {"strategy", "restartJobOnWorkerRestart", "timeout"}
POOL_KEYS = {"machineSpec", "replicaCount", "containerSpec", "pythonPackageSpec", "diskSpec"}
MACHINE_KEYS = {"machineType", "acceleratorType", "acceleratorCount"}
CONTAINER_KEYS = {"imageUri", "command", "args", "env"}
PACKAGE_KEYS = {"executorImageUri", "packageUris", "pythonModule", "args", "env"}


def params(*overrides: str):
    return load_params(PARAMS, [*GOOD, *overrides])


def check_field_names(spec: dict) -> None:
    assert set(spec) <= SPEC_KEYS
    assert set(spec["baseOutputDirectory"]) == {"outputUriPrefix"}
    assert set(spec.get("scheduling", {})) <= SCHEDULING_KEYS
    for pool in spec["workerPoolSpecs"]:
        assert set(pool) <= POOL_KEYS
        assert set(pool["machineSpec"]) <= MACHINE_KEYS
        assert isinstance(pool["replicaCount"], int)
        if "containerSpec" in pool:
            assert set(pool["containerSpec"]) <= CONTAINER_KEYS
            program = pool["containerSpec"]
        else:
            assert set(pool["pythonPackageSpec"]) <= PACKAGE_KEYS
            program = pool["pythonPackageSpec"]
        for var in program["env"]:
            assert set(var) == {"name", "value"}


def env_of(pool: dict) -> dict[str, str]:
    program = pool.get("containerSpec") or pool["pythonPackageSpec"]
    return {var["name"]: var["value"] for var in program["env"]}


def test_default_job_is_one_chief_with_a_gpu():
    spec = job_spec(params())
    check_field_names(spec)
    (chief,) = spec["workerPoolSpecs"]
    assert chief["replicaCount"] == 1
    assert chief["machineSpec"] == {
        "machineType": "g2-standard-8",
        "acceleratorType": "NVIDIA_L4",
        "acceleratorCount": 1,
    }
    assert chief["containerSpec"]["imageUri"] == IMAGE
    assert chief["containerSpec"]["args"] == ["train"]  # the image's entrypoint runs the package
    assert env_of(chief) == {
        "PROJECT_STORAGE_DIR": "gs://my-bucket/exp",
        "PROJECT_RESULTS_DIR": "gs://my-bucket/exp/results",
    }
    assert spec["baseOutputDirectory"] == {"outputUriPrefix": "gs://my-bucket/exp"}


def test_workers_get_a_second_pool_with_the_same_machines():
    spec = job_spec(params("vertex.worker_replicas=3", "vertex.bucket=gs://my-bucket/exp/"))
    check_field_names(spec)
    chief, workers = spec["workerPoolSpecs"]
    assert (chief["replicaCount"], workers["replicaCount"]) == (1, 3)
    assert workers["machineSpec"] == chief["machineSpec"]
    assert workers["containerSpec"] == chief["containerSpec"]
    assert env_of(workers)["PROJECT_STORAGE_DIR"] == "gs://my-bucket/exp"  # no trailing slash
    # A replaced worker cannot rejoin MultiWorkerMirroredStrategy: restart all, then resume.
    assert spec["scheduling"] == {"restartJobOnWorkerRestart": True}


def test_single_machine_has_no_scheduling_unless_spot():
    assert "scheduling" not in job_spec(params())
    assert job_spec(params("vertex.spot=true"))["scheduling"] == {"strategy": "SPOT"}


def test_cpu_only_job_has_no_accelerator_fields():
    p = params(
        "vertex.machine_type=n2-standard-8",
        "vertex.accelerator_type=''",
        "vertex.accelerator_count=0",
    )
    validate(p.vertex, p.run_name)
    assert job_spec(p)["workerPoolSpecs"][0]["machineSpec"] == {"machineType": "n2-standard-8"}


PACKAGE_MODE = [
    "vertex.image_uri=''",
    "vertex.python_package_uri=gs://my-bucket/dist/app-0.1.0.tar.gz",
    "vertex.executor_image_uri=us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest",
]


def test_python_package_job_reads_params_from_the_bucket():
    p = params(*PACKAGE_MODE)
    validate(p.vertex, p.run_name)
    spec = job_spec(p, ["train.epochs=2"], params_at="gs://my-bucket/exp/params-0123abcd.yaml")
    check_field_names(spec)
    package = spec["workerPoolSpecs"][0]["pythonPackageSpec"]
    assert package["pythonModule"] == MODULE
    assert package["packageUris"] == ["gs://my-bucket/dist/app-0.1.0.tar.gz"]
    # A prebuilt image holds no params.yaml: the job reads the uploaded one through /gcs.
    params_path = "/gcs/my-bucket/exp/params-0123abcd.yaml"
    assert package["args"] == ["train", "--params", params_path, "--set", "train.epochs=2"]


def test_python_package_dry_run_prints_the_upload_first(tmp_path, capsys):
    params_file = tmp_path / "params.yaml"
    params_file.write_text((PARAMS).read_text())
    p = params(*PACKAGE_MODE)
    assert run_vertex(p, tmp_path, dry_run=True, params_file=params_file) == 0
    upload, create = capsys.readouterr().out.strip().splitlines()[-2:]
    at = vertex.params_uri(p.vertex, params_file.read_bytes())
    expected = ["gcloud", "storage", "cp", str(params_file), at]
    assert shlex.split(upload) == [*expected, "--project=my-proj"]
    assert shlex.split(create)[:4] == ["gcloud", "ai", "custom-jobs", "create"]


def test_python_package_jobs_each_read_the_params_they_were_submitted_with(tmp_path, capsys):
    # A job may wait in the queue, or restart after a Spot preemption, after the next upload:
    # that upload must not change the params it reads.
    uploaded = []
    for name, epochs in (("first", 3), ("second", 5)):
        params_file = tmp_path / name / "params.yaml"
        params_file.parent.mkdir()
        params_file.write_text((PARAMS).read_text() + f"# epochs {epochs}\n")
        job = tmp_path / name / "job.yaml"
        p = params(*PACKAGE_MODE)
        assert run_vertex(p, tmp_path, True, str(job), params_file=params_file) == 0
        upload = shlex.split(capsys.readouterr().out.strip().splitlines()[-2])
        package = yaml.safe_load(job.read_text())["workerPoolSpecs"][0]["pythonPackageSpec"]
        read = package["args"][package["args"].index("--params") + 1]
        assert upload[4].startswith("gs://my-bucket/exp/") and read == "/gcs/" + upload[4][5:]
        uploaded.append(upload[4])
    assert uploaded[0] != uploaded[1]


def test_training_overrides_are_forwarded_vertex_ones_are_not():
    items = ["train.epochs=50", "vertex.worker_replicas=2", "run_name=big"]
    assert forwarded_overrides(items) == ["train.epochs=50", "run_name=big"]
    spec = job_spec(params(), forwarded_overrides(items))
    expected = ["train", "--set", "train.epochs=50", "--set", "run_name=big"]
    assert spec["workerPoolSpecs"][0]["containerSpec"]["args"] == expected


@pytest.mark.parametrize(
    "machine, accelerator, count",
    [
        ("n1-standard-8", "NVIDIA_TESLA_T4", 1),
        ("n1-highmem-16", "NVIDIA_TESLA_V100", 4),
        ("n1-standard-4", "''", 0),
        ("g2-standard-24", "NVIDIA_L4", 2),
        ("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1),
        ("a2-ultragpu-2g", "NVIDIA_A100_80GB", 2),
        ("a3-highgpu-8g", "NVIDIA_H100_80GB", 8),
        ("ct5lp-hightpu-4t", "TPU_V5_LITEPOD", 4),
        ("e2-standard-4", "''", 0),
    ],
)
def test_valid_machines(machine, accelerator, count):
    p = params(
        f"vertex.machine_type={machine}",
        f"vertex.accelerator_type={accelerator}",
        f"vertex.accelerator_count={count}",
    )
    validate(p.vertex, p.run_name)


# Only what needs no catalogue of Google Cloud: machine types, accelerators and regions are
# checked by Vertex AI when the job is submitted (test_the_service_refusal_is_one_line).
BAD = [
    # (overrides, the key the message must name)
    (["vertex.bucket=''"], "bucket"),
    (["vertex.bucket=my-bucket/exp"], "bucket"),
    (["vertex.bucket=s3://my-bucket"], "bucket"),
    (["vertex.bucket=gs://MY_BUCKET"], "bucket"),
    (["vertex.machine_type=''"], "machine_type"),
    (["vertex.region=''"], "region"),
    (["vertex.accelerator_count=0"], "accelerator_count"),
    (["vertex.machine_type=n2-standard-8", "vertex.accelerator_type=''"], "accelerator_count"),
    (["vertex.chief_replicas=0"], "chief_replicas"),
    (["vertex.chief_replicas=2"], "chief_replicas"),
    (["vertex.worker_replicas=-1"], "worker_replicas"),
    (["vertex.worker_replicas=two"], "worker_replicas"),
    (
        [
            "vertex.machine_type=ct5lp-hightpu-4t",
            "vertex.accelerator_type=TPU_V5_LITEPOD",
            "vertex.accelerator_count=4",
            "vertex.worker_replicas=1",
        ],
        "worker_replicas",
    ),
    (["vertex.image_uri=''"], "image_uri"),
    (["vertex.python_package_uri=gs://my-bucket/app.tar.gz"], "image_uri"),  # both set
    (["vertex.image_uri=not an image"], "image_uri"),
    (["vertex.image_uri=''", "vertex.python_package_uri=/tmp/app.tar.gz"], "python_package_uri"),
    (
        ["vertex.image_uri=''", "vertex.python_package_uri=gs://my-bucket/app.tar.gz"],
        "executor_image_uri",
    ),
    (["vertex.display_name=" + "x" * 129], "display_name"),
]


@pytest.mark.parametrize("overrides, key", BAD)
def test_bad_fields_are_one_line_errors_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        p = params(*overrides)  # type errors (e.g. -1 replicas) stop here already
        validate(p.vertex, p.run_name)
    message = str(err.value)
    assert message.startswith(f"vertex.{key}:"), message
    assert f"example: --set vertex.{key}=" in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    "bad",
    ["vertex.bucket=bad", "vertex.accelerator_count=0", "vertex.chief_replicas=2"],
)
def test_following_the_example_fixes_the_error(bad):
    with pytest.raises(ConfigError) as err:
        p = params(bad)
        validate(p.vertex, p.run_name)
    example = str(err.value).split("(example: --set ")[-1].rstrip(")")
    p = params(bad, example)
    validate(p.vertex, p.run_name)


def test_dry_run_prints_the_command_and_writes_the_spec(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out_file = tmp_path / "job.yaml"
    argv = [
        "vertex",
        "--dry-run",
        "--params",
        str(PARAMS),
        "--output",
        str(out_file),
    ]
    for item in [*GOOD, "vertex.worker_replicas=1", "train.epochs=3"]:
        argv += ["--set", item]
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert shlex.split(lines[-1]) == [
        "gcloud",
        "ai",
        "custom-jobs",
        "create",
        "--region=us-central1",
        f"--display-name={SLUG}-baseline",
        f"--config={out_file}",
        "--project=my-proj",
    ]
    text = out_file.read_text()
    assert "&id" not in text and "*id" not in text  # plain YAML, no anchors
    written = yaml.safe_load(text)
    expected = job_spec(params("vertex.worker_replicas=1"), ["train.epochs=3"])
    assert written == expected
    check_field_names(written)
    assert not list(tmp_path.glob(".job.yaml.*"))  # the atomic write left no temp file


def test_an_image_job_refuses_a_params_file_it_would_not_train(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    big.write_text(PARAMS.read_text())
    argv = ["vertex", "--dry-run", "--params", str(big), *(a for o in GOOD for a in ("--set", o))]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: --params {big}: a job of vertex.image_uri trains the params")
    assert line.endswith("(example: --set train.epochs=50)")
    assert [p.name for p in tmp_path.rglob("*")] == ["big.yaml"]  # nothing written


def test_default_output_is_under_results(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "params.yaml").write_text((PARAMS).read_text())
    p = load_params(project / "params.yaml", GOOD)
    assert run_vertex(p, project, dry_run=True) == 0
    assert (project / "results" / "vertex" / "job.yaml").is_file()


def test_bad_params_exit_2_with_the_key(capsys):
    argv = ["vertex", "--dry-run", "--params", str(PARAMS)]
    argv += ["--set", f"vertex.image_uri={IMAGE}", "--set", "vertex.bucket=my-bucket"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: vertex.bucket: ")


@pytest.mark.parametrize("extra", [[], ["--sweep"]])
def test_a_components_bad_argument_stops_before_any_job(extra, tmp_path, capsys):
    """A misspelt argument (or one the sweep's space searches) is refused here, not by a job
    that has started in the cloud."""
    bad = "model.args.x=3" if not extra else "sweep.space={model.args.x: {choices: [3]}}"
    job = tmp_path / "job.yaml"
    argv = ["vertex", "--dry-run", *extra, "--params", str(PARAMS), "--output", str(job)]
    assert main([*argv, *(f"--set={item}" for item in [*GOOD, bad])]) == 2
    key = "sweep.space.model.args.x" if extra else "model.args.x"
    assert capsys.readouterr().err.startswith(f"error: {key}: architecture ")
    assert not list(tmp_path.iterdir())


def _fake_gcloud(folder: Path, record: Path) -> None:
    folder.mkdir()
    script = folder / "gcloud"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{record}"\nexit 0\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.mark.skipif(os.name == "nt", reason="a shell-script stand-in for gcloud")
def test_without_dry_run_gcloud_is_called(tmp_path, monkeypatch):
    record = tmp_path / "args.txt"
    _fake_gcloud(tmp_path / "bin", record)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    p = params()
    assert run_vertex(p, tmp_path, output=str(tmp_path / "job.yaml")) == 0
    (call,) = record.read_text().splitlines()
    assert call.startswith("ai custom-jobs create --region=us-central1 ")
    assert f"--config={tmp_path / 'job.yaml'}" in call


@pytest.mark.skipif(os.name == "nt", reason="a shell-script stand-in for gcloud")
def test_python_package_mode_uploads_params_then_creates(tmp_path, monkeypatch):
    record = tmp_path / "args.txt"
    _fake_gcloud(tmp_path / "bin", record)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    params_file = PARAMS
    p = params(*PACKAGE_MODE)
    out = str(tmp_path / "job.yaml")
    assert run_vertex(p, tmp_path, output=out, params_file=params_file) == 0
    upload, create = record.read_text().splitlines()
    at = vertex.params_uri(p.vertex, params_file.read_bytes())
    assert upload == f"storage cp {params_file} {at} --project=my-proj"
    assert create.startswith("ai custom-jobs create ")


@pytest.mark.skipif(os.name == "nt", reason="a shell-script stand-in for gcloud")
def test_the_service_refusal_is_one_line(tmp_path, monkeypatch, capsys):
    """Vertex AI checks machine types and accelerators when the job is submitted; gcloud's error
    reaches the user as one line, and the first failing command stops the rest."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "gcloud"
    script.write_text(
        "#!/bin/sh\necho 'Using endpoint [https://us-central1-aiplatform.googleapis.com/]' >&2\n"
        'echo \'ERROR: (gcloud.ai.custom-jobs.create) INVALID_ARGUMENT: Machine type "z9" is not'
        " supported.' >&2\necho '- details: ...' >&2\nexit 7\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    p = params("vertex.machine_type=z9-standard-8")
    assert run_vertex(p, tmp_path, output=str(tmp_path / "job.yaml")) == 7
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "error: gcloud ai custom-jobs create failed: ERROR: (gcloud.ai.custom-jobs.create) "
        'INVALID_ARGUMENT: Machine type "z9" is not supported.'
    )


def test_dry_run_sweep_writes_a_tuning_job_around_the_custom_job(tmp_path, capsys):
    p = load_params(PARAMS, [*GOOD, "sweep.n_trials=6"])
    forwarded = ["train.epochs=3", "sweep.storage=postgresql://me@db/x", "vertex.spot=true"]
    assert run_vertex(p, tmp_path, True, None, forwarded, tuning_job=tuning_job) == 0
    path = tmp_path / "results" / "vertex" / "hpt-lr-dropout.yaml"
    job = yaml.safe_load(path.read_text())
    assert job["displayName"] == f"{SLUG}-sweep-lr-dropout" and job["maxTrialCount"] == 6
    assert [s["parameterId"] for s in job["studySpec"]["parameters"]] == [
        "train.learning_rate",
        "model.dropout",
        "train.optimizer",
    ]
    args = job["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"]
    assert args == ["train", "--sweep-trial", "lr-dropout", "--set", "train.epochs=3"]
    command = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    assert command[:4] == ["gcloud", "ai", "hp-tuning-jobs", "create"]
    assert f"--config={path}" in command


def test_a_later_tuning_jobs_trial_is_a_run_of_its_own(tmp_path, monkeypatch, capsys):
    """Vertex AI numbers each job's trials from 1: a second job's trial 1, with other values,
    trains and reports as a run of its own beside the first job's complete one."""
    p = params(*TINY, "train.epochs=1")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(tmp_path / "hypertune"))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "1")
    stamps = []
    for rate in ("0.01", "0.001"):
        trial = tuning_job(p, vertex.job_spec(p))["trialJobSpec"]["workerPoolSpecs"][0]
        (stamp,) = (
            e["value"] for e in trial["containerSpec"]["env"] if e["name"] == tuning.JOB_STAMP
        )
        monkeypatch.setenv(tuning.JOB_STAMP, stamp)
        args = [f"--train.learning_rate={rate}"]
        assert tuning.run_tuning_trial(p, tmp_path, "lr-dropout", args, TINY, PARAMS) == 0
        stamps.append(stamp)
        time.sleep(1.1 if len(stamps) == 1 else 0)  # the stamp is to the second
    runs = sorted(d.name for d in (tmp_path / "results/sweeps/lr-dropout").iterdir())
    assert runs == [f"vertex-{stamp}-1" for stamp in stamps] and stamps[0] != stamps[1]
    assert len((tmp_path / "hypertune").read_text().splitlines()) == 2  # one epoch each
    assert "started with other settings" not in capsys.readouterr().err
    # Vertex AI restarts the second job's trial after it finished: it reports the run's result
    # again, which it did not train again.
    best = json.loads((tmp_path / "hypertune").read_text().splitlines()[-1])["val_loss"]
    assert tuning.run_tuning_trial(p, tmp_path, "lr-dropout", args, TINY, PARAMS) == 0
    assert "is already complete" in capsys.readouterr().out
    (again,) = (tmp_path / "hypertune").read_text().splitlines()  # the new process's file
    assert json.loads(again)["val_loss"] == best


def test_a_tuning_trial_reads_vertex_ai_arguments():
    p = load_params(PARAMS, ["sweep.space={train.epochs: {low: 1, high: 9}}"])
    dims = sweep_space(p)
    assert trial_values(["--train.epochs=4.0"], dims) == {"train.epochs": 4}
    with pytest.raises(ConfigError, match=r"unexpected argument '--train.lr=1'"):
        trial_values(["--train.lr=1"], dims)


def test_numeric_choices_are_vertex_ais_discrete_values_sorted():
    numbers, flags = CategoricalDistribution([64, 32]), CategoricalDistribution([True, False])
    assert parameter_spec("train.batch_size", numbers) == {
        "parameterId": "train.batch_size",
        "discreteValueSpec": {"values": [32.0, 64.0]},
        "scaleType": "UNIT_LINEAR_SCALE",
    }
    assert parameter_spec("data.cache", flags)["categoricalValueSpec"] == {
        "values": ["true", "false"]
    }


def test_vertex_and_tuning_do_not_import_each_other():
    for module, other in ((vertex, "tuning"), (tuning, "vertex")):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + [
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        ]
        assert not [name for name in imported if name.split(".")[-1] == other], module


def test_without_gcloud_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no gcloud here
    with pytest.raises(ConfigError, match="gcloud is not on PATH.*--dry-run"):
        run_vertex(params(), tmp_path, output=str(tmp_path / "job.yaml"))


def test_vertex_params_do_not_block_training_params():
    """An unfilled vertex section (no bucket, no image) must not stop `train`."""
    p = load_params(PARAMS)
    assert dataclasses.asdict(p.vertex)["bucket"] == ""


# Run by the Python that ships with the Google Cloud CLI: load the spec into gcloud's own
# Vertex AI v1 message classes (what `gcloud ai custom-jobs create --config` does) and back.
_GCLOUD_ROUND_TRIP = """
import json, sys
sys.path[:0] = [sys.argv[1] + "/lib", sys.argv[1] + "/lib/third_party"]
from apitools.base.py import encoding
from googlecloudsdk.api_lib.util import apis
from googlecloudsdk.command_lib.export import util as export_util
spec_type = apis.GetMessagesModule("aiplatform", "v1").GoogleCloudAiplatformV1CustomJobSpec
message = export_util.Import(message_type=spec_type, stream=open(sys.argv[2]).read())
print(json.dumps(encoding.MessageToPyValue(message)))
"""


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="needs the Google Cloud CLI")
@pytest.mark.parametrize(
    "extra",
    [
        ["vertex.worker_replicas=2", "vertex.spot=true"],
        [
            "vertex.image_uri=''",
            "vertex.python_package_uri=gs://my-bucket/dist/app-0.1.0.tar.gz",
            "vertex.executor_image_uri=us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest",
            "vertex.machine_type=n1-standard-8",
            "vertex.accelerator_type=NVIDIA_TESLA_T4",
            "vertex.service_account=trainer@my-proj.iam.gserviceaccount.com",
        ],
    ],
)
def test_gcloud_reads_every_field(tmp_path, extra):
    """A misspelt field or enum value would be dropped by gcloud: the round trip would differ."""
    info = subprocess.run(
        ["gcloud", "info", "--format=value(installation.sdk_root,basic.python_location)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    sdk_root, python = (info.stdout.split() + ["", ""])[:2]
    if info.returncode != 0 or not Path(python).is_file():
        pytest.skip("could not locate the Google Cloud CLI's Python")
    out = tmp_path / "job.yaml"
    assert run_vertex(params(*extra), PROJECT, dry_run=True, output=str(out)) == 0
    done = subprocess.run(
        [python, "-c", _GCLOUD_ROUND_TRIP, sdk_root, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0 and "ModuleNotFoundError" in done.stderr:
        pytest.skip(f"this Google Cloud CLI is laid out differently: {done.stderr[-200:]}")
    assert done.returncode == 0, done.stderr
    assert _leaves_as_text(json.loads(done.stdout)) == _leaves_as_text(
        yaml.safe_load(out.read_text())
    )


def _leaves_as_text(value):
    """JSON writes int64 fields (replicaCount) as strings: compare every leaf as text."""
    if isinstance(value, dict):
        return {key: _leaves_as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_leaves_as_text(item) for item in value]
    return value if isinstance(value, bool) else str(value)
