"""Colab in a box: the Colab path as a user meets it, with a user's answers, on Colab's Python and
packages, across VMs that go away (scripts/colab_box.py builds the box).

A project baked with non-default answers (Pets, by ada-lab) is pushed to "GitHub" (a local bare
repository reached as https://github.com/ada-lab/pets.git); its notebooks run top to bottom in a
Colab kernel, each VM with its own /content, host name and processes, Drive shared between them:

1. a runtime that moved on (a newer TensorFlow) is refused in one line by the setup cell;
2. VM 1: 01 clones the answered repository onto the VM's disk and prepares; its `%pip install`
   replaces no preinstalled package (but the lock's documented overrides); DVC's remote is on Drive;
3. VM 1: after a teammate's push, 02 with its default parameters finds no GPU and stops at once,
   in one line, having written nothing (no checkpoint, no lease, no run record);
4. VM 1: 02 trains on the CPU (uncommitted edits kept) and the VM goes away mid-run;
5. VM 2: 02 again resumes from Drive at the next batch and finishes;
6. VM 3: 03 evaluates.
The steps share one box and run in this order.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

import colab_box
import project_env

ANSWERS = {
    "project_name": "Pets",
    "github_owner": "ada-lab",
    "author_name": "Ada Lovelace",
    "author_email": "ada@example.org",
    "description": "Tells pets apart.",
    "python_version": "3.12",
    "open_source_license": "BSD-3-Clause",
}
SLUG, MODULE, OWNER = "pets", "pets", "ada-lab"
DEFAULT_NAMES = ("your-github-user", "colab-project", "colab_project", "Colab Project")
# The user's own settings in params.yaml (the notebooks take them: no parameter is set): small,
# so that training lasts seconds on a CPU and checkpoints often.
USER_PARAMS = {
    "  epochs: 20": "  epochs: 3",
    "  batch_size: 32 ": "  batch_size: 8 ",
    "  checkpoint_every_steps: 500": "  checkpoint_every_steps: 6",
    "  steps_per_execution: 100": "  steps_per_execution: 3",
    "  hidden_units: [64, 64]": "  hidden_units: [16]",
}
KILL_AT_STEP = 30
CPU = {"require_accelerator": False}
TIMES: dict[str, float] = {}

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="Colab in a box needs root and unshare (mount and UTS namespaces): run the tests as root",
)


def load_lock_tool(project: Path):
    spec = importlib.util.spec_from_file_location("pets_lock_tool", project / "tools" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Scenario:
    """The box and what the steps learn from each other."""

    def __init__(self, root: Path) -> None:
        started = time.monotonic()
        self.project = project_env.bake(root / "bake", **ANSWERS)
        params = self.project / "params.yaml"
        text = params.read_text()
        for old, new in USER_PARAMS.items():
            assert old in text, old
            text = text.replace(old, new)
        params.write_text(text)
        TIMES["bake"] = time.monotonic() - started
        started = time.monotonic()
        self.image = colab_box.image_for(self.project)
        TIMES["image (0 when cached)"] = time.monotonic() - started
        self.box = colab_box.Box(root / "box", self.image, OWNER, SLUG)
        self.box.publish(self.project)
        self.teammate = root / "teammate"
        colab_box.git(root, "clone", "-q", str(self.box.origin), str(self.teammate))
        self.vm: colab_box.VM | None = None
        self.killed_at = 0

    def notebook(self, number: str) -> Path:
        return next((self.project / "notebooks").glob(f"{number}_*.ipynb"))

    def teammate_pushes(self, text: str) -> str:
        """A teammate commits a change and pushes it; returns the new commit."""
        (self.teammate / "NOTES.md").write_text(text)
        colab_box.git(self.teammate, "add", "NOTES.md")
        colab_box.git(self.teammate, "commit", "-q", "--no-verify", "-m", text.strip())
        colab_box.git(self.teammate, "pull", "-q", "--rebase", "origin", "main")
        colab_box.git(self.teammate, "push", "-q", "origin", "HEAD:main")
        return colab_box.git(self.teammate, "rev-parse", "HEAD")

    def checkpoints(self) -> list[int]:
        """Steps of the complete checkpoints of the run on Drive."""
        folder = self.box.storage / "checkpoints" / "baseline"
        return sorted(int(p.parent.name.split("-")[1]) for p in folder.glob("step-*/meta.json"))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory):
    scenario = Scenario(tmp_path_factory.mktemp("colab-box"))
    yield scenario
    scenario.box.close()
    lines = [f"  {name:<34} {seconds:6.1f} s" for name, seconds in TIMES.items()]
    print("\nColab in a box, timings:\n" + "\n".join(lines))
    (scenario.box.root / "timings.json").write_text(json.dumps(TIMES, indent=1))


def setup_seconds(run: colab_box.NotebookRun) -> float:
    """How long the setup cell took (nbclient's timing of it)."""
    cell = next(c for c in run.code_cells if "start_session(" in "".join(c["source"]))
    times = cell["metadata"]["execution"]
    start, end = (times[k].replace("Z", "+00:00") for k in ("iopub.execute_input", "shell.execute_reply"))
    from datetime import datetime

    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def one_line_stop(run: colab_box.NotebookRun) -> str:
    """The run stopped on a cell that showed one line and nothing else; that line."""
    assert run.status == "error", (run.status, run.result, run.text[-3000:], run.log[-2000:])
    (error,) = run.errors
    assert error["ename"] == "NotebookStop" and len(error["traceback"]) == 1, error
    return error["traceback"][0]


def test_a_runtime_that_moved_on_is_refused_in_one_line(scenario: Scenario) -> None:
    """Item 6: a newer TensorFlow on the runtime. The setup cell stops before `%pip`, in one line
    naming it and the ways out, with this runtime's pip freeze saved on Drive for `make lock`."""
    vm = scenario.box.new_vm()
    vm.fake_distribution("tensorflow", "2.99.0")
    run = vm.run(scenario.notebook("01"))
    TIMES["refusal: 01 until it stops"] = run.seconds
    line = one_line_stop(run)
    lock = colab_box.pins(scenario.project / "requirements.txt")
    assert line.startswith("This Colab runtime is not the one requirements.txt was locked for: ")
    assert f"tensorflow 2.99.0 (lock: {lock['tensorflow']})" in line, line
    freeze = re.search(r"make lock COLAB_FREEZE=(\S+)`", line)[1]
    assert freeze.startswith(f"/content/drive/MyDrive/{SLUG}/colab-pip-freeze-gpu-"), line
    assert "allow_reinstall = True" in line and "Runtime version" not in line
    saved = scenario.box.drive / Path(freeze).relative_to("/content/drive")
    text = saved.read_text()
    assert text.startswith("# pip freeze of the Colab GPU runtime ") and "\ntensorflow==2.99.0\n" in text
    assert f"\nkeras=={lock['keras']}\n" in text  # the rest of the runtime, as it is
    # Refused before installing: the VM holds the clone, and nothing of %pip.
    assert (vm.checkout / ".git").is_dir()
    assert vm.distributions() == {"tensorflow": "2.99.0"}


def test_01_clones_the_answered_repository_and_prepares(scenario: Scenario) -> None:
    """Notebook 01 on a new VM: the clone of ada-lab/pets on the VM's disk, `%pip` that changes
    no preinstalled package (but tools/lock.py's OVERRIDES), the data prepared and pushed to the
    DVC remote on Drive, TensorBoard logs and run records on Drive."""
    box, project = scenario.box, scenario.project
    vm = scenario.vm = box.new_vm()
    image_before = scenario.image.distributions()
    run = vm.run(scenario.notebook("01"))
    TIMES["VM 1: 01 (clone, %pip, prepare)"] = run.seconds
    TIMES["VM 1: 01's setup cell"] = setup_seconds(run)
    assert run.status == "ok", (run.result, run.text[-5000:], run.log[-3000:])
    text = run.text
    # The answered repository, cloned onto the VM's disk; nothing of the code on Drive.
    checkout = vm.checkout
    assert colab_box.git(checkout, "config", "--get", "remote.origin.url") == box.url
    # Clean with the git hooks installed (the notebooks are in nbstripout's form): the next
    # setup moves it to the latest commit.
    assert colab_box.git(checkout, "status", "--porcelain", "--untracked-files=no") == ""
    assert not [p for p in box.storage.rglob("*") if p.name in (".git", "src", "notebooks")]
    assert f"Saved /content/{SLUG}/results/environment.json" in text and "Colab       yes" in text
    environment = json.loads((checkout / "results" / "environment.json").read_text())
    assert environment["python"]["version"].startswith(f"{colab_box.COLAB_PYTHON}.")
    # %pip: the lock's missing packages and the project went to the VM; no preinstalled package
    # changed version but the lock's documented overrides.
    overrides = {canonicalize_name(n) for n in load_lock_tool(project).OVERRIDES}
    installed = vm.distributions()
    assert {"dvc", "nbstripout", SLUG} <= set(installed)
    assert set(installed) & set(image_before) == overrides, set(installed) & set(image_before)
    assert scenario.image.distributions() == image_before
    lock = colab_box.pins(project / "requirements.txt")
    effective = vm.effective_versions()
    assert {n: (effective.get(n), v) for n, v in lock.items() if effective.get(n) != v} == {}
    # DVC: outputs in the workspace, the cache on the VM's disk, the remote on Drive.
    assert (checkout / "data" / "manifest.json").is_file()
    assert list((checkout / "data" / "processed").iterdir())
    assert list((checkout / ".dvc" / "cache").rglob("*"))
    assert "DVC: `prepare` recorded in dvc.lock and pushed" in text, text
    assert list((box.storage / "dvc-storage").rglob("*")), "prepare's outputs on the remote"
    assert "prepare:" in (checkout / "dvc.lock").read_text()
    # TensorBoard logs and run records go to Drive.
    assert os.readlink(checkout / "results" / "tensorboard") == f"/content/drive/MyDrive/{SLUG}/tensorboard"
    assert (box.storage / "tensorboard").is_dir() and (box.storage / "runs").is_dir()
    assert (checkout / "results" / "figures" / "01_class_counts.png").is_file()
    # Nothing of the default answers, in what the user opened or in what it printed.
    for path in (project / "notebooks").glob("*.ipynb"):
        assert not [name for name in DEFAULT_NAMES if name in path.read_text()], path.name
    assert not [name for name in DEFAULT_NAMES if name in text]


def test_02_without_an_accelerator_stops_at_once(scenario: Scenario) -> None:
    """Item 7, on the same VM after a teammate's push: the setup moves to it (a warm start), then
    02 with its default parameters finds no GPU and stops in one line, before anything trains:
    no checkpoint, no lease, no run record."""
    box, vm = scenario.box, scenario.vm
    checkout = vm.checkout
    # The daily loop from Colab: commit dvc.lock and push; a teammate then pushes a commit.
    colab_box.git(checkout, "add", "dvc.lock")
    colab_box.git(checkout, "commit", "-q", "--no-verify", "-m", "Data prepared on Colab")
    box.push_from(checkout)
    head = scenario.teammate_pushes("a teammate's change\n")
    run = vm.run(scenario.notebook("02"))
    TIMES["VM 1: 02 until no accelerator"] = run.seconds
    TIMES["VM 1: warm setup cell (fetch, %pip)"] = setup_seconds(run)
    line = one_line_stop(run)
    assert line.startswith("No GPU or TPU on this runtime, only the CPU") and "require_accelerator = False" in line
    assert colab_box.git(checkout, "rev-parse", "HEAD") == head, run.outputs_of("start_session(")
    assert (checkout / "NOTES.md").is_file()
    train = next(c for c in run.code_cells if "exit_code = main(" in "".join(c["source"]))
    assert train["execution_count"] is None and not train["outputs"], "training never started"
    assert not (box.storage / "checkpoints").exists(), "nothing under the checkpoints, no lease"
    assert not list(box.storage.glob("runs/*/manifest.json"))
    assert not list(checkout.glob("results/runs/*/manifest.json")), "no run record"


def test_02_trains_until_the_vm_goes_away(scenario: Scenario) -> None:
    """02 on the CPU (require_accelerator = False), with the user's params.yaml (no other
    parameter set), until a checkpoint is on Drive; then the VM disconnects: every process of it
    killed at once. Uncommitted edits on the VM were kept by the setup, not overwritten."""
    box, vm = scenario.box, scenario.vm
    checkout = vm.checkout
    (checkout / "params.yaml").write_text((checkout / "params.yaml").read_text() + "# mine\n")
    head = scenario.teammate_pushes("a second change\n")
    run = vm.run(scenario.notebook("02"), CPU, kill_at_step=KILL_AT_STEP)
    TIMES["VM 1: 02 until the disconnect"] = run.seconds
    assert run.status == "killed", (run.result, run.text[-5000:], run.log[-3000:])
    text = run.text
    assert f"NOTE: uncommitted edits in /content/{SLUG}: kept" in text
    assert (checkout / "params.yaml").read_text().endswith("# mine\n")
    assert colab_box.git(checkout, "rev-parse", "HEAD") != head
    # params.yaml's settings, not a copy in the notebook: 3 epochs of batches of 8.
    per_epoch, total = map(int, re.search(r"(\d+) steps per epoch, (\d+) in all", text).groups())
    assert total == 3 * per_epoch and "Global batch 8 = 8 per replica" in text
    steps = scenario.checkpoints()
    assert steps and KILL_AT_STEP <= steps[-1] < total, (steps, total)
    lease = json.loads((box.storage / "checkpoints" / "baseline" / "lease.json").read_text())
    assert lease["host"] == vm.hostname, "the dead VM's lease stays on Drive"
    scenario.killed_at = steps[-1]


def test_02_on_a_new_vm_resumes_from_drive_and_finishes(scenario: Scenario) -> None:
    """A new VM (new disk, new host name, Drive kept): 02 run again, as its text says, restores
    what it needs, takes over the dead VM's lease at once and resumes at the next batch."""
    box, old = scenario.box, scenario.vm
    assert scenario.killed_at, "the disconnect step did not run"
    vm = scenario.vm = box.new_vm()
    assert not old.dir.exists() and vm.hostname != old.hostname
    newest = scenario.checkpoints()[-1]
    run = vm.run(scenario.notebook("02"), CPU)
    TIMES["VM 2: 02 (resume, finish)"] = run.seconds
    text = run.text
    assert run.status == "ok", (run.result, run.text[-5000:], run.log[-3000:])
    assert f"Taking over run 'baseline' from host {old.hostname}" in text
    assert f"Resuming run 'baseline' from its checkpoint at step {newest} " in text
    assert "--fresh" not in text and "temporary train/validation split" not in text
    assert (vm.checkout / "results" / "models" / "model.keras").is_file()
    assert list(box.storage.glob("runs/*/manifest.json")), "the run record on Drive"
    assert not (box.storage / "checkpoints" / "baseline" / "lease.json").exists()


def test_03_on_a_new_vm_evaluates(scenario: Scenario) -> None:
    box = scenario.box
    vm = scenario.vm = box.new_vm()
    run = vm.run(scenario.notebook("03"))
    TIMES["VM 3: 03 (evaluate)"] = run.seconds
    assert run.status == "ok", (run.result, run.text[-5000:], run.log[-3000:])
    assert (vm.checkout / "results" / "metrics" / "evaluate.json").is_file()
    assert (vm.checkout / "results" / "figures" / "03_training_curves.png").is_file()
