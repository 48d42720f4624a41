"""`data.source: tfds`: a TensorFlow Datasets data set, by its name."""

from __future__ import annotations

import importlib.resources
import importlib.resources.abc
import sys
from typing import Any

import numpy as np

from ..config import ConfigError, DataConfig
from ..core.files import json_text
from ..sources import Source, source
from ..tasks.base import encode


@source("tfds", reads_path=False)
def read_tfds(path: str, data: DataConfig, kind: str, data_dir: str | None = None) -> Source:
    """The TFDS data set `data.name` (`mnist`, `tf_flowers`, `imdb_reviews`) and its splits."""
    name = data.name
    try:
        import tensorflow_datasets as tfds

        tfds.builder  # noqa: B018 - tensorflow_datasets logs its own import errors and goes on, empty
    except Exception as exc:  # noqa: BLE001 - e.g. protobuf's VersionError, not an ImportError
        raise ConfigError(
            f"data.source: tfds, but tensorflow_datasets does not import ({type(exc).__name__}: "
            f"{str(exc)[:160]}; its own error is logged above); pip install -r requirements.txt "
            "(it pins tensorflow-metadata 1.17.3, which imports with protobuf 5)"
        ) from None
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as exc:  # tfds raises DatasetNotFoundError and friends
        raise ConfigError(
            f"data.name: {name!r} is not a TFDS data set ({str(exc).splitlines()[0][:120]}) "
            "(example: --set data.name=mnist)"
        ) from None
    # tensorflow-datasets 4.9.10 needs the `importlib_resources` backport to prepare any data set
    # but declares it only for Python < 3.9 (tensorflow/datasets#11212); neither Colab nor the
    # lock has it. The standard library's module has what it uses (`abc.Traversable`).
    sys.modules.setdefault("importlib_resources", importlib.resources)
    builder.download_and_prepare()
    keys = builder.info.supervised_keys
    if not keys or len(keys) != 2:
        raise ConfigError(f"data.name: {name} has no (input, label) supervised keys to train on")
    feature = builder.info.features[keys[0]]
    known = {tfds.features.Image: "image", tfds.features.Text: "text"}
    what = next((k for cls, k in known.items() if isinstance(feature, cls)), "vector")
    # Images stay encoded (as TFDS stores them) until prepare re-encodes them one at a time.
    decoders = {keys[0]: tfds.decode.SkipDecoding()} if what == "image" else None
    inputs: list[Any] = []
    labels: list[int] = []
    ids: list[str] = []  # an example's index in its TFDS split: `test[17]`
    ranges: dict[str, np.ndarray] = {}
    # A data set's info lists its splits once prepared (mock_data's lists none: ask for all three).
    available = [s for s in builder.info.splits if s in ("train", "validation", "test")]
    for split in available or ["train", "validation", "test"]:
        start = len(labels)
        dataset = builder.as_dataset(split=split, as_supervised=True, decoders=decoders)
        for k, (x, y) in enumerate(dataset.as_numpy_iterator()):
            inputs.append(x.decode("utf-8") if what == "text" else x)
            labels.append(int(y))
            ids.append(f"{split}[{k}]")
        ranges[split] = np.arange(start, len(labels))
    if not labels:
        raise ConfigError(f"data.name: {name} has no train / validation / test examples")
    label_feature = builder.info.features[keys[1]]
    num = getattr(label_feature, "num_classes", None) or (max(labels) + 1)
    names = list(getattr(label_feature, "names", None) or [str(i) for i in range(num)])
    y, names = encode(kind, [names[i] for i in labels], f"tfds {name} labels")
    given = {s: r for s, r in ranges.items() if len(r)} if len(ranges.get("train", ())) else None
    record = json_text({"tfds": name, "examples": len(labels), "classes": names})
    return Source(
        what,
        kind,
        y,
        names,
        inputs.__getitem__,
        lambda i: f"tfds {name}: example {i}",
        ids.__getitem__,
        splits=given,
        feature_names=["text"] if what == "text" else [],
        split_from={s: f"tfds {name} {s}" for s in given or ()},
        raw={"tfds.json": (record.encode(), f"tensorflow_datasets {name}")},
    )
