"""One image path for training and serving. Outside the model on purpose: an antialiased resize
needs ops LiteRT cannot run. docs/data.md ("Images: from file to pixels").
"""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np
import tensorflow as tf
from PIL import ExifTags, Image, ImageOps

from ..config import ConfigError

BACKGROUND = (255, 255, 255)  # white: what a viewer shows behind a transparent logo or cut-out
RESAMPLE = "bilinear"  # PIL's Image.Resampling member: antialiased when shrinking
JPEG_QUALITY = 95
TRANSFORMS = range(2, 9)  # EXIF orientations that flip or turn the stored pixels


def _open(payload: bytes) -> Any:
    image = Image.open(io.BytesIO(payload))
    image.load()  # decodes it all: a truncated file fails here
    return image


def _orientation(image: Any) -> int:
    try:
        return int(image.getexif().get(ExifTags.Base.Orientation, 1))
    except (TypeError, ValueError):  # an unreadable EXIF block: the pixels as stored
        return 1


def load_image(payload: Any, size: tuple[int, int] | None, channels: int) -> Any:
    """Steps 1-5 of docs/data.md's recipe: bytes, a PIL image or a uint8 array -> a PIL image
    of `channels` at `size` (height, width, not PIL's order; None: as it is)."""
    if isinstance(payload, bytes | Image.Image):
        image = _open(payload) if isinstance(payload, bytes) else payload
        if _orientation(image) in TRANSFORMS:
            image = ImageOps.exif_transpose(image)
        if image.mode.startswith("I"):  # 16-bit grey (PIL's own conversion would clip at 255)
            scaled = np.asarray(image, dtype=np.float64) / 257.0
            image = Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), "L")
    else:
        array = np.asarray(payload, dtype=np.uint8)
        grey = array.ndim == 3 and array.shape[-1] == 1
        image = Image.fromarray(array[..., 0] if grey else array)
    if image.has_transparency_data:
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (*BACKGROUND, 255)), rgba)
    image = image.convert("L" if channels == 1 else "RGB")
    if size is not None and image.size != (size[1], size[0]):
        image = image.resize((size[1], size[0]), Image.Resampling[RESAMPLE.upper()])
    return image


def _kept_as_is(image: Any, size: tuple[int, int], channels: int, fmt: str) -> bool:
    """True when the original needs none of `load_image`'s steps and is in the shards' format."""
    return (
        (image.format or "").lower() == fmt
        and image.mode == ("L" if channels == 1 else "RGB")
        and image.size == (size[1], size[0])
        and not image.has_transparency_data
        and _orientation(image) not in TRANSFORMS
    )


def stored_image(payload: Any, size: tuple[int, int], channels: int, fmt: str, where: str) -> bytes:
    """An image as the shards hold it, at `size` (height, width) as `fmt`: the original bytes
    when steps 2-5 would not change them."""
    try:
        decoded = _open(payload) if isinstance(payload, bytes) else payload
        if isinstance(payload, bytes) and _kept_as_is(decoded, size, channels, fmt):
            return payload
        image = load_image(decoded, size, channels)
        buf = io.BytesIO()
        image.save(buf, format=fmt.upper(), quality=JPEG_QUALITY)  # PNG takes no quality
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        cause = re.sub(r" <[^>]* at 0x[0-9a-f]+>", "", str(exc))  # PIL names its buffer, not a file
        raise ConfigError(
            f"{where}: not a readable image ({cause}); fix it or leave it out"
        ) from None
    return buf.getvalue()


def decode_stored(data: Any, shape: Any) -> Any:
    """Stored image bytes (a string tensor) -> float32 pixel values 0-255 of `shape` [h, w, c]."""
    x = tf.io.decode_image(data, channels=shape[-1], expand_animations=False)
    return tf.cast(tf.ensure_shape(x, shape), tf.float32)


def model_input(payload: bytes, shape: Any, fmt: str, where: str) -> np.ndarray:
    """An image file's bytes -> the model's input, float32 [h, w, c], as the pipeline decodes it."""
    height, width, channels = (int(v) for v in shape)
    stored = stored_image(payload, (height, width), channels, fmt, where)
    return decode_stored(stored, [height, width, channels]).numpy()
