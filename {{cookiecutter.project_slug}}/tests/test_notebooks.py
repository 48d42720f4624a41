"""The notebooks: Colab-ready, parameterised, clean, and they run headless on the bundled data
and on an image folder."""

from __future__ import annotations

import json
import os
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
import yaml
from conftest import not_in_a_clone

from {{ cookiecutter.module_name }}.colab.notebooks import (
    NotebookError,
    keep_state_on_storage,
    push_stage,
    run_notebooks,
)

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((PROJECT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
REPO = "{{ cookiecutter.github_owner }}/{{ cookiecutter.project_slug }}"
COLAB = f"https://colab.research.google.com/github/{REPO}/blob/main/notebooks/"


def code_cells(path: Path) -> list:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def is_injected(cell) -> bool:
    """The cell papermill adds after the `parameters` cell."""
    return "injected-parameters" in cell.metadata.get("tags", [])


def test_numbered_setup_train_evaluate():
    names = [nb.name for nb in NOTEBOOKS]
    assert len(names) >= 3
    assert names[0].startswith("01_") and names[1].startswith("02_") and names[2].startswith("03_")


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
    assigned = {line.split("=")[0].strip() for line in lines if " = " in line}
    assert set(papermill.inspect_notebook(str(path))) == assigned
    assert {"seed", "branch"} <= assigned
    assert COLAB + path.name in nb.cells[0].source, "Open in Colab badge"
    # The code lives in the package: cells call it, they define nothing.
    for cell in cells:
        lines = cell.source.splitlines()
        assert not any(line.startswith(("def ", "class ")) for line in lines), cell.source


def test_every_notebook_starts_with_the_same_setup():
    setups = []
    for path in NOTEBOOKS:
        setup = next(c.source for c in code_cells(path) if "start_session(" in c.source)
        setups.append(setup)
        steps = ("drive.mount", "clone", "fetch", "FETCH_HEAD", "%pip install -q -r requirements")
        for step in steps:
            assert step in setup, f"{path.name}: setup lacks {step}"
    assert len(set(setups)) == 1, "the setup cell differs between notebooks"


def test_a_parameter_no_notebook_has_is_a_one_line_error():
    with pytest.raises(NotebookError, match=r"^-p epoch: no notebook has this parameter"):
        run_notebooks(PROJECT, {"epoch": 1})


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


def test_a_run_with_other_params_is_not_pushed_as_the_stage(tmp_path, capsys):
    (tmp_path / "params.yaml").write_text("run_name: baseline\ntrain:\n  epochs: 20\n")
    assert not push_stage(tmp_path, "train", {"run_name": "baseline", "train.epochs": 1})
    note = capsys.readouterr().out  # run_name is params.yaml's: not named
    expected = "NOTE: not recorded in DVC: this run used train.epochs=1 (params.yaml: 20);"
    assert note.startswith(expected)


def test_training_notebook_shows_tensorboard_on_colab():
    train = next(p for p in NOTEBOOKS if p.name.startswith("02_"))
    assert any("%tensorboard --logdir" in c.source for c in code_cells(train))


def copy_project(tmp_path: Path) -> Path:
    """This project's files (no results, data or environments) in a new git repository."""
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=not_in_a_clone)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    return project


def make_notebooks(project: Path, storage: Path, *parameters: str) -> dict[str, Any]:
    """Run what `make notebooks` runs, with `-p` parameters, in `project`; check that it passed,
    that every notebook has its HTML report and no error output; return the executed notebooks
    by number ("01", ...)."""
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
    run = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=1500
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]
    reports, executed = project / "results" / "reports", {}
    for path in NOTEBOOKS:
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
    executed = make_notebooks(project, tmp_path / "storage", "epochs=1", "run_name=nb")
    for number, nb in executed.items():
        injected = "".join(c.source for c in nb.cells if is_injected(c))
        # Each notebook gets only the parameters it declares: epochs and run_name go to 02.
        assert ("epochs = 1" in injected) == (number == "02")
    figures = {p.name for p in (project / "results" / "figures").glob("*.png")}
    for name in ("01_class_counts", "01_examples", "03_confusion_matrix", "03_training_curves"):
        assert f"{name}.png" in figures
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
    executed = make_notebooks(project, tmp_path / "storage", "epochs=1", "batch_size=8")
    print(f"make notebooks on an image folder: {time.monotonic() - started:.0f} s")
    printed = "".join(o.get("text", "") for c in executed["01"].cells for o in c.get("outputs", []))
    assert "from images (images 16x16x3)" in printed and "inputs of shape (16, 16, 3)" in printed
    cells = [c for c in executed["03"].cells if c.cell_type == "code"]
    summary = next(c for c in cells if "evaluation_summary(" in c.source).outputs[-1]
    table = summary.data["text/markdown"]
    assert table.startswith("Test split (classification, 12 examples): accuracy ")
    assert "| class | precision | recall | F1 | support |" in table
    assert all(f"| {name} | " in table for name in classes)
    figure = next(c for c in cells if "plot_evaluation(" in c.source)
    assert any("image/png" in o.get("data", {}) for o in figure.outputs)
    assert "Saved results/figures/03_confusion_matrix.png" in "".join(
        o.get("text", "") for o in figure.outputs
    )
    figures = {p.stem for p in (project / "results" / "figures").glob("*.png")}
    assert {"01_examples", "01_mean_images", "03_confusion_matrix"} <= figures


# Stands in for Colab's `google.colab.drive` (Drive is a local folder here).
FAKE_DRIVE = "def mount(path, **kwargs):\n    print('mounted', path)\n"
# Records `%pip` instead of installing: the packages are already in this environment.
FAKE_PIP = """from IPython.core.magic import register_line_magic

PIP = []


@register_line_magic
def pip(line):
    PIP.append(line)
"""


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd` with a committer set; return its output."""
    env = {
        **os.environ,
        **{f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
           for what, value in (("NAME", "t"), ("EMAIL", "t@example.com"))},
    }  # fmt: skip
    run = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
    return run.stdout.decode().strip()


def run_on_fake_colab(nb, env: dict[str, str]) -> str:
    """Execute `nb` in a kernel whose environment is `env`; return its printed text."""
    from nbclient import NotebookClient

    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3").execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def timed_setup(path: Path) -> nbformat.NotebookNode:
    """The notebook's parameters and setup cells, timed (`SETUP <seconds>`), `%pip` recorded."""
    nb = nbformat.read(path, as_version=4)
    setup = next(i for i, c in enumerate(nb.cells) if "start_session(" in c.source)
    nb.cells = [
        nbformat.v4.new_code_cell(FAKE_PIP + "\nimport time"),
        *[c for c in nb.cells[: setup + 1] if c.cell_type == "code"],
        nbformat.v4.new_code_cell("print('PIP', PIP, 'CWD', os.getcwd())"),
    ]
    nb.cells.insert(-2, nbformat.v4.new_code_cell("started = time.monotonic()"))
    nb.cells.insert(-1, nbformat.v4.new_code_cell("print(f'SETUP {time.monotonic()-started:.2f}')"))
    return nb


@pytest.mark.slow
def test_setup_cell_on_colab_keeps_code_on_the_vm_and_state_on_drive(tmp_path):
    """The Colab branch of the setup cell, with Colab's services stood in for: a fake
    `google.colab`, GitHub a local bare repository, `%pip` recorded, the VM's disk and Drive
    temporary folders. A new VM clones and runs notebook 01 (prepare, pushed to the DVC remote
    on Drive); after a commit on GitHub the same VM runs the setup again (a warm start) and moves
    to it.
    """
    work, origin = tmp_path / "work", tmp_path / "github" / "project.git"
    shutil.copytree(PROJECT, work, ignore=not_in_a_clone)
    for keep in [*PROJECT.glob("data/*/.gitkeep"), *PROJECT.glob("results/*/.gitkeep")]:
        (work / keep.relative_to(PROJECT)).parent.mkdir(parents=True, exist_ok=True)
        (work / keep.relative_to(PROJECT)).touch()  # as in a clone: data/external/ is a DVC dep
    git(work, "init", "-q")
    git(work, "symbolic-ref", "HEAD", "refs/heads/main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "--no-verify", "-m", "start")
    git(tmp_path, "clone", "-q", "--bare", str(work), str(origin))
    fake = tmp_path / "fake" / "google" / "colab"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "drive.py").write_text(FAKE_DRIVE)
    storage = tmp_path / "drive" / "MyDrive" / "{{ cookiecutter.project_slug }}"
    checkout = tmp_path / "content" / "{{ cookiecutter.project_slug }}"
    colab_env = {
        **os.environ,
        "COLAB_RELEASE_TAG": "simulated",
        "PYTHONPATH": str(tmp_path / "fake"),  # not src/: the notebook must find its clone
        "PROJECT_STORAGE_DIR": str(storage),
        "PROJECT_CHECKOUT_DIR": str(checkout),  # /content/<slug> on Colab
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{origin}.insteadOf",
        "GIT_CONFIG_VALUE_0": f"https://github.com/{REPO}.git",
    }
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(FAKE_PIP))
    nb.cells.append(nbformat.v4.new_code_cell("print('PIP', PIP, 'CWD', os.getcwd())"))
    text = run_on_fake_colab(nb, colab_env)

    # The code on the VM's disk, nothing of it on Drive.
    assert (checkout / ".git").is_dir() and not (storage / "repo").exists()
    assert f"CWD {checkout}" in text and "Colab       yes" in text
    assert "-q -r requirements.txt" in text and "-q --no-deps -e ." in text
    # DVC outputs in the workspace, the DVC cache on the VM's disk, the remote on Drive.
    assert (checkout / "data" / "manifest.json").is_file()
    assert list((checkout / "data" / "processed").iterdir())
    assert list((checkout / ".dvc" / "cache").rglob("*"))
    assert "DVC: `prepare` recorded in dvc.lock and pushed" in text, text
    assert list((storage / "dvc-storage").rglob("*")), "prepare's outputs on the remote"
    assert "prepare:" in (checkout / "dvc.lock").read_text()
    # TensorBoard logs and run records go to Drive.
    assert (checkout / "results" / "tensorboard").resolve() == (storage / "tensorboard").resolve()
    assert (storage / "runs").is_dir()
    assert (checkout / "results" / "figures" / "01_class_counts.png").is_file()

    # The daily loop from Colab: commit dvc.lock and push; a teammate then pushes a commit.
    git(checkout, "add", "dvc.lock")
    git(checkout, "commit", "-q", "--no-verify", "-m", "Data prepared on Colab")
    git(checkout, "-c", f"url.{origin}.insteadOf=https://github.com/{REPO}.git", "push", "-q")
    git(work, "pull", "-q", "--ff-only", str(origin), "main")
    (work / "NOTES.md").write_text("a teammate's change\n")
    git(work, "add", "NOTES.md")
    git(work, "commit", "-q", "--no-verify", "-m", "teammate")
    git(work, "push", "-q", str(origin), "main")

    warm = run_on_fake_colab(timed_setup(NOTEBOOKS[1]), colab_env)
    assert git(checkout, "rev-parse", "HEAD") == git(work, "rev-parse", "HEAD")
    assert (checkout / "NOTES.md").is_file() and f"CWD {checkout}" in warm
    seconds = float(warm.split("SETUP ")[1].split()[0])
    print(f"warm start of the setup cell (fetch, reset, start_session): {seconds:.1f} s")

    # Uncommitted edits on the VM are never thrown away by the next setup: it keeps them, says so.
    (checkout / "params.yaml").write_text((checkout / "params.yaml").read_text() + "# mine\n")
    (work / "NOTES.md").write_text("a second change\n")
    git(work, "commit", "-q", "--no-verify", "-am", "teammate again")
    git(work, "push", "-q", str(origin), "main")
    kept = run_on_fake_colab(timed_setup(NOTEBOOKS[2]), colab_env)
    assert f"NOTE: uncommitted edits in {checkout}: kept" in kept
    assert (checkout / "params.yaml").read_text().endswith("# mine\n")
    assert git(checkout, "rev-parse", "HEAD") != git(work, "rev-parse", "HEAD")
