"""The model, defined in one place."""

from __future__ import annotations

import keras

from .config import ModelConfig


def build_model(input_dim: int, num_classes: int, cfg: ModelConfig) -> keras.Model:
    """A small MLP classifier that returns logits.

    Build it inside `strategy.scope()` so its variables are mirrored. The last layer computes in
    float32 even under a mixed-precision policy: a float16 softmax/loss loses too much precision.
    """
    layers: list[keras.layers.Layer] = [keras.Input(shape=(input_dim,), name="features")]
    for units in cfg.hidden_units:
        layers.append(keras.layers.Dense(units, activation="relu"))
        if cfg.dropout > 0:
            layers.append(keras.layers.Dropout(cfg.dropout))
    layers.append(keras.layers.Dense(num_classes, dtype="float32", name="logits"))
    return keras.Sequential(layers, name="mlp")
