"""`export`: `model.keras` as a SavedModel (endpoint `serve`) or a `.tflite` (docs/customise.md).

A `.tflite` holds builtin ops only (neither LiteRT interpreter of TensorFlow 2.20 runs "Flex"
ops); a text model's is the network on token ids, `vocabulary.txt` beside it. Each is run at once
by `ai-edge-litert` on the test split beside the Keras model: export.json and the model card.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from ..config import COMMAND, ConfigError, Params
from ..core.files import atomic_write, file_sha256, read_json, save_json
from ..core.storage import EXPORTS, MODEL_FILE, results_root
from ..data.pipeline import eval_dataset, load_prepared
from ..data.prepare import PROCESSED
from ..spec import SPEC, load_spec
from ..tasks.base import make_task, task_class
from ..training.run_record import find_run
from ..training.saved_model import load_for_users
from .evaluate import check_trained_alike

LITERT_FILE = "models/model.tflite"  # under the results root
SAVED_MODEL_DIR = "models/saved_model"
VOCABULARY = "vocabulary.txt"
SAVED_MODEL = {"saved_model.pb", "fingerprint.pb", "variables", "assets", "assets.extra"}


class LiteRTUnsupported(ConfigError):
    """The model holds an op LiteRT's builtins lack; the message names the op and the layer."""


def export_saved_model(project_dir: Path, destination: Path) -> dict[str, Any]:
    """`model.keras` -> a SavedModel at `destination`; returns its (written) export.json entry."""
    results = results_root(project_dir)
    replaces = _check_replaceable(results, destination, "results/models/saved_model-2")
    model, info = load_for_users(results / "models")
    options: dict[str, Any] = {}
    if info["input_kind"] == "text":  # a batch of strings: `serve(tf.constant(["a text"]))`
        options["input_signature"] = [tf.TensorSpec([None], tf.string, name="text")]
    with _staging(destination) as new:
        model.export(str(new), format="tf_saved_model", verbose=False, **options)
        entry = {
            "format": "saved_model",
            "bytes": sum(p.stat().st_size for p in new.rglob("*") if p.is_file()),
            "model_sha256": file_sha256(results / MODEL_FILE),
            "fingerprint": _fingerprint(new),
            "inputs": "as model.keras (endpoint `serve`)",
        }
        _move_into_place(results, new, destination, {**entry, "replaces": replaces})
    record_export(results, destination, entry)
    return entry


def to_litert(model: Any, quantize: str | None = None) -> bytes:
    """A Keras model -> `.tflite` bytes of builtin ops, through a SavedModel (Keras's own LiteRT
    exporter prints, and allows Flex ops); LiteRTUnsupported names each op it lacks."""
    from tensorflow.lite.python.convert_phase import ConverterError  # the converter: only here

    with tempfile.TemporaryDirectory(prefix="litert-") as folder:
        model.export(folder, format="tf_saved_model", verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(folder)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize:  # float16 or int8: `--quantize` takes no other value
            # No representative data set: int8 is dynamic range (int8 weights, float
            # activations); inputs and outputs stay float32 either way.
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
        try:
            # Its log and pages of MLIR, dropped: the exception holds the same.
            with _native_stderr(lambda line: False):
                return converter.convert()
        except ConverterError as exc:
            ops = unsupported_ops(exc, model)
            named = ", ".join(f"{op} (layer {layer!r})" for op, layer in sorted(ops.items()))
            raise LiteRTUnsupported(
                f"export --format litert: LiteRT's builtin ops cannot run {named or 'this model'}"
                "; replace that layer in model.py, or keep this model as a SavedModel "
                f"(`{COMMAND} export`)"
            ) from None


# What the LiteRT runtime prints once per process, on a model's first run (a C++ INFO line on
# file descriptor 2: red in a notebook); only this line is dropped, never an error.
XNNPACK_NOTICE = "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."


@contextlib.contextmanager
def _native_stderr(keep: Callable[[str], bool]) -> Iterator[None]:
    """What C++ writes to file descriptor 2 inside: the lines `keep` accepts, to `sys.stderr`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        try:
            os.dup2(caught.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines = caught.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if keep(line)))
            sys.stderr.flush()


# The converter names each failing op with the Keras layer's name scope in its location:
# fused["ScaleAndTranslate:", "functional_1/resize_aa_1/resize/ScaleAndTranslate@__inference_..."]
_LOCATION = re.compile(r'fused\["([A-Za-z0-9_]+):", "([^"@]+)@')


def unsupported_ops(exc: Exception, model: Any) -> dict[str, str]:
    """{'tf.Op': 'layer name'} of a failed conversion; from the converter's wording, else from
    its structured errors (layer '?')."""
    names = {layer.name for layer in layers(model)}
    found: dict[str, str] = {}
    for op, scope in _LOCATION.findall(str(exc)):
        if op == "StatefulPartitionedCall":
            continue
        parts = scope.split("/")
        candidates = [c for p in parts for c in (p, re.sub(r"_\d+$", "", p))]
        layer = next((c for c in candidates if c in names), parts[1] if len(parts) > 1 else "?")
        found.setdefault(f"tf.{op}", layer)
    if not found:
        for error in getattr(exc, "errors", []):
            if error.operator.name:
                found.setdefault(error.operator.name, "?")
    return found


def layers(model: Any) -> list[Any]:
    """Every layer of `model`, nested models' too, outer ones first."""
    found, stack = [], list(model.layers)
    while stack:
        layer = stack.pop(0)
        found.append(layer)
        stack.extend(getattr(layer, "layers", []))
    return found


def on_token_ids(model: Any, vectorizer: Any) -> Any:
    """A text model after its TextVectorization, on int32 token ids (LiteRT has no string ops)."""
    length = vectorizer.get_config()["output_sequence_length"]
    ids = keras.Input((length,), dtype="int32", name="token_ids")
    if hasattr(model, "network") and hasattr(model, "head"):  # data/text.py's TextModel: its parts
        return keras.Model(ids, model.head(model.network(ids)), name="model")
    after = keras.Model(vectorizer.output, model.output)
    return keras.Model(ids, after(keras.ops.cast(ids, vectorizer.output.dtype)), name="model")


def tokenize_text(vectorizer: Any) -> str:
    """How a text becomes the `.tflite`'s token ids, in words, from the layer's settings."""
    cfg = vectorizer.get_config()
    if callable(cfg["standardize"]):  # a function: text.standardize, or one of yours
        cfg["standardize"] = cfg["standardize"].__name__
    standardize = {
        "standardize": "lower-case it (every alphabet) and remove punctuation and symbols "
        "(Unicode classes P and S)",
        "lower_and_strip_punctuation": "lower-case it (ASCII letters) and remove ASCII punctuation",
        "lower": "lower-case it (ASCII letters)",
        "strip_punctuation": "remove ASCII punctuation",
        None: "take it as it is",
    }.get(cfg["standardize"], f"standardise it as `{cfg['standardize']}` does")
    split = {
        "whitespace": "split it on whitespace",
        "character": "split it into characters",
        None: "take it as one token",
    }.get(cfg["split"], f"split it as `{cfg['split']}` does")
    ngrams = f", add its {cfg['ngrams']}-grams" if cfg.get("ngrams") else ""
    return (
        f"{standardize}, {split}{ngrams}, replace each token by its line number in {VOCABULARY} "
        f"(from 0; a token not there is 1, `[UNK]`), then cut or pad with 0 to "
        f"{cfg['output_sequence_length']} ids."
    )


def check_litert(
    params: Params, project_dir: Path, model: Any, vectorizer: Any, network: Any, tflite: Path
) -> dict[str, Any]:
    """The `.tflite` beside the Keras model on the test split: both metrics, the largest output
    difference, the same predictions' share; without prepared data, one probe example."""
    runner = Interpreter(model_path=str(tflite)).get_signature_runner()
    (input_name,) = runner.get_input_details()

    def run(x: np.ndarray) -> np.ndarray:  # a batch of any size: the signature resizes it
        with _native_stderr(lambda line: line.strip() != XNNPACK_NOTICE):
            (outputs,) = runner(**{input_name: x}).values()
        return np.asarray(outputs)

    name = f"ai-edge-litert {version('ai-edge-litert')}"
    dtype = np.dtype(network.inputs[0].dtype)
    if not (project_dir / PROCESSED / "spec.json").is_file():
        shape = (1, *network.inputs[0].shape[1:])
        x = np.ones(shape, dtype) if dtype.kind == "i" else np.zeros(shape, dtype)
        diff = np.abs(np.asarray(network(x, training=False)) - run(x))
        return {
            "interpreter": name,
            "checked_on": "probe",
            "examples": 1,
            "max_abs_diff": float(diff.max()),
        }
    data = load_prepared(project_dir / PROCESSED)
    task = make_task(params, data.spec)
    batch = 1024 if data.spec.kind == "vector" else params.train.batch_size
    got: list[np.ndarray] = []  # the .tflite's outputs, batch by batch

    def keras_batches() -> Iterator[tuple[Any, np.ndarray]]:
        for x, y in eval_dataset(data, "test", batch):
            ref = np.asarray(model(x, training=False), np.float32)
            inputs = vectorizer(x) if vectorizer is not None else x
            got.append(run(np.asarray(inputs, dtype)).reshape(ref.shape))
            yield y.numpy(), ref

    on_keras = task.evaluate(keras_batches())
    on_litert = task.evaluate([(on_keras.targets, np.concatenate(got))])
    entry = {
        "interpreter": name,
        "checked_on": "test split",
        "examples": len(on_keras.targets),
        "max_abs_diff": float(np.max(np.abs(on_keras.outputs - on_litert.outputs))),
        "keras": {k.removeprefix("test_"): v for k, v in on_keras.metrics.items()},
        "litert": {k.removeprefix("test_"): v for k, v in on_litert.metrics.items()},
    }
    if task.name_word != "target":  # names (a class, labels); a number differs in its last digits
        ref, out = (task.predictions(e.outputs)["prediction"] for e in (on_keras, on_litert))
        entry["same_prediction"] = float(np.mean(np.array(ref) == np.array(out)))  # as predicted
    return entry


def export_litert(
    params: Params, project_dir: Path, output: Path | None = None, quantize: str | None = None
) -> dict[str, Any]:
    """`model.keras` -> a checked `.tflite` at `output`; returns its (written) export.json entry."""
    results = results_root(project_dir)
    output = Path(output) if output else results / LITERT_FILE
    example = "results/models/model-int8.tflite"
    if output.suffix != ".tflite":
        raise ConfigError(
            f"--output {output}: a LiteRT model is a .tflite file (example: --output {example})"
        )
    replaces = _check_replaceable(results, output, example)
    check_trained_alike(params, find_run(results, MODEL_FILE) or {})  # the parity's metrics
    prepared = project_dir / PROCESSED  # the parity check runs on its test split
    spec = load_spec(prepared) if (prepared / SPEC).is_file() else None
    model, info = load_for_users(results / "models", spec)
    found = (la for la in layers(model) if isinstance(la, keras.layers.TextVectorization))
    vectorizer = next(found, None)
    network, vocabulary = model, None
    if vectorizer is not None:  # a text model: the .tflite takes its token ids
        network, vocabulary = on_token_ids(model, vectorizer), output.parent / VOCABULARY
        _check_replaceable(results, vocabulary, example, beside=output)
    shape = "x".join(str(d) for d in network.inputs[0].shape[1:])
    inputs = f"float32 [batch, {shape}], as model.keras"
    if vocabulary:
        inputs = f"token ids, int32 [batch, {shape}], with {VOCABULARY} beside it"
    # Checked before it takes the place of the last export: a failed check leaves that one there.
    with _staging(output) as checked:
        atomic_write(checked, to_litert(network, quantize))
        entry = {
            "format": "litert",
            "task": info["task"],
            "quantize": quantize or "none",
            "bytes": checked.stat().st_size,
            "sha256": file_sha256(checked),
            "model_sha256": file_sha256(results / MODEL_FILE),
            "inputs": inputs,
            "vocabulary": _shown(vocabulary, results) if vocabulary else None,
            "tokenize": tokenize_text(vectorizer) if vocabulary else None,
            **check_litert(params, project_dir, model, vectorizer, network, checked),
        }
        _move_into_place(results, checked, output, {**entry, "replaces": replaces})
    if vocabulary:  # one token per line: line i (from 0) is id i ('' and [UNK] first)
        atomic_write(vocabulary, "".join(f"{token}\n" for token in vectorizer.get_vocabulary()))
    record_export(results, output, entry)
    return entry


@contextlib.contextmanager
def _staging(output: Path) -> Iterator[Path]:
    """`new` in a hidden folder beside `output` (moved in by a rename), removed at the end; such
    folders a killed export left go first (an earlier version's are named without `export-`)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{output.name}-export-"
    left = re.compile(r"\." + re.escape(output.name) + r"-(export-)?[a-z0-9_]{8}")  # mkdtemp's
    for folder in output.parent.iterdir():
        if left.fullmatch(folder.name) and _left_by_export(folder):
            shutil.rmtree(folder)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=output.parent))
    try:
        yield folder / "new"
    finally:
        shutil.rmtree(folder)


def _left_by_export(folder: Path) -> bool:
    """Only `new` and `old`, each a `.tflite` or a SavedModel's parts (or `<part>.tmp<uuid>`)."""
    if not folder.is_dir() or not {p.name for p in folder.iterdir()} <= {"new", "old"}:
        return False
    parts = [q.name for p in folder.iterdir() if p.is_dir() for q in p.iterdir()]
    return all(re.sub(r"\.tmp[0-9a-f]{32}$", "", name) in SAVED_MODEL for name in parts)


def _move_into_place(results: Path, new: Path, output: Path, pending: dict[str, Any]) -> None:
    """`new` becomes `output`; export.json names it first, with the one it `replaces`, so a
    kill at any point leaves what the next export accepts."""
    record_export(results, output, pending)
    if output.is_dir():
        os.replace(output, new.with_name("old"))  # removed with the staging folder
    os.replace(new, output)


def record_export(results: Path, output: Path, entry: dict[str, Any]) -> Path:
    """Add (or replace) `output`'s entry in export.json."""
    exports = load_exports(results)
    exports[_shown(output, results)] = entry
    return save_json(exports, results / EXPORTS)


def load_exports(results: Path) -> dict[str, dict[str, Any]]:
    """export.json: {file (relative to the results root when inside it): entry}."""
    return read_json(results / EXPORTS)


def litert_summary(output: Path, entry: dict[str, Any]) -> str:
    """The one line `export --format litert` prints."""
    quantize = {"none": "float32", "int8": "int8 dynamic range"}.get(entry["quantize"])
    line = (
        f"Wrote {output} (LiteRT, {quantize or entry['quantize']}, {entry['bytes'] / 1024:.1f} "
        f"KiB, builtin ops only; inputs: {entry['inputs']})"
    )
    if entry["checked_on"] == "probe":
        return line + (
            f"; no prepared test split here, so run on one probe example with "
            f"{entry['interpreter']}: largest difference from Keras {entry['max_abs_diff']:.1e}"
        )
    shown = [m for m in task_class(entry["task"]).headline if m in entry["litert"]]
    metrics = ", ".join(
        f"{m} {entry['litert'][m]:.4f} (Keras {entry['keras'][m]:.4f})" for m in shown
    )
    same = entry.get("same_prediction")  # none for a number
    return line + (
        f"; on {entry['examples']} test examples with {entry['interpreter']}: {metrics}; "
        f"largest output difference {entry['max_abs_diff']:.1e}"
        f"{'' if same is None else f', same prediction {same:.1%}'}"
    )


def _shown(path: Path, results: Path) -> str:
    """export.json's key: `path` relative to the results root when inside it."""
    path, root = Path(path).resolve(), results.resolve()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def _fingerprint(saved_model: Path) -> str:
    """TensorFlow's own identity of a SavedModel (its graph, signatures and weights)."""
    return tf.saved_model.experimental.read_fingerprint(str(saved_model)).singleprint()


def _check_replaceable(
    results: Path, path: Path, example: str, beside: Path | None = None
) -> str | None:
    """Refuse to replace what export did not write (export.json's sha256, fingerprint, `replaces`
    or vocabulary for `path`; `beside`: the --output `path` is by); returns the one found."""
    if not path.exists():
        return None
    exports, shown = load_exports(results), _shown(path, results)
    entry = exports.get(shown, {})
    current = file_sha256(path) if path.is_file() else None
    if (path / "fingerprint.pb").is_file():
        current = _fingerprint(path)
    listed = shown in {e.get("vocabulary") for e in exports.values()}
    recorded = {entry.get("fingerprint"), entry.get("sha256"), entry.get("replaces")}
    if current is None or not (listed or current in recorded):
        found = f"{path.name} beside it exists" if beside else "exists"
        raise ConfigError(
            f"--output {beside or path}: {found} and export did not write it (or it changed "
            f"since); not overwriting it (example: --output {example})"
        )
    return current
