"""Your augmentations: `data.augment: [flip, {rotation: {factor: 0.2}}]`, training images only.

THE CONTRACT. An augmentation is a function

    augmentation(image, key, <your own keyword arguments>) -> image

registered under its name. It receives one float32 image tensor [h, w, c] of pixel values 0-255
and `key`, an int64 tensor of shape [2] that the pipeline derives from the seed, the epoch and
the example's position; then its own arguments, from its entry in `data.augment`
(`{name: {argument: value}}`, checked against their annotations before anything runs). It
returns the augmented image, same shape, values 0-255. Every random draw must be a stateless
op of `key` (`tf.random.stateless_*`, `tf.image.stateless_random_*`; Keras's random ops take no
per-example key): an example then gets the same augmentation in a resumed run, which is what
keeps a resume bit-identical. The augmentations run in the tf.data pipeline, on the CPU, in the
order `data.augment` lists them.

`flip` below is the worked example; `rotation`, `zoom` and `contrast` are in augmentations/.
Add yours here or in a file of your own beside this one, and list its name in params.yaml.
"""

from __future__ import annotations

import tensorflow as tf

from .registry import register


@register("augmentation", "flip")
def flip(image: tf.Tensor, key: tf.Tensor, vertical: bool = False) -> tf.Tensor:
    """Mirror left-right (`vertical: true`: also upside down, each half of the time)."""
    image = tf.image.stateless_random_flip_left_right(image, key)
    if vertical:
        other = tf.random.experimental.stateless_fold_in(key, 1)
        image = tf.image.stateless_random_flip_up_down(image, other)
    return image
