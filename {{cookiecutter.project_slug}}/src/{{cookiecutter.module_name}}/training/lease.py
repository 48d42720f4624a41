"""One writer per run: `<storage>/checkpoints/<run_name>/lease.json` names the session that
trains the run, with a heartbeat. Another session is refused (exit code 4) unless the holder is
gone or `--take-over`; Drive has no atomic create, so across VMs a holder that finds another token
at a heartbeat or before a checkpoint stops, writing nothing more (exit code 5). The rules:
docs/training-faults.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from ..core.files import atomic_write, temp_file
from ..core.progress import say

LEASE_FILE = "lease.json"
# Seconds between heartbeats; `PROJECT_LEASE_HEARTBEAT_S` changes it (tests use a fraction).
HEARTBEAT_S = float(os.environ.get("PROJECT_LEASE_HEARTBEAT_S", "30"))
STALE_AFTER = 3  # missed heartbeats after which another host's lease is stale
EXIT_LEASE_HELD = 4  # `train` refused: another session holds the run
EXIT_LEASE_LOST = 5  # `train` stopped (no checkpoint): another session took the run over


class LeaseHeld(RuntimeError):
    """Another live session holds the run; the message is one line naming it."""


def _process_start(pid: int) -> float | None:
    """When process `pid` started, or None when it is gone: with the pid it names one process, so
    a pid reused by an unrelated process does not keep a dead holder's lease."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def read_lease(path: Path) -> dict[str, Any] | None:
    """The lease in `path`: None when there is none, {} when it is unreadable (a torn sync)."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def holder(doc: dict[str, Any]) -> str:
    """`host <h>, pid <p>, since <t>` for messages."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(doc.get("started", 0)))
    return f"host {doc.get('host', '?')}, pid {doc.get('pid', '?')}, since {since}"


def why_free(doc: dict[str, Any] | None, now: float) -> str | None:
    """Why the lease `doc` may be taken over without asking ('' = there is none), or None when
    its holder may still be alive."""
    if not doc:
        return ""
    if doc.get("host") == socket.gethostname():
        pid = int(doc.get("pid", 0))
        started = _process_start(pid)
        if pid == os.getpid() or started is None or doc.get("pid_start") not in (None, started):
            return f"its process {pid} on this host is gone"
        return None
    interval = float(doc.get("heartbeat_s", HEARTBEAT_S))
    age = now - float(doc.get("heartbeat", 0))
    if age > STALE_AFTER * interval:
        return (
            f"its last heartbeat was {age:.0f} s ago (stale after {STALE_AFTER} x {interval:g} s)"
        )
    return None


def watch(path: Path, doc: dict[str, Any], what: str) -> str | None:
    """Wait, saying so, until another host's lease `doc` on `what` (`run 'baseline'`) beats
    again or is replaced (None), is released ('') or goes stale (why it is free now)."""
    interval = float(doc.get("heartbeat_s", HEARTBEAT_S))
    beat = float(doc.get("heartbeat", 0))
    stale_at = beat + STALE_AFTER * interval
    say(
        f"{what[:1].upper()}{what[1:]} is held by {holder(doc)}, whose last heartbeat was "
        f"{time.time() - beat:.0f} s ago: waiting up to {stale_at - time.time():.0f} s for the "
        f"next one (a live session beats every {interval:g} s); without one its VM is gone and "
        "this session takes it over.",
    )
    poll = min(5.0, max(interval / 10, 0.05))
    while (now := time.time()) <= stale_at:
        time.sleep(min(poll, stale_at - now + 0.01))
        seen = read_lease(path)
        if seen is None:
            return ""  # released: its holder finished
        if seen.get("token") != doc.get("token") or seen.get("heartbeat") != doc.get("heartbeat"):
            return None  # it beat (alive), or another session took it
    return why_free(read_lease(path), time.time())


class Lease:
    """This session's claim on one run folder; `acquire` makes one."""

    def __init__(self, run_dir: Path, run_name: str, kind: str = "run") -> None:
        self.path = run_dir / LEASE_FILE
        self.run_name = run_name
        self.what = f"{kind} '{run_name}'"  # for messages: a sweep's lease is on the sweep
        self.interval = HEARTBEAT_S
        self.token = uuid.uuid4().hex
        self.doc = {
            "run_name": run_name,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()),
            "started": time.time(),
            "heartbeat": time.time(),
            "heartbeat_s": self.interval,
            "token": self.token,
        }
        self.lost = ""  # why another session has the run now, or ''
        self.storage_fault = ""  # the last heartbeat write that failed, or ''
        self._stop = threading.Event()
        self._writing = threading.Lock()  # a heartbeat's write, or release's removal
        self._thread: threading.Thread | None = None

    @classmethod
    def acquire(
        cls, run_dir: Path, run_name: str, take_over: bool = False, kind: str = "run"
    ) -> Lease:
        """Claim `run_dir` for this process (the `kind` named `run_name`), or raise LeaseHeld
        naming the holder."""
        lease = cls(run_dir, run_name, kind)
        current = read_lease(lease.path)
        reason = "--take-over" if take_over and current else why_free(current, time.time())
        if reason is None and (current or {}).get("host") != socket.gethostname():
            reason = watch(lease.path, current or {}, lease.what)
            current = read_lease(lease.path)
        if reason is None:
            raise LeaseHeld(
                f"{lease.what} is being trained by another session ({holder(current or {})}; "
                f"lease {lease.path}). Wait for it, use another run_name, or take the run over "
                f"with `train --take-over` if that session is gone"
            )
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            if current is None:
                lease._create()
            else:
                reason = reason or "its lease file was unreadable"
                say(f"Taking over {lease.what} from {holder(current)}: {reason}.")
                atomic_write(lease.path, json.dumps(lease.doc, indent=1))
        except OSError as exc:  # a full or unreachable storage: a storage fault, not a refusal
            lease.storage_fault = str(exc)
            say(
                f"WARNING: lease not written to {lease.path} ({exc.strerror or exc}); storage "
                "fault, training goes on and each heartbeat tries to write it again",
            )
            return lease
        if (read_lease(lease.path) or {}).get("token") != lease.token:  # lost a race
            raise lease._raced()
        return lease

    def _raced(self) -> LeaseHeld:
        held = holder(read_lease(self.path) or {})
        return LeaseHeld(
            f"{self.what} was claimed by another session at the same moment ({held}); "
            "use another run_name"
        )

    def _create(self) -> None:
        """Write the lease only if there is none: a hard link of a finished file is an atomic
        create with content on local disks; file systems without links get a plain write."""
        tmp = Path(temp_file(self.path))
        try:
            tmp.write_text(json.dumps(self.doc, indent=1))
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                raise self._raced() from None
            except OSError:  # no hard links (FUSE mounts such as Drive): best effort
                os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)

    def check(self) -> bool:
        """Whether the lease is still this session's, read again (no write: a take-over written
        meanwhile is not overwritten); else why not, in `lost`."""
        current = read_lease(self.path)
        if current and current.get("token") != self.token:
            self.lost = f"{self.what} was taken over by {holder(current)}"
        return not self.lost

    def beat(self) -> None:
        """Refresh the lease's time, or note that another session took it; none once released."""
        with self._writing:
            if self._stop.is_set():
                return
            try:
                if not self.check():
                    return
                self.doc["heartbeat"] = time.time()  # into the run's folder, never made again
                atomic_write(self.path, json.dumps(self.doc, indent=1), make_folder=False)
            except OSError as exc:  # ENOSPC, EIO, a dropped FUSE mount: a storage fault
                if not self.storage_fault:
                    say(
                        f"WARNING: lease heartbeat not written to {self.path} "
                        f"({exc.strerror or exc}); storage fault, still training, retrying every "
                        f"{self.interval:g} s",
                    )
                self.storage_fault = str(exc)
                return
            if self.storage_fault:
                say(f"Lease heartbeat written again to {self.path}.")
                self.storage_fault = ""

    def start_heartbeat(self) -> Lease:
        """Beat every `interval` seconds in a daemon thread until `release`."""

        def loop() -> None:
            while not self._stop.wait(self.interval) and not self.lost:
                self.beat()

        self._thread = threading.Thread(target=loop, name="lease-heartbeat", daemon=True)
        self._thread.start()
        return self

    def release(self) -> None:
        """Stop the heartbeat and remove the lease if it is still ours: after a heartbeat still
        being written on a slow storage (one that hangs for a minute leaves it to go stale)."""
        self._stop.set()
        if not self._writing.acquire(timeout=60):
            return
        try:
            if (read_lease(self.path) or {}).get("token") == self.token:
                with contextlib.suppress(OSError):
                    self.path.unlink()
        finally:
            self._writing.release()
