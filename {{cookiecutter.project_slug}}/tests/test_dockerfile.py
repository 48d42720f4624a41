"""The Dockerfile, checked without Docker: a pinned base, the lock installed, the package run."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from {{ cookiecutter.module_name }}.__main__ import build_parser

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]


def instructions(path: Path = PROJECT / "Dockerfile") -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with comments dropped and continuation lines joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        result.append((word.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return result


def first(kind: str, steps: list[tuple[str, str]]) -> int:
    return next(i for i, (word, _) in enumerate(steps) if word == kind)


def test_runs_in_the_image_record_the_commit_make_image_built(tmp_path, monkeypatch):
    """The image has no .git: `make image` passes the commit, the run records read it."""
    from {{ cookiecutter.module_name }}.core.environment import git_info

    steps = instructions()
    assert ("ARG", 'GIT_COMMIT=""') in steps and ("ENV", "PROJECT_GIT_COMMIT=$GIT_COMMIT") in steps
    if shutil.which("make"):
        make = subprocess.run(["make", "-n", "image"], cwd=PROJECT, capture_output=True, text=True)
        assert '--build-arg GIT_COMMIT="$(git rev-parse HEAD' in make.stdout, make.stdout
    monkeypatch.setenv("PROJECT_GIT_COMMIT", "0123abc")
    assert git_info(tmp_path)["commit"] == "0123abc"  # tmp_path: not a git clone


def test_parser_reads_the_file():
    steps = instructions()
    words = {word for word, _ in steps}
    assert {"FROM", "COPY", "RUN", "ENTRYPOINT", "WORKDIR"} <= words
    assert all(re.fullmatch(r"[A-Z]+", word) for word in words)


def test_base_image_is_pinned():
    steps = instructions()
    froms = [args for word, args in steps if word == "FROM"]
    assert len(froms) == 1
    image = froms[0].split()[0]
    match = re.fullmatch(
        r"python:(?P<version>3\.\d+\.\d+)-slim-(?P<distro>[a-z]+)(@sha256:[0-9a-f]{64})?", image
    )
    assert match, f"FROM {image}: expected python:<major.minor.patch>-slim-<debian>[@sha256:...]"
    assert "latest" not in image
    # The image's Python satisfies the package's requires-python.
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    minimum = pyproject["project"]["requires-python"].removeprefix(">=")
    have = tuple(int(x) for x in match["version"].split(".")[:2])
    assert have >= tuple(int(x) for x in minimum.split(".")[:2])


def test_installs_the_lock_before_the_code():
    steps = instructions()
    copy_lock = next(
        i for i, (w, a) in enumerate(steps) if w == "COPY" and a.split()[0] == "requirements.txt"
    )
    install_lock = next(
        i for i, (w, a) in enumerate(steps) if w == "RUN" and "-r requirements.txt" in a
    )
    copy_src = next(i for i, (w, a) in enumerate(steps) if w == "COPY" and a.startswith("src/"))
    install_pkg = next(
        i for i, (w, a) in enumerate(steps) if w == "RUN" and re.search(r"--no-deps \.(\s|$)", a)
    )
    # Lock first (its layer survives code edits), then the code, then the package without
    # re-resolving dependencies (the lock is the environment).
    assert copy_lock < install_lock < copy_src < install_pkg
    assert first("FROM", steps) < copy_lock


def test_the_lock_pins_every_package():
    lines = [
        line.split(";")[0].strip()
        for line in (PROJECT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines
    unpinned = [line for line in lines if not re.fullmatch(r"[A-Za-z0-9._\[\],-]+==[^=\s]+", line)]
    assert not unpinned, unpinned
    assert any(line.startswith("tensorflow==") for line in lines)


def test_accelerator_variants():
    run = next(a for w, a in instructions() if w == "RUN" and "-r requirements.txt" in a)
    assert "tensorflow[and-cuda]==${TF_VERSION}" in run
    assert "tensorflow-tpu==${TF_VERSION}" in run  # Colab's TPU runtime ships no TensorFlow
    assert re.search(r"\*\)[^\n]*exit 1", run)  # an unknown ACCELERATOR stops the build
    args = [a for w, a in instructions() if w == "ARG"]
    assert "ACCELERATOR=gpu" in args


def test_entrypoint_runs_the_package():
    steps = instructions()
    entry = json.loads(next(a for w, a in steps if w == "ENTRYPOINT"))
    assert entry == ["python", "-m", MODULE]
    assert (PROJECT / "src" / MODULE / "__main__.py").is_file()
    cmd = json.loads(next(a for w, a in steps if w == "CMD"))
    commands = build_parser()._subparsers._group_actions[0].choices  # the CLI's commands
    assert cmd[0] in commands
    assert "vertex" in commands


def test_every_copied_file_exists_and_is_not_ignored():
    ignored = [
        line.strip().rstrip("/")
        for line in (PROJECT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = []
    for word, args in instructions():
        if word == "COPY":
            copied += [s for s in args.split()[:-1] if not s.startswith("--")]
    assert {"requirements.txt", "pyproject.toml", "requirements.in", "src/", "params.yaml"} <= set(
        copied
    )
    for source in copied:
        assert (PROJECT / source).exists(), f"COPY {source}: not in the project"
        name = source.rstrip("/")
        assert not any(fnmatch.fnmatch(name, pattern) for pattern in ignored), source


@pytest.mark.parametrize("path", ["data", "results", ".git", "checkpoints", ".env", "notebooks"])
def test_dockerignore_keeps_data_and_secrets_out(path):
    ignored = {
        line.strip().rstrip("/")
        for line in (PROJECT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert path in ignored


def test_pyproject_files_needed_by_the_build_are_copied():
    """`pip install .` reads pyproject.toml, and through it requirements.in, README and LICENSE."""
    copied = " ".join(a for w, a in instructions() if w == "COPY")
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    needed = list(pyproject["tool"]["setuptools"]["dynamic"]["dependencies"]["file"])
    needed.append(pyproject["project"]["readme"])
    needed += pyproject["project"].get("license-files", [])
    for name in needed:
        assert name in copied.split(), f"pip install . needs {name}"


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
@pytest.mark.parametrize(
    "accelerator, expected",
    [
        ("gpu", ["install --no-cache-dir -r requirements.txt", "show tensorflow",
                 "install --no-cache-dir tensorflow[and-cuda]==2.20.0"]),
        ("cpu", ["install --no-cache-dir -r requirements.txt", "show tensorflow"]),
        ("tpu", ["install --no-cache-dir -r requirements.txt", "show tensorflow",
                 "uninstall -y tensorflow", "install --no-cache-dir tensorflow-tpu==2.20.0"]),
    ],
)  # fmt: skip
def test_install_step_runs_in_a_shell(tmp_path, accelerator, expected):
    """Run the lock-install RUN line as Docker would (`/bin/sh -c`, ARG as a variable), with a
    stand-in `pip` that records its arguments: the shell logic itself is exercised."""
    run = next(a for w, a in instructions() if w == "RUN" and "-r requirements.txt" in a)
    log = tmp_path / "pip.log"
    fake = tmp_path / "bin" / "pip"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        'if [ "$1" = show ]; then echo "Name: tensorflow"; echo "Version: 2.20.0"; fi\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    env["ACCELERATOR"] = accelerator
    done = subprocess.run(["sh", "-c", run], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == expected


def test_unknown_accelerator_stops_the_build(tmp_path):
    run = next(a for w, a in instructions() if w == "RUN" and "-r requirements.txt" in a)
    fake = tmp_path / "pip"
    fake.write_text("#!/bin/sh\necho Version: 2.20.0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {
        **os.environ,
        "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
        "ACCELERATOR": "gpus",
    }
    done = subprocess.run(["sh", "-c", run], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1
    assert "ACCELERATOR must be gpu, cpu or tpu, not 'gpus'" in done.stderr
