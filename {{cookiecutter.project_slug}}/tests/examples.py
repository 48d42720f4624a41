"""Small example inputs of each kind, and the command line run in this process: what
test_components.py and test_end_to_end.py (the tests `make test` runs) train on.

Nothing here reads your data, results or storage root: each input is written into a temporary
folder, and each project folder gets a copy of params.yaml.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import yaml
from conftest import PARAMS

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import flat

# One short epoch on one device, offline (no ImageNet download), small built-in models, and every
# setting of yours that a component under test might not take (your task and its metrics and
# monitor, a profile, a GPU requirement) back to neutral; the rest of params.yaml is your own.
TINY = [
    "train.epochs=1",
    "train.batch_size=8",
    "train.steps_per_execution=1",
    "train.early_stopping_patience=0",
    "train.time_budget_minutes=0",
    "train.monitor=val_loss",
    "train.class_weight=none",
    "train.label_smoothing=0",
    "train.profile_steps=[]",
    "train.mixed_precision=false",
    "train.xla=false",
    "train.fine_tune.frozen_epochs=0",
    "distribute.strategy=default",
    "distribute.logical_cpus=0",
    "distribute.require_accelerator=false",
    "task.type=classification",
    "task.metrics=[]",
    "model.weights=null",
    "model.backbone=MobileNetV3Small",
    "model.hidden_units=[8]",
    "model.filters=[4,8]",
    "model.embedding_dim=8",
    "data.augment=[]",
    "data.split=random",
    "data.validation_fraction=0.25",
    "data.test_fraction=0.25",
]
TARGETS = ("classes", "labels", "values")


def write_table(path: Path, target: str, rows: int = 48) -> Path:
    """A CSV of three numeric features and a `target` column of `classes` ("0", "1", "2"),
    `labels` (`x`, `y`, `x|y` or none) or `values` (numbers), each a function of the features."""
    rng = np.random.default_rng(0)
    lines = ["f1,f2,f3,target"]
    for f1, f2, f3 in rng.normal(0, 1, size=(rows, 3)):
        cell = {
            "classes": str(int(f1 > -0.4) + int(f1 > 0.4)),
            "labels": "|".join(name for name, on in (("x", f1 > 0), ("y", f2 > 0)) if on),
            "values": f"{10 + 3 * f1 - f2:.3f}",
        }[target]
        lines.append(f"{f1:.3f},{f2:.3f},{f3:.3f},{cell}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_images(folder: Path, per_class: int = 8) -> Path:
    """`folder/<class>/<i>.png`: 32x32 RGB, each class bright in its own channel."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for k, name in enumerate(("red", "green", "blue")):
        (folder / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 60, (32, 32, 3), dtype=np.uint8)
            pixels[..., k] += 150
            Image.fromarray(pixels).save(folder / name / f"{i}.png")
    return folder


def write_texts(folder: Path, per_class: int = 12) -> Path:
    """`folder/<class>/<i>.txt`: eight words each, every class with words of its own."""
    rng = np.random.default_rng(0)
    words = {"sport": "goal match team coach", "food": "oven sugar bake sauce"}
    for name, topic in words.items():
        (folder / name).mkdir(parents=True)
        for i in range(per_class):
            text = " ".join(rng.choice((topic + " the a of and").split(), 8))
            (folder / name / f"{i}.txt").write_text(text, encoding="utf-8")
    return folder


def write_tfrecord(path: Path, rows: int = 40) -> Path:
    """`tf.train.Example` records: a float vector `features` and an int64 `label`."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for vector in rng.normal(0, 1, size=(rows, 4)):
            label = tf.train.Int64List(value=[int(vector[0] > 0)])
            feature = {
                "features": tf.train.Feature(float_list=tf.train.FloatList(value=vector)),
                "label": tf.train.Feature(int64_list=label),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    return path


class Inputs:
    """The example inputs, written into `folder`, and the `--set` overrides that read each."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        self.tables = {target: write_table(folder / f"{target}.csv", target) for target in TARGETS}
        self.images = write_images(folder / "images")
        self.texts = write_texts(folder / "texts")
        self.tfrecord = write_tfrecord(folder / "vectors.tfrecord")

    def table(self, target: str) -> list[str]:
        """The CSV whose target column holds `target` (see write_table)."""
        path = self.tables[target]
        return ["data.source=csv", f"data.path={path}", "data.label=target", 'data.text=""']

    def image_folder(self) -> list[str]:
        return ["data.source=images", f"data.path={self.images}", "data.image_size=[32,32]",
                "data.image_channels=3"]  # fmt: skip

    def text_folder(self) -> list[str]:
        return ["data.source=text", f"data.path={self.texts}", "data.sequence_length=16",
                "data.max_tokens=100"]  # fmt: skip

    def tfrecord_file(self) -> list[str]:
        return ["data.source=tfrecord", f"data.path={self.tfrecord}", "data.features=features",
                "data.label=label", "data.feature_kind=vector"]  # fmt: skip

    def by_kind(self) -> dict[str, list[str]]:
        """One input of each kind a model takes: vectors, images, text (classes)."""
        return {"vectors": self.table("classes"), "images": self.image_folder(),
                "text": self.text_folder()}  # fmt: skip

    def for_source(self, name: str) -> list[list[str]]:
        """What `data.source: name` is tried on: its own example input; a source of yours, its
        sample `tests/inputs/<name>.*` if you committed one, then each input here (with
        `data.source` set to it) until one reads."""
        own = {
            "digits": [["data.source=digits"]],
            "csv": [self.table("classes")],
            "images": [self.image_folder()],
            "text": [self.text_folder()],
            "tfrecord": [self.tfrecord_file()],
            "tfds": [["data.source=tfds", "data.name=mnist"]],
        }
        if name in own:
            return own[name]
        samples = sorted((Path(__file__).parent / "inputs").glob(f"{name}.*"))
        inputs = [*(self.table(t) for t in TARGETS), self.image_folder(), self.text_folder(),
                  self.tfrecord_file()]  # fmt: skip
        return [[f"data.path={path}", f"data.source={name}"] for path in samples] + [
            [*sets, f"data.source={name}"] for sets in inputs
        ]


@contextlib.contextmanager
def mock_tfds() -> Iterator[None]:
    """TensorFlow Datasets without a download: random examples with the data set's features."""
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=24):
        yield


def new_project(folder: Path) -> Path:
    """A project folder with a copy of params.yaml (`run` there picks other components)."""
    folder.mkdir(parents=True)
    (folder / "params.yaml").write_bytes(PARAMS.read_bytes())
    return folder


# A component's own arguments go with it: a test that picks another one leaves them out.
ARGUMENTS = {"data.source": "data.args", "model.architecture": "model.args"}


def run(command: str, project: Path, *sets: str, args: tuple[str, ...] = ()) -> tuple[int, str]:
    """`python -m {{ cookiecutter.module_name }} COMMAND [ARGS] --params <project>/params.yaml
    --set ...`, in this process: (its exit code, what it printed). A `--set` that picks another
    source or architecture than params.yaml's runs it without params.yaml's arguments."""
    printed = io.StringIO()
    named = flat(yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8")))
    given = dict(item.split("=", 1) for item in sets)
    sets += tuple(
        arguments + "={}"
        for key, arguments in ARGUMENTS.items()
        if given.get(key, named[key]) != named[key]
        and not any(k.startswith(arguments) for k in given)
    )
    argv = [command, *args, "--params", str(project / "params.yaml")]
    argv += [part for item in sets for part in ("--set", item)]
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = main(argv)
    return code, printed.getvalue()


def refused_in_one_line(code: int, printed: str) -> bool:
    """A command that stopped on settings it cannot use: exit code 2 and one `error:` line."""
    return code == 2 and sum(line.startswith("error: ") for line in printed.splitlines()) == 1
