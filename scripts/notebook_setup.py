"""Write the shared start of every notebook of the generated project from this one source.

Each numbered notebook in `{{cookiecutter.project_slug}}/notebooks/` gets:
- its "Open in Colab" badge (first cell), pointing at itself in the answered repository;
- the common parameters (`seed`, `branch`, `allow_reinstall`) at the top of its `parameters`
  cell; the notebook's own parameters after them are kept;
- the setup cells (a markdown cell, then the code cell that mounts Drive, clones the answered
  repository, checks the runtime against the lock, installs, and calls `start_session`), right
  after the parameters cell.
The answers stay Jinja placeholders, rendered at bake time as the rest of the notebook (one text
for cookiecutter, cruft and copier). Run `python scripts/notebook_setup.py` after changing this
file or adding a notebook; `--check` exits 1 when a committed notebook is stale (the template's
tests check the same).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "{{cookiecutter.project_slug}}" / "notebooks"
PATTERN = "[0-9][0-9]_*.ipynb"
REPO = "{{ cookiecutter.github_owner }}/{{ cookiecutter.project_slug }}"
MODULE = "{{ cookiecutter.module_name }}"
BADGE = (  # + the notebook's file name + ")"
    "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
    f"(https://colab.research.google.com/github/{REPO}/blob/main/notebooks/"
)
BADGE_LINE = re.compile(r"^\[!\[Open In Colab\]\(.*$", re.MULTILINE)

PARAMETERS = """\
# Parameters: papermill replaces these values. The package's `notebooks -p NAME=VALUE` reads each
# VALUE as the type after its name (`-p run_name=0123` stays text); papermill's own `-p NAME VALUE`
# guesses (its `-p run_name 0123` gives 123: a name of digits needs `-r NAME VALUE` there).
# None takes the value in params.yaml; anything else overrides it for this run only.
seed: int = None  # for every random number generator (params.yaml: seed)
branch: str = "main"  # the branch Colab clones
allow_reinstall: bool = False  # True: install the lock's versions over a Colab runtime that differs
"""
COMMON_NAMES = ("seed", "branch", "allow_reinstall")

SETUP_TITLE = "## Setup (the same first cells in every notebook)"
SETUP_TEXT = f"""\
{SETUP_TITLE}

On Colab: clones the repository onto the VM's own disk (`/content/{{{{ cookiecutter.project_slug }}}}`; on a VM
that has it already, fetches `branch` and moves to its latest commit), and stops at once on a TPU
runtime: Colab's TPU runtimes have no TensorFlow. Then it mounts Google Drive and checks that this
runtime is the one the lock was made for: Python, TensorFlow, Keras, NumPy and Colab's other
packages at the versions of the lock's snapshot of Colab. A runtime that moved on stops there, in
one line that names what differs and the ways out (lock to this runtime, pick a pinned runtime
version, or `allow_reinstall = True`). Then it installs the pinned requirements (Colab's own
packages are already at those versions but one, see `docs/reproducibility.md`, so only the missing
ones are installed) and this package. What must outlive the VM lives in the storage folder on
Drive: checkpoints, TensorBoard logs, a copy of each run record and the DVC remote. Edits you make
to the code here are lost with the VM unless you commit and push them (see
`docs/troubleshooting.md`). In local Jupyter it uses the checkout this notebook is in (install it
with `make setup`). Then it registers the git hooks, logs the environment to
`results/environment.json` and seeds every random number generator."""

SETUP_CODE = f"""\
import os
import subprocess
import sys
from pathlib import Path

REPO_URL = "https://github.com/{REPO}.git"
IN_COLAB = "COLAB_RELEASE_TAG" in os.environ
if IN_COLAB:
    # The code on the VM's own disk (fast; one clone per VM); what must outlive the VM goes to the
    # storage folder on Drive (checkpoints, TensorBoard logs, run records, the DVC remote).
    CHECKOUT = "/content/{{{{ cookiecutter.project_slug }}}}"
    PROJECT = Path(os.environ.get("PROJECT_CHECKOUT_DIR", CHECKOUT))
    if not (PROJECT / ".git").is_dir():
        subprocess.run(["git", "clone", "-q", "-b", branch, REPO_URL, str(PROJECT)], check=True)
    else:  # this VM ran a notebook before: move to the branch's latest commit
        git = ["git", "-C", str(PROJECT)]
        fetched = subprocess.run([*git, "fetch", "-q", "origin", branch]).returncode == 0
        edited = [*git, "status", "--porcelain", "--untracked-files=no"]
        if not fetched:  # offline, or a private repository (docs/troubleshooting.md)
            print(f"NOTE: could not fetch {{branch}}: {{PROJECT}} is used as it is")
        elif subprocess.run(edited, capture_output=True, text=True).stdout:
            print(f"NOTE: uncommitted edits in {{PROJECT}}: kept, so not updated to {{branch}}")
        else:
            subprocess.run([*git, "checkout", "-q", "-B", branch, "FETCH_HEAD"], check=True)
else:
    # Local Jupyter (or `make notebooks`): the checkout this notebook belongs to.
    PROJECT = Path.cwd().resolve()
    while not (PROJECT / "params.yaml").is_file():
        if PROJECT.parent == PROJECT:
            raise SystemExit("no params.yaml above: open the notebook in the project's notebooks/")
        PROJECT = PROJECT.parent
os.chdir(PROJECT)
# This checkout's package, importable at once (an editable install needs a kernel restart).
sys.path.insert(0, str(PROJECT / "src"))
if IN_COLAB:
    from {MODULE}.colab.runtime_check import check_runtime, stop_on_tpu

    stop_on_tpu()  # Colab's TPU runtimes have no TensorFlow: one line, before Drive or %pip
    from google.colab import drive

    drive.mount("/content/drive")
    # Before installing anything: a runtime that differs from the lock's stops here, in one line.
    check_runtime(PROJECT, allow_reinstall)
    %pip install -q -r requirements.txt
    %pip install -q --no-deps -e .
from {MODULE}.colab.notebooks import start_session

params = start_session(PROJECT, seed=seed)"""


def source_lines(text: str) -> list[str]:
    """A cell's `source` as nbformat writes it: lines with their newlines, the last without."""
    lines = text.splitlines(keepends=True)
    if lines:
        lines[-1] = lines[-1].rstrip("\n")
    return lines


def text_of(cell: dict) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def parameters_source(own: str) -> str:
    """The common parameters, then the notebook's own (its lines for other names)."""
    kept = [
        line
        for line in own.splitlines()
        if line.strip()
        and not line.startswith("# ")
        and re.split("[:=]", line)[0].strip() not in COMMON_NAMES
    ]
    return PARAMETERS + "".join(f"{line}\n" for line in kept)


def new_cell(kind: str, text: str, cell_id: str) -> dict:
    cell = {"cell_type": kind, "id": cell_id, "metadata": {}, "source": source_lines(text)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def render(path: Path) -> str:
    """The text `path` must have: its own cells, with the shared start rewritten."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = nb["cells"]
    title = cells[0]
    if not BADGE_LINE.search(text_of(title)):
        raise SystemExit(f"error: {path.name}: the first cell has no Open in Colab badge line")
    badge = f"{BADGE}{path.name})"
    title["source"] = source_lines(BADGE_LINE.sub(lambda _: badge, text_of(title), count=1))
    tagged = [i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])]
    if len(tagged) != 1:
        raise SystemExit(f"error: {path.name}: needs exactly one cell tagged `parameters`")
    at = tagged[0]
    cells[at]["source"] = source_lines(parameters_source(text_of(cells[at])))
    setup = [
        i
        for i, c in enumerate(cells)
        if (c["cell_type"] == "markdown" and text_of(c).startswith(SETUP_TITLE))
        or (c["cell_type"] == "code" and "start_session(" in text_of(c))
    ]
    if setup and setup != [at + 1, at + 2]:
        raise SystemExit(f"error: {path.name}: the setup cells must follow the parameters cell")
    if not setup:  # a new notebook: the setup goes after its parameters
        cells[at + 1 : at + 1] = [new_cell("markdown", "", ""), new_cell("code", "", "")]
    cells[at + 1]["source"] = source_lines(SETUP_TEXT)
    cells[at + 2]["source"] = source_lines(SETUP_CODE)
    # Cell ids as nbstripout (the git clean filter) writes them, 0, 1, ...: any other id makes
    # every clone look edited once the filter is installed, and the setup then stops updating it.
    for number, cell in enumerate(cells):
        cell["id"] = str(number)
        # Sources as lists of lines, as nbstripout writes them: a string would differ too.
        cell["source"] = source_lines(text_of(cell))
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Rewrite the notebooks' shared start, or with `--check` say which ones are stale."""
    stale = []
    for path in sorted(NOTEBOOKS.glob(PATTERN)):
        text = render(path)
        if path.read_text(encoding="utf-8") != text:
            stale.append(path.name)
            if "--check" not in argv:
                path.write_text(text, encoding="utf-8")
    if stale and "--check" in argv:
        print(
            f"error: {', '.join(stale)}: the setup is stale: run `python scripts/notebook_setup.py`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
