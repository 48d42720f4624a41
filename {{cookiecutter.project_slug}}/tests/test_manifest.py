"""data/manifest.json: written with size, sha256, source and DVC md5; a changed file is caught."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from {{ cookiecutter.module_name }}.config import COMMAND
from {{ cookiecutter.module_name }}.data import manifest

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "data" / "raw").mkdir(parents=True)
    (tmp_path / "data" / "processed").mkdir(parents=True)
    (tmp_path / "data" / "raw" / "x.csv").write_text("a,label\n1,0\n")
    (tmp_path / "data" / "processed" / "train.npz").write_bytes(b"\x00" * 100)
    manifest.write(
        tmp_path,
        {"data/raw": {"data/raw/x.csv": "my source"}, "data/processed": {}},
        {"seed": 1},
    )
    return tmp_path


def test_entries(project: Path) -> None:
    doc = json.loads((project / manifest.MANIFEST).read_text())
    entries = {e["path"]: e for e in doc["files"]}
    assert set(entries) == {"data/raw/x.csv", "data/processed/train.npz"}
    raw = (project / "data/raw/x.csv").read_bytes()
    e = entries["data/raw/x.csv"]
    assert e["size"] == len(raw)
    assert e["sha256"] == hashlib.sha256(raw).hexdigest()
    assert e["dvc"] == {"out": "data/raw", "md5": hashlib.md5(raw).hexdigest()}
    assert e["source"] == "my source"
    assert entries["data/processed/train.npz"]["source"] == "prepare"
    assert manifest.check(project) == 2


def test_changed_file_is_named(project: Path) -> None:
    path = project / "data" / "processed" / "train.npz"
    path.write_bytes(b"\x01" + path.read_bytes()[1:])  # same size, other content
    with pytest.raises(manifest.ManifestMismatch) as exc:
        manifest.check(project)
    message = str(exc.value)
    assert message.startswith("data/processed/train.npz: changed since prepare")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda p: (p / "data/raw/x.csv").unlink(), "data/raw/x.csv: missing"),
        (lambda p: (p / "data/raw/x.csv").write_text("longer,label\n"), "data/raw/x.csv: 13 bytes"),
        (lambda p: (p / "data/raw/extra.csv").write_text("1"), "data/raw/extra.csv: not in"),
    ],
)
def test_other_mismatches(project: Path, change, words: str) -> None:
    change(project)
    with pytest.raises(manifest.ManifestMismatch, match=words):
        manifest.check(project)


def test_a_hidden_folders_files_are_no_data(project: Path) -> None:
    """Jupyter's checkpoint of a file opened in Colab's editor (data/raw/.ipynb_checkpoints/),
    which .dvcignore leaves out too: neither a mismatch nor listed."""
    hidden = project / "data/raw/.ipynb_checkpoints/x-checkpoint.csv"
    hidden.parent.mkdir()
    hidden.write_text("a,label\n1,0\n")
    assert manifest.check(project) == 2
    manifest.write(project, {"data/raw": {}, "data/processed": {}}, {"seed": 1})
    assert manifest.check(project) == 2


def test_no_manifest(tmp_path: Path) -> None:
    assert manifest.load(tmp_path) == {}
    with pytest.raises(manifest.ManifestMismatch, match="prepare"):
        manifest.check(tmp_path)


def test_a_manifest_that_is_not_json_is_refused_in_a_line_whose_fix_runs(project: Path) -> None:
    """A hand edit or a merge conflict left in data/manifest.json: one line, not a traceback, and
    its git command brings back the committed manifest."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-qm", "data"], cwd=project, check=True)
    path = project / manifest.MANIFEST
    path.write_text(path.read_text().replace('"files"', '<<<<<<< HEAD\n"files"', 1))
    with pytest.raises(manifest.ManifestMismatch) as refused:
        manifest.check(project)
    line = str(refused.value)
    assert line.startswith(f"{manifest.MANIFEST}: not JSON (Expecting ") and "\n" not in line
    assert line.endswith(f"or move it out and run `{COMMAND} prepare`")
    command = re.search(r"`(git checkout [^`]+)`", line)[1]
    subprocess.run(shlex.split(command), cwd=project, check=True)
    assert manifest.check(project) == 2
