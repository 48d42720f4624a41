"""`data.source: tfrecord`: your own `tf.train.Example` records."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import tensorflow as tf

from ..config import ConfigError, DataConfig
from ..core import locations
from ..sources import MissingLabels, Source, source
from ..tasks.base import encode, task_class


@source("tfrecord", patterns=True)
def read_tfrecord(path: str, data: DataConfig, kind: str) -> Source:
    """`data.features` (an encoded image or numbers) and `data.label` of TFRecord file(s), held in
    memory while `prepare` runs: TFRecords have no random access."""
    files = sorted(tf.io.gfile.glob(path) if "*" in path else locations.walk_files(path))

    def named(file: str, k: int) -> str:  # an id: the index in its file, after the file's name
        if file == path:
            return str(k)
        return f"{file.rsplit('/', 1)[-1] if '*' in path else locations.relative(file, path)}:{k}"

    inputs: list[Any] = []
    labels: list[Any] = []
    ids: list[str] = []
    for file in files:
        try:
            for k, raw in enumerate(tf.data.TFRecordDataset(file).as_numpy_iterator()):
                feature = tf.train.Example.FromString(raw).features.feature
                ids.append(named(file, k))
                inputs.append(_input(feature, data, f"record {ids[-1]} in {data.path}"))
                labels.append(_values(feature[data.label]))
        except tf.errors.DataLossError as exc:  # cut short, or not a TFRecord file at all
            cause = re.search(r"(truncated|corrupted) record at \d+", exc.message)
            file_name = named(file, 0).removesuffix(":0")  # the file, as in data.path
            shown = data.path if file == path else f"{data.path} ({file_name})"
            raise ConfigError(
                f"data.path: {shown} is not a whole TFRecord file "
                f"({cause[0] if cause else 'unreadable'}); write it again, or move it out of "
                "data.path (example: --set data.path=data/external/records)"
            ) from None
    single = all(len(v) == 1 for v in labels)
    if not single and not task_class(kind)(names=[]).target_shape():  # one value per example
        bad = next(i for i, v in enumerate(labels) if len(v) != 1)
        raise ConfigError(
            f"data.label: record {ids[bad]} in {data.path} has {len(labels[bad])} values of "
            f"{data.label!r}; {kind} takes one per record (example: --set task.type=multilabel)"
        )
    y, names = encode(kind, [v[0] for v in labels] if single else labels, data.label)
    where = lambda i: f"{data.path}: record {ids[i]}"  # noqa: E731
    # Vectors: prepare refuses a record of another width than the others, naming it.
    return Source(data.feature_kind, kind, y, names, inputs.__getitem__, where, ids.__getitem__)


def _input(feature: Any, data: DataConfig, where: str) -> Any:
    """One record's input: the encoded image's bytes, or its numbers as float32."""
    if data.features in feature and data.label not in feature:
        raise MissingLabels(
            f"data.label: {where} has no feature {data.label!r} (features: {sorted(feature)}) "
            "(example: --set data.label=label)"
        )
    if data.features not in feature:
        label = data.label if data.label in feature else "label"
        image = data.feature_kind == "image"  # a feature it has, of the kind asked for
        alike = [n for n in sorted(feature) if bool(feature[n].bytes_list.value) == image]
        alike = [n for n in alike if n != label] or ["image" if image else "x"]
        raise ConfigError(
            f"data.features / data.label: {where} has features {sorted(feature)} "
            f"(example: --set data.features={alike[0]} --set data.label={label})"
        )
    x = feature[data.features]
    if data.feature_kind != "image":
        if x.bytes_list.value:  # an encoded image (or text) read as numbers would be 0 of them
            raise ConfigError(
                f"data.feature_kind: {data.features!r} in {where} holds bytes, not numbers "
                "(example: --set data.feature_kind=image)"
            )
        # prepare refuses a NaN or an infinite value, naming the record: as any source's.
        return np.array(x.float_list.value or x.int64_list.value, np.float32)
    if not x.bytes_list.value:
        raise ConfigError(
            f"data.feature_kind: {data.features!r} in {where} is not an encoded image "
            "(example: --set data.feature_kind=vector)"
        )
    return x.bytes_list.value[0]


def _values(label: Any) -> list[Any]:
    """A label feature's values: integers, numbers or strings."""
    return (
        list(label.int64_list.value)
        or list(label.float_list.value)
        or [v.decode() for v in label.bytes_list.value]
    )
