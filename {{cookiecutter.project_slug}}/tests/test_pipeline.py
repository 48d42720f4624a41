"""The DVC pipeline in a copy of this project under git: repro, no-op repro, a changed param,
push / pull through a local remote, and the manifest check; the train stage reuses a run that a
notebook trained with the same settings and trains a run of its own for other ones, deleting no
checkpoint; a new VM restores the data from the remote. Training is kept tiny (1 epoch)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PARAMS

ROOT = Path(__file__).resolve().parents[1]
MODULE = "{{ cookiecutter.module_name }}"
# What a clean clone does not have: outputs of earlier runs in this checkout.
GENERATED = ["dvc.lock", "data/manifest.json", "results/metrics", "results/plots"]

pytestmark = pytest.mark.slow


def clean_copy(dest: Path) -> None:
    """Copy the files a clone would have (tracked or not ignored), never outputs or caches."""
    listing = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if listing.returncode == 0 and listing.stdout:
        for rel in filter(None, listing.stdout.split("\0")):
            if (ROOT / rel).is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, dest / rel)
    else:  # not a git checkout (an unpacked archive)
        skip = shutil.ignore_patterns(".git", ".venv", "cache", "tmp", "__pycache__", "checkpoints")
        shutil.copytree(ROOT, dest, ignore=skip, dirs_exist_ok=True)
        for out in ("data/raw", "data/processed", "results/models"):
            for p in (dest / out).glob("*"):
                if p.is_file() and p.name != ".gitkeep":
                    p.unlink()
    for rel in GENERATED:
        target = dest / rel
        if target.is_file():
            target.unlink()
        elif target.is_dir():
            for p in target.glob("*.*"):
                if p.name != ".gitkeep":
                    p.unlink()


class Project:
    """A throwaway copy of the project, with `dvc`, `git` and the package on hand."""

    def __init__(self, path: Path, storage: Path) -> None:
        self.path = path
        self.storage = storage
        self.output = ""
        self.times: list[str] = []  # printed at the end (pytest -s): where the time goes
        # dvc.yaml's stages run `python`: make that this interpreter (a venv's, or one without a
        # `python` next to it).
        bindir = storage.parent / "bin"
        bindir.mkdir(exist_ok=True)
        wrapper = bindir / "python"  # not a symlink: a venv's python must keep its own path
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        wrapper.chmod(0o755)
        search = [str(bindir), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "PROJECT_RESULTS_DIR"},
            "PATH": os.pathsep.join(search),
            "PYTHONPATH": str(path / "src"),
            "PROJECT_STORAGE_DIR": str(storage),
            "DVC_NO_ANALYTICS": "1",
            "GIT_AUTHOR_NAME": "test",
            "GIT_AUTHOR_EMAIL": "test@example.com",
            "GIT_COMMITTER_NAME": "test",
            "GIT_COMMITTER_EMAIL": "test@example.com",
        }

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        start = time.perf_counter()
        proc = subprocess.run(
            args, cwd=self.path, env=self.env, capture_output=True, text=True, timeout=600
        )
        shown = args[2:] if args[0] == sys.executable else args  # `-m dvc repro` -> `repro`
        self.times.append(f"{time.perf_counter() - start:6.1f} s  {' '.join(shown)}")
        if ok and proc.returncode != 0:
            output = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            pytest.fail(f"{' '.join(args)} exited {proc.returncode}:\n{output}")
        return proc

    def dvc(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "dvc", *args, ok=ok)

    def repro(self, *targets: str) -> tuple[set[str], float]:
        """Run `dvc repro [targets]`; return the stages that ran and the seconds it took (the
        stages' output is in `self.output`)."""
        start = time.perf_counter()
        proc = self.dvc("repro", *targets)
        self.output = proc.stdout + proc.stderr
        return set(re.findall(r"Running stage '(\w+)'", proc.stdout)), time.perf_counter() - start

    def checkpoints(self, run_name: str) -> dict[str, float]:
        """The run's checkpoint folders on the storage root, with their meta.json's mtime."""
        folder = self.storage / "checkpoints" / run_name
        return {p.parent.name: p.stat().st_mtime_ns for p in folder.glob("step-*/meta.json")}

    def set_param(self, key: str, value: str) -> None:
        params = self.path / "params.yaml"
        text, n = re.subn(rf"(?m)^(\s+{key}:)\s*[^#\n]*", rf"\g<1> {value} ", params.read_text())
        assert n == 1, key
        params.write_text(text)

    def changed_stages(self) -> set[str]:
        """The stages `dvc status` reports as changed."""
        return set(json.loads(self.dvc("status", "--json").stdout or "{}"))

    def sha256(self, rel: str) -> str:
        return hashlib.sha256((self.path / rel).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    base = tmp_path_factory.mktemp("pipeline")
    clean_copy(base / "project")
    shutil.copy(PARAMS, base / "project" / "params.yaml")  # the values the test asserts on
    p = Project(base / "project", base / "storage")
    p.set_param("epochs", "1")
    p.run("git", "init", "-q")
    p.dvc("config", "--local", "core.check_update", "false")
    # The remote of the chosen template option is replaced by a folder, in config.local only.
    p.dvc("remote", "add", "--local", "-d", "-f", "testremote", str(base / "remote"))
    p.run("git", "add", "-A")
    p.run("git", "commit", "-qm", "baked project")
    return p


def test_pipeline(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    p = project
    # The data, then run 'baseline' trained as notebook 02 trains it; then the whole pipeline:
    # the train stage reuses that run (same settings, data and code), its checkpoints kept.
    ran, first = p.repro("prepare")
    assert ran == {"prepare"}
    p.run(sys.executable, "-m", MODULE, "train")
    notebook_run = p.checkpoints("baseline")
    assert notebook_run
    ran, reused = p.repro()
    first += reused
    assert ran == {"train", "evaluate"}
    assert "Run 'baseline' is already complete" in p.output and "differs" not in p.output
    assert p.checkpoints("baseline") == notebook_run
    for rel in ("data/raw/digits.csv", "data/processed/spec.json", "results/models/model.keras"):
        assert (p.path / rel).is_file(), rel
    metrics = json.loads((p.path / "results/metrics/evaluate.json").read_text())
    assert set(metrics) == {"test_accuracy", "test_f1"}  # what DVC compares
    assert 0.0 <= metrics["test_accuracy"] <= 1.0
    card = (p.path / "results/reports/model_card.md").read_text()
    assert re.search(r"\| balanced_accuracy +\| 0\.", card), "the card lists every metric"
    curve = (p.path / "results/plots/training_curve.csv").read_text().splitlines()
    header = curve[0].split(",")
    assert {"epoch", "loss", "accuracy", "val_loss", "val_accuracy"} <= set(header)
    assert len(curve) == 2
    # Every data file's DVC md5 in the manifest is an object in the DVC cache.
    manifest = json.loads((p.path / "data/manifest.json").read_text())
    for entry in manifest["files"]:
        md5 = entry["dvc"]["md5"]
        assert (p.path / ".dvc/cache/files/md5" / md5[:2] / md5[2:]).is_file(), entry["path"]

    ran, noop = p.repro()
    assert ran == set()
    assert p.changed_stages() == set()  # __pycache__ of the runs does not count (.dvcignore)

    # The stages depend on folders: a module the user adds counts for train and evaluate; an edit
    # to the model leaves the (long) prepare alone.
    package = p.path / "src" / MODULE
    (package / "resnet.py").write_text('"""A model of my own."""\n')
    assert p.changed_stages() == {"train", "evaluate"}
    (package / "resnet.py").unlink()
    checkpoints = package / ".ipynb_checkpoints"  # Jupyter's copy of model.py: no code
    checkpoints.mkdir()
    (checkpoints / "model-checkpoint.py").write_text("# an older copy\n")
    assert p.changed_stages() == set()
    shutil.rmtree(checkpoints)
    model = package / "model.py"
    original = model.read_text()
    model.write_text(original + "# a comment\n")
    assert p.changed_stages() == {"train", "evaluate"}
    model.write_text(original)
    (package / "sources.py").write_text((package / "sources.py").read_text() + "# a comment\n")
    assert "prepare" in p.changed_stages()
    p.run("git", "checkout", "--", f"src/{MODULE}/sources.py")
    assert p.changed_stages() == set()

    # Another learning rate: a run of its own; run 'baseline' keeps every checkpoint.
    p.set_param("learning_rate", "0.003")
    ran, _ = p.repro()
    assert ran == {"train", "evaluate"}
    own = re.search(r"training run '(baseline-[0-9a-f]{8})' instead", p.output)
    assert own and "train.learning_rate was 0.001, now 0.003" in p.output, p.output[-3000:]
    assert p.checkpoints("baseline") == notebook_run and p.checkpoints(own[1])

    # Every task's plots are declared; the other tasks' files are there, header only: no errors.
    plots = json.loads(p.dvc("plots", "show", "--json").stdout)
    shown = {"Loss per epoch", "Accuracy per epoch (classification)"}
    shown |= {
        "Confusion matrix, test split (classification)",
        "F1 per label, test split (multilabel)",
    }
    assert shown <= set(plots.get("data", plots)) and not plots.get("errors")

    # Push, lose every copy (cache and workspace), pull: the same bytes come back.
    p.run("git", "add", "-A")
    p.run("git", "commit", "-qm", "lr 0.003")
    p.dvc("push")
    versioned = [
        "data/raw/digits.csv",
        "data/processed/train-00000.tfrecord",
        "data/processed/validation-00000.tfrecord",
        "data/processed/test-00000.tfrecord",
        "data/processed/spec.json",
        "results/models/model.keras",
    ]
    before = {rel: p.sha256(rel) for rel in versioned}
    # Then troubleshooting.md's `dvc gc --all-commits -c` (with -f: no prompt here): it keeps
    # every version a commit names, so the same bytes come back again.
    for gc in ([], ["gc", "--all-commits", "--cloud", "--force"]):
        if gc:
            p.dvc(*gc)
        shutil.rmtree(p.path / ".dvc" / "cache")
        for rel in ("data/raw", "data/processed", "results/models/model.keras"):
            target = p.path / rel
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        p.dvc("pull")
        assert {rel: p.sha256(rel) for rel in versioned} == before
        assert "up to date" in p.dvc("status").stdout

    # A data file that differs from the manifest stops `train` with one line naming it.
    train_file = p.path / "data/processed/train-00000.tfrecord"
    data = bytearray(train_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    train_file.write_bytes(bytes(data))
    proc = p.run(sys.executable, "-m", MODULE, "train", ok=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: data/processed/train-00000.tfrecord: changed since"), error
    p.dvc("checkout", "--force")
    shard = "data/processed/train-00000.tfrecord"
    assert p.sha256(shard) == before[shard]

    # A new VM: a clean clone, the same remote and storage; the data of the run (its checkpoint
    # names it, the storage folder keeps its manifest) comes back from what `dvc push` stored.
    from {{ cookiecutter.module_name }}.colab.restore import restore_for_training

    vm = p.path.parent / "new-vm"
    shutil.copytree(p.path, vm, ignore=shutil.ignore_patterns("data", "results", "cache"))
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(p.storage))
    line = restore_for_training(vm, {"run_name": own[1]})
    assert line.startswith(f"Data: the data run '{own[1]}' was trained on (") and "remote" in line
    for rel in versioned[:-1]:
        assert hashlib.sha256((vm / rel).read_bytes()).hexdigest() == before[rel], rel
    print(f"\ndvc repro {first:.1f} s, no-op {noop:.1f} s; every command:", *p.times, sep="\n")
