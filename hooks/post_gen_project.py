"""Remove what the answers did not choose, start a git repository, print the next steps."""

import shutil
import subprocess
from pathlib import Path

# Paths that exist in the template for one answer only.
UNCHOSEN = [
{%- if cookiecutter.open_source_license == "none" %}
    "LICENSE",
{%- endif %}
]


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def git_init() -> str:
    """`git init` on branch main; a note instead when git is missing."""
    if shutil.which("git") is None:
        return "git was not found: run `git init -b main` once it is installed."
    # `git init -b` needs git 2.28; setting HEAD works on any version.
    subprocess.run(["git", "init", "--quiet"], check=True)
    subprocess.run(["git", "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
    return "Initialised a git repository on branch main."


for name in UNCHOSEN:
    remove(Path(name))
git_note = git_init()

print(f"""
Created {{ cookiecutter.project_slug }}/. {git_note}

Next steps:
  cd {{ cookiecutter.project_slug }}
  python3 -m venv .venv && . .venv/bin/activate
  make setup        # pinned requirements, editable install, git hooks
  make test
  git add -A && git commit -m "Start from cookiecutter-colab"
  git remote add origin git@github.com:{{ cookiecutter.github_owner }}/{{ cookiecutter.project_slug }}.git
  git push -u origin main

On Colab: push first, then open a notebook from the README's "Open in Colab" badges.
`make` lists every target.
""")
