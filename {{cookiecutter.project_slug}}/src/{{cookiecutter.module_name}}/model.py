"""The model, defined in one place."""

from __future__ import annotations

import keras

from .config import ModelConfig
from .dataspec import DataSpec


def build_model(spec: DataSpec, num_outputs: int, cfg: ModelConfig) -> keras.Model:
    """A classifier that returns float32 logits, taking raw inputs of `spec.input_shape`.

    The model owns its input scaling, so a saved model takes raw inputs: images (pixel values
    0-255) go through `Rescaling(1/255)`, vectors through a `Normalization` with the training
    split's mean and variance. `model.architecture`: `mlp` (Flatten, then `hidden_units`) or
    `cnn` (a small conv net). Build it inside `strategy.scope()` so its variables are mirrored.
    The last layer computes in float32 even under a mixed-precision policy.
    """
    inputs = keras.Input(shape=spec.input_shape, name="inputs")
    if spec.kind == "image":
        x = keras.layers.Rescaling(1.0 / 255.0)(inputs)
    else:
        x = keras.layers.Normalization(mean=spec.feature_mean, variance=spec.feature_var)(inputs)
    if cfg.architecture == "cnn" and spec.kind == "image":
        for filters in (32, 64):
            x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = keras.layers.MaxPooling2D(2, padding="same")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
    else:
        x = keras.layers.Flatten()(x)
    for units in cfg.hidden_units:
        x = keras.layers.Dense(units, activation="relu")(x)
        if cfg.dropout > 0:
            x = keras.layers.Dropout(cfg.dropout)(x)
    logits = keras.layers.Dense(num_outputs, dtype="float32", name="logits")(x)
    return keras.Model(inputs, logits, name=cfg.architecture)
