"""Your models: an architecture per `model.architecture`, registered under that name.

An architecture is a function `(inputs, spec, cfg) -> features`: it gets the RAW inputs (pixel
values 0-255, or unscaled features: `scaled` scales them; for text, int32 token ids, 0 for
padding: text.py makes them), the data's spec (spec.py: input shape,
kind, feature statistics) and the `model:` section of params.yaml, and returns the features the
head reads. `build_model` adds the head: dropout and a float32 Dense of logits (a bfloat16 or
float16 softmax or loss loses too much precision). The task (task.py) turns logits into
probabilities or values, so the saved model needs nothing else. Build it inside
`strategy.scope()` so its variables are mirrored.

An architecture of your own, in this file or a new one beside it, then `model.architecture: mine`:

    @register("architecture", "mine")
    def mine(inputs, spec, cfg):
        x = scaled(inputs, spec)
        x = keras.layers.Conv2D(32, 3, activation="relu")(x)
        return keras.layers.GlobalAveragePooling2D()(x)
"""

from __future__ import annotations

import importlib
import inspect

import keras

from .config import ConfigError, ModelConfig
from .registry import lookup, register
from .spec import DataSpec

# Smallest height/width keras.applications accepts (most families: 32).
MIN_SIZE = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71}


def build_model(spec: DataSpec, num_outputs: int, cfg: ModelConfig) -> keras.Model:
    """Raw inputs of `spec.input_shape` -> `num_outputs` float32 logits: the architecture
    `model.architecture`, then dropout and the float32 head."""
    architecture = lookup("architecture", cfg.architecture)
    if spec.kind == "text":  # the input pipeline turns text into token ids (text.py)
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
    if spec.feature_mean is None or spec.feature_var is None:
        return inputs
    return keras.layers.Normalization(
        mean=spec.feature_mean, variance=spec.feature_var, name="standardise_features"
    )(inputs)


@register("architecture", "mlp")
def mlp(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """Dense layers of `model.hidden_units` (tabular data; small images are flattened)."""
    x = scaled(inputs, spec)
    if len(x.shape) > 2:
        x = keras.layers.Flatten(name="flatten")(x)
    for i, units in enumerate(cfg.hidden_units):
        if i and cfg.dropout > 0:  # the head's dropout follows the last one
            x = keras.layers.Dropout(cfg.dropout)(x)
        x = keras.layers.Dense(units, activation="relu")(x)
    return x


@register("architecture", "cnn")
def cnn(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """A small VGG-style conv net: blocks of 3x3 conv + batch norm + ReLU + 2x2 max pooling, one
    per entry of `model.filters`, then more with the last entry while the feature map is wider
    than 4 px (the default [16, 32, 64, 128]: 4 blocks up to 64x64, 6 at 224x224); then global
    average pooling, so the weights barely grow with the image (no flatten).

    Batch norm's moving averages use momentum 0.9, not Keras's 0.99: at 0.99 they take ~300
    steps to settle, longer than a small data set trains, and validation sits at chance."""
    if spec.kind != "image":
        raise ConfigError(
            "model.architecture: cnn needs images (data.source images / tfrecord / tfds), got "
            f"{spec.kind} inputs (example: --set model.architecture={_FOR_KIND[spec.kind]})"
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


_FOR_KIND = {"vector": "mlp", "text": "text", "image": "cnn"}  # the built-in for each kind


@register("architecture", "text")
def text_network(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """Token ids -> a learned vector of `model.embedding_dim` per token -> their mean over the
    text's tokens (padding left out) -> Dense layers of `model.hidden_units`, dropout before each.
    Small and quick, and strong on topic-like labels; it ignores word order (docs/customise.md
    has a 1-D convolution that does not)."""
    if spec.kind != "text":
        raise ConfigError(
            f"model.architecture: text needs text (data.text or data.source text), got "
            f"{spec.kind} inputs (example: --set model.architecture={_FOR_KIND[spec.kind]})"
        )
    x = keras.layers.Embedding(spec.vocabulary_size, cfg.embedding_dim, name="embedding")(inputs)
    x = masked_mean(x, inputs)
    for units in cfg.hidden_units:
        if cfg.dropout > 0:
            x = keras.layers.Dropout(cfg.dropout)(x)
        x = keras.layers.Dense(units, activation="relu")(x)
    return x


def masked_mean(x: keras.KerasTensor, ids: keras.KerasTensor, pad: int = 0) -> keras.KerasTensor:
    """The mean of `x` [batch, tokens, dim] over the tokens whose id is not `pad`; zeros for a
    text without any (an empty one), not a division by zero."""
    mask = keras.ops.expand_dims(keras.ops.cast(keras.ops.not_equal(ids, pad), x.dtype), -1)
    count = keras.ops.maximum(keras.ops.sum(mask, axis=1), 1.0)
    return keras.ops.sum(x * mask, axis=1) / count


@register("architecture", "backbone")
def backbone(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """The keras.applications model `model.backbone` without its top, with its own input
    preprocessing, weights `model.weights` (imagenet: downloaded on first use), then pooling.
    For text: the keras-hub preset `model.backbone` (`text_backbone`)."""
    if spec.kind == "text":
        return text_backbone(inputs, spec, cfg)
    constructor = _backbone_constructor(cfg.backbone)
    _check_backbone_input(spec, cfg)
    height, width, channels = spec.input_shape
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
    except ValueError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(
            f"model.backbone: {cfg.backbone} cannot take inputs of shape {spec.input_shape} "
            f"({first}) (example: --set data.image_size=[96,96])"
        ) from None
    # training=False: batch norm stays in inference mode, also once layers are unfrozen
    # (Keras's transfer-learning guide), so fine-tuning does not wreck the learned statistics.
    x = backbone(x, training=False)
    return keras.layers.GlobalAveragePooling2D(name="pool")(x)


def _backbone_constructor(name: str):  # noqa: ANN202 - a keras.applications function
    constructor = getattr(keras.applications, name, None)
    if not name[:1].isupper() or not callable(constructor):
        raise ConfigError(
            f"model.backbone: {name!r} is not a keras.applications model "
            "(example: --set model.backbone=MobileNetV3Small)"
        )
    return constructor


def _check_backbone_input(spec: DataSpec, cfg: ModelConfig) -> None:
    """One line naming the key to change, before keras fails with a long message."""
    if spec.kind != "image" or len(spec.input_shape) != 3:
        raise ConfigError(
            f"model.architecture: backbone needs images or text, got {spec.kind} inputs of shape "
            f"{spec.input_shape} (example: --set model.architecture=mlp)"
        )
    height, width, channels = spec.input_shape
    smallest = MIN_SIZE.get(cfg.backbone, 32)
    if min(height, width) < smallest:
        raise ConfigError(
            f"data.image_size: {cfg.backbone} needs images of at least {smallest}x{smallest}, "
            f"got {height}x{width} (example: --set data.image_size=[{smallest * 2},{smallest * 2}])"
        )
    if channels not in (1, 3):
        raise ConfigError(
            f"data.image_channels: a backbone takes 1 (grayscale) or 3 (RGB) channels, got "
            f"{channels} (example: --set data.image_channels=3)"
        )


def text_backbone(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """The keras-hub backbone of the preset `model.backbone` (a name such as
    `bert_tiny_en_uncased`, downloaded once; `kaggle://`, `hf://` or a local folder) on the
    token ids of its own tokenizer (text.make_vectorizer), its weights unless `model.weights` is
    null; its pooled output, else the mean of its token outputs."""
    from .text import from_preset, keras_hub

    hub = keras_hub()
    encoder = from_preset(hub.models.Backbone, cfg.backbone, load_weights=cfg.weights is not None)
    pad = getattr(from_preset(hub.tokenizers.Tokenizer, cfg.backbone), "pad_token_id", None) or 0
    longest = getattr(encoder, "max_sequence_length", None)
    if longest and spec.input_shape[0] > longest:
        raise ConfigError(
            f"data.sequence_length: {cfg.backbone} takes at most {longest} tokens, got "
            f"{spec.input_shape[0]} (example: --set data.sequence_length={longest})"
        )
    # What the preset's preprocessor would give beside the ids, made from them.
    given = {
        "token_ids": inputs,
        "padding_mask": keras.ops.cast(keras.ops.not_equal(inputs, pad), "int32"),
        "segment_ids": keras.ops.zeros_like(inputs),
    }
    wanted = list(encoder.input) if isinstance(encoder.input, dict) else ["token_ids"]
    if any(name not in given for name in wanted):
        raise ConfigError(
            f"model.backbone: {cfg.backbone} takes inputs {wanted}; a text backbone here gets "
            f"{', '.join(given)} (example: --set model.backbone=bert_tiny_en_uncased)"
        )
    feeds = {name: given[name] for name in wanted}
    outputs = encoder(feeds if isinstance(encoder.input, dict) else inputs)
    if isinstance(outputs, dict):
        if "pooled_output" in outputs:
            return outputs["pooled_output"]
        outputs = outputs["sequence_output"]
    return masked_mean(outputs, inputs, pad)


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


# Fine-tuning in two phases: the head alone on a frozen backbone, then the top of the backbone.


def find_backbone(model: keras.Model) -> keras.Model | None:
    """The keras.applications model inside `model`, or None (mlp, cnn)."""
    return next((layer for layer in model.layers if isinstance(layer, keras.Model)), None)


def set_backbone_trainable(model: keras.Model, unfreeze_layers: int | None) -> None:
    """None: freeze the whole backbone. N: unfreeze its top N layers (0 = all of them).

    Batch-normalization layers always stay frozen. Changing what is trainable changes the
    variables a train step updates: retrace the step (a new tf.function) after calling this.
    """
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
