"""The notebooks' shared start (badge, common parameters, setup cells) comes from one source,
scripts/notebook_setup.py, and the committed notebooks are what it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import notebook_setup

ROOT = Path(__file__).resolve().parent.parent


def test_committed_notebooks_are_generated() -> None:
    run = subprocess.run([sys.executable, "scripts/notebook_setup.py", "--check"], cwd=ROOT,
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr


def test_a_new_notebook_gets_the_badge_parameters_and_setup(tmp_path: Path) -> None:
    cells = [
        {"cell_type": "markdown", "id": "0", "metadata": {},
         "source": ["# 04: Export\n", "\n", "[![Open In Colab](https://example.org/x.svg)](https://x)\n", "\n", "Text."]},
        {"cell_type": "code", "id": "1", "metadata": {"tags": ["parameters"]}, "execution_count": None,
         "outputs": [], "source": ["seed = 1\n", "quantize = None  # int8 / float16"]},
        {"cell_type": "code", "id": "2", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["print(params.seed)"]},
    ]  # fmt: skip
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "04_export.ipynb"
    path.write_text(json.dumps(notebook))
    rendered = json.loads(notebook_setup.render(path))
    sources = ["".join(c["source"]) for c in rendered["cells"]]
    assert notebook_setup.BADGE + "04_export.ipynb)" in sources[0] and sources[0].endswith("Text.")
    assert sources[1].startswith(notebook_setup.PARAMETERS) and "seed: int = None" in sources[1]
    assert sources[1].endswith("quantize = None  # int8 / float16") and "seed = 1" not in sources[1]
    assert sources[2] == notebook_setup.SETUP_TEXT and sources[3] == notebook_setup.SETUP_CODE
    assert sources[4] == "print(params.seed)"
    assert [c["id"] for c in rendered["cells"]] == ["0", "1", "2", "3", "4"]  # as nbstripout numbers them
    path.write_text(notebook_setup.render(path))
    assert notebook_setup.render(path) == path.read_text(), "a second run changes nothing"


def test_the_setup_renders_the_answers() -> None:
    assert 'REPO_URL = "https://github.com/{{ cookiecutter.github_owner }}/{{ cookiecutter.project_slug }}.git"' in notebook_setup.SETUP_CODE
    assert "/content/{{ cookiecutter.project_slug }}" in notebook_setup.SETUP_CODE
    assert "your-github-user" not in notebook_setup.SETUP_CODE + notebook_setup.BADGE


def test_on_colab_the_setup_stops_on_a_tpu_before_drive_and_any_install() -> None:
    """Colab's TPU runtimes have no TensorFlow: the setup refuses them right after the clone (the
    package is needed to say so in one line), before asking for Drive or installing anything."""
    code = notebook_setup.SETUP_CODE
    order = ["git\", \"clone", "stop_on_tpu()", "drive.mount(", "check_runtime(", "%pip install"]
    assert [code.index(step) for step in order] == sorted(code.index(step) for step in order)
    assert code.count("stop_on_tpu()") == 1 and "TPU runtime" in notebook_setup.SETUP_TEXT
