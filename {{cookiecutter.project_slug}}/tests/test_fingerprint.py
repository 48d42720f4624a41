"""The run fingerprint (training/fingerprint.py) and the DVC stage's choice of run (`choose_run`):
which keys define a run, how a difference is named, and that a run with other settings gets a run
of its own instead of the old one's checkpoints. In-process, no training."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import PARAMS

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.data import manifest
from {{ cookiecutter.module_name }}.training import fingerprint
from {{ cookiecutter.module_name }}.training.checkpoints import CheckpointStore, newest_meta
from {{ cookiecutter.module_name }}.training.trainer import choose_run

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

DATA = "ab" * 32


def params(*overrides: str):
    return load_params(PARAMS, list(overrides))


def test_what_defines_a_run_and_what_only_changes_how_it_runs() -> None:
    base = fingerprint.of(params(), DATA, replicas=1)
    assert base["data"] == DATA and base["seed"] == 42 and base["global_batch"] == 32
    assert {"data.augment", "model.architecture", "model.filters", "task.type"} <= set(base)
    assert {"train.learning_rate", "train.optimizer", "train.mixed_precision"} <= set(base)
    assert not {key for key in base if key.startswith(("distribute.", "repro."{% if cookiecutter.vertex_ai %}, "vertex."{% endif %}))}
    # How or when a run runs: the same run.
    how = [
        "train.checkpoint_every_steps=7",
        "train.keep_checkpoints=1",
        "train.steps_per_execution=3",
        "train.time_budget_minutes=5",
        "train.profile_steps=[1,2]",
        "train.early_stopping_patience=4",
        "train.epochs=50",  # a constant schedule: more epochs continue the run
        "distribute.strategy=default",
        "repro.deterministic=false",
    ]
    assert fingerprint.of(params(*how), DATA, 1) == base
    # The global batch counts, not how it is split: 16 per replica x 2 = 32 x 1.
    two = fingerprint.of(params("train.batch_size=16"), DATA, replicas=2)
    assert two["global_batch"] == 32
    assert fingerprint.differences(base, two) == [
        "learning_rate_applied was 0.001, now 0.002"  # train.lr_scaling: linear
    ]
    # A schedule over all steps: its length (train.epochs) is the run's.
    cosine = fingerprint.of(params("train.schedule=cosine"), DATA, 1)
    longer = fingerprint.of(params("train.schedule=cosine", "train.epochs=30"), DATA, 1)
    assert fingerprint.differences(cosine, longer) == ["train.epochs was 20, now 30"]


def test_a_difference_is_named_key_by_key() -> None:
    base = fingerprint.of(params(), DATA, 1)
    other = fingerprint.of(
        params("train.learning_rate=0.003", "model.filters=[16,32]", "seed=7"), "cd" * 32, 1
    )
    assert fingerprint.differences(base, other) == [
        "the data (data/manifest.json's files) was abababababab, now cdcdcdcdcdcd",
        "seed was 42, now 7",
        "model.filters was [16, 32, 64, 128], now [16, 32]",
        "train.learning_rate was 0.001, now 0.003",
    ]
    assert fingerprint.differences(base, dict(base)) == []
    # Derived values are named only when nothing they follow from differs.
    small, big = tf.Variable(tf.zeros([3, 4])), tf.Variable(tf.zeros([5, 4]))
    a = fingerprint.with_variables(base, [small])
    b = fingerprint.with_variables(base, [big])
    assert fingerprint.differences(a, b) == [
        "variables was 12 weights in 1 tensors (" + a["variables"][-9:-1] + "), now 20 weights "
        "in 1 tensors (" + b["variables"][-9:-1] + ")"
    ]
    c = fingerprint.with_variables(other, [big])
    assert not [line for line in fingerprint.differences(a, c) if line.startswith("variables")]


def test_a_key_on_one_side_only_is_a_difference() -> None:
    """A component's argument set on one side only (`model.args.width`) is named like any other
    change (a checkpoint of an older version never gets here: its format is refused first)."""
    base = fingerprint.of(params(), DATA, 1)
    wider = {**base, "model.args.width": 24}
    assert fingerprint.differences(base, wider) == ["model.args.width was null, now 24"]
    assert fingerprint.differences(wider, base) == ["model.args.width was 24, now null"]
    # `variables`, known once the model is built, is not compared with a fingerprint without it.
    built = fingerprint.with_variables(base, [tf.Variable(tf.zeros([3]))])
    assert fingerprint.differences(built, base) == fingerprint.differences(base, built) == []


def test_digests_and_hashes(tmp_path: Path) -> None:
    base = fingerprint.of(params(), DATA, 1)
    assert fingerprint.digest(base) == fingerprint.digest(dict(reversed(base.items())))
    assert fingerprint.digest(base) != fingerprint.digest(base, code="x")
    moved = {**base, "learning_rate_applied": 9.0}  # derived: not in the digest
    assert fingerprint.digest(moved) == fingerprint.digest(base)
    # A folder of shards hashes as data/manifest.py's data_hash of the same files.
    (tmp_path / "train-00000.tfrecord").write_bytes(b"shard")
    (tmp_path / ".hidden").write_text("not data")
    doc = {
        "files": [
            {
                "path": "data/processed/train-00000.tfrecord",
                "sha256": hashlib.sha256(b"shard").hexdigest(),
            }
        ]
    }
    assert fingerprint.folder_hash(tmp_path) == manifest.data_hash(doc)
    # The code's digest: source files only, caches left out.
    package = tmp_path / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    first = fingerprint.code_digest(package)
    (package / "__pycache__" / "a.cpython.pyc").write_bytes(b"\0")
    fingerprint.code_digest.cache_clear()
    assert fingerprint.code_digest(package) == first
    (package / "a.py").write_text("x = 2\n")
    fingerprint.code_digest.cache_clear()
    assert fingerprint.code_digest(package) != first


def checkpoint_of(storage: Path, run_name: str, step: int, meta: dict) -> None:
    """A complete checkpoint of `run_name` at `step` with `meta` (what `train` records)."""
    store = CheckpointStore(storage / "checkpoints" / run_name, keep=3)
    store.save(tf.train.Checkpoint(v=tf.Variable([1.0])), step, meta)


def test_the_dvc_stage_reuses_a_matching_run_and_trains_its_own_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path))
    p = params("train.epochs=2")
    expected = fingerprint.of(p, DATA, 1)
    code = fingerprint.code_digest()
    # No checkpoint yet: run_name itself.
    assert choose_run(p, tmp_path, expected, train_examples=320).run_name == "baseline"
    # A notebook's run with the same fingerprint and code: reused (resumed or already complete).
    checkpoint_of(tmp_path, "baseline", 20, {"fingerprint": expected, "code": code})
    assert choose_run(p, tmp_path, expected, 320).run_name == "baseline"
    assert capsys.readouterr().out == ""
    # Another learning rate: a run of its own, named from the fingerprint and the code.
    other = fingerprint.of(params("train.epochs=2", "train.learning_rate=0.003"), DATA, 1)
    chosen = choose_run(p, tmp_path, other, 320)
    own = f"baseline-{fingerprint.digest(other, code)[:8]}"
    assert chosen.run_name == own
    out = capsys.readouterr().out
    assert "train.learning_rate was 0.001, now 0.003" in out and f"training run '{own}'" in out
    assert "run 'baseline' keeps its checkpoints" in out and "--fresh" not in out
    # Other code, or a run past train.epochs: not the stage's run either.
    checkpoint_of(tmp_path, "code", 20, {"fingerprint": expected, "code": "other"})
    assert choose_run(
        load_params(PARAMS, ["run_name=code"]), tmp_path, expected, 320
    ).run_name.startswith("code-")
    assert "the code of src/" in capsys.readouterr().out
    checkpoint_of(tmp_path, "long", 40, {"fingerprint": expected, "code": code})
    shorter = load_params(PARAMS, ["run_name=long", "train.epochs=1"])
    assert choose_run(shorter, tmp_path, expected, 320).run_name.startswith("long-")
    assert "it trained 40 steps, more than train.epochs makes (10)" in capsys.readouterr().out
    # A checkpoint of an older version of the project (another format): a run of its own.
    checkpoint_of(tmp_path, "old", 20, {"fingerprint": expected, "code": code})
    meta_file = next((tmp_path / "checkpoints" / "old").glob("step-*/meta.json"))
    meta_file.write_text(json.dumps({**json.loads(meta_file.read_text()), "format": 1}))
    old = load_params(PARAMS, ["run_name=old", "train.epochs=2"])
    assert choose_run(old, tmp_path, expected, 320).run_name.startswith("old-")
    assert "its checkpoints are of an older version" in capsys.readouterr().out
    # Every run's checkpoints are where they were.
    for name, step in (("baseline", 20), ("code", 20), ("long", 40), ("old", 20)):
        assert newest_meta(tmp_path / "checkpoints" / name)["step"] == step
    meta = json.loads(
        next((tmp_path / "checkpoints" / "baseline").glob("step-*/meta.json")).read_text()
    )
    assert meta["fingerprint"] == expected


def test_the_codes_digest_leaves_out_hidden_folders(tmp_path: Path) -> None:
    """Jupyter's autosave (`.ipynb_checkpoints/`, made when a module is opened in Colab's or
    Jupyter's editor) is not the package's code: it must not make the DVC stage train a new run."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "model.py").write_text("x = 1\n")
    first = fingerprint.code_digest(package)
    (package / ".ipynb_checkpoints").mkdir()
    (package / ".ipynb_checkpoints" / "model-checkpoint.py").write_text("x = 0\n")
    fingerprint.code_digest.cache_clear()
    assert fingerprint.code_digest(package) == first
