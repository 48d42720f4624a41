"""`rotation` and `zoom`: one affine transform about the image's centre, borders reflected."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from ..registry import register


@register("augmentation", "rotation")
def rotation(image: tf.Tensor, key: tf.Tensor, factor: float = 0.1) -> tf.Tensor:
    """Rotate by up to `factor` of a full turn either way (0.1: 36 degrees)."""
    angle = tf.random.stateless_uniform([], key, -factor, factor) * 2 * math.pi
    return affine(image, angle, 1.0)


@register("augmentation", "zoom")
def zoom(image: tf.Tensor, key: tf.Tensor, factor: float = 0.15) -> tf.Tensor:
    """Zoom in or out by up to `factor` (0.15: +-15 %)."""
    return affine(image, 0.0, 1.0 + tf.random.stateless_uniform([], key, -factor, factor))


def affine(image: tf.Tensor, angle: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    """Rotate by `angle` (radians) and zoom by `scale` about the centre, reflecting at borders."""
    h = tf.cast(tf.shape(image)[0], tf.float32)
    w = tf.cast(tf.shape(image)[1], tf.float32)
    cx, cy = (w - 1) / 2, (h - 1) / 2
    # The transform maps each output pixel to the input pixel it samples.
    k = 1.0 / tf.cast(scale, tf.float32)
    angle = tf.cast(angle, tf.float32)
    a0, a1 = k * tf.cos(angle), -k * tf.sin(angle)
    b0, b1 = k * tf.sin(angle), k * tf.cos(angle)
    matrix = tf.stack([a0, a1, cx - a0 * cx - a1 * cy, b0, b1, cy - b0 * cx - b1 * cy, 0.0, 0.0])
    return keras.ops.image.affine_transform(image, matrix, fill_mode="reflect")
