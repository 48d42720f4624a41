"""The notebooks: Colab-ready, parameterised, clean, and they run headless on the bundled data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill
import pytest

from {{ cookiecutter.module_name }}.notebooks import NotebookError, run_notebooks

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((PROJECT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
REPO = "{{ cookiecutter.github_owner }}/{{ cookiecutter.project_slug }}"
COLAB = f"https://colab.research.google.com/github/{REPO}/blob/main/notebooks/"
SKIP = (".git", ".venv", "results", "data", "wandb", "checkpoints", "__pycache__", "*.egg-info")


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
        for step in ("drive.mount", "git", "clone", "pull", "%pip install -q -r requirements.txt"):
            assert step in setup, f"{path.name}: setup lacks {step}"
    assert len(set(setups)) == 1, "the setup cell differs between notebooks"


def test_a_parameter_no_notebook_has_is_a_one_line_error():
    with pytest.raises(NotebookError, match=r"^-p epoch: no notebook has this parameter"):
        run_notebooks(PROJECT, {"epoch": 1})


def test_training_notebook_shows_tensorboard_on_colab():
    train = next(p for p in NOTEBOOKS if p.name.startswith("02_"))
    assert any("%tensorboard --logdir" in c.source for c in code_cells(train))


@pytest.mark.slow
def test_make_notebooks_runs_every_notebook_and_writes_html_reports(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(*SKIP))
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    bindir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(project / "src"),
        "PROJECT_STORAGE_DIR": str(tmp_path / "storage"),
        "WANDB_MODE": "offline",
    }
    for name in ("COLAB_RELEASE_TAG", "PROJECT_RESULTS_DIR", "TF_CONFIG", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    # What `make notebooks` runs, with tiny parameters.
    command = [sys.executable, "-m", MODULE, "notebooks", "-p", "epochs=1", "-p", "run_name=nb"]
    run = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=1500
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]

    reports = project / "results" / "reports"
    for path in NOTEBOOKS:
        html = reports / path.with_suffix(".html").name
        assert html.is_file() and html.stat().st_size > 10_000, html
        executed = nbformat.read(reports / path.name, as_version=4)
        injected = "".join(c.source for c in executed.cells if is_injected(c))
        # Each notebook gets only the parameters it declares: epochs and run_name go to 02.
        assert ("epochs = 1" in injected) == path.name.startswith("02_")
        errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]
        assert not [o for o in errors if o.output_type == "error"]
    figures = {p.name for p in (project / "results" / "figures").glob("*.png")}
    for name in ("01_class_counts", "01_examples", "03_confusion_matrix", "03_training_curves"):
        assert f"{name}.png" in figures
    assert (project / "results" / "environment.json").is_file()
    (manifest,) = (project / "results" / "runs").glob("*-nb-*/manifest.json")
    assert json.loads(manifest.read_text())["params"]["train"]["epochs"] == 1


# Stands in for Colab's `google.colab.drive` (Drive is a local folder here).
FAKE_DRIVE = "def mount(path, **kwargs):\n    print('mounted', path)\n"
# Records `%pip` instead of installing: the packages are already in this environment.
FAKE_PIP = """from IPython.core.magic import register_line_magic

PIP = []


@register_line_magic
def pip(line):
    PIP.append(line)
"""


@pytest.mark.slow
def test_setup_cell_on_colab_mounts_clones_installs_and_runs(tmp_path):
    """The Colab branch of the setup cell, with Colab's services stood in for: a fake
    `google.colab`, the GitHub URL redirected to a local repository, `%pip` recorded."""
    from nbclient import NotebookClient

    origin = tmp_path / "origin"
    shutil.copytree(PROJECT, origin, ignore=shutil.ignore_patterns(*SKIP))
    git_env = {
        **os.environ,
        **{f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
           for what, value in (("NAME", "t"), ("EMAIL", "t@example.com"))},
    }  # fmt: skip
    for command in (
        ["git", "init", "-q"],
        ["git", "symbolic-ref", "HEAD", "refs/heads/main"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "--no-verify", "-m", "start"],
    ):
        subprocess.run(command, cwd=origin, env=git_env, check=True, capture_output=True)
    fake = tmp_path / "fake" / "google" / "colab"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "drive.py").write_text(FAKE_DRIVE)
    storage = tmp_path / "drive" / "MyDrive" / "{{ cookiecutter.project_slug }}"
    colab_env = {
        **git_env,
        "COLAB_RELEASE_TAG": "simulated",
        "PYTHONPATH": str(tmp_path / "fake"),  # not src/: the notebook must find its clone
        "PROJECT_STORAGE_DIR": str(storage),
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{origin}.insteadOf",
        "GIT_CONFIG_VALUE_0": f"https://github.com/{REPO}.git",
    }
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(FAKE_PIP))
    nb.cells.append(nbformat.v4.new_code_cell("print('PIP', PIP, 'CWD', os.getcwd())"))
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(colab_env)  # the kernel inherits this process's environment
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3").execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    clone = storage / "repo"
    assert (clone / ".git").is_dir() and (clone / "params.yaml").is_file()
    assert "Colab       yes" in text
    assert "-q -r requirements.txt" in text and "-q --no-deps -e ." in text
    assert f"CWD {clone}" in text
    assert (clone / "results" / "figures" / "01_class_counts.png").is_file()
    assert (clone / "data" / "manifest.json").is_file()
