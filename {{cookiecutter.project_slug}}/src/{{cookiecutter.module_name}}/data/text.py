"""Text: how a string becomes token ids (`data.text`, `data.source: text`; docs/data.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from ..architectures.text import from_preset, keras_hub
from ..config import ModelConfig
from ..spec import DataSpec

VOCABULARY = "vocabulary.txt"  # in data/processed, beside spec.json
RESERVED = 2  # id 0: padding; id 1: a word that is not in the vocabulary ([UNK])


@keras.saving.register_keras_serializable(package="{{ cookiecutter.module_name }}")
def standardize(text: Any) -> Any:
    """Lower case in every alphabet (Keras's default lowers ASCII only: `Über` would stay), then
    drop punctuation and symbols (Unicode classes P and S: `«»`, `—`, `€`, emoji too)."""
    text = tf.strings.lower(text, encoding="utf-8")
    return tf.strings.regex_replace(text, r"[\p{P}\p{S}]", "")


def learn_vocabulary(texts: Any, max_tokens: int) -> list[str]:
    """The words of `texts`, most frequent first, at most `max_tokens` with padding and [UNK]."""
    layer = keras.layers.TextVectorization(
        max_tokens=max_tokens, standardize=standardize, output_mode="int"
    )
    layer.adapt(texts.batch(1024))
    return [str(token) for token in layer.get_vocabulary()[RESERVED:]]


def make_vectorizer(spec: DataSpec, folder: Path, cfg: ModelConfig) -> Any:
    """Strings -> token ids: a keras-hub preset's preprocessor, else prepare's vocabulary."""
    length = int(spec.input_shape[0])
    if cfg.architecture == "backbone":
        preprocessor = keras_hub().models.TextClassifierPreprocessor
        return from_preset(preprocessor, cfg.backbone, sequence_length=length)
    return keras.layers.TextVectorization(
        standardize=standardize,
        output_mode="int",
        output_sequence_length=length,
        vocabulary=str(Path(folder) / spec.vocabulary),
        name="vectorize",
    )


def token_ids(vectorized: Any) -> Any:
    """The vectoriser's output as int32 ids (of a keras-hub preprocessor's dict: `token_ids`)."""
    if isinstance(vectorized, dict):
        vectorized = vectorized["token_ids"]
    return keras.ops.cast(vectorized, "int32")


@keras.saving.register_keras_serializable(package="{{ cookiecutter.module_name }}")
class TextModel(keras.Model):
    """Raw strings -> the vectoriser -> the network -> the task's output layer; `network` alone
    takes token ids (what a converter for phones takes)."""

    def __init__(self, vectorizer: Any, network: Any, head: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vectorizer, self.network, self.head = vectorizer, network, head
        # The parts are built already; Keras cannot build this by tracing a string input with
        # its float stand-ins (and loading builds only what is not built).
        self.built = True

    def call(self, text: Any, training: bool = False) -> Any:
        return self.head(self.network(token_ids(self.vectorizer(text)), training=training))

    def get_config(self) -> dict[str, Any]:
        parts = {name: getattr(self, name) for name in ("vectorizer", "network", "head")}
        config = {k: keras.saving.serialize_keras_object(v) for k, v in parts.items()}
        return {**super().get_config(), **config}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TextModel:
        for name in ("vectorizer", "network", "head"):
            config[name] = keras.saving.deserialize_keras_object(config[name])
        return cls(**config)
