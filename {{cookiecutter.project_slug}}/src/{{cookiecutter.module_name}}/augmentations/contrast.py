"""`contrast`: scale each image's contrast by a random factor."""

from __future__ import annotations

import tensorflow as tf

from ..registry import register


@register("augmentation", "contrast")
def contrast(image: tf.Tensor, key: tf.Tensor, lower: float = 0.8, upper: float = 1.2) -> tf.Tensor:
    """Scale the contrast by a factor between `lower` and `upper`."""
    image = tf.image.stateless_random_contrast(image, lower, upper, key)
    return tf.clip_by_value(image, 0.0, 255.0)
