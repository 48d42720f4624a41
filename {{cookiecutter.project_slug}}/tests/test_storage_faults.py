"""A full storage root does not end a run: a real small tmpfs (or, where mounting is refused, a
simulated ENOSPC), checkpoints that fail are reported and skipped, the results are still written."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import PARAMS, TINY, cli, cli_env, drop, fill, sets

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.core.files import free_bytes
from {{ cookiecutter.module_name }}.training import checkpoints
from {{ cookiecutter.module_name }}.training.checkpoints import (
    CheckpointStore,
    ResultsWriteError,
    list_checkpoints,
    write_results,
)
from {{ cookiecutter.module_name }}.training.tracking import Tracker
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

# 64 -> 512 -> 512 -> 10: about 1.2 MB of weights, 3.6 MB with Adam's two slots per checkpoint.
# A 6 MiB storage root holds the first checkpoint; the 2nd and every later one do not fit.
BIG = [
    "train.epochs=1",
    "train.batch_size=32",
    "train.checkpoint_every_steps=10",
    "train.steps_per_execution=5",
    "train.keep_checkpoints=3",
    "model.hidden_units=[512,512]",
    "distribute.strategy=default",
    "run_name=full",
]
FAILED = re.compile(r"WARNING: checkpoint at step (\d+) not saved \((.+)\); ([\d.,]+) MiB free in ")


def _simulate_full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no tmpfs can be mounted: every checkpoint after the first fails like a full disk."""
    real_save = CheckpointStore.save
    calls = {"n": 0}

    def save(self, checkpoint, step, meta):
        calls["n"] += 1
        if calls["n"] > 1:
            (self.directory / f".tmp-step-{step:09d}-0").mkdir(parents=True, exist_ok=True)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(self, checkpoint, step, meta)

    monkeypatch.setattr(CheckpointStore, "save", save)


def test_a_run_on_a_full_storage_root_completes_and_says_which_checkpoints_failed(
    tmp_path: Path, small_storage: tuple[Path, bool], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    storage, mounted = small_storage
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PARAMS, project / "params.yaml")
    if mounted:  # the real thing: TensorFlow's SaveV2 runs out of space in its own process
        proc = cli(["train", *sets(BIG)], project, cli_env(storage))
        out = proc.communicate(timeout=600)[0]
        assert proc.returncode == 0, out
    else:
        _simulate_full_disk(monkeypatch)
        monkeypatch.setenv("PROJECT_STORAGE_DIR", str(storage))
        result = train(load_params(project / "params.yaml", BIG), project)
        out = capsys.readouterr().out
        assert result.status == "completed", out
    print(out)
    assert "Traceback" not in out
    failed = FAILED.findall(out)
    assert [int(step) for step, *_ in failed] == [20, 30, 40, 44], out
    for _, cause, _free in failed:
        # ENOSPC out of the traced SaveV2 (mounted) or the simulated OSError: the cause alone
        assert cause in ("ResourceExhaustedError: No space left on device",
                         "OSError: No space left on device"), cause  # fmt: skip
    run_dir = storage / "checkpoints" / "full"
    assert [s for s, _ in list_checkpoints(run_dir)] == [10]  # the one that fit, kept
    assert checkpoints.verify(run_dir / "step-000000010") is None
    assert not list(run_dir.glob(".tmp-*"))  # partial writes removed
    metrics = json.loads((project / "results/metrics/train.json").read_text())
    assert metrics["history"][-1]["step"] == 44 and "val_accuracy" in metrics
    assert (project / "results/models/model.keras").stat().st_size > 1_000_000
    if mounted:  # the shortfall was foreseen before the first step
        assert "WARNING: preflight:" in out and "MiB free at" in out


def test_a_stop_whose_checkpoint_fails_names_the_newest_one_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A run stopped (its time budget) on a full disk: the stop's checkpoint fails, and the line
    names the checkpoint the next run resumes from, or says there is none."""
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    shutil.copy(PARAMS, tmp_path / "params.yaml")
    stopped = [*TINY, "distribute.strategy=default", "train.time_budget_minutes=0.00005"]

    def full(self, checkpoint, step, meta):
        raise OSError(errno.ENOSPC, "No space left on device")

    def stop_on_a_full_disk() -> str:
        with monkeypatch.context() as patch:
            patch.setattr(CheckpointStore, "save", full)
            result = train(load_params(tmp_path / "params.yaml", stopped), tmp_path)
        assert result.status == "stopped"
        return capsys.readouterr().out

    out = stop_on_a_full_disk()
    assert "Stopped at step 5 of " in out, out
    assert (
        "its checkpoint could not be saved and the run has none: it starts again at step 0" in out
    )
    train(load_params(tmp_path / "params.yaml", stopped), tmp_path)  # saved at step 5
    assert "; checkpoint saved in " in capsys.readouterr().out
    out = stop_on_a_full_disk()  # resumed at step 5, stopped at 10
    assert "Stopped at step 10 of " in out, out
    assert "its checkpoint could not be saved, the newest is at step 5" in out


def _var(size: int) -> tuple[tf.train.Checkpoint, tf.Variable]:
    var = tf.Variable(tf.zeros([size]))
    return tf.train.Checkpoint(v=var), var


def test_failed_save_keeps_the_newest_complete_one_and_resume_uses_it(
    small_storage: tuple[Path, bool], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    storage, mounted = small_storage
    if not mounted:
        _simulate_full_disk(monkeypatch)
    store = CheckpointStore(storage / "run", keep=1)
    ckpt, var = _var(900_000)  # 3.6 MB: one fits in 6 MiB, two do not
    var.assign(tf.fill([900_000], 1.0))
    assert store.try_save(ckpt, 1, {}) is not None
    var.assign(tf.fill([900_000], 2.0))
    assert store.try_save(ckpt, 2, {}) is None  # does not fit; keep=1 must not prune step 1
    out = capsys.readouterr().out
    assert len(FAILED.findall(out)) == 1 and "step 2 not saved" in out
    assert [s for s, _ in list_checkpoints(storage / "run")] == [1]
    assert not list((storage / "run").glob(".tmp-*"))
    var.assign(tf.zeros([900_000]))
    assert store.restore(ckpt)["step"] == 1 and float(var[0]) == 1.0


def test_pruning_makes_room_but_never_takes_the_newest_complete_one(
    small_storage: tuple[Path, bool], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    storage, mounted = small_storage
    if not mounted:  # free space as a 6 MiB file system would report it
        monkeypatch.setattr(
            checkpoints,
            "free_bytes",
            lambda _: 6 * 2**20 - sum(p.stat().st_size for p in storage.rglob("*") if p.is_file()),
        )
    store = CheckpointStore(storage / "run", keep=3)
    ckpt, var = _var(400_000)  # 1.6 MB each: three fit in 6 MiB, a fourth does not
    for step in (1, 2, 3):
        var.assign(tf.fill([400_000], float(step)))
        assert store.try_save(ckpt, step, {}) is not None
    var.assign(tf.fill([400_000], 4.0))
    assert store.try_save(ckpt, 4, {}) is not None  # room made by pruning the oldest first
    out = capsys.readouterr().out
    assert "Pruning run/step-000000001 early" in out and "not saved" not in out
    assert [s for s, _ in list_checkpoints(storage / "run")] == [2, 3, 4]
    assert store.restore(ckpt)["step"] == 4 and float(var[0]) == 4.0


def test_free_space_unknown_prunes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoints, "free_bytes", lambda _: None)  # a mount without statvfs
    store = CheckpointStore(tmp_path, keep=3)
    ckpt, _ = _var(10)
    for step in (1, 2, 3):
        assert store.try_save(ckpt, step, {}) is not None
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1, 2, 3]


def test_a_results_write_that_fails_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import keras

    model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
    model_file, metrics_file = tmp_path / "models/model.keras", tmp_path / "metrics/train.json"

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints.os, "replace", full)
    with pytest.raises(ResultsWriteError, match=r"model.keras: the final results could not be"):
        write_results(model, {"val_loss": 1.0}, model_file, metrics_file)
    assert not model_file.exists() and not list(model_file.parent.glob("*"))  # nothing half


def test_a_storage_that_turns_read_only_is_reported_and_the_next_save_works(
    small_storage: tuple[Path, bool], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A dropped or read-only mount (EIO, EROFS) mid-run: one line, then the next save works."""
    storage, mounted = small_storage
    store = CheckpointStore(storage / "run", keep=2)
    ckpt, var = _var(1000)
    assert store.try_save(ckpt, 1, {}) is not None
    if mounted:
        subprocess.run(["mount", "-o", "remount,ro", str(storage)], check=True)
    else:
        monkeypatch.setattr(
            CheckpointStore, "save", lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O"))
        )
    try:
        assert store.try_save(ckpt, 2, {}) is None
    finally:
        if mounted:
            subprocess.run(["mount", "-o", "remount,rw", str(storage)], check=True)
        monkeypatch.undo()
    out = capsys.readouterr().out
    assert "WARNING: checkpoint at step 2 not saved" in out and out.count("\n") == 1
    assert store.try_save(ckpt, 3, {}) is not None
    assert [s for s, _ in list_checkpoints(storage / "run")] == [1, 3]


def test_a_checkpoint_folder_gone_with_drive_is_not_made_again_on_the_vm_disk(
    tmp_path: Path, capsys
) -> None:
    """Drive unmounted mid-run: its path is gone, /content/drive an empty folder on the VM's disk.
    The save fails in one line (its free space unknown: the VM disk's is not Drive's), and the
    run's folder is not made again under it, where later checkpoints would vanish with the VM."""
    drive = tmp_path / "content/drive"
    store = CheckpointStore(drive / "MyDrive/project/checkpoints/run", keep=2)
    ckpt, _ = _var(1000)
    assert store.try_save(ckpt, 1, {}) is not None
    shutil.rmtree(drive / "MyDrive")
    capsys.readouterr()
    assert store.try_save(ckpt, 2, {}) is None
    out = capsys.readouterr().out
    assert "step 2 not saved (FileNotFoundError: No such file or directory); " in out, out
    assert f"free space unknown in {store.directory}" in out and out.count("\n") == 1, out
    assert not (drive / "MyDrive").exists()


def test_a_dropped_drive_shows_no_other_disk_free_space_nor_a_removal_that_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A dropped mount (ENOTCONN): the free space is unknown, not the disk's the mount point is
    on, and the partial write is not said to be removed, as it could not be."""
    drive = tmp_path / "content/drive"
    store = CheckpointStore(drive / "MyDrive/project/checkpoints/run", keep=2)
    ckpt, _ = _var(1000)
    assert store.try_save(ckpt, 1, {}) is not None
    drop(drive, errno.ENOTCONN, monkeypatch)
    assert free_bytes(store.directory) is None and free_bytes(tmp_path / "new") is not None
    capsys.readouterr()
    assert store.try_save(ckpt, 2, {}) is None
    out = capsys.readouterr().out
    assert "not saved (OSError: Transport endpoint is not connected); free space unknown" in out
    assert "partial write removed" not in out and "a partial write may be left" in out, out


def test_a_full_disk_names_the_damaged_checkpoints_to_delete_and_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A checkpoint found damaged is set aside (`damaged-step-*`) and never pruned: on a full
    disk the warning names it and its size, as what the user may delete."""
    store = CheckpointStore(tmp_path / "run", keep=3)
    ckpt, _ = _var(400_000)  # 1.6 MB
    for step in (1, 2):
        assert store.try_save(ckpt, step, {}) is not None
    (tmp_path / "run/step-000000002/meta.json").write_text("{")
    assert store.restore(ckpt)["step"] == 1
    (damaged,) = (tmp_path / "run").glob("damaged-step-000000002-*")
    capsys.readouterr()
    monkeypatch.setattr(
        CheckpointStore, "save", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    )
    assert store.try_save(ckpt, 3, {}) is None
    out = capsys.readouterr().out
    assert f"yours to delete to free space: {damaged.name} (1.5 MiB)" in out, out
    assert damaged.is_dir()


# What TensorFlow's summary writer raised on a full Drive (its own three lines after the first;
# the op's `function_node` prefix left out).
WRITER_FULL = (
    "results/tensorboard/full/events.out.tfevents.1.vm.1.1.v2; No space left on "
    "device\n\tFailed to flush 1 events to results/tensorboard/full/events.out.tfevents.1.vm.1.1"
    ".v2\n\tFlushing first event.\n\tCould not initialize events writer. "
    "[Op:CreateSummaryFileWriter] name: "
)


def test_a_full_disk_turns_tensorboard_tracking_off_in_one_line(
    small_storage: tuple[Path, bool], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The results' disk full when the run's params and metrics go to TensorBoard (at the end of
    a run): one line that says why, not the writer's four; the run goes on without it."""
    storage, mounted = small_storage
    monkeypatch.setenv("PROJECT_RESULTS_DIR", str(storage / "results"))
    if mounted:
        fill(storage)
    else:

        def full(*args: object, **kwargs: object) -> None:
            raise tf.errors.ResourceExhaustedError(None, None, WRITER_FULL)

        monkeypatch.setattr(tf.summary, "create_file_writer", full)
    tracker = Tracker(storage, "full", "run-1")
    out = capsys.readouterr().out
    assert tracker.backends == []
    assert out.count("\n") == 1, out
    assert out.startswith("WARNING: tensorboard tracking is off for this run: ")
    assert out.rstrip().endswith("Error: No space left on device"), out


# What TensorFlow's summary writer raised when the disk filled during a run (its own two lines
# after the first; the op's `function_node` prefix left out).
FLUSH_FULL = (
    "results/tensorboard/full/events.out.tfevents.1.vm.1.1.v2; No space left on device\n"
    "\tFailed to flush 11 events to results/tensorboard/full/events.out.tfevents.1.vm.1.1.v2\n"
    "\tCould not flush events file. [Op:WriteSummary] name: "
)


@pytest.mark.parametrize("when", ["before the run", "during the run"])
def test_a_full_tensorboard_disk_stops_the_curves_in_one_line_and_the_run_completes(
    when: str,
    tmp_path: Path,
    small_storage: tuple[Path, bool],
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> None:
    """results/tensorboard on a disk of its own (Drive, in the notebooks) that is full when the
    trainer opens its writer, or fills while it writes the curves: one line says the curves
    stopped and why (the tracker's TensorBoard writer, in the same folder at the end, says
    nothing more), the run completes, like a checkpoint that does not fit."""
    storage, mounted = small_storage
    project = tmp_path / "project"
    (project / "results").mkdir(parents=True)
    shutil.copy(PARAMS, project / "params.yaml")
    (project / "results/tensorboard").symlink_to(storage, target_is_directory=True)
    if mounted:  # filled to the last byte, or to the last 4 KiB (a few epochs' curves)
        room = 0 if when == "before the run" else 4096
        with open(storage / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):
            filler.write(b"\0" * (shutil.disk_usage(storage).free - room))
            while not room:
                filler.write(b"\0" * 4096)
    elif when == "before the run":

        def full(*args: object, **kwargs: object) -> None:
            raise tf.errors.ResourceExhaustedError(None, None, WRITER_FULL)

        monkeypatch.setattr(tf.summary, "create_file_writer", full)
    else:
        scalar, calls = tf.summary.scalar, []

        def fills(*args: object, **kwargs: object) -> bool:
            calls.append(1)
            if len(calls) > 20:
                raise tf.errors.ResourceExhaustedError(None, None, FLUSH_FULL)
            return scalar(*args, **kwargs)

        monkeypatch.setattr(tf.summary, "scalar", fills)
    result = train(load_params(project / "params.yaml", ["train.epochs=10"]), project)
    out = capsys.readouterr().out
    assert result.status == "completed", out
    said = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert len(said) == 1, out
    step = re.fullmatch(
        r"WARNING: TensorBoard curves in .+ stopped at step (\d+) "
        r"\(ResourceExhaustedError: No space left on device\); the run goes on without them",
        said[0],
    )
    assert step, said[0]
    assert (int(step[1]) == 0) == (when == "before the run"), said[0]
    assert "Traceback" not in out and "function_node" not in out
    assert (project / "results/models/model.keras").is_file()


# What TensorFlow's file ops raise for each errno (tensorflow/core/platform/error.cc): its words
# after the file.
TF_ERRORS = {
    errno.EIO: tf.errors.UnknownError,
    errno.ENOTCONN: tf.errors.FailedPreconditionError,
    errno.ESTALE: tf.errors.AbortedError,
}


def said_errors(err: str) -> list[str]:
    """The `error:` lines of a command's stderr."""
    return [line for line in err.splitlines() if line.startswith("error")]


def remount_line(file: Path, code: int) -> str:
    """The one line any command ends in when its file on a dropped Drive fails with `code`."""
    return (
        f"error: {file}: {os.strerror(code)}; the storage's connection dropped: remount it (Google "
        'Drive, in a Colab cell: from google.colab import drive; drive.mount("/content/drive", '
        "force_remount=True)), then run the same command again"
    )


@pytest.mark.parametrize("raised_by", ["python", "tensorflow"])
@pytest.mark.parametrize("code", list(TF_ERRORS), ids=errno.errorcode.get)
def test_a_dropped_drive_is_one_line_that_says_to_remount_it(
    code: int, raised_by: str, tiny_project: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Google Drive's FUSE mount, dropped under any command (here `prepare`): its file calls fail
    with one of these errnos. One line: the file, its cause, and how to go on (remount Drive,
    then the same command again), not a traceback."""
    monkeypatch.chdir(tiny_project)
    if raised_by == "python":
        file = tiny_project / "data/raw/digits.csv"

        def dropped(target: Path, data: object) -> Path:
            raise OSError(code, os.strerror(code), str(target))

        monkeypatch.setattr("{{ cookiecutter.module_name }}.data.prepare.atomic_write", dropped)
    else:
        file = tiny_project / "data/processed/train-00000-of-00001.tfrecord"

        def dropped(*args: object) -> None:
            raise TF_ERRORS[code](None, None, f"{file}; {os.strerror(code)}")

        monkeypatch.setattr("{{ cookiecutter.module_name }}.data.prepare.write_shards", dropped)
    capsys.readouterr()
    assert main(["prepare", "--params", str(tiny_project / "params.yaml")]) == 1
    err = capsys.readouterr().err
    assert said_errors(err) == [remount_line(file, code)], err
    assert "Traceback" not in err


@pytest.mark.parametrize("code", list(TF_ERRORS), ids=errno.errorcode.get)
def test_data_on_a_dropped_drive_is_not_taken_for_a_missing_path(
    code: int, tiny_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """data.path on a Drive whose mount dropped: the path is right, every file call under it
    fails. prepare says to remount Drive, not that data.path does not exist."""
    data = tmp_path / "drive/MyDrive/digits.csv"
    data.parent.mkdir(parents=True)
    data.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40)))
    drop(data.parent.parent, code, monkeypatch)
    monkeypatch.chdir(tiny_project)
    capsys.readouterr()
    args = ["prepare", "--params", str(tiny_project / "params.yaml")]
    returned = main([*args, *sets(["data.source=csv", f"data.path={data}"])])
    err = capsys.readouterr().err
    assert said_errors(err) == [remount_line(data, code)], err
    assert returned == 1
