"""`model.architecture: backbone`: a pretrained keras.applications model (images) or a keras-hub
preset (text), with its own input preprocessing inside the model."""

from __future__ import annotations

import importlib
import inspect

import keras

from ..config import ConfigError, ModelConfig
from ..registry import register
from ..spec import DataSpec
from .text import text_backbone


@register("architecture", "backbone")
def backbone(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """The keras.applications model `model.backbone` without its top, with its own input
    preprocessing, weights `model.weights` (imagenet: downloaded on first use), then pooling.
    For text: the keras-hub preset `model.backbone` (architectures/text.py)."""
    if spec.kind == "text":
        return text_backbone(inputs, spec, cfg)
    constructor = getattr(keras.applications, cfg.backbone, None)
    if not cfg.backbone[:1].isupper() or not callable(constructor):
        raise ConfigError(
            f"model.backbone: {cfg.backbone!r} is not a keras.applications model "
            "(example: --set model.backbone=MobileNetV3Small)"
        )
    if spec.kind != "image":  # one line naming the key, before keras fails with a long message
        raise ConfigError(
            f"model.architecture: backbone needs images or text, got {spec.kind} inputs of shape "
            f"{spec.input_shape} (example: --set model.architecture=mlp)"
        )
    height, width, channels = spec.input_shape  # as prepare writes images
    if channels not in (1, 3):
        raise ConfigError(
            f"data.image_channels: a backbone takes 1 (grayscale) or 3 (RGB) channels, got "
            f"{channels} (example: --set data.image_channels=3)"
        )
    options = {"include_top": False, "weights": cfg.weights, "input_shape": (height, width, 3)}
    x = inputs
    if channels == 1:  # grayscale as RGB: what ImageNet weights and every family expect
        x = keras.layers.Concatenate(name="gray_to_rgb")([x, x, x])
    if "include_preprocessing" in inspect.signature(constructor).parameters:
        options["include_preprocessing"] = True  # it takes 0-255 pixels itself
    else:
        family = constructor.__module__.rsplit(".", 1)[-1]
        # float32: mean subtraction in bfloat16 would lose the pixels' low bits.
        x = BackbonePreprocessing(family, name="preprocess", dtype="float32")(x)
    try:
        backbone = constructor(**options)
    except ValueError as exc:  # keras.applications checks the size each family needs
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(
            f"model.backbone: {cfg.backbone} cannot take inputs of shape {spec.input_shape} "
            f"({first}) (example: --set data.image_size=[96,96])"
        ) from None
    # training=False: batch norm stays in inference mode, also once layers are unfrozen
    # (Keras's transfer-learning guide), so fine-tuning does not wreck the learned statistics.
    x = backbone(x, training=False)
    return keras.layers.GlobalAveragePooling2D(name="pool")(x)


@keras.saving.register_keras_serializable(package="{{ cookiecutter.module_name }}")
class BackbonePreprocessing(keras.layers.Layer):
    """`keras.applications.<family>.preprocess_input` as a layer, so it is saved in the model."""

    def __init__(self, family: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.family = family
        module = importlib.import_module(f"keras.applications.{family}")
        self._preprocess = module.preprocess_input

    def call(self, inputs):  # noqa: ANN001, ANN201 - keras tensors
        return self._preprocess(inputs)

    def get_config(self) -> dict:
        return {**super().get_config(), "family": self.family}
