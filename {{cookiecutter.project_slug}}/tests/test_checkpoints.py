"""Atomic checkpoints: commit by rename, verification, fallback past a damaged one, pruning."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import tensorflow as tf

from {{ cookiecutter.module_name }}.training.checkpoints import (
    CheckpointMismatch,
    CheckpointStore,
    list_checkpoints,
    newest_meta,
    verify,
)

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it


def _ckpt(value: float) -> tuple[tf.train.Checkpoint, tf.Variable]:
    var = tf.Variable([value, value])
    return tf.train.Checkpoint(v=var), var


def test_save_restore_and_keep_newest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    ckpt, var = _ckpt(0.0)
    for step in (10, 20, 30):
        var.assign([step, step])
        store.save(ckpt, step, {"epoch": 0})
    assert [s for s, _ in list_checkpoints(tmp_path)] == [20, 30]
    var.assign([0.0, 0.0])
    meta = store.restore(ckpt)
    assert meta["step"] == 30 and var.numpy().tolist() == [30.0, 30.0]
    assert not list(tmp_path.glob(".tmp-*"))
    # The write is traced once and reads the variables when it runs (not when it was traced).
    assert store._traced is not None and store._traced[1].experimental_get_tracing_count() == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "no_meta", "no_index"])
def test_damaged_newest_falls_back_with_a_warning(tmp_path: Path, capsys, damage: str) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    ckpt, var = _ckpt(1.0)
    store.save(ckpt, 1, {})
    var.assign([2.0, 2.0])
    newest = store.save(ckpt, 2, {})
    data = next(newest.glob("ckpt.data-*"))
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[:-3])
    elif damage == "flip":
        raw = bytearray(data.read_bytes())
        raw[0] ^= 0xFF
        data.write_bytes(bytes(raw))
    elif damage == "no_meta":
        (newest / "meta.json").unlink()
    else:
        (newest / "ckpt.index").unlink()
    assert verify(newest) is not None
    meta = store.restore(ckpt)
    assert meta["step"] == 1 and var.numpy().tolist() == [1.0, 1.0]
    out = capsys.readouterr().out
    assert "WARNING: checkpoint" in out and "damaged" in out and "falling back" in out
    # Moved aside, so it no longer counts as the newest (pruning would keep it over good ones).
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]
    assert list(tmp_path.glob("damaged-step-000000002-*"))


def test_a_save_interrupted_before_the_commit_is_never_read(tmp_path: Path) -> None:
    """A crash mid-write leaves only a `.tmp-*` folder: ignored, then cleaned up."""
    store = CheckpointStore(tmp_path, keep=3)
    ckpt, var = _ckpt(1.0)
    store.save(ckpt, 5, {})
    partial = tmp_path / ".tmp-step-000000009-123"
    partial.mkdir()
    ckpt.write(str(partial / "ckpt"))  # files written, meta.json and the rename never happened
    var.assign([0.0, 0.0])
    assert store.restore(ckpt)["step"] == 5
    store.clean_partial()
    assert not partial.exists()


def test_no_checkpoint_returns_none(tmp_path: Path) -> None:
    ckpt, _ = _ckpt(1.0)
    assert CheckpointStore(tmp_path / "none", keep=1).restore(ckpt) is None


def test_intact_but_different_model_is_an_error(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=1)
    ckpt, _ = _ckpt(1.0)
    store.save(ckpt, 1, {})
    other = tf.train.Checkpoint(v=tf.Variable([1.0, 2.0, 3.0]))
    with pytest.raises(CheckpointMismatch, match="holds another model") as refused:
        store.restore(other)
    # It suggests another run or the old settings, never deleting the run's checkpoints.
    assert "its checkpoints are kept" in str(refused.value) and "--fresh" not in str(refused.value)
    assert json.loads((tmp_path / "step-000000001" / "meta.json").read_text())["step"] == 1


def test_a_check_of_the_meta_runs_before_anything_is_read(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    store.save(_ckpt(1.0)[0], 1, {"fingerprint": {"data": "a"}})
    store.save(_ckpt(2.0)[0], 2, {"fingerprint": {"data": "b"}})
    assert newest_meta(tmp_path)["step"] == 2
    seen = []

    def refuse(meta: dict) -> None:
        seen.append(meta["step"])
        raise CheckpointMismatch("another run")

    target, variable = _ckpt(0.0)
    with pytest.raises(CheckpointMismatch, match="another run"):
        store.restore(target, refuse)
    assert seen == [2] and float(variable.numpy()[0]) == 0.0  # refused before reading
    assert newest_meta(tmp_path / "none") is None


def test_commit_without_folder_rename(tmp_path: Path, monkeypatch) -> None:
    """Where a folder cannot be renamed (Cloud Storage FUSE, flat bucket), files move one by one
    with meta.json last, and the result restores like any other checkpoint."""
    from {{ cookiecutter.module_name }}.training import checkpoints

    real_replace = os.replace

    def no_folder_rename(src, dst):
        if Path(src).is_dir():
            raise OSError(95, "Operation not supported")
        return real_replace(src, dst)

    monkeypatch.setattr(checkpoints.os, "replace", no_folder_rename)
    store = CheckpointStore(tmp_path, keep=2)
    ckpt, var = _ckpt(4.0)
    path = store.save(ckpt, 7, {})
    assert verify(path) is None and not list(tmp_path.glob(".tmp-*"))
    var.assign([0.0, 0.0])
    assert store.restore(ckpt)["step"] == 7 and var.numpy().tolist() == [4.0, 4.0]


def test_fresh_deletes_the_runs_checkpoints_and_nothing_else(tmp_path: Path) -> None:
    """`train --fresh` (`clear`): the steps, partial and damaged ones go; the lease and what the
    project did not write in the run's folder stay."""
    store = CheckpointStore(tmp_path, keep=3)
    ckpt, _ = _ckpt(1.0)
    for step in (10, 20):
        store.save(ckpt, step, {})
    (tmp_path / ".tmp-step-000000030-99").mkdir()
    (tmp_path / "damaged-step-000000005-1700000000").mkdir()
    (tmp_path / "lease.json").write_text("{}")
    (tmp_path / ".lease.json-0123456789abcdef.tmp").write_text("{")
    (tmp_path / "notes.md").write_text("why this run")
    (tmp_path / "exported").mkdir()
    assert store.clear() == [10, 20]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["exported", "lease.json", "notes.md"]
