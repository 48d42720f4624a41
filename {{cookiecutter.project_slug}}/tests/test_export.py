"""`export --format litert`: for each task a trained model (prepare -> train in-process) exported as
float32, float16 and int8; the `.tflite` loaded by the LiteRT interpreter (ai-edge-litert) gives the
Keras model's outputs on the test split within the tolerances below; the quantised models' test
metrics stand beside the float model's. Then the one-line refusal, a text model's token-id export
and the command line.

Tolerances (absolute, in the user's units; regression's scaled by the target's standard deviation):
float32 1e-5 on probabilities and 1e-4 std on values; float16 2e-2 and 0.05 std (half-precision
weights round at 2^-11 relative: the error grows with the logits, 8e-3 seen on a sigmoid here).
Dynamic-range int8 is compared by its metrics (within 0.05 of the Keras model's; R2 too) and, for
classification, the same class on at least 95% of the test examples.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import MODULE, PARAMS, cli_env, fill, save_for_users

from {{ cookiecutter.module_name }}.__main__ import main, storage_fault
from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.core.files import file_sha256
from {{ cookiecutter.module_name }}.data.pipeline import read_split
from {{ cookiecutter.module_name }}.data.prepare import PROCESSED, prepare
from {{ cookiecutter.module_name }}.evaluation import export
from {{ cookiecutter.module_name }}.evaluation.export import (
    EXPORTS,
    LiteRTUnsupported,
    export_litert,
    export_saved_model,
    litert_summary,
    load_exports,
)
from {{ cookiecutter.module_name }}.evaluation.model_card import exports_table
from {{ cookiecutter.module_name }}.spec import DataSpec
from {{ cookiecutter.module_name }}.tasks.base import task_class
from {{ cookiecutter.module_name }}.training.saved_model import load_for_users
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

ROWS = 300
VECTORS = ["train.epochs=10", "train.batch_size=16", "train.learning_rate=0.02",
           "model.hidden_units=[64,64]", "model.dropout=0"]  # fmt: skip
# The bundled digits as 8x8x1 pixels through a small conv net (conv, batch norm, pooling).
IMAGES = ["model.architecture=cnn", "model.filters=[16,64]", "train.epochs=6",
          "train.learning_rate=0.01", "model.dropout=0"]  # fmt: skip
TOLERANCE = {None: (1e-5, 1e-4), "float16": (2e-2, 0.05)}  # probabilities, values / std
METRIC = {"classification": "accuracy", "multilabel": "binary_accuracy", "regression": "r2"}


def _csv(task: str) -> str:
    """Two features around 100; labels `hot` (f1 > 100) and `wet` (f2 > 100), or a price."""
    rng = np.random.default_rng(0)
    f = 100 + rng.normal(0, 10, size=(ROWS, 2))
    if task == "multilabel":
        tags = ["|".join(n for n, on in (("hot", a > 100), ("wet", b > 100)) if on) for a, b in f]
        rows = (f"{a:.2f},{b:.2f},{t}\n" for (a, b), t in zip(f, tags, strict=True))
        return "f1,f2,tags\n" + "".join(rows)
    price = 50 + 0.5 * (f[:, 0] - 100) - 0.3 * (f[:, 1] - 100) + rng.normal(0, 0.3, ROWS)
    rows = (f"{a:.2f},{b:.2f},{p:.3f}\n" for (a, b), p in zip(f, price, strict=True))
    return "f1,f2,price\n" + "".join(rows)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    """task -> (project, params): a project of that task, prepared and trained at first use."""
    done: dict[str, tuple[Path, object]] = {}

    def get(task: str) -> tuple[Path, object]:
        if task not in done:
            done[task] = _prepare_and_train(task, tmp_path_factory.mktemp(task))
        return done[task]

    return get


def _prepare_and_train(task: str, project: Path) -> tuple[Path, object]:
    (project / "params.yaml").write_text((PARAMS).read_text())
    if task == "classification":
        overrides = IMAGES
    else:
        (project / "data.csv").write_text(_csv(task))
        label = "tags" if task == "multilabel" else "price"
        overrides = ["data.source=csv", f"data.path={project / 'data.csv'}",
                     f"data.label={label}", f"task.type={task}", *VECTORS]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROJECT_STORAGE_DIR", str(project / "storage"))
        params = load_params(project / "params.yaml", overrides)
        prepare(params, project)
        assert train(params, project).status == "completed"
    return project, params


def _interpreter_outputs(path: Path, x: np.ndarray) -> np.ndarray:
    """The `.tflite` run as a user would: ai-edge-litert's interpreter, its one signature."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    (name,) = interpreter.get_signature_list()["serving_default"]["inputs"]
    (outputs,) = interpreter.get_signature_runner()(**{name: x}).values()
    return np.asarray(outputs)


@pytest.mark.parametrize("task", ["classification", "multilabel", "regression"])
def test_litert_gives_the_keras_outputs_and_metrics(trained, task: str) -> None:
    project, params = trained(task)
    x, _, _ = read_split(project / PROCESSED, "test")
    model, _ = load_for_users(project / "results" / "models")
    expected = np.asarray(model(x, training=False))  # as export checks it: eager, no retracing
    std = _target_std(project)
    sizes = {}
    for quantize in (None, "float16", "int8"):
        out = project / "results" / "models" / f"model-{quantize or 'float32'}.tflite"
        entry = export_litert(params, project, out, quantize)
        got = _interpreter_outputs(out, x.astype(np.float32)).reshape(expected.shape)
        diff = float(np.abs(got - expected).max())
        sizes[quantize] = out.stat().st_size
        keras_metric, lite_metric = entry["keras"][METRIC[task]], entry["litert"][METRIC[task]]
        print(f"LiteRT {task} {quantize or 'float32'}: {out.stat().st_size / 1024:.1f} KiB, "
              f"max |diff| {diff:.2e}, {METRIC[task]} {lite_metric:.4f} (Keras {keras_metric:.4f})"
              f", same prediction {entry.get('same_prediction')}")  # fmt: skip
        assert entry["examples"] == len(x) and entry["checked_on"] == "test split"
        assert entry["max_abs_diff"] == pytest.approx(diff, rel=1e-3, abs=1e-6)
        if quantize in TOLERANCE:
            probability, value = TOLERANCE[quantize]
            assert diff <= (value * std if task == "regression" else probability)
        assert abs(lite_metric - keras_metric) <= 0.05
        if task == "regression":  # a value differs in its last digits: none is counted
            assert "same_prediction" not in entry and "same prediction" not in litert_summary(
                out, entry
            )
        else:  # a class rarely
            assert entry["same_prediction"] >= 0.95
    assert sizes["int8"] < sizes["float16"] < sizes[None]
    exports = json.loads((project / "results" / EXPORTS).read_text())
    assert {e["quantize"] for e in exports.values()} == {"none", "float16", "int8"}


def _target_std(project: Path) -> float:
    spec = json.loads((project / PROCESSED / "spec.json").read_text())
    return spec.get("target_std") or 1.0


def test_an_op_litert_lacks_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """An antialiased resize (tf.ScaleAndTranslate: no builtin, not even a Flex op)."""
    spec = DataSpec(kind="image", input_shape=(8, 8, 1), task="classification", names=["a", "b"])
    inputs = keras.Input((8, 8, 1), name="inputs")
    x = keras.layers.Resizing(16, 16, antialias=True, name="resize_aa")(inputs)
    logits = keras.layers.Dense(2, name="logits")(keras.layers.Flatten()(x))
    project = tmp_path / "project"
    project.mkdir()
    (project / "params.yaml").write_text((PARAMS).read_text())
    task = task_class("classification")(names=spec.names)
    save_for_users(keras.Model(inputs, logits), task, spec, project / "results" / "models")
    params = load_params(project / "params.yaml")
    with pytest.raises(LiteRTUnsupported) as caught:
        export_litert(params, project)
    message = str(caught.value)
    assert "\n" not in message
    assert "tf.ScaleAndTranslate (layer 'resize_aa')" in message
    assert not (project / "results" / "models" / "model.tflite").exists()
    capsys.readouterr()
    argv = ["export", "--format", "litert", "--params", str(project / "params.yaml")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: export --format litert: LiteRT's")


def _small_project(project: Path) -> tuple[Path, object]:
    """A project with a saved one-layer image model (no data prepared): quick to export."""
    spec = DataSpec(kind="image", input_shape=(8, 8, 1), task="classification", names=["a", "b"])
    inputs = keras.Input((8, 8, 1), name="inputs")
    logits = keras.layers.Dense(2, name="logits")(keras.layers.Flatten()(inputs))
    task = task_class("classification")(names=spec.names)
    save_for_users(keras.Model(inputs, logits), task, spec, project / "results" / "models")
    (project / "params.yaml").write_text((PARAMS).read_text())
    return project, load_params(project / "params.yaml")


def test_export_replaces_only_what_it_wrote(tmp_path: Path, monkeypatch) -> None:
    """Export's own files (as export.json records them) are replaced run after run; the same
    files copied elsewhere are the user's: refused, kept byte for byte. A check that fails
    leaves the last export in place."""
    project, params = _small_project(tmp_path / "project")
    models = project / "results" / "models"
    for _ in range(2):  # the default paths, run after run
        export_litert(params, project)
        export_saved_model(project, models / "saved_model")
    mine = tmp_path / "mine"
    shutil.copytree(models / "saved_model", mine / "saved_model")
    shutil.copy(models / "model.tflite", mine / "model.tflite")
    kept = {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=r"^--output \S+saved_model: exists and export did not"):
        export_saved_model(project, mine / "saved_model")
    with pytest.raises(ConfigError, match=r"^--output \S+model.tflite: exists and export did not"):
        export_litert(params, project, mine / "model.tflite")
    assert {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()} == kept

    def crash(*args: object) -> None:
        raise RuntimeError("the check stopped")

    last = (models / "model.tflite").read_bytes()
    monkeypatch.setattr(export, "check_litert", crash)
    with pytest.raises(RuntimeError):
        export_litert(params, project, quantize="int8")
    assert (models / "model.tflite").read_bytes() == last
    assert sorted(p.name for p in models.iterdir()) == [
        "model.json",
        "model.keras",
        "model.tflite",
        "saved_model",
    ]
    monkeypatch.undo()
    assert export_litert(params, project, quantize="int8")["quantize"] == "int8"


# A child process that exports over the last export and SIGKILLs itself at POINT: "staged" (the
# new SavedModel written beside the output), "checking" (the new .tflite being checked) or "moved"
# (the new output just moved into place, before export.json records it).
KILLED_AT = f"""
import os, signal, sys
from pathlib import Path
import keras
from {MODULE}.config import load_params
from {MODULE}.evaluation import export
project, kind, point = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
output = project / "results" / "models" / ("model.tflite" if kind == "litert" else "saved_model")
replace, write = os.replace, keras.Model.export
def die(*args):
    os.kill(os.getpid(), signal.SIGKILL)
def replace_then_die(src, dst):
    replace(src, dst)
    if point == "moved" and Path(dst) == output:
        die()
def write_then_die(model, path, *args, **kwargs):
    write(model, path, *args, **kwargs)
    if point == "staged" and Path(path).parent.parent == output.parent:
        die()
os.replace, keras.Model.export = replace_then_die, write_then_die
if point == "checking":
    export.check_litert = die
if kind == "litert":
    export.export_litert(load_params(project / "params.yaml"), project)
else:
    export.export_saved_model(project, output)
"""


def test_an_export_killed_at_any_point_is_replaced_by_the_next(tmp_path: Path) -> None:
    """SIGKILL at the dangerous points (in 4 processes at once): the next export accepts what
    the killed one left, replaces it and leaves no hidden folder or file beside it."""
    first, params = _small_project(tmp_path / "first")
    export_litert(params, first)
    export_saved_model(first, first / "results" / "models" / "saved_model")
    points = [
        ("saved_model", "staged"),
        ("saved_model", "moved"),
        ("litert", "checking"),
        ("litert", "moved"),
    ]
    children = []
    for kind, point in points:
        project = shutil.copytree(first, tmp_path / f"{kind}-{point}")
        _small_project(project)  # a new model.keras: a new export to replace the last
        argv = [sys.executable, "-c", KILLED_AT, str(project), kind, point]
        children.append(subprocess.Popen(argv, env=cli_env(tmp_path / "storage")))
    for (kind, point), child in zip(points, children, strict=True):
        assert child.wait(timeout=300) == -signal.SIGKILL, (kind, point)
        project = tmp_path / f"{kind}-{point}"
        models = project / "results" / "models"
        assert _hidden(models), (kind, point)  # what the kill left: the staging folder
        if kind == "litert":
            entry = export_litert(params, project)
            assert entry["sha256"] == file_sha256(models / "model.tflite")
        else:
            export_saved_model(project, models / "saved_model")
            assert tf.saved_model.load(str(models / "saved_model")).serve
        assert _hidden(models) == [], (kind, point)


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_an_export_stopped_at_each_step_is_replaced_by_the_next(
    tmp_path: Path, monkeypatch
) -> None:
    """An export stopped after each of its renames (the output's, export.json's): the next one
    to the same output goes through; a file or folder the user put there is still kept."""
    project, params = _small_project(tmp_path / "project")
    models = project / "results" / "models"
    exports = {
        "litert": lambda: export_litert(params, project),
        "saved_model": lambda: export_saved_model(project, models / "saved_model"),
    }
    replace, calls, stop_at = os.replace, [], [0]  # stop_at: the call that raises (0: none)

    def counted(src: object, dst: object) -> None:
        replace(src, dst)
        calls.append(dst)
        if len(calls) == stop_at[0]:
            raise RuntimeError("stopped")

    monkeypatch.setattr(os, "replace", counted)
    for kind, run in exports.items():
        run()
        stop_at[0] = 0
        calls.clear()
        run()  # over its own export: every rename such an export makes
        for step in range(1, len(calls) + 1):
            stop_at[0] = step
            _small_project(project)  # new weights: an export that differs from the last
            calls.clear()
            with pytest.raises(RuntimeError, match="stopped"):
                run()
            shown = f"models/{'model.tflite' if kind == 'litert' else 'saved_model'}`"
            recorded = load_exports(project / "results")
            listed = shown in exports_table(project / "results")
            assert listed != any("replaces" in e for e in recorded.values()), (kind, step)
            run()  # past stop_at: not stopped
            assert _hidden(models) == [], kind
    mine = models / ".model.tflite-export-abcd1234"  # export's name, not its content: kept
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    # A SavedModel cut short, as this version names its staging folder and as an earlier one
    # did (`.saved_model-` and mkdtemp's 8 characters): both removed.
    for left in (models / ".saved_model-export-abcd1234/new", models / ".saved_model-k2_9xq0z/new"):
        (left / "variables").mkdir(parents=True)
        (left / f"saved_model.pb.tmp{'0' * 32}").write_bytes(b"")
    also_mine = models / ".saved_model-wxyz5678"  # the earlier name, not its content: kept
    also_mine.mkdir()
    (also_mine / "notes.txt").write_text("mine")
    export_litert(params, project)
    export_saved_model(project, models / "saved_model")
    assert _hidden(models) == sorted([mine.name, also_mine.name])
    (project / "mine.tflite").write_bytes((models / "model.tflite").read_bytes() + b"mine")
    with pytest.raises(ConfigError, match="mine.tflite: exists and export did not write it"):
        export_litert(params, project, project / "mine.tflite")


def test_the_command_line(trained, capsys) -> None:
    project, _ = trained("classification")
    at = ["--params", str(project / "params.yaml"), *(a for o in IMAGES for a in ("--set", o))]
    models = project / "results" / "models"
    # A process of its own (LiteRT's runtime prints its XNNPACK line once per process) in a
    # user's environment: no TF_CPP_MIN_LOG_LEVEL, the package quiets TensorFlow's C++ log.
    env = cli_env(project / "storage")
    del env["TF_CPP_MIN_LOG_LEVEL"]
    run = subprocess.run(
        [sys.executable, "-m", MODULE, "export", "--format", "litert", "--quantize", "int8", *at],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    out = run.stdout
    assert out.count("\n") == 1 and (models / "model.tflite").is_file()
    assert f"Wrote {models / 'model.tflite'} (LiteRT, int8 dynamic range, " in out
    assert "test examples with ai-edge-litert" in out and "accuracy" in out and "(Keras " in out
    refused = {
        ("export", "--quantize", "int8"): "--quantize int8: only a LiteRT model is quantised",
        ("export", "--format", "litert", "--output", str(project / "m.bin")): "is a .tflite file",
        ("export", "--format", "litert", "--output", str(project / "params.yaml")): ".tflite",
    }
    (project / "mine.tflite").write_text("not a model")
    refused[("export", "--format", "litert", "--output", str(project / "mine.tflite"))] = (
        "exists and export did not write it (or it changed since); not overwriting it"
    )
    for argv, message in refused.items():
        assert main([*argv, *at]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert (project / "mine.tflite").read_text() == "not a model"
    with pytest.raises(SystemExit):
        main(["export", "--format", "onnx", *at])


def wrapped(op: str) -> str:
    """How TensorFlow's message of an error in op `op` begins (its two opening braces written
    apart: no generated file holds the template's marker)."""
    name = f"function_node __wrapped__{op}_device_/job:localhost/replica:0/task:0/device:CPU:0"
    return "{" * 2 + name + "}} "


# What TensorFlow raised when a SavedModel's variables did not fit (one line: its op's name around
# the file and the cause), and when TensorBoard's events did not (the op's name, then more lines).
SAVE_FULL = wrapped("SaveV2_dtypes_15") + (
    "/out/.saved_model-export-ne5pp8z7/new/variables/variables_temp/part-00000-of-00001"
    ".data-00000-of-00001.tempstate7479096070449478696; No space left on device [Op:SaveV2]"
)
FLUSH_FULL = wrapped("WriteSummary") + (
    "results/tensorboard/events.out.tfevents.1.v2; No space left on device\n\tFailed to flush 11"
    " events to results/tensorboard/events.out.tfevents.1.v2 [Op:WriteSummary] name: "
)


def test_a_full_disk_is_one_line_that_starts_with_the_file(
    tmp_path: Path, small_storage: tuple[Path, bool], monkeypatch, capsys
) -> None:
    """`export` to a full disk: one line, the file and its cause, then how to go on; not
    TensorFlow's traceback, nor its op's name."""
    project, _ = _small_project(tmp_path / "project")
    storage, mounted = small_storage
    if mounted:
        fill(storage)
    else:

        def full(*args: object, **kwargs: object) -> None:
            raise tf.errors.ResourceExhaustedError(None, None, SAVE_FULL)

        monkeypatch.setattr(keras.Model, "export", full)
    capsys.readouterr()
    argv = ["export", "--output", str(storage / "saved_model")]
    assert main([*argv, "--params", str(project / "params.yaml")]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"error: /\S+/variables_temp/part-\S+: No space left on device; free some space "
        r"\(`df -h` shows each disk's free space\), then run the same command again\n",
        err,
    ), err
    assert storage_fault(tf.errors.ResourceExhaustedError(None, None, FLUSH_FULL)) == (
        "results/tensorboard/events.out.tfevents.1.v2: No space left on device; free some "
        "space (`df -h` shows each disk's free space)"
    )


class _FullDisk(str):
    """The converter's bytes, whose write fails as on a full disk: the OSError names no file."""

    def encode(self, *args: object) -> bytes:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_litert_export_to_a_full_disk_names_the_file_it_could_not_write(
    tmp_path: Path, small_storage: tuple[Path, bool], monkeypatch, capsys
) -> None:
    """`export --format litert` to a full disk: one line that starts with the `.tflite` it was
    writing (staged beside --output), then how to go on; nothing of it is left there."""
    project, _ = _small_project(tmp_path / "project")
    storage, mounted = small_storage
    if mounted:
        fill(storage)
    else:
        monkeypatch.setattr(export, "to_litert", lambda *args: _FullDisk())
    capsys.readouterr()
    argv = ["export", "--format", "litert", "--output", str(storage / "model.tflite")]
    assert main([*argv, "--params", str(project / "params.yaml")]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        rf"error: {re.escape(str(storage))}/\.model\.tflite-export-\w+/new: No space left on "
        r"device; free some space \(`df -h` shows each disk's free space\), then run the same "
        r"command again\n",
        err,
    ), err
    assert [p.name for p in storage.iterdir()] == (["filler"] if mounted else [])


def test_only_the_xnnpack_line_of_the_litert_runtime_is_dropped(capfd) -> None:
    """What C++ code writes to file descriptor 2 while the `.tflite` runs: its XNNPACK notice
    is dropped, any other line (an error) still reaches the user."""
    capfd.readouterr()
    with export._native_stderr(lambda line: line.strip() != export.XNNPACK_NOTICE):
        os.write(2, f"{export.XNNPACK_NOTICE}\nERROR: failed to invoke\n".encode())
    assert capfd.readouterr().err == "ERROR: failed to invoke\n"


def test_a_text_model_exports_its_network_on_token_ids(tmp_path: Path) -> None:
    """Strings in the Keras model; token ids and vocabulary.txt for LiteRT, tokenised as the
    card says (here in plain Python) giving the Keras model's outputs."""
    rng = np.random.default_rng(0)
    topics = [["goal", "match", "team", "score"], ["bake", "oven", "flour", "sugar"]]
    filler = ["the", "a", "today", "we", "saw", "very", "good", "and"]
    labels = rng.integers(0, 2, 200)
    texts = [" ".join(rng.permutation([*rng.choice(topics[y], 2), *rng.choice(filler, 4)]))
             for y in labels]  # fmt: skip
    vectorize = keras.layers.TextVectorization(output_sequence_length=6, name="vectorize")
    vectorize.adapt(tf.constant(texts))
    text = keras.Input(shape=(), dtype="string", name="text")
    x = keras.layers.Embedding(len(vectorize.get_vocabulary()), 8)(vectorize(text))
    logits = keras.layers.Dense(2, name="logits")(keras.layers.GlobalAveragePooling1D()(x))
    logits_model = keras.Model(text, logits)
    logits_model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(32)
    logits_model.fit(data, epochs=5, verbose=0)
    project = tmp_path / "project"
    project.mkdir()
    (project / "params.yaml").write_text((PARAMS).read_text())
    spec = DataSpec(kind="text", input_shape=(), task="classification", names=["sport", "food"])
    task = task_class("classification")(names=spec.names)
    save_for_users(logits_model, task, spec, project / "results" / "models")

    entry = export_litert(load_params(project / "params.yaml"), project)
    assert entry["inputs"].startswith("token ids, int32 [batch, 6]")
    assert entry["checked_on"] == "probe" and entry["max_abs_diff"] < 1e-5
    assert "lower-case it" in entry["tokenize"] and "pad with 0 to 6 ids" in entry["tokenize"]
    models = project / "results" / "models"
    vocabulary = (models / "vocabulary.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert vocabulary[:2] == ["", "[UNK]"]
    new = ["The TEAM, today!", "flour sugar oven bake and a very good zebra cake", "goal"]
    index = {token: i for i, token in enumerate(vocabulary)}
    ids = np.zeros((len(new), 6), np.int32)
    for row, sentence in enumerate(new):
        words = "".join(c for c in sentence.lower() if c not in "!,.?").split()
        for col, word in enumerate(words[:6]):
            ids[row, col] = index.get(word, 1)
    model, _ = load_for_users(models)
    expected = np.asarray(model(tf.constant(new)))
    got = _interpreter_outputs(models / "model.tflite", ids)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "vocabulary.txt").write_text("my words\n")
    with pytest.raises(ConfigError, match="vocabulary.txt beside it exists and export did not"):
        export_litert(load_params(project / "params.yaml"), project, tmp_path / "mine" / "m.tflite")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["vocabulary.txt"]
