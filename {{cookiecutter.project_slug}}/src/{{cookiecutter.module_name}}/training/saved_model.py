"""The model users get: raw inputs in, outputs in their units out, with `model.json` beside it:
`train` saves both (`wrap_for_users`, `user_sidecar`); `evaluate`, `predict` and `export` load
them (`load_for_users`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import keras

from ..architectures.text import keras_hub
from ..config import COMMAND, ConfigError
from ..core.storage import MODEL_FILE, SIDECAR_FILE
from ..data.text import TextModel
from ..registry import import_all
from ..spec import DataSpec
from ..tasks.base import Task


def wrap_for_users(logits_model: Any, task: Task, vectorizer: Any = None) -> Any:
    """Raw inputs -> outputs in the user's units (probabilities, or the value). Text: strings,
    through `vectorizer` (the input pipeline's) to the logits model's token ids."""
    if vectorizer is not None:
        return TextModel(vectorizer, logits_model, task.output_layer(), name="model")
    outputs = task.output_layer()(logits_model.outputs[0])
    # One input tensor, not a list: the exported `serve` signature then takes a plain array.
    return keras.Model(logits_model.inputs[0], outputs, name="model")


def user_sidecar(task: Task, spec: DataSpec, vectorizer: Any = None) -> dict[str, Any]:
    """What `model.json` holds beside the model: the task, its names, the inputs, a tokenizer."""
    tokenizer = type(vectorizer).__module__.split(".")[0] if vectorizer is not None else None
    return {
        "task": task.kind,
        "names": task.names,
        "input_kind": spec.kind,
        "input_shape": list(spec.input_shape),
        "feature_names": spec.feature_names,
        # Images: how the shards store them (png / jpeg); `predict` makes the same pixels.
        "image_encoding": spec.extra.get("encoding") if spec.kind == "image" else None,
        **({"tokenizer": tokenizer} if tokenizer else {}),
    }


def load_for_users(models_dir: Path, spec: DataSpec | None = None) -> tuple[Any, dict[str, Any]]:
    """The saved model and its sidecar; with the prepared data's `spec`, checked to be trained
    on such data. Registered modules are imported first: Keras must know their custom layers."""
    target, sidecar = (models_dir / Path(name).name for name in (MODEL_FILE, SIDECAR_FILE))
    for path in (target, sidecar):
        if not path.is_file():
            raise ConfigError(f"{path}: no saved model; train first (example: {COMMAND} train)")
    info = json.loads(sidecar.read_text())
    trained_on = (info["input_kind"], list(info["input_shape"]), list(info["names"]))
    if spec is not None and trained_on != (spec.kind, list(spec.input_shape), list(spec.names)):
        raise ConfigError(
            f"{target}: trained on {_inputs(*trained_on)}, but the prepared data holds "
            f"{_inputs(spec.kind, spec.input_shape, spec.names)}; train on it first "
            f"(example: {COMMAND} train)"
        )
    import_all()
    if info.get("tokenizer") == "keras_hub":
        keras_hub()
    return keras.models.load_model(target, compile=False), info


def _inputs(kind: str, shape: Any, names: list[str]) -> str:
    """`images 8x8x1 (0, 1, 2, ...)`: what a model takes and names, or what data holds."""
    more = ", ..." if len(names) > 3 else ""
    return f"{kind}s {'x'.join(map(str, shape))} ({', '.join(names[:3])}{more})"
