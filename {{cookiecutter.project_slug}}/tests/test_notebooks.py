"""The notebooks: Colab-ready, parameterised, clean, and they run headless on the bundled data
and on an image folder."""

from __future__ import annotations

import csv
import errno
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import papermill
import pytest
import tensorflow as tf
import yaml
from conftest import PARAMS, copy_checkout

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.colab import notebooks, restore
from {{ cookiecutter.module_name }}.colab.notebooks import (
    keep_state_on_storage,
    push_stage,
    run_notebooks,
    stop_unless_swept,
    stop_unless_trained,
    typed_parameters,
)
from {{ cookiecutter.module_name }}.colab.restore import (
    keep_model,
    restore_for_evaluation,
    restore_for_sweep,
    restore_for_training,
    run_facts,
)
from {{ cookiecutter.module_name }}.colab.runtime_check import TPU_STOP, NotebookStop
from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.core.files import file_digests, file_sha256
from {{ cookiecutter.module_name }}.data.manifest import MANIFEST, data_hash
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.training.checkpoints import CheckpointStore

MODULE = "{{ cookiecutter.module_name }}"
MODEL = "models/model.keras"
PROJECT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((PROJECT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
REPO = "{{ cookiecutter.github_owner }}/{{ cookiecutter.project_slug }}"
COLAB = f"https://colab.research.google.com/github/{REPO}/blob/main/notebooks/"


def code_cells(path: Path) -> list:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def is_injected(cell) -> bool:
    """The cell papermill adds after the `parameters` cell."""
    return "injected-parameters" in cell.metadata.get("tags", [])


def test_numbered_setup_train_evaluate_sweep():
    names = [nb.name for nb in NOTEBOOKS]
    assert len(names) >= 4
    assert [name[:3] for name in names[:4]] == ["01_", "02_", "03_", "04_"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_valid_clean_and_parameterised(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in cells)
    tagged = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "one cell tagged `parameters` (papermill)"
    # papermill reads every assignment of the parameters cell (a comment with "=" would hide one)
    lines = tagged[0].source.splitlines()
    assigned = {re.split("[:=]", line)[0].strip() for line in lines if " = " in line}
    declared = papermill.inspect_notebook(str(path))
    assert set(declared) == assigned
    # Each declares its type: `-p NAME=VALUE` reads VALUE as that type (typed_parameters).
    assert {p["inferred_type_name"] for p in declared.values()} <= {"str", "int", "float", "bool"}
    assert {"seed", "branch", "allow_reinstall"} <= assigned
    assert COLAB + path.name in nb.cells[0].source, "Open in Colab badge"
    # The code lives in the package: cells call it, they define nothing.
    for cell in cells:
        lines = cell.source.splitlines()
        assert not any(line.startswith(("def ", "class ")) for line in lines), cell.source


def test_every_notebook_starts_with_the_same_setup():
    """Every notebook (globbed: a new one too) clones this project's repository, checks the
    runtime before installing, and starts its session (the template writes these cells from one
    source, scripts/notebook_setup.py)."""
    setups = []
    for path in NOTEBOOKS:
        setup = next(c.source for c in code_cells(path) if "start_session(" in c.source)
        setups.append(setup)
        steps = (
            f'REPO_URL = "https://github.com/{REPO}.git"',
            "drive.mount",
            "clone",
            "fetch",
            "FETCH_HEAD",
            "check_runtime(PROJECT, allow_reinstall)",
            "%pip install -q -r requirements",
        )
        for step in steps:
            assert step in setup, f"{path.name}: setup lacks {step}"
        assert setup.index("check_runtime(") < setup.index("%pip install"), path.name
    assert len(set(setups)) == 1, "the setup cell differs between notebooks"


def test_notebook_parameters_take_params_yaml_unless_set():
    """A notebook parameter that params.yaml also holds is None by default: params.yaml decides
    unless the user sets the parameter (no third copy of the defaults)."""
    for path in NOTEBOOKS:
        declared = papermill.inspect_notebook(str(path))
        for name in ("seed", "run_name", "epochs", "batch_size"):
            if name in declared:
                assert declared[name]["default"] == "None", f"{path.name}: {name}"
        assert declared["allow_reinstall"]["default"] == "False", path.name


@pytest.mark.parametrize("tpu", [True, False], ids=["tpu-runtime", "gpu-runtime-moved-on"])
def test_on_colab_the_setup_clones_then_stops_a_tpu_before_drive(tmp_path, monkeypatch, tpu):
    """01 in a kernel that looks like Colab's (GitHub a local repository, Drive a stand-in that
    notes its mount). A TPU runtime: the setup clones, then stops in one line before Drive and any
    %pip. A GPU runtime whose TensorFlow moved on (the snapshot's pin, not this interpreter's:
    that one may be the lock's own): Drive is mounted, then the runtime check stops in one line,
    still before %pip."""
    origin, source = tmp_path / "origin.git", copy_project(tmp_path / "source")
    if not tpu:
        snapshot = source / "requirements" / "colab-constraints.txt"
        moved = re.sub(r"^tensorflow==\S+", "tensorflow==9.9.9", snapshot.read_text(), flags=re.M)
        snapshot.write_text(moved)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    for command in (["add", "-A"], ["commit", "-qm", "init", "-n"], ["branch", "-M", "main"]):
        subprocess.run([*git, *command], cwd=source, check=True, capture_output=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(origin)], check=True)
    (tmp_path / "gitconfig").write_text(
        f'[url "{origin}"]\n insteadOf = https://github.com/{REPO}.git\n'
    )
    stand_in = tmp_path / "stand-in" / "google" / "colab"  # `google` stays a namespace package
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("")
    mounted = tmp_path / "mounted"
    (stand_in / "drive.py").write_text(
        f"def mount(path):\n    open({str(mounted)!r}, 'w').close()\n"
    )
    checkout = tmp_path / "content" / "project"
    colab = {"COLAB_RELEASE_TAG": "release-colab_20260819-060000_RC00", "COLAB_TPU_1VM": ""}
    tpu_env = {"COLAB_TPU_1VM": "1", "TPU_ACCELERATOR_TYPE": "v5e-1"} if tpu else {}
    for name, value in {**colab, **tpu_env, "PROJECT_CHECKOUT_DIR": str(checkout),
                        "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig"),
                        "PROJECT_STORAGE_DIR": str(tmp_path / "drive"),
                        "PYTHONPATH": str(stand_in.parents[1])}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    notebook = next(p for p in NOTEBOOKS if p.name.startswith("01_"))
    with pytest.raises(papermill.PapermillExecutionError) as stopped:
        papermill.execute_notebook(str(notebook), str(tmp_path / "01.ipynb"), cwd=str(tmp_path),
                                   kernel_name="python3", progress_bar=False)  # fmt: skip
    assert stopped.value.ename == "NotebookStop"
    cells = code_cells(tmp_path / "01.ipynb")
    setup = next(c for c in cells if "start_session(" in c.source)
    (error,) = [o for o in setup.outputs if o.output_type == "error"]
    assert len(error.traceback) == 1 and len(setup.outputs) == 1, setup.outputs
    if tpu:
        assert error.traceback == [TPU_STOP] and not mounted.exists()
    else:
        assert error.traceback[0].startswith("This Colab runtime is not the one requirements.txt")
        assert "(lock: 9.9.9)" in error.traceback[0]
        assert mounted.exists() and list((tmp_path / "drive").glob("colab-pip-freeze-gpu-*.txt"))
    assert (checkout / ".git").is_dir() and not (checkout / "results").exists()
    assert all(c.execution_count is None for c in cells[cells.index(setup) + 1 :])


def test_a_parameter_no_notebook_has_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"^-p epoch: no notebook has this parameter"):
        run_notebooks(PROJECT, ["epoch=1"])
    with pytest.raises(
        ConfigError, match=r"^--only 09: no notebook starts with it \(they are: 01_"
    ):
        run_notebooks(PROJECT, only=["09"])


def test_notebooks_exits_2_for_bad_input_and_1_for_a_failing_notebook(tmp_path, capsys):
    # As `train`'s exit codes (docs/training-faults.md): 2 a setting, 1 a run that failed.
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    shutil.copy(PARAMS, project)
    cells = [
        nbformat.v4.new_code_cell("size: int = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("raise RuntimeError('planted')"),
    ]
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    notebook = nbformat.v4.new_notebook(cells=cells, metadata=kernel)
    nbformat.write(notebook, project / "notebooks" / "01_fail.ipynb")
    params = ["--params", str(project / "params.yaml")]
    assert main(["notebooks", "-p", "sized=2", *params]) == 2
    assert main(["notebooks", "-p", "size=big", *params]) == 2
    assert main(["notebooks", "--only", "09", *params]) == 2
    assert main(["notebooks", *params]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in errors] == ["error"] * 4, errors
    assert re.match(r"error: 01_fail.ipynb failed in cell \d: RuntimeError: planted", errors[-1])


def test_each_parameter_takes_the_type_its_parameters_cell_declares():
    # `-p NAME=VALUE` as the cells declare NAME (`epochs: int = None`): a name keeps the text
    # written (YAML would make 0123 the number 83, `on` true), a bool takes true or false.
    declared = {}
    for path in NOTEBOOKS:
        declared.update(papermill.inspect_notebook(str(path)))
    given = [
        "run_name=0123",
        "sweep_name=on",
        "branch=1.10",
        "sweep_storage=007",
        "fresh=true",
        "take_over=False",
        "epochs=2",
        "time_budget_minutes=1.5",
    ]
    assert typed_parameters(given, declared) == {
        "run_name": "0123",
        "sweep_name": "on",
        "branch": "1.10",
        "sweep_storage": "007",
        "fresh": True,
        "take_over": False,
        "epochs": 2,
        "time_budget_minutes": 1.5,
    }
    for bad, expect in (("epochs=two", "an integer"), ("fresh=yes", "true or false")):
        with pytest.raises(ConfigError) as refused:
            typed_parameters([bad], declared)
        name, value = bad.split("=")
        assert str(refused.value).startswith(f"-p {bad}: {name} takes {expect} (example: -p ")
    with pytest.raises(ConfigError, match=r"^-p 'epochs': expected KEY=VALUE \(example: "):
        typed_parameters(["epochs"], declared)


def test_state_kept_on_storage_both_ways_without_overwriting(tmp_path):
    project, storage = tmp_path / "vm" / "project", tmp_path / "drive" / "project"
    for root, run, text in ((project / "results", "run-new", "vm"), (storage, "run-old", "drive")):
        (root / "runs" / run).mkdir(parents=True)
        (root / "runs" / run / "manifest.json").write_text(text)
    (storage / "runs" / "run-new").mkdir()
    (storage / "runs" / "run-new" / "manifest.json").write_text("kept")  # never overwritten
    (project / "results" / "runs" / "not-a-run").mkdir()  # no manifest: not copied

    done = keep_state_on_storage(project, storage)
    assert (project / "results" / "runs" / "run-old" / "manifest.json").read_text() == "drive"
    assert (storage / "runs" / "run-new" / "manifest.json").read_text() == "kept"
    assert not (storage / "runs" / "not-a-run").exists()
    assert (project / "results" / "tensorboard").resolve() == (storage / "tensorboard").resolve()
    assert any("Run records" in line and "1 copied" in line for line in done)
    assert any("(0 copied)" in line for line in keep_state_on_storage(project, storage))  # again
    assert keep_state_on_storage(project, project) == []  # off Colab: nothing moves


def test_state_kept_on_storage_follows_the_results_dir(tmp_path, monkeypatch):
    project, storage, results = tmp_path / "project", tmp_path / "drive", tmp_path / "elsewhere"
    (results / "runs" / "run-a").mkdir(parents=True)  # where train writes with the variable set
    (results / "runs" / "run-a" / "manifest.json").write_text("{}")
    monkeypatch.setenv("PROJECT_RESULTS_DIR", str(results))
    keep_state_on_storage(project, storage)
    assert (storage / "runs" / "run-a" / "manifest.json").is_file()
    assert (results / "tensorboard").resolve() == (storage / "tensorboard").resolve()
    assert not (project / "results").exists()


@pytest.mark.parametrize("what", ["run record", "model"])
def test_a_full_drive_is_one_warning_and_leaves_no_half_copy(tmp_path, monkeypatch, what):
    """The setup cell on a full Drive: one line says so, the rest is done, no partial folder."""
    project, storage = tmp_path / "project", tmp_path / "drive"
    results = project / "results"
    if what == "run record":
        (results / "runs" / "run-a").mkdir(parents=True)
        (results / "runs" / "run-a" / "manifest.json").write_text("{}")
    else:
        for rel in ("models/model.keras", "models/model.json", "metrics/train.json"):
            (results / rel).parent.mkdir(parents=True, exist_ok=True)
            (results / rel).write_text("{}")

    def full(src, dst, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(shutil, "copyfile", full)
    done = keep_state_on_storage(project, storage)
    (warning,) = [line for line in done if "not copied to" in line]
    assert warning.startswith("WARNING: run records or the model not copied to ")
    assert "(No space left on device); free space on Drive" in warning, warning
    assert any(line.startswith("TensorBoard logs:") for line in done)
    assert [p.name for p in storage.rglob("*") if "partial" in p.name] == []


def test_a_setup_with_nothing_to_register_prints_no_empty_line(monkeypatch, capsys):
    monkeypatch.setattr(notebooks, "install", lambda project: [])  # hooks registered already
    monkeypatch.setattr(notebooks, "log_environment", lambda project: None)
    monkeypatch.setattr(notebooks, "seed_everything", lambda seed, deterministic: ["python"])
    notebooks.start_session(PROJECT)
    assert capsys.readouterr().out.startswith("Seed ")


def test_a_bad_notebook_parameter_stops_the_cell_in_one_line():
    with pytest.raises(NotebookStop) as stop:
        restore_for_training(PROJECT, {"train.batch_size": 0})
    line = str(stop.value)
    assert line.startswith("train.batch_size: ") and "\n" not in line
    assert stop.value._render_traceback_() == [line]  # what IPython shows: no traceback


def test_a_sweep_restores_the_data_of_its_own_trials_only(tmp_path, monkeypatch):
    # Sweep 'lr' is not sweep 'lr-dropout', whose trial 'lr-dropout-0' trained on other data.
    storage = tmp_path / "drive"
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(storage))
    asked = []
    monkeypatch.setattr(restore, "restore_data", lambda *args: asked.append(args[3]) or "")
    for run, data in (("lr-dropout-0", "other-data"), ("lr-2", "its-data")):
        store = CheckpointStore(storage / "checkpoints" / run, keep=1)
        store.save(tf.train.Checkpoint(v=tf.Variable([1.0])), 1, {"fingerprint": {"data": data}})
        restore_for_sweep(PROJECT, {"sweep.name": "lr"})
    assert asked == [None, "its-data"]


def test_a_run_with_other_params_is_not_pushed_as_the_stage(tmp_path, capsys):
    (tmp_path / "params.yaml").write_text("run_name: baseline\ntrain:\n  epochs: 20\n")
    assert not push_stage(tmp_path, "train", {"run_name": "baseline", "train.epochs": 1})
    note = capsys.readouterr().out  # run_name is params.yaml's: not named
    expected = "NOTE: not recorded in DVC: this run used train.epochs=1 (params.yaml: 20);"
    assert note.startswith(expected)


def dvc_stage(folder: Path) -> None:
    """A git and DVC project in `folder` with one stage, `make`, whose output is there."""
    for args in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(args, cwd=folder, check=True)
    (folder / "dvc.yaml").write_text(
        "stages:\n  make:\n    cmd: echo hi > out.txt\n    outs: [out.txt]\n"
    )
    (folder / "out.txt").write_text("hi\n")
    (folder / "params.yaml").write_text("run_name: baseline\n")


@pytest.mark.slow  # DVC's push from a notebook, run for real: the machinery
def test_a_push_with_no_remote_records_the_stage_and_warns_of_nothing(tmp_path, capsys):
    """A project baked with dvc_remote=none: each run of a notebook records its stage in
    dvc.lock, and says there is no remote to push to, with no WARNING (nothing went wrong)."""
    dvc_stage(tmp_path)
    assert not push_stage(tmp_path, "make")
    assert capsys.readouterr().out == (
        "DVC: `make` recorded in dvc.lock (commit dvc.lock); the project has no default DVC "
        "remote to push it to (docs/data.md, Remote storage for data and models)\n"
    )
    assert "out.txt" in (tmp_path / "dvc.lock").read_text()


@pytest.mark.slow  # DVC's push from a notebook, run for real: the machinery
def test_a_push_that_fails_says_dvcs_error(tmp_path, capsys):
    """A remote that cannot be written (here a folder inside a file) is a WARNING with DVC's
    error line, without the footer DVC prints under it."""
    dvc_stage(tmp_path)
    (tmp_path / "a-file").touch()
    remote = ["remote", "add", "-d", "broken", str(tmp_path / "a-file" / "remote")]
    subprocess.run([sys.executable, "-m", "dvc", *remote], cwd=tmp_path, check=True)
    assert not push_stage(tmp_path, "make")
    warning = capsys.readouterr().out
    assert warning.startswith("WARNING: `dvc push --run-cache make` failed: ERROR: "), warning
    assert "Not a directory" in warning and "Having any troubles" not in warning


def test_training_notebook_shows_tensorboard_on_colab():
    train = next(p for p in NOTEBOOKS if p.name.startswith("02_"))
    assert any("%tensorboard --logdir" in c.source for c in code_cells(train))


def test_each_exit_code_of_train_has_its_own_advice():
    """02's train cell ends with `stop_unless_trained`: nothing on success, else one line (no
    traceback) with what the exit code means and what to do; never a step that deletes the run."""
    assert stop_unless_trained(0, "r") is None
    lines = {}
    for code in (1, 2, 3, 4, 5, 130, 143, 9):
        with pytest.raises(NotebookStop) as stopped:
            stop_unless_trained(code, "r")
        text = str(stopped.value)
        assert stopped.value._render_traceback_() == [text] and "\n" not in text
        assert text.startswith(f"Training stopped (exit code {code}): ") and "--fresh" not in text
        lines[code] = text
    assert len(set(lines.values())) == len(lines), "each code its own advice"
    assert "set run_name to a new name to train another run" in lines[2]
    assert "run this cell again to continue run 'r' from its newest checkpoint" in lines[3]
    assert "another session is training run 'r'" in lines[4] and "heartbeats" in lines[4]
    # as train says: the session taken over saves nothing more (they read "saved its checkpoint")
    assert "another session took run 'r' over" in lines[5] and "wrote nothing more" in lines[5]
    assert "run this cell again to resume" in lines[130] and "see the message above" in lines[9]
    assert not any("saved a checkpoint" in line for line in lines.values())  # train's line says
    train = next(p for p in NOTEBOOKS if p.name.startswith("02_"))
    cell = next(c.source for c in code_cells(train) if "exit_code = main(" in c.source)
    assert "stop_unless_trained(exit_code, " in cell and "assert exit_code" not in cell


def test_a_sweep_another_session_holds_stops_in_one_line():
    """04's sweep cell: exit code 4 says in one line that another session holds the sweep, and
    offers `take_over` (`sweep --take-over`) only for a session that is gone."""
    assert stop_unless_swept(0, "s") is None
    lines = {}
    for code in (1, 2, 3, 4, 5, 130, 143, 9):
        with pytest.raises(NotebookStop) as stopped:
            stop_unless_swept(code, "s")
        text = lines[code] = str(stopped.value)
        assert stopped.value._render_traceback_() == [text] and "\n" not in text
        assert text.startswith(f"Sweep stopped (exit code {code}): ")
    assert len(set(lines.values())) == len(lines), "each code its own advice"
    assert lines[4].startswith("Sweep stopped (exit code 4): another session holds sweep 's'")
    assert "only if that session is gone, set take_over = True" in lines[4]
    sweep = next(p for p in NOTEBOOKS if p.name.startswith("04_"))
    assert any('["--take-over"] if take_over' in c.source for c in code_cells(sweep))


def push_like_dvc(project: Path, doc: dict, remote: Path) -> None:
    """What `dvc push` leaves in a remote: each file under its MD5 (files/md5/<2>/<30>)."""
    for entry in doc["files"]:
        md5 = entry["dvc"]["md5"]
        target = remote / "files" / "md5" / md5[:2] / md5[2:]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(project / entry["path"], target)


def new_vm(tmp_path: Path, name: str, remote: Path | None = None) -> Path:
    """A fresh clone (no data, no results) whose DVC remote is `remote`, as the setup sets it."""
    project = copy_project(tmp_path / name)
    if remote is not None:
        (project / ".dvc" / "config.local").write_text(
            f"[core]\n    remote = box\n['remote \"box\"']\n    url = {remote}\n"
        )
    return project


def first_vm(tmp_path: Path, storage: Path, remote: Path) -> tuple[Path, dict, str]:
    """VM 1: `prepare` (its manifest kept in the storage folder) and the data pushed; run
    'baseline' checkpointed on that data. Returns (project, manifest, data hash)."""
    project = new_vm(tmp_path, "vm1", remote)
    prepare(load_params(project / "params.yaml"), project)
    doc = json.loads((project / MANIFEST).read_text())
    digest = data_hash(doc)
    kept = storage / "manifests" / f"{digest}.json"
    assert kept.read_bytes() == (project / MANIFEST).read_bytes()
    push_like_dvc(project, doc, remote)
    store = CheckpointStore(storage / "checkpoints" / "baseline", keep=3)
    store.save(tf.train.Checkpoint(v=tf.Variable([1.0])), 6, {"fingerprint": {"data": digest}})
    return project, doc, digest


def same_files(project: Path, doc: dict) -> bool:
    return all(file_sha256(project / e["path"]) == e["sha256"] for e in doc["files"])


@pytest.mark.slow  # Colab's machinery: a new VM
def test_a_new_vm_restores_the_runs_data_from_the_dvc_remote_or_prepares_it_again(
    tmp_path, monkeypatch
):
    storage, remote = tmp_path / "drive", tmp_path / "remote"
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(storage))
    first, doc, digest = first_vm(tmp_path, storage, remote)
    # The data's ID in each line: the one the environment block and the model card show, which
    # a user checks with `sha256sum data/manifest.json`.
    short, count = file_sha256(first / MANIFEST)[:12], len(doc["files"])
    # VM 2: the run's data (its checkpoint names it) from the DVC remote, the manifest from Drive.
    second = new_vm(tmp_path, "vm2", remote)
    line = restore_for_training(second)
    assert line == (
        f"Data: the data run 'baseline' was trained on ({short}), {count} files restored from "
        f"the DVC remote {remote}"
    )
    assert same_files(second, doc)
    assert (second / MANIFEST).read_bytes() == (first / MANIFEST).read_bytes()
    assert restore_for_training(second) == (
        f"Data: {MANIFEST} on this VM ({short}), nothing to restore"
    )
    # A remote without the files: `prepare` again, which makes exactly the recorded files.
    third = new_vm(tmp_path, "vm3", tmp_path / "empty-remote")
    line = restore_for_training(third)
    assert line.startswith("Data: prepared again on this VM (") and "is in neither" in line
    assert line.endswith(f"exactly the data run 'baseline' was trained on ({short})")
    assert same_files(third, doc)
    # Settings that make other data: said in one line (training then names the difference).
    fourth = new_vm(tmp_path, "vm4")
    line = restore_for_training(fourth, {"seed": 7})
    assert line.startswith("WARNING: Data: prepared again on this VM (")
    assert "not the data run 'baseline' was trained on (made " in line and short in line
    # A run with no checkpoint yet: the data dvc.lock records (a committed `prepare` stage).
    md5 = file_digests(first / MANIFEST, "md5")["md5"]
    fifth = new_vm(tmp_path, "vm5", remote)
    lock = {"stages": {"prepare": {"outs": [{"path": MANIFEST, "md5": md5}]}}}
    (fifth / "dvc.lock").write_text(yaml.safe_dump(lock))
    line = restore_for_training(fifth, {"run_name": "new"})
    assert line.startswith(f"Data: the data dvc.lock records ({short}), {count} files restored")


@pytest.mark.slow  # Colab's machinery: a new VM
def test_a_new_vm_evaluates_the_model_kept_on_drive(tmp_path, monkeypatch):
    storage, remote = tmp_path / "drive", tmp_path / "remote"
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(storage))
    first, doc, digest = first_vm(tmp_path, storage, remote)
    results = first / "results"
    (results / "models").mkdir(parents=True, exist_ok=True)
    (results / "models" / "model.keras").write_bytes(b"a model")
    (results / "models" / "model.json").write_text("{}")
    numbers = {"val_loss": 0.5, "history": []}  # train.json: numbers only
    (results / "metrics").mkdir(parents=True, exist_ok=True)
    (results / "metrics" / "train.json").write_text(json.dumps(numbers))
    # The run's facts are in its run record, which lists the model file among its artifacts;
    # another run's record (another model) is not taken for it.
    model = {"path": "results/models/model.keras", "sha256": file_sha256(results / MODEL)}
    for run_id, facts, artifacts in (
        ("20260101T000000Z-baseline-0001", {"run_name": "baseline", "data_hash": digest}, [model]),
        ("20260102T000000Z-other-0002", {"run_name": "other"}, [{**model, "sha256": "0" * 64}]),
    ):
        (results / "runs" / run_id).mkdir(parents=True)
        record = {"run_id": run_id, "facts": facts, "artifacts": artifacts}
        (results / "runs" / run_id / "manifest.json").write_text(json.dumps(record))
    assert run_facts(first) == {"run_name": "baseline", "data_hash": digest}
    assert run_facts(new_vm(tmp_path, "no-model")) == {}, "no model: no facts"
    kept = storage / "models" / "baseline"
    done = keep_state_on_storage(first, storage)  # on Colab: the model and run records on Drive
    assert f"Model of run 'baseline': {kept} (model.keras, model.json, train.json)" in done
    assert keep_model(first, storage) == f"Model of run 'baseline': in {kept} already"
    assert (kept / "model.keras").read_bytes() == b"a model"
    assert keep_model(new_vm(tmp_path, "empty"), storage) is None  # no model: nothing kept
    # A VM gone between keep_model's two renames: the model kept before is found again.
    os.replace(kept, kept.with_name(".baseline.old"))
    (storage / "models" / ".baseline.partial").mkdir()
    assert restore_for_evaluation(new_vm(tmp_path, "cut", remote)).startswith(
        f"Model: run 'baseline' restored from {kept}"
    )
    # VM 3: the model from Drive, its data from the DVC remote.
    third = new_vm(tmp_path, "vm3", remote)
    line = restore_for_evaluation(third)
    assert line.startswith(f"Model: run 'baseline' restored from {kept}; Data: the data the model")
    assert (third / "results/models/model.keras").read_bytes() == b"a model"
    assert json.loads((third / "results/metrics/train.json").read_text()) == numbers
    assert same_files(third, doc)
    assert restore_for_evaluation(third).startswith(
        f"Model: models/model.keras of run 'baseline' on this VM; Data: {MANIFEST} on this VM"
    )
    line = restore_for_evaluation(new_vm(tmp_path, "vm4"), "other")
    assert line == (
        f"Model: none on this VM, and no model of run 'other' in {storage / 'models' / 'other'}: "
        "train it first (02_train.ipynb)"
    )


def copy_project(tmp_path: Path) -> Path:
    """This project's files (no results, data or environments) in a new git repository: a new
    VM's clone, so without the DVC cache that this checkout may hold after `dvc repro`."""
    project = tmp_path / "project"
    copy_checkout(project)
    for folder in ("cache", "tmp"):
        shutil.rmtree(project / ".dvc" / folder, ignore_errors=True)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    return project


def make_notebooks(
    project: Path, storage: Path, *parameters: str, only: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Run what `make notebooks` runs, with `-p` parameters (and `--only` prefixes), in
    `project`; check that it passed, that every notebook run has its HTML report and no error
    output; return the executed notebooks by number ("01", ...)."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(project / "src"),
        "PROJECT_STORAGE_DIR": str(storage),
        "WANDB_MODE": "offline",
    }
    for name in ("COLAB_RELEASE_TAG", "PROJECT_RESULTS_DIR", "TF_CONFIG", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    command = [sys.executable, "-m", MODULE, "notebooks"]
    command += [part for item in parameters for part in ("-p", item)]
    command += ["--only", *only] if only else []
    run = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=1500
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]
    reports, executed = project / "results" / "reports", {}
    for path in [p for p in NOTEBOOKS if p.name.startswith(only or ("",))]:
        html = reports / path.with_suffix(".html").name
        assert html.is_file() and html.stat().st_size > 10_000, html
        nb = executed[path.name[:2]] = nbformat.read(reports / path.name, as_version=4)
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error"], path.name
    return executed


@pytest.mark.slow
def test_make_notebooks_runs_every_notebook_and_writes_html_reports(tmp_path):
    project = copy_project(tmp_path)
    # What `make notebooks` runs, with tiny parameters.
    executed = make_notebooks(
        project, tmp_path / "storage", "epochs=1", "run_name=nb", "n_trials=1"
    )
    for number, nb in executed.items():
        injected = "".join(c.source for c in nb.cells if is_injected(c))
        # Each notebook gets only the parameters it declares: epochs goes to 02 and 04.
        assert ("epochs = 1" in injected) == (number in ("02", "04"))
        assert ("run_name = " in injected) == (number in ("02", "03"))
    figures = {p.name for p in (project / "results" / "figures").glob("*.png")}
    for name in ("01_class_counts", "01_examples", "03_confusion_matrix", "03_training_curves"):
        assert f"{name}.png" in figures
    card = next(c for c in executed["03"].cells if "card_markdown(" in c.source).outputs[-1]
    assert card.data["text/markdown"].startswith("# Model card: ")
    assert (project / "results" / "environment.json").is_file()
    (manifest,) = (project / "results" / "runs").glob("*-nb-*/manifest.json")
    assert json.loads(manifest.read_text())["params"]["train"]["epochs"] == 1


def write_png_classes(folder: Path, classes: list[str], per_class: int) -> None:
    """`folder/<class>/<i>.png`: 16x16 RGB noise, each class bright in its own channel."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for k, name in enumerate(classes):
        (folder / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 60, (16, 16, 3), dtype=np.uint8)
            pixels[..., k % 3] += 150
            Image.fromarray(pixels).save(folder / name / f"{i}.png")


@pytest.mark.slow
def test_make_notebooks_on_an_image_folder(tmp_path):
    """`make notebooks` with `data.source: images` (a folder of class folders of PNGs) and a
    small CNN: no cell assumes the bundled digits, and notebook 03 shows the classification
    report (per-class metrics, the confusion matrix) with the folders' class names."""
    project = copy_project(tmp_path)
    classes = ["circle", "square", "stripe"]
    write_png_classes(project / "data" / "external" / "shapes", classes, per_class=20)
    params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
    params["data"].update(
        source="images", path="data/external/shapes", image_size=[16, 16], image_channels=3
    )
    params["model"].update(architecture="cnn", filters=[4])
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    started = time.monotonic()
    executed = make_notebooks(
        project, tmp_path / "storage", "epochs=1", "batch_size=8", "n_trials=1"
    )
    print(f"make notebooks on an image folder: {time.monotonic() - started:.0f} s")
    outputs = [o for c in executed["01"].cells for o in c.get("outputs", [])]
    printed = "".join(o.get("text", "") for o in outputs)
    assert "from images (classification: 3 class names; images 16x16x3)" in printed
    assert "inputs of shape (16, 16, 3)" in printed
    cells = [c for c in executed["03"].cells if c.cell_type == "code"]
    summary = next(c for c in cells if "evaluation_summary(" in c.source).outputs[-1]
    table = re.sub(" +", " ", summary.data["text/markdown"])  # tabulate pads the cells
    scored_on = "a random 20 % of shapes/ (seed 42, stratified by class), 12 examples"
    assert table.startswith(f"Test split (classification, {scored_on}): accuracy ")
    assert "| class | precision | recall | f1 | support |" in table
    assert all(f"| {name} | " in table for name in classes)
    figure = next(c for c in cells if "plot_evaluation(" in c.source)
    assert any("image/png" in o.get("data", {}) for o in figure.outputs)
    assert "Saved results/figures/03_confusion_matrix.png" in "".join(
        o.get("text", "") for o in figure.outputs
    )
    figures = {p.stem for p in (project / "results" / "figures").glob("*.png")}
    assert {"01_examples", "01_mean_images", "03_confusion_matrix"} <= figures


@pytest.mark.slow
def test_make_notebooks_on_text_files(tmp_path):
    """`make notebooks` with `data.source: text` (class folders of .txt files) and the `text`
    model: notebook 01 shows texts as a table (no images to draw), 03 the worst texts."""
    project = copy_project(tmp_path)
    rng = np.random.default_rng(0)
    words = {"sport": "goal match team coach", "food": "oven sugar bake sauce"}
    for name, topic in words.items():
        (project / "data/external/notes" / name).mkdir(parents=True)
        for i in range(20):
            text = " ".join(rng.choice((topic + " the a of and").split(), 8))
            (project / "data/external/notes" / name / f"{i}.txt").write_text(text, "utf-8")
    params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
    params["data"].update(source="text", path="data/external/notes", sequence_length=8)
    params["model"].update(architecture="text", hidden_units=[8], embedding_dim=8)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    executed = make_notebooks(
        project, tmp_path / "storage", "epochs=1", "batch_size=8", "n_trials=1"
    )
    shown = [
        o.get("data", {}).get("text/markdown", "")
        for number in ("01", "03")
        for c in executed[number].cells
        for o in c.get("outputs", [])
    ]
    outputs = [o for c in executed["01"].cells for o in c.get("outputs", [])]
    printed = "".join(o.get("text", "") for o in outputs)
    assert "classification: 2 class names; texts of 8 to 8 words" in printed
    shown = [re.sub(" +", " ", s) for s in shown]  # tabulate pads the cells
    assert any(s.startswith("| target | text |\n|:-") and "\n| food | " in s for s in shown)
    assert any("| id | text | target | prediction | loss |" in s for s in shown)
    figures = {p.stem for p in (project / "results" / "figures").glob("*.png")}
    assert "01_examples" not in figures and "01_class_counts" in figures


@pytest.mark.slow
def test_the_sweep_notebook_searches_shows_the_trials_and_promotes_the_best(tmp_path):
    """04 on a new VM (no data): two trials of one epoch on the digits, the trials table and
    figure shown, then `promote = True` makes the best trial the project's model and settings."""
    project = copy_project(tmp_path)
    tiny = ("n_trials=2", "epochs=1", "batch_size=32", "sweep_name=nb", "promote=True")
    nb = make_notebooks(project, tmp_path / "storage", *tiny, only=("04",))["04"]
    folder = project / "results" / "sweeps" / "nb"
    with open(folder / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["number"], r["state"]) for r in rows] == [("0", "COMPLETE"), ("1", "COMPLETE")]
    cells = [c for c in nb.cells if c.cell_type == "code"]
    printed = "".join(o.get("text", "") for c in cells for o in c.outputs)
    assert "Data: prepared on this VM" in printed and "Trial 1 (nb-1)" in printed
    shown = next(c for c in cells if "trials.csv" in c.source).outputs
    assert any("text/html" in o.get("data", {}) for o in shown), "the trials table"
    assert any("image/png" in o.get("data", {}) for o in shown), "the trials figure"
    assert "Promoted trial " in printed
    promoted = load_params(project / "params.yaml")
    assert promoted.run_name in ("nb-0", "nb-1")
    assert run_facts(project).get("run_name") == promoted.run_name
    assert (project / "results" / "models" / "model.keras").is_file()
