"""One writer per run: the lease (lease.py) with real processes, and its rules in-process."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from conftest import PARAMS, TINY, cli, cli_env, sets

from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.training import lease as leases
from {{ cookiecutter.module_name }}.training.checkpoints import (
    CheckpointStore,
    list_checkpoints,
)
from {{ cookiecutter.module_name }}.training.lease import (
    EXIT_LEASE_HELD,
    EXIT_LEASE_LOST,
    Lease,
    LeaseHeld,
)
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

# Long enough to outlive a second process's start (a TensorFlow import), capped by the budget.
SLOW = [
    "train.epochs=200",
    "train.batch_size=8",
    "train.steps_per_execution=2",
    "train.checkpoint_every_steps=20",
    "train.keep_checkpoints=2",
    # Long enough that the holder cannot finish before the test takes its run over, on a loaded
    # CI machine too (a safety net: the test kills it in any case).
    "train.time_budget_minutes=15",
    "model.hidden_units=[16]",
    "distribute.strategy=default",
    "run_name=shared",
]
BEAT = "0.5"  # seconds between heartbeats in these tests (30 by default)


def foreign_lease(path: Path, heartbeat_age_s: float, interval: float = 0.5) -> dict:
    """Write the lease of a session on another VM whose last heartbeat was `heartbeat_age_s` ago."""
    doc = {
        "run_name": path.parent.name,
        "host": "other-vm",
        "pid": 4242,
        "started": time.time() - 3600,
        "heartbeat": time.time() - heartbeat_age_s,
        "heartbeat_s": interval,
        "token": uuid.uuid4().hex,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".lease-test.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)  # what another session's atomic write looks like
    return doc


def wait_for(condition, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"condition not met; process ended: {proc.poll()}")


@pytest.mark.slow
def test_second_session_is_refused_then_the_holder_stops_when_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "params.yaml").write_bytes((PARAMS).read_bytes())
    storage = tmp_path / "storage"
    # The holder beats every 10 minutes: only its look at the lease before each checkpoint can
    # see the take-over below in time.
    env = cli_env(storage, PROJECT_LEASE_HEARTBEAT_S="600")
    run_dir = storage / "checkpoints" / "shared"
    lease_file = run_dir / leases.LEASE_FILE

    holder = cli(["train", *sets(SLOW)], project, env)
    try:
        wait_for(lambda: bool(list_checkpoints(run_dir)), 600, holder)  # hang guards: 2 busy cores
        ours = json.loads(lease_file.read_text())
        assert ours["pid"] == holder.pid and ours["host"] == socket.gethostname()

        # A second session of the same run: refused in one line naming the run and the holder.
        started = time.monotonic()
        second = cli(["train", *sets(SLOW)], project, env)
        out = second.communicate(timeout=600)[0]
        refused_after = time.monotonic() - started
        assert second.returncode == EXIT_LEASE_HELD, out
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in out, out
        assert "run 'shared'" in errors[0] and f"pid {holder.pid}" in errors[0], errors[0]
        assert f"host {socket.gethostname()}" in errors[0]
        assert "Starting run" not in out and "Resuming" not in out
        # It wrote nothing there: the lease is still the holder's, no file carries its pid.
        assert json.loads(lease_file.read_text())["token"] == ours["token"]
        assert not [p for p in run_dir.rglob("*") if str(second.pid) in p.name]
        with capsys.disabled():  # a measurement for the reader, not an assertion
            print(f"\nsecond session refused after {refused_after:.1f} s (its start included)")

        # Another session takes the run over (`--take-over`, or another VM: Drive has no atomic
        # create): the holder sees it before its next checkpoint and stops with its own exit code,
        # writing nothing more: the run's folder is the other session's.
        other = foreign_lease(lease_file, heartbeat_age_s=0)
        out = holder.communicate(timeout=120)[0]
    finally:
        if holder.poll() is None:
            holder.kill()
    assert holder.returncode == EXIT_LEASE_LOST, out
    assert "taken over by host other-vm, pid 4242" in out and "wrote nothing more" in out, out
    assert "Continue with" not in out
    assert json.loads(lease_file.read_text())["token"] == other["token"]  # not removed by it
    stopped = int(re.search(r"Stopped at step (\d+) ", out).group(1))
    last = list_checkpoints(run_dir)[-1][0]
    assert last < stopped, out  # it stopped where it would have saved, and did not

    # That VM dies: after 3 missed heartbeats its lease is stale and the next train takes the run
    # over at once and resumes from the checkpoint (here in-process, stopped by a tiny budget).
    foreign_lease(lease_file, heartbeat_age_s=10)
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(storage))
    capsys.readouterr()
    params = load_params(project / "params.yaml", [*SLOW, "train.time_budget_minutes=0.0001"])
    result = train(params, project)
    out = capsys.readouterr().out
    assert "Taking over run 'shared' from host other-vm" in out and "stale after 3 x" in out, out
    assert f"from its checkpoint at step {last}" in out and result.status == "stopped"
    assert not lease_file.exists()  # released at the end


class LiveVM:
    """Another VM's session that holds a lease and beats every `interval` seconds (a thread)."""

    def __init__(self, path: Path, interval: float) -> None:
        self.doc = foreign_lease(path, heartbeat_age_s=0, interval=interval)
        self.path, self.interval = path, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.beat, daemon=True)

    def beat(self) -> None:
        while not self.stop.wait(self.interval):
            self.doc["heartbeat"] = time.time()
            tmp = self.path.with_name(".lease-live.tmp")
            tmp.write_text(json.dumps(self.doc))
            os.replace(tmp, self.path)

    def __enter__(self) -> LiveVM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_take_over_and_fresh_respect_a_live_lease(tiny_project: Path, capsys) -> None:
    params = load_params(tiny_project / "params.yaml", [*TINY, "train.epochs=1", "run_name=held"])
    run_dir = Path(os.environ["PROJECT_STORAGE_DIR"]) / "checkpoints" / "held"
    with LiveVM(run_dir / leases.LEASE_FILE, interval=0.3):
        for fresh in (False, True):
            with pytest.raises(
                LeaseHeld, match=r"run 'held' .*host other-vm, pid 4242.*--take-over"
            ):
                train(params, tiny_project, fresh=fresh)
        assert sorted(p.name for p in run_dir.iterdir()) == [leases.LEASE_FILE]  # nothing written
    # Its last heartbeat is recent: only --take-over takes the run without waiting.
    result = train(params, tiny_project, take_over=True)
    assert result.status == "completed"
    out = capsys.readouterr().out
    assert "Taking over run 'held' from host other-vm, pid 4242" in out and ": --take-over." in out
    assert not (run_dir / leases.LEASE_FILE).exists() and list_checkpoints(run_dir)


def test_a_dead_vms_lease_is_watched_then_taken_over(tmp_path: Path, capsys) -> None:
    """A new VM finds the lease of a VM that died moments ago (another host, a recent heartbeat):
    it says it waits, sees no heartbeat, and takes the run over once the lease is stale, not
    minutes later and without `--take-over`."""
    path = tmp_path / leases.LEASE_FILE
    foreign_lease(path, heartbeat_age_s=0.5, interval=1.0)  # stale 3 s after its last beat
    started = time.monotonic()
    lease = Lease.acquire(tmp_path, "r")
    waited = time.monotonic() - started
    out = capsys.readouterr().out
    assert "Run 'r' is held by host other-vm, pid 4242" in out and "waiting up to 2 s" in out
    assert "Taking over run 'r' from host other-vm, pid 4242" in out and "stale after 3 x" in out
    assert 2.0 <= waited < 2.0 + 3.0  # the staleness window, not a fixed long wait
    assert json.loads(path.read_text())["token"] == lease.token
    lease.release()


def test_a_live_vm_is_refused_at_its_next_heartbeat(tmp_path: Path, capsys) -> None:
    path = tmp_path / leases.LEASE_FILE
    with LiveVM(path, interval=0.5) as live:
        started = time.monotonic()
        with pytest.raises(LeaseHeld, match=r"run 'r' is being trained by another session"):
            Lease.acquire(tmp_path, "r")
        refused_after = time.monotonic() - started
    assert refused_after < 1.5, "one heartbeat, not the staleness window (1.5 s)"
    assert "waiting up to" in capsys.readouterr().out
    assert json.loads(path.read_text())["token"] == live.doc["token"]  # its lease, untouched


def test_a_lease_released_while_watched_is_taken(tmp_path: Path) -> None:
    path = tmp_path / leases.LEASE_FILE
    foreign_lease(path, heartbeat_age_s=0, interval=1.0)
    threading.Timer(0.3, path.unlink).start()  # the holder finished meanwhile
    started = time.monotonic()
    lease = Lease.acquire(tmp_path, "r")
    assert time.monotonic() - started < 2.0
    assert json.loads(path.read_text())["token"] == lease.token
    lease.release()


def test_a_dead_pid_on_this_host_is_taken_over_at_once(tmp_path: Path, capsys) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    first = Lease.acquire(tmp_path, "r")
    doc = json.loads(first.path.read_text())
    first.path.write_text(json.dumps({**doc, "pid": dead.pid, "token": "crashed"}))
    second = Lease.acquire(tmp_path, "r")
    assert f"its process {dead.pid} on this host is gone" in capsys.readouterr().out
    assert json.loads(second.path.read_text())["token"] == second.token
    second.release()
    assert not second.path.exists()


def test_a_live_pid_on_this_host_holds_unless_the_pid_was_reused(tmp_path: Path) -> None:
    alive = subprocess.Popen(["sleep", "30"])
    try:
        doc = {"host": socket.gethostname(), "pid": alive.pid, "heartbeat": 0, "token": "x"}
        (tmp_path / leases.LEASE_FILE).write_text(json.dumps(doc))
        with pytest.raises(LeaseHeld, match=f"pid {alive.pid}"):
            Lease.acquire(tmp_path, "r")
        doc["pid_start"] = leases._process_start(alive.pid)  # recorded by a real holder
        (tmp_path / leases.LEASE_FILE).write_text(json.dumps(doc))
        with pytest.raises(LeaseHeld, match=f"pid {alive.pid}"):
            Lease.acquire(tmp_path, "r")
        doc["pid_start"] = "1"  # the holder started at another time: its pid was reused
        (tmp_path / leases.LEASE_FILE).write_text(json.dumps(doc))
        Lease.acquire(tmp_path, "r").release()
    finally:
        alive.kill()
        alive.wait()


def test_a_heartbeat_on_full_storage_is_a_storage_fault_not_a_lost_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    lease = Lease.acquire(tmp_path, "r", take_over=False)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(leases, "atomic_write", full)
    lease.beat()
    lease.beat()
    out = capsys.readouterr().out
    assert lease.lost == "" and "No space left on device" in lease.storage_fault
    assert out.count("WARNING: lease heartbeat not written") == 1 and "storage fault" in out
    monkeypatch.undo()
    lease.beat()
    assert lease.storage_fault == "" and "written again" in capsys.readouterr().out
    foreign_lease(lease.path, heartbeat_age_s=0)
    lease.beat()
    assert "taken over by host other-vm" in lease.lost
    lease.release()
    assert lease.path.exists()  # not ours any more: left to its holder


def test_a_heartbeat_does_not_make_the_run_folder_again_when_drive_is_gone(
    tmp_path: Path, capsys
) -> None:
    """Drive unmounted mid-run: the heartbeat is a storage fault, and the path of the run's folder
    is not made again on the VM's disk (under /content/drive, as if it were Drive)."""
    run_dir = tmp_path / "content/drive/MyDrive/project/checkpoints/r"
    lease = Lease.acquire(run_dir, "r")
    shutil.rmtree(tmp_path / "content/drive/MyDrive")
    lease.beat()
    assert "WARNING: lease heartbeat not written" in capsys.readouterr().out
    assert lease.storage_fault and not (tmp_path / "content/drive/MyDrive").exists()
    lease.release()


def test_a_lease_that_cannot_be_written_at_start_is_a_storage_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(leases, "temp_file", full)
    lease = Lease.acquire(tmp_path, "r")
    assert "WARNING: lease not written" in capsys.readouterr().out and not lease.path.exists()
    monkeypatch.undo()
    lease.beat()  # the storage has room again: the next heartbeat writes it
    assert json.loads(lease.path.read_text())["token"] == lease.token and not lease.lost
    lease.release()


def test_fresh_clears_the_checkpoints_but_keeps_the_lease(tmp_path: Path) -> None:
    import tensorflow as tf

    lease = Lease.acquire(tmp_path, "r")
    store = CheckpointStore(tmp_path, keep=2)
    for step in (1, 2, 3):
        store.save(tf.train.Checkpoint(v=tf.Variable([1.0])), step, {})
    assert store.clear() == [2, 3]  # the steps it deleted (the newest 2 were kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == [leases.LEASE_FILE]
    lease.release()


def test_a_heartbeat_still_writing_at_release_does_not_write_the_lease_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow storage (Drive) still writing a heartbeat when the run ends: the lease is gone
    once released, not written back by that heartbeat; a lease left behind would make the next
    session on another VM wait for it to go stale."""
    lease = Lease.acquire(tmp_path, "r")
    writing, real = threading.Event(), leases.atomic_write

    def slow(path: Path, data: str, **kwargs: bool) -> Path:
        writing.set()
        time.sleep(5.5)  # longer than any wait of release's for the heartbeat thread
        return real(path, data, **kwargs)

    monkeypatch.setattr(leases, "atomic_write", slow)
    lease.interval = 0.01
    lease.start_heartbeat()
    assert writing.wait(5)
    lease.release()
    lease._thread.join()
    assert not lease.path.exists()
