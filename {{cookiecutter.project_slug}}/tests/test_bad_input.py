"""Bad input is refused, not crashed on: one `error: ...` line naming the key or file, a non-zero
exit, no traceback, nothing half-written. Each case runs the command line in this process."""

from __future__ import annotations

import ast
import errno
import hashlib
import inspect
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import TINY, sets

from {{ cookiecutter.module_name }}.__main__ import main, storage_fault
from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.core.files import atomic_write
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

Setup = Callable[[Path], list[str]]  # prepares the project, returns the command line


def _edit_params(old: str, new: str) -> Setup:
    def setup(project: Path) -> list[str]:
        params = project / "params.yaml"
        text = params.read_text()
        assert old in text
        params.write_text(text.replace(old, new, 1))
        return ["prepare"]

    return setup


def _images(counts: dict[str, int]) -> Setup:
    def setup(project: Path) -> list[str]:
        from PIL import Image

        folder = project / "data/external/pets"
        for name, n in counts.items():
            (folder / name).mkdir(parents=True)
            for i in range(n):
                Image.new("L", (4, 4), 40 * i).save(folder / name / f"{i}.png")
        return ["prepare", *sets(["data.source=images", "data.path=data/external/pets"])]

    return setup


def _header_only(project: Path) -> list[str]:
    (project / "data/external").mkdir(parents=True)
    (project / "data/external/mine.csv").write_text("x1,x2,label\n")
    return ["prepare", *sets(["data.source=csv", "data.path=data/external/mine.csv"])]


def _no_train_file(project: Path) -> list[str]:
    (project / "data/external/comp").mkdir(parents=True)
    (project / "data/external/comp/test.csv").write_text("x1,x2,label\n1,2,a\n")
    split = ["data.source=csv", "data.path=data/external/comp", "data.split=files"]
    return ["prepare", *sets(split)]


def _csv(rows: list[str]) -> Setup:
    def setup(project: Path) -> list[str]:
        good = [f"{i},{i * 2},{'a' if i % 2 else 'b'}" for i in range(20)]
        (project / "data/external").mkdir(parents=True)
        (project / "data/external/mine.csv").write_text("\n".join(["x1,x2,label", *good, *rows]))
        return ["prepare", *sets(["data.source=csv", "data.path=data/external/mine.csv"])]

    return setup


def _not_an_image(project: Path) -> list[str]:
    """A file named .png that is no image, among the images."""
    args = _images({"cat": 3, "dog": 3})(project)
    (project / "data/external/pets/dog/notes.png").write_text("my notes")
    return args


def _images_in_data(project: Path) -> list[str]:
    """Class folders right in data/, beside the data/raw and data/processed prepare writes."""
    _images({"cat": 3, "dog": 3})(project)
    for name in ("cat", "dog"):
        (project / "data/external/pets" / name).rename(project / "data" / name)
    return ["prepare", *sets(["data.source=images", "data.path=data"])]


def _saved_index(project: Path) -> list[str]:
    """A CSV written with pandas's `df.to_csv(path)`: the index is a first column with no name."""
    _csv([])(project)
    path = project / "data/external/mine.csv"
    lines = path.read_text().splitlines()
    rows = [f"{i},{line}" for i, line in enumerate(lines[1:])]
    path.write_text("\n".join([f",{lines[0]}", *rows]))
    return ["prepare", *sets(["data.source=csv", "data.path=data/external/mine.csv"])]


def _no_labels(project: Path) -> list[str]:
    """Multi-label rows that all have an empty label cell: no label to learn."""
    (project / "data/external").mkdir(parents=True)
    rows = [f"{i},{i * 2}," for i in range(20)]
    (project / "data/external/mine.csv").write_text("\n".join(["x1,x2,label", *rows]))
    overrides = ["data.source=csv", "data.path=data/external/mine.csv", "task.type=multilabel"]
    return ["prepare", *sets(overrides)]


def _texts(overrides: list[str], command: str = "prepare") -> Setup:
    """A CSV of texts (`review`) and labels; `train`: prepared first."""

    def setup(project: Path) -> list[str]:
        rows = [f"{i},{'good' if i % 2 else 'bad'} film number {i},{i % 2}" for i in range(20)]
        (project / "data/external").mkdir(parents=True)
        (project / "data/external/texts.csv").write_text("\n".join(["id,review,label", *rows]))
        base = ["data.source=csv", "data.path=data/external/texts.csv", "data.text=review"]
        if command == "train":
            assert main(["prepare", *sets(base), "--params", str(project / "params.yaml")]) == 0
        return [command, *sets([*base, *overrides])]

    return setup


def _text_files(project: Path) -> list[str]:
    """Class folders of .txt files, one of them Latin-1."""
    folder = project / "data/external/reviews"
    for name in ("pos", "neg"):
        (folder / name).mkdir(parents=True)
        for i in range(3):
            (folder / name / f"{i}.txt").write_text(f"{name} text {i}", "utf-8")
    (folder / "neg/2.txt").write_bytes("un café noir".encode("latin-1"))
    return ["prepare", *sets(["data.source=text", "data.path=data/external/reviews"])]


def _model_of_other_data(project: Path) -> list[str]:
    """A model trained on a CSV's vectors, then the digits prepared in their place."""
    prepare_csv = [*_csv([])(project), "--params", str(project / "params.yaml")]
    assert main(prepare_csv) == 0
    run = [*TINY, "train.epochs=1", "train.batch_size=4", "distribute.strategy=default"]
    csv = ["data.source=csv", "data.path=data/external/mine.csv"]
    train(load_params(project / "params.yaml", [*run, *csv]), project)
    assert main(["prepare", "--params", str(project / "params.yaml")]) == 0
    return ["evaluate"]


def _other_model(project: Path) -> list[str]:
    """A checkpoint folder of the run written by a model with other layers."""
    run = [*TINY, "train.epochs=1", "run_name=other", "distribute.strategy=default"]
    train(load_params(project / "params.yaml", [*run, "model.hidden_units=[8]"]), project)
    return ["train", *sets([*run, "model.hidden_units=[16]"])]


CASES: dict[str, tuple[Setup, str]] = {
    "set-wrong-type": (lambda p: ["prepare", "--set", "train.epochs=ten"], "train.epochs"),
    "set-unknown-key": (lambda p: ["prepare", "--set", "train.epoch=3"], "train.epoch"),
    "set-not-key-value": (lambda p: ["prepare", "--set", "train.epochs"], "train.epochs"),
    "yaml-wrong-type": (_edit_params("epochs: 20", "epochs: twenty"), "train.epochs"),
    "yaml-unknown-key": (_edit_params("seed: 42", "seed: 42\ncolour: red"), "colour"),
    "yaml-malformed": (_edit_params("seed: 42", "seed: [42"), "params.yaml"),
    "empty-class-folder": (_images({"cat": 10, "dog": 0}), "dog"),
    "class-with-one-example": (_images({"cat": 10, "dog": 1}), "dog"),
    # A CSV's row is named by its line, as an editor numbers them (the header's is 1), in the
    # user's file (not prepare's copy in data/raw); blank lines and a quoted cell's breaks count.
    "csv-missing-value": (_csv(["7,,a"]), "external/mine.csv line 22, column 'x2': a missing"),
    "csv-missing-class": (_csv(["7,8,"]), "external/mine.csv line 22, column 'label': a missing"),
    "csv-after-blank-lines": (_csv(["", "", "7,,a"]), "mine.csv line 24, column 'x2'"),
    "csv-after-a-quoted-line-break": (_csv(['7,8,"a\nb"', "7,,a"]), "mine.csv line 24, column"),
    "csv-saved-index": (_saved_index, "mine.csv: column 1 has no name in the header"),
    "csv-short-row": (_csv(["7,a"]), "mine.csv"),
    "csv-row-longer-than-header": (_csv(["7,8,a,9"]), "mine.csv line 22: 4 fields, the header"),
    "csv-text-in-feature": (_csv(["7,seven,a"]), "mine.csv line 22, column 'x2': not a number"),
    "csv-infinite-feature": (_csv(["7,inf,a"]), "mine.csv"),
    "csv-feature-beyond-float32": (_csv(["7,1e39,a"]), "mine.csv"),
    "csv-header-only": (_header_only, "data.path: data/external/mine.csv holds no examples"),
    "split-files-without-train": (_no_train_file, "or let prepare split the data (example: "),
    "one-class": (_images({"cat": 10}), "found 1 ('cat') in pets/"),
    # Which file, why, and no advice to delete it.
    "not-an-image": (
        _not_an_image,
        "notes.png: not a readable image (cannot identify image file); fix it or leave it out",
    ),
    "multilabel-without-labels": (_no_labels, "found 0 () in mine.csv"),
    "data-path-holds-prepares-output": (_images_in_data, "data.path: data holds data/raw"),
    "missing-data-path": (
        lambda p: ["prepare", *sets(["data.source=csv", "data.path=data/external/none.csv"])],
        "data.path",
    ),
    "train-unprepared-source": (lambda p: ["train", "--set", "data.source=csv"], "data.source"),
    "checkpoint-of-another-model": (_other_model, "checkpoint"),
    "model-of-other-data": (_model_of_other_data, "models/model.keras: trained on vectors 2"),
    "text-column-missing": (_texts(["data.text=body"]), "data.text"),
    "text-column-is-the-label": (_texts(["data.text=label"]), "data.text"),
    "text-source-on-a-csv": (_texts(["data.source=text"]), "--set data.source=csv --set data.text"),
    "text-file-not-utf8": (_text_files, "2.txt: not UTF-8"),
    "mlp-on-text": (_texts(["train.batch_size=4"], "train"), "model.architecture"),
}


def _snapshot(project: Path) -> dict[str, str]:
    """Digest of every output a command could half-write."""
    outputs = ["data/processed", "data/manifest.json", "results/models", "results/metrics"]
    found = {}
    for out in outputs:
        root = project / out
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file():
                found[path.relative_to(project).as_posix()] = hashlib.sha256(
                    path.read_bytes()
                ).hexdigest()
    return found


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_naming_it(
    case: str, tiny_project: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    setup, names = CASES[case]
    monkeypatch.chdir(tiny_project)
    _is_one_line_naming(setup(tiny_project), names, tiny_project, capsys)


class _FullDisk(str):
    """Data whose write fails as on a full disk: the OSError names no file."""

    def encode(self, *args: object) -> bytes:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _full_disk_in_a_write(target: Path, data: object) -> Path:
    return atomic_write(target, _FullDisk())


def _full_disk_in_tensorflow(*args: object) -> None:
    raise tf.errors.ResourceExhaustedError(None, None, "p/t-0.tfrecord; No space left on device")


def _no_read_permission(src: Path, *args: object) -> None:
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(src))


# Where prepare meets a full disk or a file it may not read (root reads any file, and a full disk
# needs a mount: the error is raised where the real one would be).
FAULTS = {
    "data.prepare.atomic_write": (_full_disk_in_a_write, "raw/digits.csv: No space left on device"),
    "data.prepare.write_shards": (_full_disk_in_tensorflow, "t-0.tfrecord: No space left on"),
    "data.staging._copy": (_no_read_permission, "external/mine.csv: Permission denied"),
}


@pytest.mark.parametrize("where", list(FAULTS))
def test_a_full_disk_or_an_unreadable_file_is_one_line_naming_it(
    where: str, tiny_project: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    fault, names = FAULTS[where]
    monkeypatch.chdir(tiny_project)
    args = _csv([])(tiny_project) if "staging" in where else ["prepare"]
    monkeypatch.setattr(f"{{ cookiecutter.module_name }}.{where}", fault)
    _is_one_line_naming(args, names, tiny_project, capsys)


def _is_one_line_naming(args: list[str], names: str, project: Path, capsys) -> None:
    """The command fails with one `error:` line that holds `names`, and half-writes nothing."""
    before = _snapshot(project)
    capsys.readouterr()
    code = main([*args, "--params", str(project / "params.yaml")])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.strip() and "%|" not in line]
    assert code != 0, err
    assert len(errors) == 1 and errors[0].startswith("error: "), err  # beside progress bars
    assert names in errors[0] and "Traceback" not in err, errors[0]
    assert _snapshot(project) == before  # nothing half-written


def test_no_error_advises_removing_or_deleting_the_users_files() -> None:
    """An error never suggests a step that deletes the user's work: it says move it, or leave it
    out. Every error the package builds (a call of a class named `...Error`), read as written."""
    package = Path(inspect.getfile(main)).parent
    advice = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            called = getattr(node, "func", None)
            name = getattr(called, "id", None) or getattr(called, "attr", "")
            if isinstance(node, ast.Call) and name.endswith("Error"):
                words = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
                text = " ".join(w for w in words if isinstance(w, str))
                if re.search(r"\b(remove|delete|rm|erase)\b", text, re.IGNORECASE):
                    advice.append(f"{path.relative_to(package)}:{node.lineno}: {text[:90]}")
    assert not advice


def test_a_storage_fault_names_the_file_or_folder_to_fix(tmp_path: Path) -> None:
    """They saw `.evaluate.json-....tmp: Permission denied` (a file that never was), tracebacks
    for EPERM and a read-only file system, and no advice for a quota."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    target, never_made = folder / "evaluate.json", folder / ".evaluate.json-1a2b.tmp"
    target.write_text("{}")

    def said(code: int, *paths: Path) -> str | None:
        names = [str(p) for p in paths]
        return storage_fault(OSError(code, os.strerror(code), names[0], None, *names[1:]))

    assert said(errno.EACCES, never_made) == (
        f"{folder}: Permission denied; make it yours to read and write "
        f"(example: chmod u+rwX {folder})"
    )
    assert said(errno.EPERM, never_made, target).startswith(f"{target}: Operation not permitted; ")
    assert said(errno.EROFS, target) == (
        f"{target}: Read-only file system; remount it read-write, or write elsewhere "
        "(PROJECT_RESULTS_DIR, PROJECT_STORAGE_DIR)"
    )
    assert said(errno.EDQUOT, target).endswith(
        "free some space (`df -h` shows each disk's free space)"
    )
