"""`model.architecture: text` (token ids -> a mean of learned vectors), and the keras-hub text
backbones that `model.architecture: backbone` uses on text."""

from __future__ import annotations

from typing import Any

import keras

from ..config import ConfigError, ModelConfig
from ..registry import register
from ..spec import DataSpec
from .cnn import FOR_KIND

PRESET_EXAMPLE = "bert_tiny_en_uncased"


@register("architecture", "text")
def text_network(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """Token ids -> a learned vector of `model.embedding_dim` per token -> their mean over the
    text's tokens (padding left out) -> Dense layers of `model.hidden_units`, dropout before each.
    Small and quick, and strong on topic-like labels; it ignores word order (docs/customise.md
    has a 1-D convolution that does not)."""
    if spec.kind != "text":
        raise ConfigError(
            f"model.architecture: text needs text (data.text or data.source text), got "
            f"{spec.kind} inputs (example: --set model.architecture={FOR_KIND[spec.kind]})"
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


def text_backbone(inputs: keras.KerasTensor, spec: DataSpec, cfg: ModelConfig) -> keras.KerasTensor:
    """The keras-hub backbone of the preset `model.backbone` (`from_preset`) on the token ids of
    its own tokenizer (data/text.py), its weights unless `model.weights` is null; its pooled
    output, else the mean of its token outputs."""
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
            f"{', '.join(given)} (example: --set model.backbone={PRESET_EXAMPLE})"
        )
    feeds = {name: given[name] for name in wanted}
    outputs = encoder(feeds if isinstance(encoder.input, dict) else inputs)
    if isinstance(outputs, dict):
        if "pooled_output" in outputs:
            return outputs["pooled_output"]
        outputs = outputs["sequence_output"]
    return masked_mean(outputs, inputs, pad)


def keras_hub() -> Any:
    """The keras_hub module, or a one-line error naming the package. It is no requirement of the
    project (only a preset needs it; Colab preinstalls it): its tokenizers need tensorflow-text,
    which must match TensorFlow's version, else pip replaces TensorFlow."""
    try:
        import keras_hub as hub  # optional: only a text preset needs it
    except ImportError as exc:
        import tensorflow as tf

        major_minor = ".".join(tf.__version__.split(".")[:2])
        raise ConfigError(
            f"model.backbone: a text preset needs the package keras-hub ({exc}): "
            f"pip install keras-hub 'tensorflow-text~={major_minor}.0' "
            f"(example: --set model.backbone={PRESET_EXAMPLE})"
        ) from None
    return hub


def from_preset(cls: Any, preset: str, **kwargs: Any) -> Any:
    """`cls.from_preset(preset, ...)`: a built-in name (downloaded once), `kaggle://`, `hf://` or a
    local folder made by `save_to_preset`; a preset it cannot load is one line naming the key."""
    try:
        return cls.from_preset(preset, **kwargs)
    except (ValueError, OSError, ImportError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(
            f"model.backbone: {preset!r} is not a keras-hub text preset this can load ({first}) "
            f"(example: --set model.backbone={PRESET_EXAMPLE})"
        ) from None
