"""`model.architecture: cnn`: a small conv net for images."""

from __future__ import annotations

import keras

from ..config import ConfigError, ModelConfig
from ..model import scaled
from ..registry import register
from ..spec import DataSpec


@register("architecture", "cnn")
def cnn(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """A small VGG-style conv net: blocks of 3x3 conv + batch norm + ReLU + 2x2 max pooling, one
    per entry of `model.filters`, then more with the last entry while the feature map is wider
    than 4 px; then global average pooling, so the weights barely grow with the image.

    Batch norm's moving averages use momentum 0.9, not Keras's 0.99: at 0.99 they take ~300
    steps to settle, longer than a small data set trains, and validation sits at chance."""
    if spec.kind != "image":
        raise ConfigError(
            "model.architecture: cnn needs images (data.source images / tfrecord / tfds), got "
            f"{spec.kind} inputs (example: --set model.architecture={FOR_KIND[spec.kind]})"
        )
    x = scaled(inputs, spec)
    block = 0
    while block < len(cfg.filters) or min(x.shape[1], x.shape[2]) > 4:
        filters = cfg.filters[min(block, len(cfg.filters) - 1)]
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization(momentum=0.9)(x)
        x = keras.layers.Activation("relu")(x)
        if min(x.shape[1], x.shape[2]) >= 2:
            x = keras.layers.MaxPooling2D()(x)
        block += 1
    return keras.layers.GlobalAveragePooling2D(name="pool")(x)


FOR_KIND = {"vector": "mlp", "text": "text", "image": "cnn"}  # the built-in for each input kind
