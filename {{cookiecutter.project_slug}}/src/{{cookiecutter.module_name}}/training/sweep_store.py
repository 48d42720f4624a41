"""The study of a sweep on shared storage: one event file per session, merged on read.

`<storage>/sweeps/<name>/sessions/<host>-<pid>-<token>.jsonl`: each session (one `sweep`
process) appends JSON lines to its own file only, and reads every file. Nothing else is shared:
Google Drive has no atomic create across VMs and syncs whole files with a lag, so one file
appended to by two hosts (Optuna's journal file, a lock file) loses lines or trials; a file with
one writer can only end in a torn last line, which readers skip.

The rules that make a shared study out of that:
1. Trial numbers are 0 .. n_trials-1. A session claims (number, generation) by appending a
   `claim`; the earliest claim (time, session) of each pair wins, for every reader.
2. Settle time: after a claim a session waits `settle` seconds (longer than the storage's sync
   lag plus clock skew) and reads again before it trains: every rival's earlier claim is then
   visible, so both sides agree on the winner. A session that sees no other live session skips
   the wait: every session waits `settle` once after its `start` and beats every `heartbeat`
   seconds, so a rival cannot be invisible to it.
3. Results (`report`, `finish`) count only from the winner of the newest generation.
4. A session is gone after `stop`, when its process is gone (same host), or when it has been
   silent for `gone_after` seconds (another host). Its unfinished trial is claimed again as the
   next generation with the same params, and trains on from its checkpoint (the run's lease
   stops a session that was only slow).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .lease import STALE_AFTER, _process_start, why_free

SESSIONS = "sessions"
FINISHED = ("COMPLETE", "PRUNED", "FAIL")


@dataclass
class TrialView:
    """One trial number as the merged events tell it."""

    number: int
    params: dict[str, Any] = field(default_factory=dict)
    owners: list[str] = field(default_factory=list)  # the winner of each generation
    claimed: list[float] = field(default_factory=list)  # when each generation was claimed
    last: list[float] = field(default_factory=list)  # its owner's last event for it
    steps: dict[int, float] = field(default_factory=dict)  # epoch -> reported value
    state: str = "RUNNING"
    value: float | None = None

    @property
    def gen(self) -> int:
        return len(self.owners) - 1

    @property
    def owner(self) -> str:
        return self.owners[-1]

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def duration_s(self) -> float:
        """Time its owners spent on it (claim to last event), over every generation."""
        return sum(max(b - a, 0.0) for a, b in zip(self.claimed, self.last, strict=True))


@dataclass
class SessionView:
    """One session (a `sweep` process) as its events tell it."""

    id: str
    header: dict[str, Any] = field(default_factory=dict)  # its `start` event
    first: float = 0.0
    last: float = 0.0
    stopped: bool = False


@dataclass
class View:
    """The merged study: trials by number and sessions by id."""

    trials: dict[int, TrialView]
    sessions: dict[str, SessionView]

    def finished(self, below: int) -> list[TrialView]:
        return [t for t in self.trials.values() if t.finished and t.number < below]


def default_settle(folder: Path) -> float:
    """Seconds to wait after a claim: `$PROJECT_SWEEP_SETTLE_S`, else by storage: Google Drive
    60 (its sync lag has no stated bound), Cloud Storage 10, a local folder 1."""
    if "PROJECT_SWEEP_SETTLE_S" in os.environ:
        return float(os.environ["PROJECT_SWEEP_SETTLE_S"])
    text = str(folder.resolve())
    if text.startswith("/content/drive"):
        return 60.0
    gcs = str(Path(os.environ.get("PROJECT_GCS_MOUNT", "/gcs")).resolve())
    return 10.0 if text.startswith(gcs + os.sep) else 1.0


class StudyStore:
    """The event files of one sweep; `open` makes this process a session that may write."""

    def __init__(self, folder: Path, settle: float, heartbeat: float) -> None:
        self.folder = folder / SESSIONS
        self.settle = settle
        self.heartbeat = heartbeat
        # Silent longer than this (another host): gone. Covers a claim's settle, a beat missed.
        self.gone_after = 2 * settle + STALE_AFTER * heartbeat
        self.host = socket.gethostname()
        safe_host = re.sub(r"[^A-Za-z0-9._-]", "_", self.host)[:40]
        self.session = f"{safe_host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path = self.folder / f"{self.session}.jsonl"
        self.opened = 0.0
        self._seq = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beats: threading.Thread | None = None

    # -- writing: this session's file only ----------------------------------------------------
    def open(self, header: dict[str, Any]) -> None:
        """Start this session: the `start` event, the heartbeat, then one settle time, so that
        every live session is visible before the first claim (rule 2)."""
        pid = os.getpid()
        self.append(
            {
                "op": "start",
                "host": self.host,
                "pid": pid,
                "pid_start": _process_start(pid),
                **header,
            }
        )
        self.opened = time.time()
        self._beats = threading.Thread(target=self._beat, name="sweep-heartbeat", daemon=True)
        self._beats.start()
        time.sleep(self.settle)

    def append(self, event: dict[str, Any]) -> None:
        """Append one event (a JSON line, flushed and fsynced) to this session's file."""
        with self._lock:
            self._seq += 1
            line = json.dumps(
                {"ts": time.time(), "session": self.session, "seq": self._seq, **event}
            )
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                f.write((line + "\n").encode())
                f.flush()
                os.fsync(f.fileno())

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            with contextlib.suppress(OSError):  # a storage fault: the next beat tries again
                self.append({"op": "beat"})

    def close(self) -> None:
        """End this session cleanly: its unfinished trial is free at once for the next one."""
        self._stop.set()
        if self._beats is not None:
            self._beats.join(timeout=5)
            with contextlib.suppress(OSError):
                self.append({"op": "stop"})

    # -- reading: every session's file ---------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        """Every readable event of every session, oldest first."""
        found: list[dict[str, Any]] = []
        for path in sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else []:
            try:
                data = path.read_bytes()
            except OSError:
                continue  # a file being synced: read it next time
            for line in data.splitlines(keepends=True):
                if not line.endswith(b"\n"):
                    break  # a torn last line: its writer died mid-write, or a sync is under way
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict) and {"ts", "session", "op"} <= event.keys():
                        found.append(event)  # a damaged line costs that event only
        found.sort(key=lambda e: (e["ts"], e["session"], e.get("seq", 0)))
        return found

    def view(self) -> View:
        """The study now (see `fold`)."""
        return fold(self.events())

    # -- liveness and claims -------------------------------------------------------------------
    def active(self, session: SessionView, now: float | None = None) -> bool:
        """Whether `session` may still be running: not stopped, and its process alive (same
        host) or heard from within `gone_after` seconds (another host): the run lease's rule."""
        if session.stopped:
            return False
        doc = {
            "host": session.header.get("host"),
            "pid": session.header.get("pid", 0),
            "pid_start": session.header.get("pid_start"),
            "heartbeat": session.last,
            "heartbeat_s": self.gone_after / STALE_AFTER,
        }
        if doc["host"] == self.host and doc["pid"] == os.getpid():
            return session.id == self.session
        return why_free(doc, time.time() if now is None else now) is None

    def rivals(self, view: View) -> list[SessionView]:
        """The other sessions that may still be running."""
        now = time.time()
        return [s for s in view.sessions.values() if s.id != self.session and self.active(s, now)]

    def claim(self, number: int, gen: int, params: dict[str, Any]) -> bool:
        """Try to take trial `number`, generation `gen` (rule 2); True when this session won."""
        view = self.view()
        known = view.trials.get(number)
        if known is not None and len(known.owners) > gen:
            return known.owners[gen] == self.session  # already decided
        alone = not self.rivals(view)
        self.append({"op": "claim", "number": number, "gen": gen, "params": params})
        if not alone:
            time.sleep(self.settle)
        won = self.view().trials.get(number)
        return won is not None and len(won.owners) > gen and won.owners[gen] == self.session

    def holds(self, number: int, gen: int, view: View | None = None) -> bool:
        """Whether this session still owns the newest generation of `number`."""
        trial = (view or self.view()).trials.get(number)
        return trial is not None and trial.gen == gen and trial.owner == self.session


def fold(events: list[dict[str, Any]]) -> View:
    """The study from the merged events: claims decide owners (the earliest per number and
    generation), then the owners' reports and finishes fill the trials in."""
    sessions: dict[str, SessionView] = {}
    claims: dict[tuple[int, int], dict[str, Any]] = {}
    for e in events:
        s = sessions.setdefault(e["session"], SessionView(e["session"], first=e["ts"]))
        s.last = max(s.last, e["ts"])
        if e["op"] == "start":
            s.header = e
        elif e["op"] == "stop":
            s.stopped = True
        elif e["op"] == "claim":
            claims.setdefault((int(e["number"]), int(e["gen"])), e)  # sorted: the first wins
    trials: dict[int, TrialView] = {}
    for (number, gen), claim in sorted(claims.items()):
        if gen != len(trials[number].owners if number in trials else []):
            continue  # a generation without its predecessor: never claimed by these rules
        trial = trials.setdefault(number, TrialView(number, dict(claim.get("params") or {})))
        trial.owners.append(claim["session"])
        trial.claimed.append(claim["ts"])
        trial.last.append(claim["ts"])
    for e in events:
        trial = trials.get(e.get("number", -1)) if e["op"] in ("report", "finish") else None
        gen = int(e.get("gen", -1))
        if trial is None or not 0 <= gen <= trial.gen or trial.owners[gen] != e["session"]:
            continue
        trial.last[gen] = max(trial.last[gen], e["ts"])
        if e["op"] == "report":
            trial.steps.setdefault(int(e["step"]), e["value"])  # a resumed epoch repeats it
        elif gen == trial.gen and not trial.finished and e.get("state") in FINISHED:
            trial.state, trial.value = e["state"], e.get("value")
    return View(trials, sessions)
