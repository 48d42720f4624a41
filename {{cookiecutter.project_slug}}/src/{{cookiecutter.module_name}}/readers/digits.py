"""`data.source: digits`: scikit-learn's bundled 8x8 digits, the example data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import sklearn
from sklearn.datasets import load_digits

from ..config import DataConfig
from ..sources import Source, source
from ..tasks.base import encode


@source("digits", reads_path=False)
def read_digits(path: str, data: DataConfig, kind: str) -> Source:
    """The digits as 8x8x1 images of pixel values 0-255; their CSV goes to data/raw."""
    digits = load_digits()
    pixels = np.round(digits.data.reshape(-1, 8, 8, 1) * (255.0 / 16.0)).astype(np.uint8)
    y, names = encode(kind, digits.target.tolist(), "label")
    table = pd.DataFrame(digits.data.astype(np.int64)).add_prefix("pixel_")
    table["label"] = digits.target
    what = f"sklearn.datasets.load_digits (scikit-learn {sklearn.__version__}, bundled)"
    return Source(
        "image",
        kind,
        y,
        names,
        pixels.__getitem__,
        lambda i: f"digits: row {i + 2}",
        lambda i: str(i + 1),
        (8, 8, 1),
        raw={"digits.csv": (table.to_csv(index=False).encode(), what)},
    )
