"""predict.py: the saved model alone predicts in a fresh process, for each task; export."""

from __future__ import annotations

import csv
import dataclasses
import errno
import os
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import PARAMS, drop, main_in_fresh_process, save_for_users

from {{ cookiecutter.module_name }}.__main__ import STORAGE_FIXES, main
from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.data.staging import stage
from {{ cookiecutter.module_name }}.evaluation.export import export_saved_model
from {{ cookiecutter.module_name }}.evaluation.predict import predict
from {{ cookiecutter.module_name }}.model import build_model
from {{ cookiecutter.module_name }}.registry import _ENTRIES, register
from {{ cookiecutter.module_name }}.sources import Source, encode
from {{ cookiecutter.module_name }}.spec import DataSpec, load_spec
from {{ cookiecutter.module_name }}.task import task_class
from {{ cookiecutter.module_name }}.training.saved_model import (
    load_for_users,
    wrap_for_users,
)

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

FEATURES = ["height", "weight"]
VECTOR = dict(kind="vector", input_shape=(2,), feature_names=FEATURES,
              feature_mean=[170.0, 70.0], feature_var=[100.0, 225.0])  # fmt: skip
IMAGE = dict(kind="image", input_shape=(32, 32, 3))
CASES = {
    "classification": (DataSpec(task="classification", names=["cat", "dog"], **VECTOR), "mlp"),
    "regression": (
        DataSpec(task="regression", names=["price"], target_mean=50.0, target_std=10.0, **VECTOR),
        "mlp",
    ),
    # MobileNetV2: its preprocess_input is a layer of this package, loaded in a fresh process.
    "multilabel": (DataSpec(task="multilabel", names=["sky", "sea", "sun"], **IMAGE), "backbone"),
    "images": (DataSpec(task="classification", names=["a", "b", "c"], **IMAGE), "cnn"),
}
ROWS = [["height", "weight", "note"], ["180", "80", "x"], ["150", "50", "y"], ["170", "95", "z"]]


def _project(root: Path, name: str) -> tuple[Path, np.ndarray, Path]:
    """A project folder with a saved model of case `name`, an input, and the expected outputs."""
    spec, architecture = CASES[name]
    task = task_class(spec.task)(
        names=spec.names, target_mean=spec.target_mean or 0.0, target_std=spec.target_std or 1.0
    )
    model_cfg = dataclasses.replace(
        load_params(PARAMS).model, architecture=architecture,
        backbone="MobileNetV2", hidden_units=[4], filters=[4], weights=None,
    )  # fmt: skip
    keras.utils.set_random_seed(0)
    logits_model = build_model(spec, task.num_outputs, model_cfg)
    project = root / name
    (project / "inputs").mkdir(parents=True)
    shutil.copy(PARAMS, project / "params.yaml")
    save_for_users(logits_model, task, spec, project / "results" / "models")
    if spec.kind == "vector":
        source = project / "inputs" / "new.csv"
        source.write_text("\n".join(",".join(row) for row in ROWS) + "\n")
        x = np.array([[float(v) for v in row[:2]] for row in ROWS[1:]], "float32")
    else:
        pixels = np.random.default_rng(0).integers(0, 256, size=(2, 32, 32, 3), dtype=np.uint8)
        for i, image in enumerate(pixels):
            (project / "inputs" / f"{i}.png").write_bytes(tf.io.encode_png(image).numpy())
        source, x = project / "inputs", pixels.astype("float32")
    expected = np.asarray(wrap_for_users(logits_model, task)(x))
    return project, expected, source


def test_predict_in_a_fresh_process_for_each_task(tmp_path: Path) -> None:
    projects = {name: _project(tmp_path, name) for name in CASES}
    calls = [
        ["predict", str(source), "--params", str(project / "params.yaml")]
        for project, _, source in projects.values()
    ]
    exported = tmp_path / "served"
    calls.append(["export", "--output", str(exported), "--params", calls[0][3]])
    # LiteRT where no data is prepared: the interpreter runs it on one probe example.
    calls.append(["export", "--format", "litert", "--params", calls[-1][-1]])
    proc = main_in_fresh_process(calls, tmp_path, tmp_path / "storage")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("Wrote ") == len(CASES) + 2
    assert (exported / "saved_model.pb").is_file()
    assert "no prepared test split here, so run on one probe example" in proc.stdout
    assert (projects["classification"][0] / "results" / "models" / "model.tflite").is_file()
    for name, (project, expected, _) in projects.items():
        with (project / "results" / "predictions.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        _check_rows(name, rows, expected)


def _check_rows(name: str, rows: list[dict[str, str]], expected: np.ndarray) -> None:
    spec = CASES[name][0]
    assert len(rows) == len(expected)
    if name == "regression":
        assert list(rows[0]) == ["id", "prediction"] and [r["id"] for r in rows] == ["1", "2", "3"]
        got = [float(r["prediction"]) for r in rows]
        np.testing.assert_allclose(got, expected[:, 0], rtol=1e-5)
        return
    assert list(rows[0]) == ["id", "prediction", *[f"prob_{n}" for n in spec.names]]
    probs = np.array([[float(r[f"prob_{n}"]) for n in spec.names] for r in rows])
    np.testing.assert_allclose(probs, expected, rtol=1e-5, atol=1e-6)
    if name == "multilabel":
        chosen = [
            "|".join(n for n, p in zip(spec.names, row, strict=True) if p >= 0.5)
            for row in expected
        ]
        assert [r["prediction"] for r in rows] == chosen
        assert rows[0]["id"].endswith("0.png")
    else:
        assert [r["prediction"] for r in rows] == [spec.names[i] for i in expected.argmax(1)]


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    project, _, source = _project(tmp_path, "classification")
    models = project / "results" / "models"
    source.write_text("height,mass\n1,2\n")
    with pytest.raises(ConfigError, match=r"missing feature column 'weight' \(the training"):
        predict(source, tmp_path / "out.csv", models)
    source.write_text("height,weight\n1,heavy\n")
    with pytest.raises(ConfigError, match=r"new.csv line 2, column 'weight': not a number \('he"):
        predict(source, tmp_path / "out.csv", models)
    for empty in ("height,weight\n", ""):
        source.write_text(empty)
        with pytest.raises(ConfigError, match=r"new.csv: no rows to predict"):
            predict(source, tmp_path / "out.csv", models)
    # A header short of its rows: pandas would take the first column as the index, every name
    # then one column off; in the first row or a later one.
    for text, line in (("height,weight\n0,180,80\n", 2), ("height,weight\n1,2\n3,4,5,6\n", 3)):
        source.write_text(text)
        with pytest.raises(ConfigError, match=rf"new.csv line {line}: \d fields, the header has 2"):
            predict(source, tmp_path / "out.csv", models)
    source.write_text('height,weight\n1,"2\n')
    with pytest.raises(ConfigError, match=r"new.csv: not a readable CSV \(Error tokenizing"):
        predict(source, tmp_path / "out.csv", models)
    source.write_text("height,weight\n1,2\n")
    with pytest.raises(ConfigError, match=r"^--output .*new.csv: is the input; predictions would"):
        predict(source, source, models)
    assert source.read_text() == "height,weight\n1,2\n"
    with pytest.raises(ConfigError, match="no saved model"):
        load_for_users(tmp_path / "nowhere")
    assert not (tmp_path / "out.csv").exists()


def test_a_source_without_column_names_predicts_a_csv_of_x0_x1(tmp_path: Path, monkeypatch) -> None:
    """A vector source of yours gives no `feature_names` (docs/customise.md's jsonl): prepare
    names its columns x0, x1, ..., and predict reads a CSV of them, or says they are missing."""

    def read_rows(path, data, kind):  # noqa: ANN001, ANN202
        y, names = encode(kind, ["a", "b"] * 10, data.label)
        x = np.arange(60, dtype=np.float32).reshape(20, 3)
        return Source("vector", kind, y, names, x.__getitem__, str, input_shape=(3,))

    monkeypatch.setitem(_ENTRIES["source"], "rows", None)  # gone again after this test
    register("source", "rows")(read_rows)
    (tmp_path / "rows.txt").write_text("rows\n")
    params = load_params(PARAMS, ["data.source=rows", f"data.path={tmp_path / 'rows.txt'}"])
    prepare(params, tmp_path)
    spec = load_spec(tmp_path / "data" / "processed")
    task = task_class(spec.task)(names=spec.names)
    models = tmp_path / "results" / "models"
    save_for_users(build_model(spec, task.num_outputs, params.model), task, spec, models)
    source = tmp_path / "new.csv"
    source.write_text("id,x0,x1,x2\n7,0.5,1,2\n8,3,4,5\n")
    assert predict(source, tmp_path / "out.csv", models) == 2
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert [row["id"] for row in rows] == ["1", "2"] and rows[0]["prediction"] in ("a", "b")
    source.write_text("a,b,c\n0.5,1,2\n")
    with pytest.raises(
        ConfigError,
        match=r"new.csv: missing feature column 'x0' \(the training features: x0, x1, x2\)",
    ):
        predict(source, tmp_path / "out2.csv", models)


def test_an_input_of_the_other_kind_says_what_the_model_takes(tmp_path: Path) -> None:
    """A CSV given to a model trained on images, or images to one trained on a CSV: one line
    naming the input and what it is, what the model takes, and a valid example."""
    images, _, folder = _project(tmp_path, "images")
    vectors, _, table = _project(tmp_path, "classification")
    with pytest.raises(ConfigError) as refusal:
        predict(table, tmp_path / "out.csv", images / "results" / "models")
    assert str(refusal.value) == (
        f"{table}: this model takes images (.png .jpg .jpeg .bmp .gif .webp): one, or a folder "
        "of them; this is a CSV (example: predict photos/)"
    )
    for given, what in ((folder, "a folder"), (folder / "0.png", "a .png file")):
        with pytest.raises(ConfigError) as refusal:
            predict(given, tmp_path / "out.csv", vectors / "results" / "models")
        assert str(refusal.value) == (
            f"{given}: this model takes a CSV of its training features (height, weight); this "
            f"is {what} (example: predict new.csv)"
        )
    assert not (tmp_path / "out.csv").exists()


def test_export_writes_a_saved_model_that_reloads(tmp_path: Path) -> None:
    project, expected, _ = _project(tmp_path, "regression")
    destination = project / "results" / "models" / "saved_model"
    export_saved_model(project, destination)
    export_saved_model(project, destination)  # again: replaces its own
    served = tf.saved_model.load(str(destination))
    x = np.array([[float(v) for v in row[:2]] for row in ROWS[1:]], "float32")
    np.testing.assert_allclose(np.asarray(served.serve(x))[:, 0], expected[:, 0], rtol=1e-5)
    other = tmp_path / "mine"
    other.mkdir()
    with pytest.raises(ConfigError, match="mine: exists and export did not write it"):
        export_saved_model(project, other)


def test_predict_leaves_out_hidden_files_as_prepare_does(tmp_path: Path) -> None:
    """macOS's `._0.png` copies and Jupyter's checkpoint folders are no images to score."""
    project, _, source = _project(tmp_path, "images")
    (source / "._0.png").write_bytes(b"\x00\x05\x16\x07")
    (source / ".ipynb_checkpoints").mkdir()
    shutil.copy(source / "0.png", source / ".ipynb_checkpoints" / "0-checkpoint.png")
    assert predict(source, tmp_path / "out.csv", project / "results" / "models") == 2


def test_predict_passes_over_a_link_to_nothing_as_prepare_does(tmp_path: Path) -> None:
    """A link whose file is gone (or a pipe) is no image: prepare's staging copies none, and
    predict scored the others only after a FileNotFoundError traceback on it."""
    project, _, source = _project(tmp_path, "images")
    (source / "gone.png").symlink_to(tmp_path / "nowhere.png")
    os.mkfifo(source / "pipe.png")  # read, it would wait for a writer for ever
    output = tmp_path / "out.csv"
    assert predict(source, output, project / "results" / "models") == 2
    assert [row["id"] for row in csv.DictReader(output.open())] == [
        str(source / "0.png"),
        str(source / "1.png"),
    ]


def test_predict_goes_into_no_link_to_a_folder_as_staging_does(tmp_path: Path) -> None:
    """A link to a folder (`ln -s .. loop`, a careless one): staging copies nothing of it, and
    predict went into it, through a link to a parent scoring each image again at each of 40
    depths (123 rows for 3 images; with two such links it never ended)."""
    project, _, source = _project(tmp_path, "images")
    (source / "more").mkdir()
    shutil.copy(source / "0.png", source / "more" / "2.png")
    (source / "more" / "loop").symlink_to("..", target_is_directory=True)
    output = tmp_path / "out.csv"
    assert predict(source, output, project / "results" / "models") == 3
    rows = [row["id"] for row in csv.DictReader(output.open())]
    staged = stage(source, tmp_path / "staged", progress=False).files
    assert rows == [str(path) for path, _ in staged]
    assert [rel for _, rel in staged] == ["0.png", "1.png", "more/2.png"]


def test_a_subfolder_a_dropped_drive_cannot_list_stops_predict_in_the_remount_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Images on Drive, one subfolder's listing failing (EIO, a mount dropping): predict scored
    the others and said nothing; it ends in the one line every command gives a dropped Drive."""
    project, _, source = _project(tmp_path, "images")
    (source / "later").mkdir()
    shutil.copy(source / "0.png", source / "later" / "0.png")
    drop(source / "later", errno.EIO, monkeypatch)
    output = tmp_path / "out.csv"
    at = ["--output", str(output), "--params", str(project / "params.yaml")]
    assert main(["predict", str(source), *at]) == 1
    said = f"{source / 'later'}: {os.strerror(errno.EIO)}; {STORAGE_FIXES[errno.EIO]}"
    assert capsys.readouterr().err == f"error: {said}, then run the same command again\n"
    assert not output.exists()
