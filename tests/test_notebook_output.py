"""What a user reads in the notebooks' output: no warning, no TensorFlow C++ log line, no traceback.

The notebooks 01 to 04 of a baked project run once, as the project runs them (`python -m <module>
notebooks`: papermill, one kernel each), with no TensorFlow variable in the environment: the
package itself must keep TensorFlow's C++ log quiet. Each notebook's output is then checked on its
own. Outputs shown on a successful run are stdout (black); anything on stderr is shown red in
Jupyter and in the HTML reports, so it counts as noise whatever it says.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import nbformat
import pytest

import project_env

NOTEBOOKS = ("01", "02", "03", "04")
# Tiny runs: one epoch, one trial (04), the run's own name.
PARAMETERS = ("epochs=1", "n_trials=1", "run_name=quiet")
NOISE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|\b\w*Warning\b"  # warnings.warn: `...: UserWarning: ...`, `TqdmWarning: ...`
    r"|^WARNING\b"  # Python loggers (`WARNING:tensorflow:...`, `WARNING:absl:...`) and our own
    r"|^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]"  # absl's C++ log: `W0000 00:00:1758131437.32 1 x.cc:1]`
    r"|^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] \S+:\d+\]"  # TensorFlow's C++ log
    r"|absl::InitializeLog"
    r"|^INFO: ",  # LiteRT's C++ log (export's check): `INFO: Created TensorFlow Lite XNNPACK ...`
    re.MULTILINE,
)


def noise(nb: nbformat.NotebookNode) -> list[str]:
    """Every output of `nb` a user should not see, one line each: `cell N (its first line): what`."""
    found = []
    for number, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        where = f"cell {number} ({cell.source.splitlines()[0] if cell.source else ''})"
        for out in cell.outputs:
            if out.output_type == "error":
                found.append(f"{where}: {out.ename}: {out.evalue}")
            elif out.output_type == "stream" and out.name == "stderr" and out.text.strip():
                found += [f"{where}: stderr: {line}" for line in out.text.splitlines() if line.strip()]
            elif out.output_type == "stream":
                found += [f"{where}: {line}" for line in out.text.splitlines() if NOISE.search(line)]
    return found


def without_tensorflow_variables(storage: Path) -> dict[str, str]:
    """This environment without TF_* (TF_CPP_MIN_LOG_LEVEL, ...), Colab's tag or the project's
    own settings; a storage folder of its own."""
    drop = ("TF_", "PYTEST_", "COLAB_RELEASE_TAG", "MLFLOW_TRACKING_URI", "PROJECT_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "PROJECT_STORAGE_DIR": str(storage), "WANDB_MODE": "offline"}


def run_notebooks(project: Path, python: Path, storage: Path) -> dict[str, nbformat.NotebookNode]:
    """`python -m <module> notebooks` in a git clone of `project`; the executed notebooks by number."""
    module = next((project / "src").glob("*/__main__.py")).parent.name
    env = without_tensorflow_variables(storage)
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(project / "src")
    for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "init", "--no-verify"]):
        subprocess.run(command, cwd=project, check=True, capture_output=True,
                       env={**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"})  # fmt: skip
    command = [str(python), "-m", module, "notebooks", *(a for p in PARAMETERS for a in ("-p", p))]
    run = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    reports = project / "results" / "reports"
    return {n: nbformat.read(next(reports.glob(f"{n}_*.ipynb")), as_version=4) for n in NOTEBOOKS}


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict[str, nbformat.NotebookNode]:
    """The notebooks of a project baked for this file (default answers), run once for every test
    here. A project the user has already used (data prepared, a run trained) can take its place:
    copy it into `folder` and run it the same way."""
    folder = tmp_path_factory.mktemp("notebook-output")
    project = project_env.bake(folder)
    return run_notebooks(project, project_env.locked_python(project), folder / "storage")


@pytest.mark.parametrize("number", NOTEBOOKS)
def test_no_warning_log_line_or_traceback_in_the_output(executed, number: str) -> None:
    found = noise(executed[number])
    assert not found, f"{number}: {len(found)} lines a user should not see:\n" + "\n".join(found)


def test_the_check_finds_what_users_saw() -> None:
    """The lines that the notebooks showed before (TensorFlow's C++ log, tqdm's warning, Keras's
    retracing warning, absl's) are noise; the package's own progress and results are not."""
    seen = [
        "2026-12-04 21:09:11.730108: E external/local_xla/xla/stream_executor/cuda/cuda_platform.cc:51] failed call to cuInit",
        "E0000 00:00:1750688708.806475  179026 cuda_dnn.cc:8579] Unable to register cuDNN factory",
        "W0000 00:00:1758131437.322781 3722519 computation_placer.cc:177] computation placer already registered.",
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "/x/tqdm/auto.py:21: TqdmWarning: IProgress not found. Please update jupyter and ipywidgets.",
        "WARNING:tensorflow:5 out of the last 5 calls to <function pfor.<locals>.f> triggered tf.function retracing.",
        "Traceback (most recent call last):",
        "INFO: Created TensorFlow Lite XNNPACK delegate for CPU.",
    ]
    fine = [
        "Epoch 1/1: loss 0.41, val_accuracy 0.9111 (best so far)",
        "Data: data/manifest.json on this VM (3f2a9c01b2de), nothing to restore",
        "Seed 42 (python, numpy, tensorflow, keras; deterministic ops)",
        "I0 loss went down: 2026-12-04 results",
    ]
    assert [line for line in seen if not NOISE.search(line)] == []
    assert [line for line in fine if NOISE.search(line)] == []
    cell = nbformat.v4.new_code_cell("main(['train'])")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="  0%|    | 0/33\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="Done\nWARNING:absl:x\n")]  # fmt: skip
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 02"), cell])
    assert noise(nb) == ["cell 1 (main(['train'])): stderr:   0%|    | 0/33", "cell 1 (main(['train'])): WARNING:absl:x"]
