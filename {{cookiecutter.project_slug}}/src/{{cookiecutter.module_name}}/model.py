"""Your model: an architecture per `model.architecture`, registered under that name.

THE CONTRACT. An architecture is a function

    architecture(inputs, spec, cfg, <your own keyword arguments>) -> features

It receives the RAW inputs as a Keras tensor (pixel values 0-255 [h, w, c], unscaled features
[n]: `scaled` scales them as the built-ins do; for text, int32 token ids, 0 for padding), the
data's spec (spec.py: kind, input shape, feature statistics, vocabulary size), the `model:`
section of params.yaml, and then its own keyword arguments, which params.yaml gives under
`model.args` (checked against their annotations before anything runs). It returns the features
the head reads. `build_model` adds the head: dropout and a float32 Dense of logits (a bfloat16
or float16 softmax or loss loses too much precision); the task (task.py) turns logits into what
users get, so the saved model needs nothing else. Use Keras's own layers and `keras.ops`.

`mlp` below is the worked example; the other built-ins are in architectures/ (cnn, text,
backbone). Yours, in this file or one beside it, then `model.architecture: mine` and
`model.args: {width: 64}` (or `--set model.args.width=64`; a sweep can search it):

    @register("architecture", "mine")
    def mine(inputs, spec, cfg, width: int = 32):
        if spec.kind != "image":  # `make test` tries each input kind: refuse the others
            raise ConfigError(
                "model.architecture: mine takes images (example: --set model.architecture=cnn)"
            )
        x = scaled(inputs, spec)
        x = keras.layers.Conv2D(width, 3, activation="relu")(x)
        return keras.layers.GlobalAveragePooling2D()(x)
"""

from __future__ import annotations

import keras

from .config import ConfigError, ModelConfig
from .registry import bound, register
from .spec import DataSpec


def build_model(spec: DataSpec, num_outputs: int, cfg: ModelConfig) -> keras.Model:
    """Raw inputs of `spec.input_shape` -> `num_outputs` float32 logits: the architecture
    `model.architecture` with `model.args`, then dropout and the float32 head. Build it inside
    `strategy.scope()` so its variables are mirrored."""
    architecture = bound("architecture", cfg.architecture, cfg.args, "model.args")
    if spec.kind == "text":  # the input pipeline turns text into token ids (data/text.py)
        inputs = keras.Input(shape=spec.input_shape, dtype="int32", name="token_ids")
    else:
        inputs = keras.Input(shape=spec.input_shape, name="inputs")
    features = architecture(inputs, spec, cfg)
    if cfg.dropout > 0:
        features = keras.layers.Dropout(cfg.dropout, name="head_dropout")(features)
    logits = keras.layers.Dense(num_outputs, dtype="float32", name="logits")(features)
    return keras.Model(inputs, logits, name=cfg.architecture)


def scaled(inputs: keras.KerasTensor, spec: DataSpec) -> keras.KerasTensor:
    """Images: pixels to [0, 1]. Vectors: standardised with the training split's statistics."""
    if spec.kind == "text":
        raise ConfigError(
            "model.architecture: the data is text (token ids), which this architecture does not "
            "take (example: --set model.architecture=text)"
        )
    if spec.kind == "image":
        return keras.layers.Rescaling(1.0 / 255, name="scale_pixels")(inputs)
    return keras.layers.Normalization(
        mean=spec.feature_mean, variance=spec.feature_var, name="standardise_features"
    )(inputs)


@register("architecture", "mlp")
def mlp(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """Dense layers of `model.hidden_units` (tabular data; small images are flattened), with
    `model.dropout` between them (the head's dropout follows the last)."""
    x = scaled(inputs, spec)
    if len(x.shape) > 2:
        x = keras.layers.Flatten(name="flatten")(x)
    for i, units in enumerate(cfg.hidden_units):
        if i and cfg.dropout > 0:
            x = keras.layers.Dropout(cfg.dropout)(x)
        x = keras.layers.Dense(units, activation="relu")(x)
    return x


# Fine-tuning (`train.fine_tune`): a model nested in yours (a keras.applications backbone) trains
# frozen first, then its top layers. The trainer calls these two.


def find_backbone(model: keras.Model) -> keras.Model | None:
    """The model nested inside `model` (the backbone), or None (mlp, cnn)."""
    return next((layer for layer in model.layers if isinstance(layer, keras.Model)), None)


def set_backbone_trainable(model: keras.Model, unfreeze_layers: int | None) -> None:
    """None: freeze the whole backbone. N: unfreeze its top N layers (0 = all of them).

    Batch-normalization layers always stay frozen. Changing what is trainable changes the
    variables a train step updates: retrace the step (a new tf.function) after calling this."""
    backbone = find_backbone(model)
    if backbone is None:
        return
    backbone.trainable = unfreeze_layers is not None
    if unfreeze_layers is None:
        return
    first = len(backbone.layers) - unfreeze_layers if unfreeze_layers else 0
    for i, layer in enumerate(backbone.layers):
        frozen = i < first or isinstance(layer, keras.layers.BatchNormalization)
        layer.trainable = not frozen


def fine_tune_variables(model: keras.Model, unfreeze_layers: int) -> list[keras.Variable]:
    """Every variable trainable in either phase: build the optimizer over these once, so its
    state (and the checkpoint's structure) is the same before and after the phase change."""
    set_backbone_trainable(model, unfreeze_layers)
    variables = list(model.trainable_variables)
    set_backbone_trainable(model, None)
    return variables
