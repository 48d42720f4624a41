"""Remove what the answers did not choose, start a git repository, print the next steps.

Shared by both tools: cookiecutter (and cruft) render this file with the answers and run it in the
new project; copier runs it unrendered as a task (copier.yml) with the answers as JSON in argv.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

# The copier answers file: copier fills it in; cookiecutter renders it empty.
COPIER_ANSWERS = Path(".copier-answers.yml")
# Drive for desktop's My Drive on macOS (File Provider; Google's help: "under ~/Library/CloudStorage").
MAC_DRIVE = "$HOME/Library/CloudStorage/GoogleDrive-you@gmail.com/My Drive"


def unchosen(answers: dict) -> list[Path]:
    """Paths that exist in the template for another answer only."""
    paths = []
    if answers["open_source_license"] == "none":
        paths.append(Path("LICENSE"))
    if not answers["vertex_ai"]:  # the Vertex AI job writer, its training image, their tests
        package = Path("src") / answers["module_name"]
        paths += [package / "cloud", Path("Dockerfile"), Path(".dockerignore")]
        paths += [Path("tests/test_vertex.py"), Path("tests/test_dockerfile.py")]
    if COPIER_ANSWERS.exists() and not COPIER_ANSWERS.read_text().strip():
        paths.append(COPIER_ANSWERS)
    return paths


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def git_init() -> str | None:
    """`git init` on branch main (a note when git is missing); None when a repository is there.

    Copier runs this task again in the user's repository at each `copier update`: HEAD stays.
    """
    if Path(".git").exists():
        return None
    if shutil.which("git") is None:
        return "git was not found: run `git init -b main` once it is installed."
    # `git init -b` needs git 2.28; setting HEAD works on any version.
    subprocess.run(["git", "init", "--quiet"], check=True)
    subprocess.run(["git", "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
    return "Initialised a git repository on branch main."


def next_steps(answers: dict, git_note: str) -> str:
    slug, owner = answers["project_slug"], answers["github_owner"]
    python = answers["python_version"]  # the one requires-python names
    vertex = ""
    if answers["vertex_ai"]:
        vertex = "\nBeyond Colab: Vertex AI jobs (`make image`, `make vertex`; docs/scaling.md)."
    # The data set in the DVC remote and its dvc.lock in the first commit: what a teammate's
    # `dvc pull` needs. The remote is reached first: off Colab the Drive remote's /content/drive
    # would be a folder on this disk (and a mistyped Drive path one DVC makes), a bucket or a
    # Drive folder needs its owner's login (gdrive's placeholder would wait for a browser).
    reach = {
        "drive": (
            f'  DRIVE="{MAC_DRIVE}"   # off Colab: Drive for desktop\'s My Drive (your account; Windows: G:/My Drive)\n'
            f'  ls -d "$DRIVE" && dvc remote modify --local storage url "$DRIVE/{slug}/dvc-storage"\n'
        ),
        "gcs": (
            "  gcloud auth application-default login   # for the DVC remote, "
            f"gs://{slug}-dvc/storage: a bucket you made (docs/data.md)\n"
        ),
        "gdrive": (
            "  dvc remote modify storage url gdrive://FOLDER_ID   # your Drive folder; "
            "then its OAuth client or service account (docs/data.md)\n"
        ),
    }
    data = reach.get(answers["dvc_remote"], "")
    data += "  make data         # the example data set (dvc repro prepare)\n"
    if answers["dvc_remote"] != "none":
        data += "  dvc push          # to the DVC remote (docs/data.md): what teammates `dvc pull`\n"
    return f"""
Created {slug}/. {git_note}

Next steps:
  cd {slug}
  python{python} -m venv .venv && . .venv/bin/activate    # a newer Python does too
  make setup        # pinned requirements, editable install, git hooks
  make test
{data}  git add -A && git commit -m "Start from cookiecutter-colab"   # with dvc.lock
  git remote add origin git@github.com:{owner}/{slug}.git
  git push -u origin main

On Colab: push first, then open a notebook from the README's "Open in Colab" badges.
`make` lists every target.{vertex}
"""


def main(answers: dict) -> None:
    for path in unchosen(answers):
        remove(path)
    git_note = git_init()
    if git_note is not None:  # a new project, not an update
        print(next_steps(answers, git_note))


if __name__ == "__main__":
    # copier passes the answers; cookiecutter has rendered them into the string below.
    main(json.loads(sys.argv[1] if len(sys.argv) > 1 else r"""{{ cookiecutter | tojson }}"""))
