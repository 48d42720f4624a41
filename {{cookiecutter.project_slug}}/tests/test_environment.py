"""`env`: what a result depends on, printed and saved."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from {{ cookiecutter.module_name }}.core import environment
from {{ cookiecutter.module_name }}.core.environment import (
    collect_environment,
    git_info,
    log_environment,
    summary,
)
from {{ cookiecutter.module_name }}.core.progress import bar_kind, progress_bar, say

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_git_commit_and_dirty_flag(tmp_path):
    assert git_info(tmp_path)["commit"] is None
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "a")
    info = git_info(tmp_path)
    assert info["commit"] == git(tmp_path, "rev-parse", "HEAD")
    assert info["dirty"] is False
    (tmp_path / "a.txt").write_text("2")
    assert git_info(tmp_path)["dirty"] is True
    assert git_info(tmp_path)["changed_files"] == ["a.txt"]


def test_packages_data_hashes_and_summary(tmp_path):
    (tmp_path / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  prepare:\n    outs:\n    - path: data/processed\n"
        "      hash: md5\n      md5: 0123abcd.dir\n"
        # an output outside the project, as DVC allows: named as dvc.lock names it
        "    - path: /content/drive/MyDrive/mirror\n      md5: ccc.dir\n"
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "manifest.json").write_text("{}")
    (tmp_path / "data" / "extra.dvc").write_text("outs:\n- md5: 99ff\n  path: extra\n")
    env = collect_environment(tmp_path, devices=False)
    assert env["python"]["version"].count(".") == 2
    assert env["packages"]["numpy"] and env["packages"]["pyyaml"]
    assert env["data"]["dvc"] == {
        "data/processed": "0123abcd.dir",
        "/content/drive/MyDrive/mirror": "ccc.dir",
        "data/extra": "99ff",
    }
    assert env["data"]["manifest"]["path"] == "data/manifest.json"
    assert env["colab"]["on_colab"] is False
    text = summary(env)
    assert "Colab       no" in text and "data/processed: 0123abcd.dir" in text


def test_a_dvc_lock_in_a_merge_conflict_is_noted_not_fatal(tmp_path):
    # After a git merge of two branches that both ran the pipeline: every run record reads it.
    (tmp_path / "dvc.lock").write_text(
        "schema: '2.0'\n<<<<<<< HEAD\nstages: {}\n=======\nstages: {prepare: {}}\n>>>>>>> b\n"
    )
    env = collect_environment(tmp_path, devices=False)
    assert env["data"]["dvc"]["dvc.lock"].startswith("unreadable: ")
    assert "dvc.lock: unreadable: " in summary(env)


def test_env_is_saved_with_the_results_where_a_job_keeps_them(tmp_path, monkeypatch):
    monkeypatch.setenv("PROJECT_RESULTS_DIR", str(tmp_path / "bucket"))
    monkeypatch.setattr(environment, "tensorflow_info", lambda: {"skipped": True})
    (tmp_path / "project").mkdir()
    log_environment(tmp_path / "project")
    assert (tmp_path / "bucket" / "environment.json").is_file()
    assert not (tmp_path / "project" / "results").exists()


@pytest.mark.slow
def test_env_command_prints_and_saves_everything(tmp_path):
    output = tmp_path / "environment.json"
    run = subprocess.run(
        [sys.executable, "-m", MODULE, "env", "--output", str(output)],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    env = json.loads(output.read_text())
    tf = env["tensorflow"]
    assert tf["version"] and tf["keras_version"]
    assert "cuda_version" in tf and "cudnn_version" in tf and tf["devices"]
    assert env["colab"]["accelerator"].startswith(("CPU", "GPU", "TPU"))
    assert {"commit", "dirty"} <= set(env["git"])
    assert env["packages"]["tensorflow"] == tf["version"]  # every package is saved
    assert f"{len(env['packages'])} installed" in run.stdout  # and counted, not listed
    assert f"tensorflow=={tf['version']}" not in run.stdout
    assert "TensorFlow  " in run.stdout and "accelerator" in run.stdout


def test_make_test_all_prints_no_tensorflow_log():
    # `make test-all` runs pytest with workers; the line TensorFlow's C++ log writes when it finds
    # no GPU (`failed call to cuInit`) reached the terminal from this suite's conftest, at the
    # level the package keeps quiet for every other command (docs/troubleshooting.md).
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    test = "tests/test_config.py::test_template_params_load_with_the_keys_the_checks_use"
    command = [sys.executable, "-m", "pytest", "-n", "1", "-p", "no:cacheprovider", "-q", test]
    run = subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    logged = [
        line for line in (run.stdout + run.stderr).splitlines() if "] " in line and ".cc:" in line
    ]
    assert logged == []


def test_progress_suits_where_the_output_goes(monkeypatch, capsys):
    """A widget bar only in Colab's notebook kernel, tqdm's text bar on a terminal, else no bar
    but the caller's own lines (a log file, CI, a papermill report, a notebook without widgets)."""
    terminal, log = SimpleNamespace(isatty=lambda: True), SimpleNamespace(isatty=lambda: False)
    assert bar_kind(terminal) == "text" and bar_kind(log) == "lines"
    kernel = SimpleNamespace(config={"IPKernelApp": {}})
    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=lambda: kernel))
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    assert bar_kind(terminal) == "lines"  # Jupyter or papermill: a widget may not render
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20260801")
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: name == "ipywidgets" or None)
    assert bar_kind(terminal) == "widget"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert bar_kind(terminal) == "lines"  # Colab without ipywidgets: no TqdmWarning either
    monkeypatch.setattr(importlib.util, "find_spec", found)
    monkeypatch.delenv("COLAB_RELEASE_TAG")  # a kernel elsewhere: lines
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a TqdmWarning would fail here
        bar = progress_bar(10, unit="step")
        bar.update(10)
        bar.close()
        say("epoch 1/1  step 10/10")
    assert capsys.readouterr() == ("epoch 1/1  step 10/10\n", "")


def test_a_package_installed_twice_is_the_copy_python_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two copies on sys.path (a user's `pip install --target`, Colab's own): the first wins."""
    for folder, version in (("later", "2.0"), ("first", "1.0")):
        info = tmp_path / folder / f"twice_pkg-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: twice_pkg\nVersion: {version}\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path / folder))
    assert environment.installed_packages()["twice-pkg"] == "1.0"
