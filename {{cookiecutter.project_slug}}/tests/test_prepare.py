"""`prepare` and every source: the bundled digits, a user's CSV, image folder (with a bad file),
TFRecords (vectors and encoded images) and a TFDS data set (offline, `tfds.testing.mock_data`)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from conftest import PARAMS, drop

from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.core import locations
from {{ cookiecutter.module_name }}.data import manifest
from {{ cookiecutter.module_name }}.data.pipeline import (
    example_ids,
    load_prepared,
    read_split,
)
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.data.split import split_indices
from {{ cookiecutter.module_name }}.data.staging import INDEX, StagingError
from {{ cookiecutter.module_name }}.readers.tfds import read_tfds
from {{ cookiecutter.module_name }}.sources import source
from {{ cookiecutter.module_name }}.spec import SPLITS, load_spec

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it


def run_prepare(project: Path, *overrides: str) -> dict:
    return prepare(load_params(PARAMS, list(overrides)), project)


def processed(project: Path) -> Path:
    return project / "data" / "processed"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ids(project: Path) -> list[str]:
    """Every prepared example's source id, all splits."""
    data = load_prepared(processed(project))
    return sorted(i for split in SPLITS for i in example_ids(data, split))


def test_digits_are_8x8x1_images_in_seeded_shards(tmp_path: Path) -> None:
    info = run_prepare(tmp_path)
    assert (tmp_path / "data/raw/digits.csv").is_file()
    assert info["counts"] == {"train": 1079, "validation": 359, "test": 359}
    spec = load_spec(processed(tmp_path))
    assert spec.kind == "image" and spec.input_shape == (8, 8, 1)
    assert spec.names == [str(i) for i in range(10)]
    assert spec.extra["shards"]["train"] == ["train-00000.tfrecord"]
    x, y, _ = read_split(processed(tmp_path), "train")
    assert x.shape == (1079, 8, 8, 1) and x.dtype == np.float32
    assert x.min() == 0.0 and x.max() == 255.0  # pixel values; the model rescales
    # Written in a seeded random order: the classes are mixed, not sorted.
    assert len(set(y[:20].tolist())) >= 5
    x_test, y_test, _ = read_split(processed(tmp_path), "test")
    assert np.bincount(y_test).min() >= 35  # stratified: every class in the test split
    assert manifest.check(tmp_path) == 5  # raw csv, 3 shards, spec.json
    assert info["data_path"] is None  # the reader reads no data.path

    # Same seed: byte-identical files (DVC stores them once); another seed: another split.
    before = {p.name: sha(p) for p in processed(tmp_path).iterdir()}
    run_prepare(tmp_path)
    assert {p.name: sha(p) for p in processed(tmp_path).iterdir()} == before
    run_prepare(tmp_path, "seed=7")
    assert sha(processed(tmp_path) / "train-00000.tfrecord") != before["train-00000.tfrecord"]


def test_a_source_registered_as_the_others_are_reads_its_path(tmp_path: Path, monkeypatch) -> None:
    """`@register("source", name)`, as docs/customise.md registers every component, not only
    `@source(name)`: prepare reads `data.path` with it."""
    from {{ cookiecutter.module_name }}.registry import _ENTRIES, register
    from {{ cookiecutter.module_name }}.sources import Source, encode

    def read_rows(path, data, kind):  # noqa: ANN001, ANN202
        y, names = encode(kind, ["a", "b"] * 10, data.label)
        x = np.arange(40, dtype=np.float32).reshape(20, 2)
        return Source("vector", kind, y, names, x.__getitem__, str)

    monkeypatch.setitem(_ENTRIES["source"], "rows", None)  # gone again after this test
    register("source", "rows")(read_rows)
    (tmp_path / "rows.txt").write_text("rows\n")
    info = run_prepare(tmp_path, "data.source=rows", f"data.path={tmp_path / 'rows.txt'}")
    assert sum(info["counts"].values()) == 20
    # No `input_shape` given: the vectors' own width, not (1,) (train failed on it: "Unable to
    # broadcast tensor of shape [2] to tensor of shape [1,1]").
    assert load_spec(processed(tmp_path)).input_shape == (2,) and info["input_shape"] == [2]


def register_pairs(
    folder: Path, monkeypatch: pytest.MonkeyPatch, x: np.ndarray, named: list[int] | None = None
) -> tuple[str, str]:
    """A source of the user's own, as docs/customise.md registers one, of the vectors `x` (20 of
    them), each example it names appended to `named`; the overrides that prepare it."""
    from {{ cookiecutter.module_name }}.registry import _ENTRIES
    from {{ cookiecutter.module_name }}.sources import Source, encode

    monkeypatch.setitem(_ENTRIES["source"], "pairs", None)  # gone again after this test
    (folder / "pairs.jsonl").write_text("pairs\n")

    @source("pairs", takes="file")
    def read_pairs(path, data, kind):  # noqa: ANN001, ANN202
        y, names = encode(kind, ["a", "b"] * 10, data.label)

        def where(i: int) -> str:
            (named if named is not None else []).append(i)
            return f"pairs.jsonl line {i + 1}"

        return Source("vector", kind, y, names, x.__getitem__, where, input_shape=x.shape[1:])

    return "data.source=pairs", f"data.path={folder / 'pairs.jsonl'}"


def test_a_missing_number_in_a_users_source_is_refused_naming_its_example(
    tmp_path: Path, monkeypatch
) -> None:
    """JSON's null read as a number is NaN: a model trained on it learns NaN. prepare checks
    every vector source's examples, not only the CSV reader's, and writes nothing."""
    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    x[7, 1] = np.nan
    args = register_pairs(tmp_path, monkeypatch, x)
    with pytest.raises(ConfigError) as refused:
        run_prepare(tmp_path, *args)
    assert str(refused.value) == (
        "pairs.jsonl line 8: nan among its 3 numbers; fill in the missing or infinite values, "
        "or leave the example out (example: [0.5, 0.5, 0.5])"
    )
    assert not processed(tmp_path).exists()


@pytest.mark.parametrize(
    ("odd", "refusal"),
    [
        (
            7,
            "pairs.jsonl line 8: 2 numbers, where pairs.jsonl line 2 (the first training "
            "example) has 3; give every example as many (example: [0.5, 0.5, 0.5])",
        ),
        (
            1,
            "pairs.jsonl line 12: 3 numbers, where pairs.jsonl line 2 (the first training "
            "example) has 2; give every example as many (example: [0.5, 0.5])",
        ),
    ],
)
def test_a_vector_of_another_width_is_refused_naming_its_example(
    tmp_path: Path, monkeypatch, odd: int, refusal: str
) -> None:
    """A line of 2 numbers among lines of 3: the model takes one width; prepare names the line
    and the first training example it was measured against (line 2: when that is the odd one,
    the user sees it), and writes nothing."""
    x = [np.arange(3, dtype=np.float32) + i for i in range(20)]
    x[odd] = x[odd][:2]
    with pytest.raises(ConfigError) as refused:
        run_prepare(tmp_path, *register_pairs(tmp_path, monkeypatch, np.array(x, dtype=object)))
    assert str(refused.value) == refusal
    assert not processed(tmp_path).exists()


def test_each_example_of_a_vector_source_is_loaded_once(tmp_path: Path, monkeypatch) -> None:
    """One pass writes the shards and gathers the training split's feature statistics: a reader
    that streams (each load a read from Drive) reads each example once, and holds none. Only the
    first training example is named (for a refusal's line); the others cost no string."""
    x = np.arange(60, dtype=np.float32).reshape(20, 3) ** 1.5
    loads: dict[int, int] = {}
    named: list[int] = []

    class Counted:  # the vectors, each load counted
        shape = x.shape

        def __getitem__(self, i: int) -> np.ndarray:
            loads[i] = loads.get(i, 0) + 1
            return x[i]

    run_prepare(tmp_path, *register_pairs(tmp_path, monkeypatch, Counted(), named))
    assert loads == dict.fromkeys(range(20), 1)
    assert len(named) == 1
    spec = load_spec(processed(tmp_path))
    train, _, _ = read_split(processed(tmp_path), "train")
    assert spec.feature_mean == pytest.approx(train.mean(0), rel=1e-6)
    assert spec.feature_var == pytest.approx(train.var(0), rel=1e-6)


def test_a_users_source_of_nested_lists_is_prepared_flat(tmp_path: Path, monkeypatch) -> None:
    """Each example's numbers row by row, as the shards hold them: the spec, the statistics and
    predict's CSV columns (x0..x3) take the same flat vector the model is trained on."""
    x = np.arange(80, dtype=np.float32).reshape(20, 2, 2)
    run_prepare(tmp_path, *register_pairs(tmp_path, monkeypatch, x))
    spec = load_spec(processed(tmp_path))
    assert spec.input_shape == (4,) and spec.feature_names == ["x0", "x1", "x2", "x3"]
    assert np.array(spec.feature_mean).shape == (4,)
    inputs, _, _ = read_split(processed(tmp_path), "train")
    assert inputs.shape[1:] == (4,) and set(map(tuple, inputs)) <= set(map(tuple, x.reshape(20, 4)))


def test_an_alias_of_a_built_in_reader_keeps_what_it_reads(monkeypatch) -> None:
    """`register("source", "my_digits")(read_digits)` names a built-in again: it neither takes
    nor changes the reader's options (digits reads no data.path; csv takes a file)."""
    from {{ cookiecutter.module_name }}.readers.csv_rows import read_csv
    from {{ cookiecutter.module_name }}.readers.digits import read_digits
    from {{ cookiecutter.module_name }}.registry import _ENTRIES, register

    for name, reader in {"my_digits": read_digits, "my_csv": read_csv}.items():
        monkeypatch.setitem(_ENTRIES["source"], name, None)  # gone again after this test
        before = (reader.reads_path, reader.patterns, reader.takes, reader.example)
        register("source", name)(reader)
        assert (reader.reads_path, reader.patterns, reader.takes, reader.example) == before
    assert (read_digits.reads_path, read_csv.takes) == (False, "file")


def test_split_is_seeded_and_stratified() -> None:
    y = np.repeat(np.arange(3), 20)
    a = split_indices(y, 0.25, 0.25, seed=1)
    b = split_indices(y, 0.25, 0.25, seed=1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert [len(a[k]) for k in ("train", "validation", "test")] == [30, 15, 15]
    assert np.array_equal(np.bincount(y[a["test"]]), [5, 5, 5])
    assert len(np.intersect1d(a["train"], a["test"])) == 0
    with pytest.raises(ConfigError, match="split empty"):
        split_indices(np.array([0, 1]), 0.2, 0.2, seed=1)


def test_own_csv_stays_unscaled_with_training_stats(tmp_path: Path) -> None:
    src = tmp_path / "mine.csv"
    rng = np.random.default_rng(0)
    lines = ["f1,f2,species"] + [
        f"{rng.random() * 10:.3f},{rng.random():.3f},{'cat' if i % 2 else 'dog'}" for i in range(40)
    ]
    src.write_text("\n".join(lines) + "\n")
    project = tmp_path / "project"
    csv_args = ("data.source=csv", f"data.path={src}", "data.label=species")
    run_prepare(project, *csv_args)
    assert (project / "data/raw/mine.csv").read_bytes() == src.read_bytes()  # staged copy
    x, y, classes = read_split(processed(project), "train")
    spec = load_spec(processed(project))
    assert classes == ["cat", "dog"] and x.shape[1] == 2 and x.max() > 1.0  # not rescaled
    assert spec.kind == "vector" and spec.feature_names == ["f1", "f2"]
    assert spec.feature_mean == pytest.approx(x.mean(0), abs=1e-5)  # training split only
    assert spec.feature_var == pytest.approx(x.var(0), abs=1e-4)
    doc = json.loads((project / manifest.MANIFEST).read_text())
    entry = next(e for e in doc["files"] if e["path"] == "data/raw/mine.csv")
    assert entry["source"] == str(src) and doc["data_path"] == str(src)

    src.write_text("f1,species\nabc,cat\n")
    with pytest.raises(ConfigError, match=r"mine.csv line 2, column 'f1': not a number"):
        run_prepare(project, *csv_args)
    src.write_text("f1,f2,species\n1,,cat\n")
    with pytest.raises(ConfigError, match=r"line 2, column 'f2': a missing value"):
        run_prepare(project, *csv_args)
    src.write_text("f1,species\n1,cat\n2,cat\n3,dog\n")
    with pytest.raises(ConfigError, match=r"^data: class 'dog' has 1 example; "):
        run_prepare(project, *csv_args)
    with pytest.raises(ConfigError, match="data.label"):
        run_prepare(project, "data.source=csv", f"data.path={src}", "data.label=kind")
    with pytest.raises(ConfigError, match=r"^data.path: nothing.csv does not exist"):
        run_prepare(project, "data.source=csv", "data.path=nothing.csv")
    inside = project / "data" / "raw" / "mine.csv"
    with pytest.raises(ConfigError, match="inside data/raw, which prepare writes"):
        run_prepare(project, "data.source=csv", f"data.path={inside}", "data.label=species")


def test_a_csv_header_short_of_its_rows_is_refused(tmp_path: Path) -> None:
    # pandas would take the first column as the index: every name one column off, silently.
    src, project = tmp_path / "mine.csv", tmp_path / "project"
    csv_args = ("data.source=csv", f"data.path={src}", "data.label=species")
    rows = [f"{i},{i % 3},{'cat' if i % 2 else 'dog'}" for i in range(20)]
    src.write_text("\n".join(["f2,species", *rows]) + "\n")
    with pytest.raises(ConfigError, match=r"mine.csv line 2: 3 fields, the header has 2; each"):
        run_prepare(project, *csv_args)
    src.write_text("\n".join(["f1,f2,species", *rows, "", "7,1,cat,9"]) + "\n")
    with pytest.raises(ConfigError, match=r"mine.csv line 23: 4 fields, the header has 3; each"):
        run_prepare(project, *csv_args)
    # A trailing comma (the header's, or every line's) names no column and holds no value.
    for header, end in (("f1,f2,species,", ""), ("f1,f2,species,", ",")):
        src.write_text("\n".join([header, *(row + end for row in rows)]) + "\n")
        run_prepare(project, *csv_args)
        assert load_spec(processed(project)).feature_names == ["f1", "f2"]


def _pets(folder: Path, per_class: int = 6) -> None:
    from PIL import Image

    for cls, value in (("cat", 30), ("dog", 220)):
        (folder / cls).mkdir(parents=True)
        for i in range(per_class):
            image = Image.new("RGB", (12 + i, 10), (value,) * 3)
            image.save(folder / cls / f"{i}.{'png' if i % 2 else 'jpg'}")


def test_own_images_resized_once_and_a_bad_file_named(tmp_path: Path) -> None:
    folder = tmp_path / "pets"
    _pets(folder)
    # Hidden folders (Jupyter's checkpoints) and files (macOS's `._` copies) are no examples.
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / "cat/0.jpg").rename(folder / ".ipynb_checkpoints/0.jpg")
    (folder / "cat/.ipynb_checkpoints").mkdir()
    (folder / "cat/.ipynb_checkpoints/1-checkpoint.png").write_bytes(b"not an image")
    (folder / "cat/._1.png").write_bytes(b"not an image")
    project = tmp_path / "project"
    args = ("data.source=images", f"data.path={folder}", "data.image_size=[4,5]")
    run_prepare(project, *args)
    assert len(list((project / "data/raw/pets").rglob("*.[jp][pn]g"))) == 11
    spec = load_spec(processed(project))
    assert spec.input_shape == (4, 5, 1) and spec.names == ["cat", "dog"]
    x, y, _ = read_split(processed(project), "train")
    assert x.shape[1:] == (4, 5, 1)
    assert np.allclose(x[y == 0], 30, atol=3) and np.allclose(x[y == 1], 220, atol=3)
    names = sorted(p.relative_to(folder).as_posix() for p in folder.glob("[!.]*/[!.]*.*"))
    assert ids(project) == names  # each example's file, relative to data.path

    # Jupyter's checkpoint of a staged image opened in Colab (a hidden folder in data/raw) is no
    # data: not the user's file in prepare's way, not in the manifest (.dvcignore leaves it out).
    checkpoint = project / "data/raw/pets/cat/.ipynb_checkpoints/1-checkpoint.png"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"not an image")
    run_prepare(project, *args)
    assert manifest.check(project) == 11 + 4  # the images, 3 shards and spec.json
    assert ".ipynb_checkpoints" not in (project / manifest.MANIFEST).read_text()
    checkpoint.unlink()

    # A truncated image stops prepare with its path; the previous shards stay as they were.
    before = {p.name: sha(p) for p in processed(project).iterdir()}
    bad = folder / "dog" / "3.png"
    bad.write_bytes(bad.read_bytes()[:40])
    with pytest.raises(ConfigError, match=rf"^{folder}/dog/3.png: not a readable image"):
        run_prepare(project, *args)
    assert {p.name: sha(p) for p in processed(project).iterdir()} == before
    bad.unlink()
    (folder / "bird").mkdir()
    with pytest.raises(ConfigError, match=r"^data.path: class folder 'bird' of .* has no images"):
        run_prepare(project, *args)
    (folder / "bird").rmdir()

    # Switching back to the example removes the old raw files (data/raw is kept between runs) and
    # the folders that leaves empty; the one Jupyter made stays, as any folder prepare did not make,
    # and no index of staging's with it.
    run_prepare(project)
    left = sorted(p.relative_to(project).as_posix() for p in project.glob("data/raw/pets/**/*"))
    assert left == ["data/raw/pets/cat", "data/raw/pets/cat/.ipynb_checkpoints"]
    assert manifest.check(project) == 5


def _example(feature: dict) -> bytes:
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_own_tfrecords_vectors_images_and_gfile(tmp_path: Path) -> None:
    import tensorflow as tf

    folder = tmp_path / "records"
    folder.mkdir()
    for shard in range(2):
        with tf.io.TFRecordWriter(str(folder / f"part-{shard}.tfrecord")) as writer:
            for i in range(10):
                pixels = tf.train.FloatList(value=[float(i), 0.5, shard])
                png = tf.io.encode_png(tf.fill([6, 6, 3], tf.constant(i * 20, tf.uint8))).numpy()
                writer.write(
                    _example(
                        {
                            "pixels": tf.train.Feature(float_list=pixels),
                            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
                            "label": tf.train.Feature(
                                bytes_list=tf.train.BytesList(value=[b"odd" if i % 2 else b"even"])
                            ),
                        }
                    )
                )
    project = tmp_path / "project"
    run_prepare(project, "data.source=tfrecord", f"data.path={folder}", "data.features=pixels")
    spec = load_spec(processed(project))
    assert spec.kind == "vector" and spec.input_shape == (3,) and spec.names == ["even", "odd"]
    assert sum(spec.counts.values()) == 20

    run_prepare(
        project,
        "data.source=tfrecord",
        f"data.path={folder}",
        "data.features=image",
        "data.feature_kind=image",
        "data.image_size=[4,4]",
        "data.image_channels=3",
    )
    x, y, _ = read_split(processed(project), "train")
    assert load_spec(processed(project)).kind == "image" and x.shape[1:] == (4, 4, 3)
    assert ids(project) == sorted(f"part-{s}.tfrecord:{k}" for s in range(2) for k in range(10))
    with pytest.raises(ConfigError) as refused:  # the example names a feature the records have
        run_prepare(project, "data.source=tfrecord", f"data.path={folder}", "data.features=pix")
    assert str(refused.value) == (
        f"data.features / data.label: record part-0.tfrecord:0 in {folder} has features ['image', "
        "'label', 'pixels'] (example: --set data.features=pixels --set data.label=label)"
    )
    with tf.io.TFRecordWriter(str(folder / "part-2.tfrecord")) as writer:  # a missing value
        pixels = tf.train.FloatList(value=[float("nan"), 0.5, 2.0])
        label = tf.train.BytesList(value=[b"odd"])
        writer.write(_example({"pixels": tf.train.Feature(float_list=pixels),
                               "label": tf.train.Feature(bytes_list=label)}))  # fmt: skip
    with pytest.raises(ConfigError) as refused:  # by prepare, as any source's numbers
        run_prepare(project, "data.source=tfrecord", f"data.path={folder}", "data.features=pixels")
    assert str(refused.value) == (
        f"{folder}: record part-2.tfrecord:0: nan among its 3 numbers; fill in the missing or "
        "infinite values, or leave the example out (example: [0.5, 0.5, 0.5])"
    )
    assert load_spec(processed(project)).kind == "image"  # the images prepared before, as they were
    with tf.io.TFRecordWriter(str(folder / "part-2.tfrecord")) as writer:  # two numbers of three
        pixels = tf.train.FloatList(value=[1.0, 0.5])
        writer.write(_example({"pixels": tf.train.Feature(float_list=pixels),
                               "label": tf.train.Feature(bytes_list=label)}))  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        run_prepare(project, "data.source=tfrecord", f"data.path={folder}", "data.features=pixels")
    assert str(refused.value).startswith(
        f"{folder}: record part-2.tfrecord:0: 2 numbers, where {folder}: record "
        "part-0.tfrecord:1 (the first training example) has 3; give every"
    )
    (folder / "part-2.tfrecord").unlink()
    # An encoded image read as numbers, and a file cut short: one line each, naming the fix.
    with pytest.raises(ConfigError) as refused:
        run_prepare(project, "data.source=tfrecord", f"data.path={folder}",
                    "data.features=image", "data.feature_kind=vector")  # fmt: skip
    assert str(refused.value) == (
        f"data.feature_kind: 'image' in record part-0.tfrecord:0 in {folder} holds bytes, not "
        "numbers (example: --set data.feature_kind=image)"
    )
    cut, whole = folder / "part-1.tfrecord", (folder / "part-1.tfrecord").read_bytes()
    cut.write_bytes(whole[: len(whole) // 2 + 30])  # inside a record
    with pytest.raises(ConfigError) as refused:
        run_prepare(project, "data.source=tfrecord", f"data.path={folder}", "data.features=pixels")
    head, _, tail = str(refused.value).partition(" record at ")  # at the byte it was cut at
    assert head == f"data.path: {folder} (part-1.tfrecord) is not a whole TFRecord file (truncated"
    assert tail.endswith("); write it again, or move it out of data.path (example: --set "
                         "data.path=data/external/records)")  # fmt: skip
    cut.write_bytes(whole)

    # The URL code path (gs:// on Colab) on fsspec's in-memory file system: same listing, bytes.
    local = sorted(locations.walk_files(str(folder)))
    remote = fsspec.filesystem("memory")
    for path in local:
        remote.pipe(f"/bucket/records/{Path(path).name}", Path(path).read_bytes())
    remote.pipe("/bucket/records/.hidden", b"")
    urls = list(locations.walk_files("memory://bucket/records"))
    assert urls == [f"memory:///bucket/records/{Path(p).name}" for p in local]
    with locations.open_binary(urls[0]) as f:
        assert f.read() == Path(local[0]).read_bytes()
    assert locations.walk_files(urls[0]) == {urls[0]: Path(local[0]).stat().st_size}
    assert locations.list_dir("memory://bucket") == ["records"]


def test_tfds_prepares_without_the_importlib_resources_backport(tmp_path, monkeypatch) -> None:
    """tensorflow-datasets 4.9.10 needs `importlib_resources` (on neither Colab nor the lock) to
    prepare any data set (tensorflow/datasets#11212): offline, `prepare` gets to the download."""
    import tensorflow_datasets as tfds

    monkeypatch.delitem(sys.modules, "importlib_resources", raising=False)
    found = []

    def download_and_prepare(builder: Any, *args: Any, **kwargs: Any) -> None:
        found.append(builder.code_path)  # where 4.9.10 imported the backport
        raise OSError("offline: the download would start here")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", download_and_prepare)
    data = load_params(PARAMS, ["data.source=tfds", "data.name=mnist"]).data
    with pytest.raises(OSError, match="offline"):
        read_tfds("", data, "classification", data_dir=str(tmp_path))
    assert [path.name for path in found] == ["mnist.py"]


def test_tfds_through_mock_data(tmp_path: Path) -> None:
    import tensorflow_datasets as tfds

    # Without metadata files mock_data knows no split names and gives every split asked for:
    # all three are kept as they are.
    with tfds.testing.mock_data(num_examples=30):  # random examples, mnist's features
        run_prepare(tmp_path, "data.source=tfds", "data.name=mnist")
    spec = load_spec(processed(tmp_path))
    assert spec.kind == "image" and spec.input_shape == (28, 28, 1)
    assert spec.names == [str(i) for i in range(10)]
    assert spec.counts == {"train": 30, "validation": 30, "test": 30}
    tested = example_ids(load_prepared(processed(tmp_path)), "test")
    assert sorted(tested) == sorted(f"test[{k}]" for k in range(30))  # as TFDS numbers them
    x, _, _ = read_split(processed(tmp_path), "validation")
    assert x.shape[1:] == (28, 28, 1) and 0 <= x.min() <= x.max() <= 255
    assert json.loads((tmp_path / "data/raw/tfds.json").read_text())["tfds"] == "mnist"
    assert manifest.check(tmp_path) == 5  # tfds.json, 3 shards, spec.json

    # A text data set (the tutorials' imdb_reviews): texts and their vocabulary.
    with tfds.testing.mock_data(num_examples=30):
        run_prepare(tmp_path / "text", "data.source=tfds", "data.name=imdb_reviews")
    spec = load_spec(processed(tmp_path / "text"))
    assert spec.kind == "text" and spec.names == ["neg", "pos"] and spec.vocabulary_size > 2

    # With metadata that lists mnist's real splits (train and test only): its test split is
    # kept, validation is carved out of its train split (stratified, seeded).
    meta = tmp_path / "tfds-metadata"
    builder = tfds.builder("mnist", data_dir=str(meta))
    real = [
        tfds.core.SplitInfo(name=s, shard_lengths=[100], num_bytes=0) for s in ("train", "test")
    ]
    builder.info.set_splits(tfds.core.SplitDict(real))
    Path(builder.data_dir).mkdir(parents=True)
    builder.info.write_to_directory(builder.data_dir)
    project = tmp_path / "real-splits"
    with tfds.testing.mock_data(num_examples=100, data_dir=str(meta)):
        info = run_prepare(project, "data.source=tfds", "data.name=mnist")
    counts = info["counts"]
    assert counts["test"] == 100 and counts["train"] + counts["validation"] == 100
    assert 15 <= counts["validation"] <= 25  # 20 % of each class of train
    assert info["split"]["from"] == {s: f"tfds mnist {s if s != 'validation' else 'train'}"
                                     for s in ("train", "validation", "test")}  # fmt: skip
    assert info["split"]["carved"] == {"validation": 0.2}
    assert json.loads((project / "data/raw/tfds.json").read_text())["examples"] == 200


def test_tfds_that_imports_only_partly_is_a_config_error(tmp_path: Path, monkeypatch) -> None:
    # tensorflow_datasets catches its own import errors (e.g. protobuf's VersionError) and logs
    # them: the module imports, empty.
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", types.ModuleType("tensorflow_datasets"))
    with pytest.raises(ConfigError, match=r"^data.source: tfds, but tensorflow_datasets does not"):
        run_prepare(tmp_path, "data.source=tfds", "data.name=mnist")


def table(path: Path, kind: str, n: int = 60) -> Path:
    """A small CSV of two raw features and a target of `kind` (a function of the features)."""
    rng = np.random.default_rng(3)
    rows = ["size,weight,target"]
    for _ in range(n):
        size, weight = rng.normal(1000, 300), rng.random()
        target = {
            "regression": f"{50 + size / 100 + rng.normal(0, 0.5):.3f}",
            "multilabel": "|".join(
                name for name, on in (("big", size > 1000), ("heavy", weight > 0.5)) if on
            ),
            "classes": "big" if size > 1000 else "small",
            "continuous": f"{size:.2f}",  # a continuous target: not classes
        }[kind]
        rows.append(f"{size:.1f},{weight:.3f},{target}")
    path.write_text("\n".join(rows) + "\n")
    return path


def prepare_table(tmp_path: Path, kind: str, n: int = 60) -> Path:
    project = tmp_path / kind
    project.mkdir()
    csv_file = table(tmp_path / f"{kind}.csv", kind, n)
    run_prepare(
        project, "data.source=csv", f"data.path={csv_file}", "data.label=target",
        f"task.type={kind if kind in ('multilabel', 'regression') else 'classification'}",
    )  # fmt: skip
    return project


def test_a_data_path_in_the_users_home_is_read(tmp_path: Path, monkeypatch) -> None:
    # `~/data/x.csv` is the user's home, as in a shell: it was joined to the project folder.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "data").mkdir(parents=True)
    table(tmp_path / "home" / "data" / "pets.csv", "classes")
    project = tmp_path / "project"
    run_prepare(
        project, "data.source=csv", "data.path=~/data/pets.csv", "data.label=target",
    )  # fmt: skip
    assert load_spec(processed(project)).feature_names == ["size", "weight"]


def test_multilabel_and_regression_csvs_reach_the_pipeline(tmp_path: Path) -> None:
    project = prepare_table(tmp_path, "multilabel")
    spec = load_spec(processed(project))
    assert spec.task == "multilabel" and spec.names == ["big", "heavy"]
    x, y, names = read_split(processed(project), "train")
    assert x.shape == (36, 2) and y.shape == (36, 2) and y.dtype == np.float32
    assert set(np.unique(y)) <= {0.0, 1.0} and names == ["big", "heavy"]
    assert 0 < y[:, 0].mean() < 1 and 0 < y[:, 1].mean() < 1  # both labels, on and off

    project = prepare_table(tmp_path, "regression")
    spec = load_spec(processed(project))
    assert spec.task == "regression" and spec.names == ["target"]
    x, y, _ = read_split(processed(project), "train")
    assert y.shape == (36,) and y.dtype == np.float32
    # The spec's statistics are the training split's (the loss standardises with them).
    assert spec.target_mean == pytest.approx(float(y.mean()), rel=1e-5)
    assert spec.target_std == pytest.approx(float(y.std()), rel=1e-4)
    _, y_test, _ = read_split(processed(project), "test")
    assert len(y_test) == 12 and spec.counts == {"train": 36, "validation": 12, "test": 12}
    # A seeded random split: the same seed, the same bytes.
    before = sha(processed(project) / "train-00000.tfrecord")
    run_prepare(
        project, "data.source=csv", f"data.path={tmp_path / 'regression.csv'}",
        "data.label=target", "task.type=regression",
    )  # fmt: skip
    assert sha(processed(project) / "train-00000.tfrecord") == before


def test_tfrecord_targets_for_regression_and_multilabel(tmp_path: Path) -> None:
    import tensorflow as tf

    def feature(values: list) -> tf.train.Feature:
        if isinstance(values[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    folder = tmp_path / "records"
    folder.mkdir()
    with tf.io.TFRecordWriter(str(folder / "part-0.tfrecord")) as writer:
        for i in range(20):
            tags = [b"cat", b"dog"][: i % 3]  # none, cat, or cat and dog
            writer.write(
                _example(
                    {
                        "x": feature([float(i), 1.0]),
                        "price": feature([40.0 + i]),
                        "tags": feature(tags) if tags else tf.train.Feature(),
                        "flags": feature([float(i % 2), float(i % 3 == 0)]),
                    }
                )
            )
    project = tmp_path / "project"
    common = ["data.source=tfrecord", f"data.path={folder}", "data.features=x"]
    run_prepare(project, *common, "data.label=price", "task.type=regression")
    spec = load_spec(processed(project))
    assert spec.task == "regression" and spec.names == ["price"]
    _, y, _ = read_split(processed(project), "train")
    assert y.dtype == np.float32 and spec.target_mean == pytest.approx(float(y.mean()), rel=1e-5)

    # One class per record: a label feature with none or several values is no class.
    one = r"^data.label: record part-0.tfrecord:0 in .* has 0 values of 'tags'; classification"
    with pytest.raises(ConfigError, match=one):
        run_prepare(project, *common, "data.label=tags")
    run_prepare(project, *common, "data.label=tags", "task.type=multilabel")
    assert load_spec(processed(project)).names == ["cat", "dog"]
    _, y, _ = read_split(processed(project), "train")
    assert y.shape[1] == 2 and {tuple(r) for r in y.tolist()} == {(0, 0), (1, 0), (1, 1)}

    run_prepare(project, *common, "data.label=flags", "task.type=multilabel")
    assert load_spec(processed(project)).names == ["label_0", "label_1"]
    assert read_split(processed(project), "train")[1].shape[1] == 2


def test_a_continuous_target_is_refused_as_classes(tmp_path: Path) -> None:
    refused = r"^data.label: 60 distinct values .*task.type=regression"
    with pytest.raises(ConfigError, match=refused):
        prepare_table(tmp_path, "continuous")
    project = tmp_path / "digits"  # the digits' labels are numbers: a regression is possible
    run_prepare(project, "task.type=regression")
    assert load_spec(processed(project)).target_mean == pytest.approx(4.5, abs=0.1)


@pytest.mark.parametrize("kind", ["classes", "multilabel", "regression"])
def test_evaluate_reports_the_task_of_a_saved_users_model(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """evaluate over the test shards with a model saved as users get it (model.json beside)."""
    from conftest import save_for_users

    from {{ cookiecutter.module_name }}.evaluation.evaluate import evaluate
    from {{ cookiecutter.module_name }}.model import build_model
    from {{ cookiecutter.module_name }}.task import make_task

    project = prepare_table(tmp_path, kind)
    params = load_params(PARAMS, [f"task.type={kind.replace('classes', 'classification')}"])
    spec = load_spec(processed(project))
    task = make_task(params, spec)
    save_for_users(
        build_model(spec, task.num_outputs, params.model), task, spec, project / "results/models"
    )
    metrics = evaluate(params, project)
    plots = project / "results/plots"
    tested = spec.counts["test"]
    assert metrics["test_examples"] == tested > 0 and np.isfinite(metrics["test_loss"])
    if kind == "regression":
        assert {"test_mae", "test_rmse", "test_r2"} <= set(metrics)
        lines = (plots / "predictions.csv").read_text().splitlines()
        assert lines[0] == "actual,predicted,residual" and len(lines) == tested + 1
        assert (plots / "per_label.csv").read_text() == "label,precision,recall,f1,support\n"
    elif kind == "multilabel":
        assert {"test_binary_accuracy", "test_auc", "test_f1"} <= set(metrics)
        lines = (plots / "per_label.csv").read_text().splitlines()
        assert [row.split(",")[0] for row in lines] == ["label", "big", "heavy"]
        assert (plots / "predictions.csv").read_text() == "actual,predicted,residual\n"
    else:
        assert {"test_accuracy", "test_auc", "test_f1"} <= set(metrics)
        assert len((plots / "confusion_matrix.csv").read_text().splitlines()) == tested + 1
        lines = (plots / "per_class.csv").read_text().splitlines()
        assert [row.split(",")[0] for row in lines] == ["class", "big", "small"]
        assert (plots / "per_label.csv").read_text() == "label,precision,recall,f1,support\n"
    if kind != "classes":
        assert (plots / "confusion_matrix.csv").read_text() == "actual,predicted\n"
    # Each test example's prediction, by its CSV row (row 1: the first data row), sorted.
    lines = (project / "results/predictions/test.csv").read_text().splitlines()
    header = ["id", "target", "prediction"] + [f"prob_{n}" for n in spec.names]
    assert lines[0].split(",") == [*(header if kind != "regression" else header[:3]), "loss"]
    rows = [int(line.split(",")[0]) for line in lines[1:]]
    assert len(rows) == tested and rows == sorted(rows) and 1 <= rows[0] <= rows[-1] <= 60
    compared = task.compared(metrics, "test")  # the kind's headline metrics
    assert json.loads((project / "results/metrics/evaluate.json").read_text()) == compared
    # Its line names the kind's own plot files, not the other kinds' header-only ones.
    own = {
        "classes": ["plots/confusion_matrix.csv", "plots/per_class.csv"],
        "multilabel": ["plots/per_label.csv"],
        "regression": ["plots/predictions.csv"],
    }[kind]
    wrote = ["metrics/evaluate.json", *own, "plots/training_curve.csv", "predictions/test.csv"]
    assert f"; wrote {', '.join(wrote)}, reports/model_card.md in " in capsys.readouterr().out


def test_csv_vectors_train_and_evaluate_end_to_end(tmp_path: Path, monkeypatch) -> None:
    """Tabular data: unscaled shards, a model that normalises its own inputs, test metrics."""
    from {{ cookiecutter.module_name }}.evaluation.evaluate import evaluate
    from {{ cookiecutter.module_name }}.training.trainer import train

    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    rng = np.random.default_rng(1)
    rows = ["size,weight,kind"]
    for i in range(200):  # two classes far apart in raw units: thousands and tenths
        kind = i % 2
        rows.append(f"{1000 + 3000 * kind + rng.normal(0, 200):.1f},{rng.random():.3f},{kind}")
    (tmp_path / "animals.csv").write_text("\n".join(rows) + "\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "params.yaml").write_text(PARAMS.read_text())
    args = [
        "data.source=csv",
        f"data.path={tmp_path / 'animals.csv'}",
        "data.label=kind",
        "train.epochs=4",
        "train.batch_size=16",
        "train.learning_rate=0.01",
        "model.hidden_units=[8]",
        "model.dropout=0",
        "run_name=csv",
    ]
    params = load_params(project / "params.yaml", args)
    prepare(params, project)
    result = train(params, project)
    assert result.status == "completed" and result.metrics["val_accuracy"] >= 0.9
    metrics = evaluate(params, project)
    assert metrics["test_examples"] == 40 and metrics["test_accuracy"] >= 0.9
    confusion = (project / "results/plots/confusion_matrix.csv").read_text().splitlines()
    assert confusion[0] == "actual,predicted" and len(confusion) == 41


def test_prepare_never_deletes_data_it_did_not_write(tmp_path: Path) -> None:
    """Files a user put under data/raw/<name>/, data/interim/ and data/external/ survive prepare
    runs with two sources and a switch back; a file where prepare would write is refused."""
    from PIL import Image

    project = tmp_path / "project"
    user = {
        "data/raw/mine/notes.txt": b"my notes",
        "data/raw/mine/deep/table.csv": b"a,b\n1,2\n",
        "data/raw/README.md": b"mine too",
        "data/interim/cache.bin": b"\x00\x01",
        "data/external/keep.txt": b"keep",
    }
    for rel, data in user.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_bytes(data)
    pets = project / "data/external/pets"
    for cls, value in (("cat", 30), ("dog", 220)):
        (pets / cls).mkdir(parents=True)
        for i in range(6):
            Image.new("L", (6, 6), value).save(pets / cls / f"{i}.png")

    run_prepare(project)  # digits
    run_prepare(project, "data.source=images", "data.path=data/external/pets")
    assert not (project / "data/raw/digits.csv").exists()  # prepare wrote it: removed
    run_prepare(project)  # and back
    assert not (project / "data/raw/pets").exists() and (project / "data/raw/digits.csv").is_file()
    for rel, data in user.items():
        assert (project / rel).read_bytes() == data, f"{rel} was changed or deleted"
    assert len(list(pets.rglob("*.png"))) == 12
    written = set(json.loads((project / manifest.MANIFEST).read_text())["written"])
    assert {"data/raw/digits.csv", "data/processed/spec.json"} <= written
    assert all(w == "data/raw/digits.csv" or w.startswith("data/processed/") for w in written)

    # A user's file exactly where prepare would stage: refused in one line, nothing deleted.
    (project / "data/raw/keep.txt").write_bytes(b"the user's own")
    before = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file())
    with pytest.raises(ConfigError, match=r"^data/raw/keep.txt: prepare would write here"):
        run_prepare(project, "data.source=csv", "data.path=data/external/keep.txt")
    after = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file())
    assert after == before and (project / "data/raw/keep.txt").read_bytes() == b"the user's own"


def test_a_folder_the_user_made_in_a_staged_copy_stays_when_the_copy_goes(tmp_path: Path) -> None:
    """Switching data.path removes the copies of the old one and the folders that leaves empty; a
    folder the user made in the copy, even empty, stays (it was removed with the copy's)."""
    project, pets = tmp_path / "project", tmp_path / "pets"
    _pets(pets)
    run_prepare(project, "data.source=images", f"data.path={pets}")
    for mine in ("cat/mine", "notes"):
        (project / "data/raw/pets" / mine).mkdir()
    run_prepare(project)  # the digits: the copy of pets goes
    left = [p.relative_to(project / "data/raw") for p in project.glob("data/raw/pets/**/*")]
    assert sorted(p.as_posix() for p in left if not locations.hidden(p)) == [
        "pets/cat",
        "pets/cat/mine",
        "pets/notes",
    ]
    assert manifest.check(project) == 5  # data/raw/digits.csv, 3 shards, spec.json


def test_a_file_the_user_puts_where_a_removed_copy_was_is_never_deleted(tmp_path: Path) -> None:
    """A staged copy's folder that holds a folder of the user's outlives the copy, and staging's
    index in it listed the removed copies still: a file the user put at one of those paths later
    was taken for prepare's and deleted by the next prepare. The same in data/raw, where a staged
    data.path file's index outlives every copy."""
    project, pets = tmp_path / "project", tmp_path / "pets"
    _pets(pets)
    run_prepare(project, "data.source=images", f"data.path={pets}")
    (project / "data/raw/pets/notes").mkdir()
    run_prepare(project)  # the digits: the copy of pets goes, notes/ stays
    mine = project / "data/raw/pets/cat/0.png"
    mine.parent.mkdir()
    mine.write_bytes(b"the user's own")
    run_prepare(project)
    left = sorted(p.relative_to(project).as_posix() for p in project.glob("data/raw/pets/**/*"))
    assert left == ["data/raw/pets/cat", "data/raw/pets/cat/0.png", "data/raw/pets/notes"]

    for name in ("a", "b"):
        lines = ["f1,species"] + [f"{i},{'cat' if i % 2 else 'dog'}" for i in range(20)]
        (tmp_path / f"{name}.csv").write_text("\n".join(lines) + "\n")
        run_prepare(
            project, "data.source=csv", f"data.path={tmp_path / name}.csv", "data.label=species"
        )
    (project / "data/raw/a.csv").write_text("the user's own")  # where a.csv's copy was
    run_prepare(project)
    assert (project / "data/raw/a.csv").read_text() == "the user's own"
    assert not (project / "data/raw" / INDEX).exists()  # it listed a.csv and b.csv


def test_a_failed_prepare_leaves_no_copy_in_data_raw_after_the_next_one(tmp_path: Path) -> None:
    """A data.path that prepare refused (one class) or that is empty was staged into data/raw
    (a retry copies nothing again); the next prepare that succeeds removes those copies: data/raw
    (a DVC output) then holds what the manifest lists, and a user's own file there stays."""
    project = tmp_path / "project"
    (project / "data/raw/mine").mkdir(parents=True)
    (project / "data/raw/mine/notes.txt").write_text("mine")
    one_class = tmp_path / "one.csv"
    one_class.write_text("x,label\n" + "".join(f"{i},cat\n" for i in range(20)))
    (tmp_path / "empty/none").mkdir(parents=True)
    with pytest.raises(ConfigError, match="at least 2 class"):
        run_prepare(project, "data.source=csv", f"data.path={one_class}")
    with pytest.raises(ConfigError, match="has no images"):
        run_prepare(project, "data.source=images", f"data.path={tmp_path / 'empty'}")
    run_prepare(project)
    files = [p.relative_to(project).as_posix() for p in project.glob("data/raw/**/*")]
    raw = sorted(p for p in files if (project / p).is_file() and not locations.hidden(p))
    assert raw == ["data/raw/digits.csv", "data/raw/mine/notes.txt"]  # as DVC sees data/raw


def test_a_failed_prepares_copy_is_named_as_such_by_the_data_check(tmp_path: Path) -> None:
    """Between a failed prepare and the next one, the data check before train and evaluate
    names the copy the failed one left in data/raw, not only a file the user added."""
    project = tmp_path / "project"
    run_prepare(project)
    one_class = tmp_path / "one.csv"
    one_class.write_text("x,label\n" + "".join(f"{i},cat\n" for i in range(20)))
    with pytest.raises(ConfigError, match="at least 2 class"):
        run_prepare(project, "data.source=csv", f"data.path={one_class}")
    with pytest.raises(manifest.ManifestMismatch) as err:
        manifest.check(project)
    assert str(err.value).startswith(
        "data/raw/one.csv: not in data/manifest.json (added after prepare, or copied by a "
        "prepare that stopped?); restore the versioned data"
    ), err.value


def test_a_file_left_out_after_a_failed_prepare_is_not_read_again(tmp_path: Path) -> None:
    """prepare says "fix it or leave it out" of an unreadable image. Its copy, staged into
    data/raw before the failure, was still read: the retry failed on a file data.path no longer
    has. Copies of files gone from data.path go before the reader runs (and a class folder that
    leaves without files); the rest of the copy stays, and a user's own file in data/raw too."""
    project, pets = tmp_path / "project", tmp_path / "pets"
    _pets(pets)
    (pets / "cat/bad.png").write_bytes(b"not a png")
    (pets / "bird").mkdir()
    for i in (1, 3):
        (pets / f"bird/{i}.png").write_bytes((pets / f"cat/{i}.png").read_bytes())
    (project / "data/raw/mine").mkdir(parents=True)
    (project / "data/raw/mine/notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"cat/bad.png: not a readable image"):
        run_prepare(project, "data.source=images", f"data.path={pets}")
    (pets / "cat/bad.png").unlink()  # left out, as the line says
    shutil.rmtree(pets / "bird")  # a whole class left out too
    info = run_prepare(project, "data.source=images", f"data.path={pets}")
    assert info["classes"] == ["cat", "dog"] and sum(info["counts"].values()) == 12
    files = [p.relative_to(project).as_posix() for p in project.glob("data/raw/**/*")]
    raw = sorted(p for p in files if (project / p).is_file() and not locations.hidden(p))
    names = [f"{i}.{'png' if i % 2 else 'jpg'}" for i in range(6)]  # as _pets names them
    copies = [f"data/raw/pets/{c}/{name}" for c in ("cat", "dog") for name in names]
    assert raw == sorted([*copies, "data/raw/mine/notes.txt"])


def test_a_data_path_folder_is_listed_once(tmp_path: Path, monkeypatch) -> None:
    """On Drive (a slow FUSE mount) each listing of a folder of many images costs seconds: one
    prepare lists data.path and each folder in it once, staging's listing, which also maps each
    staged copy back to its source (it was listed 5 times: twice per `rglob`, then again)."""
    project, pets = tmp_path / "project", tmp_path / "pets"
    _pets(pets)
    listed: list[Path] = []
    scandir = os.scandir

    def listing(path: Any = ".") -> Any:
        if not isinstance(path, int):  # a file descriptor: rmtree's, not a listing of pets
            listed.append(Path(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", listing)
    run_prepare(project, "data.source=images", f"data.path={pets}")
    assert [listed.count(folder) for folder in (pets, pets / "cat", pets / "dog")] == [1, 1, 1]
    files = json.loads((project / manifest.MANIFEST).read_text())["files"]
    raw = {e["path"]: e["source"] for e in files if e["path"].startswith("data/raw/")}
    images = sorted(p.relative_to(pets).as_posix() for p in pets.rglob("*.*"))
    assert raw == {f"data/raw/pets/{name}": str(pets / name) for name in images}  # each its source


def test_a_bucket_is_listed_with_its_sizes_not_asked_file_by_file(
    tmp_path: Path, monkeypatch
) -> None:
    """prepare on gs:// records each file's size in data/raw/source.json: it asked the bucket
    for each file's size, one request per file (10,000 images, 10,000 requests); the listing
    already holds every size."""
    pets, bucket = tmp_path / "pets", fsspec.filesystem("memory")
    _pets(pets)
    url = f"memory://{tmp_path.name}/pets"  # fsspec's in-memory file system, as gs:// is read
    for image in sorted(pets.rglob("*.*")):
        bucket.pipe(f"{url}/{image.relative_to(pets).as_posix()}", image.read_bytes())
    asked: list[str] = []
    info = type(bucket).info

    def counted(self: Any, path: str, **kwargs: Any) -> Any:
        asked.append(path)
        return info(self, path, **kwargs)

    monkeypatch.setattr(type(bucket), "info", counted)
    try:
        run_prepare(tmp_path / "project", "data.source=images", f"data.path={url}")
    finally:
        bucket.rm(f"memory://{tmp_path.name}", recursive=True)
    assert [path for path in asked if path.endswith((".png", ".jpg"))] == []
    listing = json.loads((tmp_path / "project/data/raw/source.json").read_text())
    assert listing == [
        {"path": f"memory:///{tmp_path.name}/pets/{image.relative_to(pets).as_posix()}",
         "size": image.stat().st_size}
        for image in sorted(pets.rglob("*.*"))
    ]  # fmt: skip


def test_a_folder_that_cannot_be_listed_stops_prepare_and_keeps_the_copies(
    tmp_path: Path, monkeypatch
) -> None:
    """Drive can fail to list a folder (an I/O error): that is no empty class folder, so prepare
    stops on the error and the staged copies of that class stay."""
    project, pets = tmp_path / "project", tmp_path / "pets"
    _pets(pets)
    run_prepare(project, "data.source=images", f"data.path={pets}")
    copies = sorted((project / "data/raw/pets/dog").iterdir())
    scandir = os.scandir

    def listing(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == pets / "dog":
            raise OSError(errno.EIO, "Input/output error", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", listing)
    with pytest.raises(OSError, match="Input/output error"):
        run_prepare(project, "data.source=images", f"data.path={pets}")
    assert sorted((project / "data/raw/pets/dog").iterdir()) == copies


def test_a_file_a_dropped_drive_cannot_read_is_not_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder listed, one file then failing (EIO): listing it raises, so no file is left out of
    the data without a word. Python 3.14's `Path.is_file` says False there, as `os.path.isfile`
    does (set here, so the test holds on every Python)."""
    folder = tmp_path / "images"
    folder.mkdir()
    for name in ("a.png", "b.png"):
        (folder / name).write_bytes(b"png")
    monkeypatch.setattr(Path, "is_file", lambda self, **_: os.path.isfile(self))
    drop(folder / "b.png", errno.EIO, monkeypatch)
    with pytest.raises(OSError) as raised:
        locations.walk_files(str(folder))
    assert raised.value.errno == errno.EIO


def test_a_data_path_of_the_wrong_kind_is_refused_before_anything_is_copied(
    tmp_path: Path,
) -> None:
    """A folder (on Drive: GBs of images) given to a source that reads a file, or the reverse,
    is refused in one line naming data.path, before staging copies it into data/raw."""
    project, pets, table = tmp_path / "project", tmp_path / "pets", tmp_path / "table.csv"
    _pets(pets, per_class=50)
    table.write_text("x,label\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(20)))
    refused = {
        ("data.source=csv", f"data.path={pets}"): f"data.path: {pets} is a folder; data.source "
        "csv reads a file (example: --set data.path=data/external/my.csv)",
        ("data.source=images", f"data.path={table}"): f"data.path: {table} is a file; "
        "data.source images reads a folder (example: --set data.path=data/external/pets)",
        ("data.source=csv", f"data.path={pets}", "data.split=folders"): "data.split: folders "
        "gives data.source csv a folder per split, but it reads a file (example: --set "
        "data.split=files)",
        # A CSV of texts given to the text source: the csv source reads it, with the text column.
        ("data.source=text", f"data.path={table}"): f"data.path: {table} is a file; data.source "
        "text reads a folder (example: --set data.path=data/external/reviews); a CSV with a text "
        "column: --set data.source=csv --set data.text=review",
        ("data.source=text", f"data.path={table}", "data.text=x"): f"data.path: {table} is a "
        "file; data.source text reads a folder (example: --set data.path=data/external/reviews); "
        "a CSV with a text column: --set data.source=csv --set data.text=x",
    }
    for args, message in refused.items():
        with pytest.raises(ConfigError) as refusal:
            run_prepare(project, *args)
        assert not (project / "data").exists(), f"{args}: wrote {list(project.rglob('*'))[:3]}"
        assert str(refusal.value) == message


def test_a_reader_that_takes_neither_a_file_nor_a_folder_is_refused_as_registered() -> None:
    """`takes` is "file", "folder" or "" (either): a typo (`folders`) would refuse every folder,
    the very thing the reader reads, when prepare runs; it is one line when the module loads."""
    with pytest.raises(ValueError) as refusal:
        source("my_images", takes="folders")
    assert str(refusal.value) == (
        "@source('my_images'): takes='folders' is not 'file', 'folder' or '' (either) "
        "(example: @source('my_images', takes='folder'))"
    )


def test_a_failed_prepare_leaves_no_folder_it_made(tmp_path: Path, monkeypatch) -> None:
    """data/raw is a DVC output: a prepare that fails (a missing data.path, a full disk) leaves
    none of the folders it made without files in it; a folder the user made stays."""
    project, pets = tmp_path / "project", tmp_path / "pets"
    (project / "data/external").mkdir(parents=True)  # as in a new project: no data/raw yet
    _pets(pets)
    with pytest.raises(ConfigError, match="does not exist"):
        run_prepare(project, "data.source=csv", "data.path=data/external/nothing.csv")
    assert not (project / "data/raw").exists()
    monkeypatch.setattr("{{ cookiecutter.module_name }}.data.staging.free_bytes", lambda _: 0)
    with pytest.raises(StagingError, match="GiB free"):
        run_prepare(project, "data.source=images", f"data.path={pets}")
    assert not (project / "data/raw").exists()
    (project / "data/raw/mine").mkdir(parents=True)  # the user's, empty
    with pytest.raises(StagingError, match="GiB free"):
        run_prepare(project, "data.source=images", f"data.path={pets}")
    folders = sorted(p.relative_to(project).as_posix() for p in project.rglob("*"))
    assert folders == ["data", "data/external", "data/raw", "data/raw/mine"]


def test_errors_name_the_users_files_not_their_staged_copies(tmp_path: Path) -> None:
    """prepare reads the copy it staged in data/raw; its errors, also one found while the shards
    are written (a text file that is not UTF-8), name the user's file as data.path gives it:
    relative to the project, or a Drive path with spaces."""
    project, drive = tmp_path / "project", tmp_path / "My Drive" / "My Reviews"
    for folder in (project / "data/external/reviews", drive):
        for i in range(12):
            (folder / "pn"[i % 2] / f"{i}.txt").parent.mkdir(parents=True, exist_ok=True)
            (folder / "pn"[i % 2] / f"{i}.txt").write_text(f"a {'pn'[i % 2]} film")
        (folder / "n/12.txt").write_bytes(b"bad \xff bytes")
    for path in ("data/external/reviews", str(drive)):
        with pytest.raises(ConfigError) as refusal:
            run_prepare(project, "data.source=text", f"data.path={path}")
        assert str(refusal.value).startswith(f"{path}/n/12.txt: not UTF-8 text"), refusal.value
    splits = project / "data/external/splits"
    splits.mkdir()
    (splits / "train.csv").write_text(
        "x,label\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(9))
    )
    (splits / "test.csv").write_text("x,label\n1,a\n2,b,3\n")
    args = ("data.source=csv", "data.path=data/external/splits", "data.split=files")
    with pytest.raises(ConfigError, match=r"^data/external/splits/test.csv line 3: 3 fields"):
        run_prepare(project, *args)


def test_a_prepare_stopped_after_its_data_raw_record_runs_again(
    tmp_path: Path, monkeypatch
) -> None:
    """A bundled or downloaded source's record goes to data/raw before the shards are written: a
    prepare stopped there (a full disk, Ctrl-C) left it, and the next one takes those same bytes
    as its own; a file of other bytes there is still the user's and refused."""

    def stopped(*args: object) -> None:
        raise KeyboardInterrupt

    project = tmp_path / "project"
    with monkeypatch.context() as patch:
        patch.setattr("{{ cookiecutter.module_name }}.data.prepare.write_processed", stopped)
        with pytest.raises(KeyboardInterrupt):
            run_prepare(project)
    run_prepare(project)
    assert manifest.check(project) == 5
    (project / manifest.MANIFEST).unlink()
    (project / "data/raw/digits.csv").write_text("mine")
    with pytest.raises(ConfigError, match=r"^data/raw/digits.csv: prepare would write here"):
        run_prepare(project)
