"""`prepare`: the bundled digits, and a user's own CSV, image folder and TFRecords (made here)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from {{ cookiecutter.module_name }} import gcs, manifest
from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.data import load_processed, load_processed_split
from {{ cookiecutter.module_name }}.evaluate import scores, training_curve
from {{ cookiecutter.module_name }}.prepare import prepare, split_indices

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


def run_prepare(project: Path, *overrides: str) -> dict:
    return prepare(load_params(PARAMS, list(overrides)), project)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_digits(tmp_path: Path) -> None:
    info = run_prepare(tmp_path)
    assert (tmp_path / "data/raw/digits.csv").is_file()
    assert info["counts"] == {"train": 1079, "validation": 359, "test": 359}
    split = load_processed_split(tmp_path)
    assert split.x_train.shape == (1079, 64) and split.x_train.dtype == np.float32
    assert split.num_classes == 10 and 0.0 <= split.x_train.min() <= split.x_train.max() <= 1.0
    x_test, y_test, classes = load_processed(tmp_path, "test")
    assert classes == [str(i) for i in range(10)]
    assert np.bincount(y_test).min() >= 35  # stratified: every class in the test split
    # The three splits are disjoint and together are the whole data set.
    rows = np.concatenate([split.x_train, split.x_val, x_test])
    assert len(rows) == 1797
    assert manifest.check(tmp_path) == 4

    # Same seed: byte-identical files (DVC stores them once); another seed: another split.
    before = {p.name: sha(p) for p in (tmp_path / "data/processed").iterdir()}
    run_prepare(tmp_path)
    assert {p.name: sha(p) for p in (tmp_path / "data/processed").iterdir()} == before
    run_prepare(tmp_path, "seed=7")
    assert sha(tmp_path / "data/processed/train.npz") != before["train.npz"]


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


def test_own_csv(tmp_path: Path) -> None:
    src = tmp_path / "mine.csv"
    rng = np.random.default_rng(0)
    lines = ["f1,f2,species"] + [
        f"{rng.random() * 10:.3f},{rng.random():.3f},{'cat' if i % 2 else 'dog'}" for i in range(40)
    ]
    src.write_text("\n".join(lines) + "\n")
    project = tmp_path / "project"
    run_prepare(project, "data.source=csv", f"data.path={src}", "data.label=species")
    assert (project / "data/raw/mine.csv").read_bytes() == src.read_bytes()  # staged copy
    x, y, classes = load_processed(project, "train")
    assert classes == ["cat", "dog"] and x.shape[1] == 2 and x.max() <= 1.0
    doc = json.loads((project / manifest.MANIFEST).read_text())
    entry = next(e for e in doc["files"] if e["path"] == "data/raw/mine.csv")
    assert entry["source"] == str(src)

    src.write_text("f1,species\nabc,cat\n")
    with pytest.raises(ConfigError, match="'f1': 'abc' is not a number"):
        run_prepare(project, "data.source=csv", f"data.path={src}", "data.label=species")
    with pytest.raises(ConfigError, match="data.label"):
        run_prepare(project, "data.source=csv", f"data.path={src}", "data.label=kind")
    inside = project / "data" / "raw" / "mine.csv"
    with pytest.raises(ConfigError, match="inside data/raw, which prepare writes"):
        run_prepare(project, "data.source=csv", f"data.path={inside}", "data.label=species")


def test_own_images(tmp_path: Path) -> None:
    from PIL import Image

    folder = tmp_path / "pets"
    for cls, value in (("cat", 30), ("dog", 220)):
        (folder / cls).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (12 + i, 10), (value,) * 3).save(folder / cls / f"{i}.png")
    project = tmp_path / "project"
    run_prepare(project, "data.source=images", f"data.path={folder}", "data.image_size=[4,5]")
    assert len(list((project / "data/raw/pets").rglob("*.png"))) == 12
    x, y, classes = load_processed(project, "train")
    assert classes == ["cat", "dog"] and x.shape[1] == 4 * 5
    assert np.allclose(x[y == 0], 30 / 255, atol=0.01)
    assert np.allclose(x[y == 1], 220 / 255, atol=0.01)
    # Switching back to the example removes the old raw files (data/raw is kept between runs).
    run_prepare(project)
    assert not (project / "data/raw/pets").exists()
    assert manifest.check(project) == 4


@pytest.mark.slow
def test_own_tfrecords_and_gfile(tmp_path: Path) -> None:
    import tensorflow as tf

    folder = tmp_path / "records"
    folder.mkdir()
    for shard in range(2):
        with tf.io.TFRecordWriter(str(folder / f"part-{shard}.tfrecord")) as writer:
            for i in range(10):
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "pixels": tf.train.Feature(
                                float_list=tf.train.FloatList(value=[float(i), 0.5, shard])
                            ),
                            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2])),
                        }
                    )
                )
                writer.write(example.SerializeToString())
    project = tmp_path / "project"
    run_prepare(project, "data.source=tfrecord", f"data.path={folder}", "data.features=pixels")
    counts = [len(load_processed(project, s)[1]) for s in ("train", "validation", "test")]
    assert sum(counts) == 20 and load_processed(project, "train")[0].shape[1] == 3

    # The gs:// code path (tf.io.gfile) on a local folder: same listing, same bytes.
    local = sorted(gcs.walk_files(str(folder)))
    assert sorted(gcs.walk_files(str(folder), force_gfile=True)) == local
    with gcs.open_binary(local[0], force_gfile=True) as f:
        assert f.read() == Path(local[0]).read_bytes()
    assert gcs.size(local[0], force_gfile=True) == Path(local[0]).stat().st_size


def test_evaluate_helpers(tmp_path: Path) -> None:
    logits = np.array([[2.0, 0.0], [0.0, 3.0], [1.0, 0.0]])
    result = scores(logits, np.array([0, 1, 1]))
    assert result["test_accuracy"] == pytest.approx(2 / 3)
    assert result["test_loss"] > 0
    metrics = tmp_path / "train.json"
    metrics.write_text(json.dumps({"history": [{"epoch": 1, "loss": 0.5, "val_loss": 0.6}]}))
    assert training_curve(metrics) == [[1, 0.5, None, 0.6, None]]
    assert training_curve(tmp_path / "missing.json") == []


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
    assert set(json.loads((project / manifest.MANIFEST).read_text())["written"]) == {
        "data/raw/digits.csv",
        "data/processed/train.npz",
        "data/processed/validation.npz",
        "data/processed/test.npz",
    }

    # A user's file exactly where prepare would stage: refused in one line, nothing deleted.
    (project / "data/raw/keep.txt").write_bytes(b"the user's own")
    before = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file())
    with pytest.raises(ConfigError, match=r"^data/raw/keep.txt: prepare would write here"):
        run_prepare(project, "data.source=csv", "data.path=data/external/keep.txt")
    after = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file())
    assert after == before and (project / "data/raw/keep.txt").read_bytes() == b"the user's own"
