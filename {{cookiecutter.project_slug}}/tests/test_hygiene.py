"""A notebook committed with outputs and Colab's churn is stored without them; a copy of the
checkout for a test holds none of the user's outputs.

A real git repository, the hooks registered by `make hooks`, a real `git add` through the
nbstripout filter; `git show :path` is what the repository holds.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import copy_checkout

from {{ cookiecutter.module_name }}.colab.githooks import EXTRA_KEYS, install

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]
TOKEN = "PLANTED-TOKEN-5f3c9a"  # must never reach git


def colab_notebook() -> dict:
    """A notebook as Colab saves it after a run: outputs, counts, widgets, provenance, ids."""
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "accelerator": "GPU",
            "colab": {"gpuType": "T4", "provenance": [{"file_id": TOKEN}], "authorship_tag": TOKEN},
            "kernelspec": {"display_name": "Python 3", "name": "python3", "language": "python"},
            "language_info": {"name": "python", "version": "3.13.0", "pygments_lexer": "ipython3"},
            "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {"w": TOKEN}}},
        },
        "cells": [
            {
                "cell_type": "code",
                "id": "c0ffee",
                "execution_count": 7,
                "metadata": {
                    "id": "colab-cell-id",
                    "colab": {"base_uri": "https://localhost:8080/", "height": 35},
                    "outputId": TOKEN,
                    "executionInfo": {"elapsed": 5, "user": {"displayName": TOKEN}},
                    "tags": ["parameters"],
                },
                "source": "answer = 42\nprint(answer)",
                "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": f"{TOKEN}\n"},
                    {
                        "output_type": "execute_result",
                        "execution_count": 7,
                        "data": {"text/plain": f"'{TOKEN}'"},
                        "metadata": {},
                    },
                ],
            }
        ],
    }


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    run = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env)
    assert run.returncode == 0, f"git {' '.join(args)}: {run.stdout}{run.stderr}"
    return run.stdout


def ignored(folder: Path, ignore_file: str, paths: list[str]) -> list[str]:
    """Which of `paths` git leaves out in a new repository at `folder` whose .gitignore is the
    project's `ignore_file`."""
    shutil.copy(PROJECT / ignore_file, folder / ".gitignore")
    git(folder, "init", "-q")
    return git(folder, "check-ignore", *paths).split()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A fresh clone-like copy of the project with `make hooks` run in it."""
    repo = tmp_path_factory.mktemp("hygiene") / "project"
    copy_checkout(repo)
    bindir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(repo / "src"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    git(repo, "init", "-q", env=env)
    if shutil.which("make"):
        command = ["make", "hooks", f"PYTHON={sys.executable}"]
    else:  # what the Makefile's `hooks` target runs
        command = [sys.executable, "-m", MODULE, "hooks"]
    run = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return repo, env


@pytest.mark.slow
def test_outputs_and_colab_churn_never_reach_git(repo):
    repo, env = repo
    path = repo / "notebooks" / "99_planted.ipynb"
    path.write_text(json.dumps(colab_notebook(), indent=1))
    git(repo, "add", "notebooks/99_planted.ipynb", env=env)

    stored_text = git(repo, "show", ":notebooks/99_planted.ipynb", env=env)
    assert TOKEN not in stored_text
    stored = json.loads(stored_text)
    (cell,) = stored["cells"]
    assert cell["outputs"] == []
    assert cell["execution_count"] is None
    assert "".join(cell["source"]) == "answer = 42\nprint(answer)"
    assert cell["metadata"] == {"tags": ["parameters"]}  # papermill's tag stays
    assert "widgets" not in stored["metadata"]
    assert "provenance" not in stored["metadata"]["colab"]
    assert stored["metadata"]["language_info"] == {"name": "python"}  # as Colab saves it
    # What documents the runtime stays: Colab reopens it on a T4 GPU.
    assert stored["metadata"]["accelerator"] == "GPU"
    assert stored["metadata"]["colab"]["gpuType"] == "T4"
    assert stored["metadata"]["kernelspec"]["name"] == "python3"
    # The working copy keeps its outputs: only what git stores is stripped.
    assert TOKEN in path.read_text()


@pytest.mark.slow
def test_the_notebooks_are_committed_as_the_filter_writes_them(repo):
    """A clone with the hooks installed sees no notebook edited (cell ids 0, 1, ... as nbstripout
    numbers them): the setup cell on Colab moves a clean checkout to the latest commit only."""
    repo, env = repo
    for path in sorted((PROJECT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        rel = path.relative_to(PROJECT).as_posix()
        filtered = git(repo, "hash-object", "--path", rel, rel, env=env)
        assert filtered == git(repo, "hash-object", "--no-filters", rel, env=env), rel


@pytest.mark.slow
def test_rerunning_a_committed_notebook_leaves_nothing_to_commit(repo):
    repo, env = repo
    path = repo / "notebooks" / "98_rerun.ipynb"
    rel = str(path.relative_to(repo))
    clean = colab_notebook()
    clean["cells"][0]["outputs"] = []
    path.write_text(json.dumps(clean, indent=1))
    git(repo, "add", rel, env=env)
    git(repo, "commit", "-q", "--no-verify", "-m", "notebook", env=env)
    path.write_text(json.dumps(colab_notebook(), indent=1))  # run again: new outputs only
    # `git status` may list it (the file's size changed), but its content as git sees it is the
    # same: no diff, and staging it stages nothing.
    assert git(repo, "diff", "--stat", "--", rel, env=env) == ""
    git(repo, "add", rel, env=env)
    assert git(repo, "diff", "--cached", "--stat", env=env) == ""


@pytest.mark.slow
def test_diff_and_merge_drivers_are_nbdime_and_the_filter_is_nbstripout(repo):
    repo, env = repo
    attrs = git(repo, "check-attr", "filter", "diff", "merge", "--", "notebooks/x.ipynb", env=env)
    assert "filter: nbstripout" in attrs
    assert "diff: jupyternotebook" in attrs  # nbdime's; it strips through the filter first
    assert "merge: jupyternotebook" in attrs
    assert "nbstripout" in git(repo, "config", "filter.nbstripout.clean", env=env)
    assert git(repo, "config", "filter.nbstripout.extrakeys", env=env).split() == list(EXTRA_KEYS)
    assert "git-nbdiffdriver" in git(repo, "config", "diff.jupyternotebook.command", env=env)
    assert "git-nbmergedriver" in git(repo, "config", "merge.jupyternotebook.driver", env=env)
    assert (repo / ".git" / "hooks" / "pre-commit").is_file()
    # Registering the hooks leaves the committed .gitattributes as it is.
    assert (repo / ".gitattributes").read_bytes() == (PROJECT / ".gitattributes").read_bytes()


@pytest.mark.slow
def test_each_notebooks_start_says_what_it_registered_once(tmp_path):
    """The setup cell registers the hooks at every run: lines the first time, then none."""
    shutil.copy(PROJECT / ".gitattributes", tmp_path)
    git(tmp_path, "init", "-q")
    first = install(tmp_path)
    assert [line.split(":")[0] for line in first] == ["nbstripout", "nbdime", "pre-commit"]
    assert install(tmp_path) == []


def test_a_folder_remote_is_outside_the_checkout():
    """`dvc push` to a folder remote never writes into the repository, where the next
    `git add -A` would commit the data (DVC reads a relative url from the .dvc folder)."""
    from dvc.config import Config

    for name, remote in Config(dvc_dir=str(PROJECT / ".dvc"))["remote"].items():
        if "://" not in remote["url"]:
            assert not Path(remote["url"]).resolve().is_relative_to(PROJECT), (name, remote)


def test_pre_commit_strips_the_same_keys_as_the_git_filter():
    config = yaml.safe_load((PROJECT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    args = shlex.split(hooks["nbstripout"]["entry"])
    assert args[args.index("--extra-keys") + 1].split() == list(EXTRA_KEYS)


def test_a_checkout_copy_has_what_a_clone_has_and_none_of_the_users_outputs(tmp_path):
    """copy_checkout (the tests' fresh clone, conftest.py): tracked and new files but not what
    .gitignore ignores, and never what running the project makes, ignored or not: data, results,
    checkpoints, a sweep's study, DVC's cache, lock and local config, caches."""
    used = tmp_path / "used"
    code = ["src/pkg/model.py", "src/pkg/mine.py", "params.yaml", ".dvc/config", ".gitignore"]
    made = [
        *(".dvc/cache/files/md5/ab/cdef", ".dvc/tmp/lock", ".dvc/config.local", "dvc.lock"),
        *("data/processed/spec.json", "results/metrics/train.json", "sweeps/study.db"),
        *("checkpoints/baseline/step-000000010/meta.json", "src/pkg/__pycache__/model.pyc"),
    ]
    for name in [*code, *made, "train.log"]:
        (used / name).parent.mkdir(parents=True, exist_ok=True)
        (used / name).write_text(name)
    (used / ".gitignore").write_text("*.log\n")
    git(used, "init", "-q")
    git(used, "add", "src/pkg/model.py", "params.yaml", ".dvc/config", ".gitignore")  # mine.py: new

    def copied(dest: Path) -> list[str]:
        return sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())

    assert copied(copy_checkout(tmp_path / "clone", used)) == sorted(code)
    shutil.rmtree(used / ".git")  # not a git work tree: every file but what running makes
    assert copied(copy_checkout(tmp_path / "folder", used)) == sorted([*code, "train.log"])


def test_what_a_local_run_keeps_in_the_storage_root_stays_out_of_git(tmp_path):
    """Off Colab the storage root is the project folder: its checkpoints, caches and a sweep's
    study (journal and lease) are one machine's state, never for `git add -A`."""
    state = [
        "checkpoints/baseline/meta.json",
        "cache/tfds/mnist/x",
        "sweeps/lr-dropout/journal.log",
        "sweeps/lr-dropout/lease.json",
    ]
    assert ignored(tmp_path, ".gitignore", state) == state


def test_a_sweeps_trial_models_stay_out_of_git_and_its_table_goes_in(tmp_path):
    """Each trial's model and train.json (results/sweeps/<name>/<number>/) are one machine's, as
    results/models is: the daily loop's `git add -A` leaves them out and keeps the study's table."""
    trials = [
        "results/sweeps/lr-dropout/0/models/model.keras",
        "results/sweeps/lr-dropout/12/metrics/train.json",
    ]
    study = ["results/sweeps/lr-dropout/trials.csv", "results/sweeps/lr-dropout/trials.png"]
    assert ignored(tmp_path, ".gitignore", [*trials, *study]) == trials


def test_what_a_killed_write_or_export_leaves_stays_out_of_git_and_dvc(tmp_path):
    """A killed atomic write's temporary file, and a killed export's staging folder beside an
    `--output` of the user's choosing (this version's name and an earlier one's): the next write
    or export there removes them; until then neither git nor DVC looks at them."""
    left = [
        "exports/.metrics.json-0123456789abcdef.tmp",
        "exports/.saved_model-export-k2_9xq0z/new/saved_model.pb",
        "exports/.saved_model-k2_9xq0z/new/saved_model.pb",
        "exports/.phone.tflite-export-k2_9xq0z/new",
    ]
    for ignore in (".gitignore", ".dvcignore"):  # .dvcignore: the same syntax
        assert ignored(tmp_path, ignore, left) == left, ignore


def test_predicts_default_output_stays_out_of_git_and_evaluates_goes_in(tmp_path):
    """`predict`'s default CSV scores new data (no result to version); evaluate's test
    predictions are a DVC output that git versions (cache: false)."""
    mine, stage = "results/predictions.csv", "results/predictions/test.csv"
    assert ignored(tmp_path, ".gitignore", [mine, stage]) == [mine]
