"""Your augmentations: `data.augment: [flip, rotation, zoom, contrast]`, training images only.

Each is a function `(image, key) -> image` on one float32 image of pixel values 0-255, registered
under its name. Every random draw is a stateless op of `key` (shape [2], int64; the pipeline
derives it from the seed, the epoch and the example's position), so an example gets the same
augmentation in a resumed run: that is what keeps a resume bit-identical. Add one with
`@register("augmentation", "<name>")` here or in a file of your own beside this one, and list the
name in params.yaml.
"""

from __future__ import annotations

import math
from typing import Any

from .registry import lookup, register

MAX_ROTATION = 0.1  # of a full turn, either way (36 degrees)
MAX_ZOOM = 0.15  # +-15 %
CONTRAST = (0.8, 1.2)


@register("augmentation", "flip")
def flip(image: Any, key: Any) -> Any:
    """Mirror left-right, half of the time."""
    import tensorflow as tf

    return tf.image.stateless_random_flip_left_right(image, key)


@register("augmentation", "rotation")
def rotation(image: Any, key: Any) -> Any:
    """Rotate by up to MAX_ROTATION of a turn either way."""
    import tensorflow as tf

    angle = tf.random.stateless_uniform([], key, -MAX_ROTATION, MAX_ROTATION) * 2 * math.pi
    return _affine(image, angle, 1.0)


@register("augmentation", "zoom")
def zoom(image: Any, key: Any) -> Any:
    """Zoom in or out by up to MAX_ZOOM."""
    import tensorflow as tf

    return _affine(image, 0.0, 1.0 + tf.random.stateless_uniform([], key, -MAX_ZOOM, MAX_ZOOM))


@register("augmentation", "contrast")
def contrast(image: Any, key: Any) -> Any:
    """Scale the contrast by a factor in CONTRAST."""
    import tensorflow as tf

    image = tf.image.stateless_random_contrast(image, *CONTRAST, key)
    return tf.clip_by_value(image, 0.0, 255.0)


def augmenter(names: list[str] | tuple[str, ...]) -> Any:
    """The augmentations `names`, in that order, as one function `(image, key) -> image`."""
    import tensorflow as tf

    steps = [lookup("augmentation", name) for name in names]

    def augment(image: Any, key: Any) -> Any:
        for i, step in enumerate(steps):
            image = step(image, tf.random.experimental.stateless_fold_in(key, i))
        return image

    return augment


def _affine(image: Any, angle: Any, scale: Any) -> Any:
    """Rotate by `angle` (radians) and zoom by `scale` about the centre, reflecting at borders."""
    import tensorflow as tf

    h = tf.cast(tf.shape(image)[0], tf.float32)
    w = tf.cast(tf.shape(image)[1], tf.float32)
    cx, cy = (w - 1) / 2, (h - 1) / 2
    # The transform maps each output pixel to the input pixel it samples.
    k = 1.0 / tf.cast(scale, tf.float32)
    angle = tf.cast(angle, tf.float32)
    a0, a1 = k * tf.cos(angle), -k * tf.sin(angle)
    b0, b1 = k * tf.sin(angle), k * tf.cos(angle)
    matrix = tf.stack([a0, a1, cx - a0 * cx - a1 * cy, b0, b1, cy - b0 * cx - b1 * cy, 0.0, 0.0])
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None],
        transforms=matrix[None],
        output_shape=tf.shape(image)[:2],
        fill_value=0.0,
        interpolation="BILINEAR",
        fill_mode="REFLECT",
    )
    return out[0]
