"""Notebook hygiene in git (`make hooks`, each notebook's setup): nbstripout, nbdime, pre-commit."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

# On top of nbstripout's defaults; the same list is in .pre-commit-config.yaml (test_hygiene.py).
EXTRA_KEYS = (
    "metadata.colab.provenance",  # Colab's history of where the notebook was opened from
    "metadata.colab.authorship_tag",
    "metadata.widgets",  # widget state (progress bars): large and different on every run
    "cell.metadata.colab",  # output heights, base URIs
    "cell.metadata.outputId",
    "cell.metadata.executionInfo",  # run times, and the user's name and id
    "cell.metadata.id",  # Colab's random cell ids
    # Jupyter's, off Colab: the kernel's Python version and editor modes (Colab keeps the name)
    "metadata.language_info.version",
    "metadata.language_info.codemirror_mode",
    "metadata.language_info.file_extension",
    "metadata.language_info.mimetype",
    "metadata.language_info.nbconvert_exporter",
    "metadata.language_info.pygments_lexer",
)
# Kept even if a future default strips them: they document the runtime the notebook expects.
KEEP_KEYS = ("metadata.accelerator", "metadata.colab.gpuType", "metadata.kernelspec")


def install(project_dir: Path) -> list[str]:
    """Register nbstripout, nbdime and pre-commit in the clone; what was done, one line each, or
    none when all was registered already (each notebook's start calls this). Safe to run again:
    nothing is added twice, the committed `.gitattributes` is kept."""
    project_dir = Path(project_dir)
    if not (project_dir / ".git").exists():
        return [f"{project_dir} is not a git clone: `git init` first, then `make hooks`"]

    def run(*args: str) -> str:
        done = subprocess.run(args, cwd=project_dir, check=True, capture_output=True, text=True)
        return done.stdout

    def registered() -> str:
        """The clone's git config and pre-commit hook: all that the commands below write."""
        hook = project_dir / run("git", "rev-parse", "--git-path", "hooks/pre-commit").strip()
        return run("git", "config", "--local", "--list") + (
            hook.read_text(encoding="utf-8") if hook.is_file() else ""
        )

    before = registered()
    done = []
    run("git", "config", "filter.nbstripout.extrakeys", " ".join(EXTRA_KEYS))
    run("git", "config", "filter.nbstripout.keepmetadatakeys", " ".join(KEEP_KEYS))
    # .gitattributes already names the filter and diff driver: nbstripout adds no second `diff=`.
    run(sys.executable, "-m", "nbstripout", "--install", "--attributes", ".gitattributes")
    done.append("nbstripout: clean filter for *.ipynb (outputs and Colab metadata stripped)")
    run(sys.executable, "-m", "nbdime", "config-git", "--enable")
    done.append("nbdime: diff and merge drivers for *.ipynb (git diff / git merge)")
    if importlib.util.find_spec("pre_commit") is not None:
        run(sys.executable, "-m", "pre_commit", "install")
        done.append("pre-commit: hook installed (runs on git commit)")
    else:
        done.append("pre-commit: not installed here (dev tool; `make setup` installs it)")
    return done if registered() != before else []
