"""Three shapes: circle / square / triangle, one filled shape per 64x64 JPEG (make bench's `cnn`).

Every image has a random background colour and a shape of another colour (apart in luma too),
of a random size (24-56 px) and place, fully inside the image. Deterministic in `seed`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ("circle", "square", "triangle")
LUMA = np.array([0.299, 0.587, 0.114])


def _colour(rng: np.random.Generator, away_from: np.ndarray | None = None) -> np.ndarray:
    """A random RGB colour; with `away_from`, one clearly apart from it (also in grey)."""
    while True:
        c = rng.integers(0, 256, size=3)
        if away_from is None or (np.abs(c - away_from).sum() >= 150 and abs((c - away_from) @ LUMA) >= 100):
            return c


def draw_shape(kind: str, rng: np.random.Generator, size: int = 64) -> Image.Image:
    """One image of `kind`."""
    background = _colour(rng)
    fill = tuple(int(v) for v in _colour(rng, away_from=background))
    image = Image.new("RGB", (size, size), tuple(int(v) for v in background))
    draw = ImageDraw.Draw(image)
    r = int(rng.integers(24, 57)) / 2
    cx, cy = rng.uniform(r + 1, size - r - 1), rng.uniform(r + 1, size - r - 1)
    if kind == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif kind == "square":
        draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
    else:  # an upright equilateral triangle
        corners = [-math.pi / 2 + k * 2 * math.pi / 3 for k in range(3)]
        draw.polygon([(cx + r * math.cos(a), cy + r * math.sin(a)) for a in corners], fill=fill)
    return image


def write_shapes(out: Path, per_class: int = 300, size: int = 64, seed: int = 0) -> Path:
    """`out/<class>/<NNNN>.jpg` (quality 90), the classes drawn in turn from one random stream."""
    rng = np.random.default_rng(seed)
    for kind in CLASSES:
        (Path(out) / kind).mkdir(parents=True, exist_ok=True)
    for i in range(per_class):
        for kind in CLASSES:
            draw_shape(kind, rng, size).save(Path(out) / kind / f"{i:04d}.jpg", quality=90)
    return Path(out)
