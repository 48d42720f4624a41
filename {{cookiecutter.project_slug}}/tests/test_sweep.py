"""`sweep`: the search space, the shared study (claims, liveness, resume), pruning, `--best`,
a SIGKILL in the middle of a trial, and two sweep processes on one study."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import PROJECT, cli, cli_env, copy_checkout, sets

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import ConfigError, load_params, sweep_space
from {{ cookiecutter.module_name }}.training import sweep_store
from {{ cookiecutter.module_name }}.training.checkpoints import list_checkpoints
from {{ cookiecutter.module_name }}.training.sweep import Sweep, next_trial, propose
from {{ cookiecutter.module_name }}.training.sweep_store import StudyStore, fold

# Small trials on the bundled digits: 1438 training examples.
SMALL = ["train.batch_size=32", "train.steps_per_execution=11", "model.hidden_units=[16]"]


def params_with(*overrides: str):
    return load_params(PROJECT / "params.yaml", list(overrides))


# -- the search space ------------------------------------------------------------------------------
BAD_SPACES = [
    ("{trian.lr: {low: 0.1, high: 1.0}}", "sweep.space.trian.lr: not a params key"),
    ("{train: {low: 0.1, high: 1.0}}", "sweep.space.train: a section"),
    ("{run_name: {choices: [a, b]}}", "sweep.space.run_name: run_name cannot be searched"),
    ("{train.learning_rate: {low: 0.0, high: 0.1, log: true}}", "needs low > 0"),
    ("{train.learning_rate: {low: 0.1, high: 0.01}}", "low (0.1) must be below high"),
    ("{train.learning_rate: {low: 0.1}}", "give low and high, or choices"),
    ("{train.learning_rate: {low: 0.1, hi: 1.0}}", "unknown field 'hi'"),
    ("{train.optimizer: {low: 1, high: 2}}", "train.optimizer is not a number"),
    ("{train.optimizer: {choices: [adam, rmsprop]}}", "rmsprop is refused"),
    ("{train.optimizer: {choices: []}}", "choices must be a non-empty list"),
    ("{train.optimizer: {choices: [adam, adam]}}", "a choice is listed twice"),
    ("{train.epochs: {low: 1.5, high: 4}}", "low and high must be integers"),
    ("{model.dropout: {low: 0.0, high: 1.5}}", "1.5 is refused"),
    ("{train.learning_rate: 0.1}", "sweep.space: expected"),
]


@pytest.mark.parametrize(("space", "message"), BAD_SPACES)
def test_a_bad_space_is_one_line_naming_the_key(space: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        params_with(f"sweep.space={space}")
    text = str(err.value)
    assert message in text and "\n" not in text
    assert "example:" in text


def test_grid_needs_choices_and_enough_points() -> None:
    with pytest.raises(ConfigError, match=r"sweep.space.train.learning_rate: the grid sampler"):
        params_with("sweep.sampler=grid")
    grid = (
        "sweep.space={train.optimizer: {choices: [adam, adamw]}, train.epochs: {choices: [1, 2]}}"
    )
    with pytest.raises(ConfigError, match=r"sweep.n_trials: 20, but the grid has 4 points"):
        params_with("sweep.sampler=grid", grid)
    assert len(sweep_space(params_with("sweep.sampler=grid", grid, "sweep.n_trials=4"))) == 2


def test_the_default_space_and_its_kinds() -> None:
    dims = sweep_space(
        params_with(
            "sweep.space={train.epochs: {low: 2, high: 8}, model.hidden_units: "
            "{choices: [[64], [128, 64]]}, train.learning_rate: {low: 1.0e-4, "
            "high: 1.0e-2, log: true}}"
        )
    )
    assert dims["train.epochs"].integer and not dims["train.learning_rate"].integer
    assert dims["model.hidden_units"].override([128, 64]) == "model.hidden_units=[128, 64]"
    assert set(sweep_space(params_with())) == {
        "train.learning_rate",
        "model.dropout",
        "train.optimizer",
    }


def test_a_bad_space_stops_the_command_with_exit_2(capsys) -> None:
    space = "sweep.space={train.learning_rate: {low: 0, high: 1, log: true}}"
    code = main(["sweep", "--params", str(PROJECT / "params.yaml"), "--set", space])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: sweep.space.train.learning_rate:")
    assert len(err.splitlines()) == 1


# -- the study's events --------------------------------------------------------------------------
def test_fold_earliest_claim_wins_and_only_owners_count(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()

    def write(session: str, *events: dict) -> None:
        with open(folder / f"{session}.jsonl", "a") as f:
            for e in events:
                f.write(json.dumps({"session": session, **e}) + "\n")

    write(
        "a",
        {"ts": 1, "op": "start"},
        {"ts": 2, "op": "claim", "number": 0, "gen": 0, "params": {"x": 1}},
        {"ts": 5, "op": "report", "number": 0, "gen": 0, "step": 1, "value": 0.5},
        {"ts": 6, "op": "finish", "number": 0, "gen": 0, "state": "COMPLETE", "value": 0.4},
    )
    write(
        "b",
        {"ts": 1.5, "op": "start"},
        {"ts": 3, "op": "claim", "number": 0, "gen": 0, "params": {"x": 2}},
        {"ts": 4, "op": "report", "number": 0, "gen": 0, "step": 1, "value": 9.0},
        {"ts": 7, "op": "claim", "number": 1, "gen": 1, "params": {}},
    )
    (folder / "c.jsonl").write_bytes(b'{"ts": 8, "session": "c", "op": "st')  # torn: skipped
    (folder / "d.jsonl").write_text('not json\n{"ts": 9, "session": "d", "op": "stop"}\n')
    view = StudyStore(tmp_path, 0.0, 1.0).view()
    t = view.trials[0]
    assert t.owners == ["a"] and t.params == {"x": 1}  # b's later claim lost
    assert t.steps == {1: 0.5} and (t.state, t.value) == ("COMPLETE", 0.4)  # b's report ignored
    assert t.duration_s == 4
    assert 1 not in view.trials  # generation 1 without a generation 0
    assert view.sessions["d"].stopped and "c" not in view.sessions


class LaggyStore(StudyStore):
    """Another session's events show up `lag` seconds late, as across VMs on Drive."""

    lag = 0.0

    def events(self) -> list[dict]:
        now = time.time()
        return [
            e for e in super().events() if e["session"] == self.session or e["ts"] <= now - self.lag
        ]


def _race(folder: Path, settle: float, lag: float, rounds: int) -> list[tuple[bool, bool]]:
    """Two sessions on two 'hosts' claim each number at the same moment; who won each."""
    stores = []
    for host in ("vm-a", "vm-b"):
        store = LaggyStore(folder, settle, heartbeat=0.1)
        store.host, store.lag = host, lag
        stores.append(store)
    threads = [threading.Thread(target=s.open, args=({},)) for s in stores]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    time.sleep(lag + 0.1)  # each sees the other (and so takes the settle path)
    results = [_claim_together(stores, number) for number in range(rounds)]
    for store in stores:
        store.close()
    return results


def _claim_together(stores: list[StudyStore], number: int) -> tuple[bool, bool]:
    """Both sessions claim `number` at the same moment (a barrier); whether each won."""
    barrier, won = threading.Barrier(2), [False, False]

    def claim(i: int) -> None:
        barrier.wait()
        won[i] = stores[i].claim(number, 0, {"i": i})

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return won[0], won[1]


def test_claims_with_a_settle_time_have_one_winner_despite_the_lag(tmp_path: Path) -> None:
    results = _race(tmp_path / "ok", settle=0.5, lag=0.2, rounds=8)
    assert all(a != b for a, b in results), results  # exactly one winner every time
    # The control: without the settle time both sessions take the same trial.
    results = _race(tmp_path / "control", settle=0.0, lag=0.2, rounds=8)
    assert any(a and b for a, b in results), results


def test_a_lone_session_claims_without_waiting(tmp_path: Path, monkeypatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(sweep_store.time, "sleep", slept.append)
    store = StudyStore(tmp_path, settle=5.0, heartbeat=60.0)
    store.open({})
    assert slept == [5.0]  # once, after its start
    assert store.claim(0, 0, {}) and slept == [5.0]
    rival = StudyStore(tmp_path, settle=5.0, heartbeat=60.0)
    rival.host = "other-vm"
    rival.open({})
    assert store.claim(1, 0, {}) and slept[-1] == 5.0 and len(slept) == 3  # waits: a rival
    assert not rival.claim(1, 0, {})  # already decided, seen at once
    rival.close()
    store.close()


def test_a_session_is_gone_when_stopped_dead_or_silent(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    me = StudyStore(tmp_path, settle=0.1, heartbeat=1.0)
    now = time.time()
    events = {
        "stopped": [{"op": "start", "host": "vm-x"}, {"op": "stop"}],
        "dead": [{"op": "start", "host": me.host, "pid": int(dead)}],
        "silent": [{"op": "start", "host": "vm-x", "pid": 1}],
        "live": [{"op": "start", "host": "vm-y", "pid": 1}],
    }
    for name, evs in events.items():
        age = me.gone_after + 5 if name == "silent" else 0.0
        lines = [json.dumps({"ts": now - age, "session": name, **e}) for e in evs]
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    view = me.view()
    assert {s.id for s in me.rivals(view)} == {"live"}


# -- proposals and the order of trials ------------------------------------------------------------
def _sweep(tmp_path: Path, *overrides: str) -> Sweep:
    params = params_with(*overrides)
    store = StudyStore(tmp_path / "study", settle=0.0, heartbeat=60.0)
    return Sweep(params, PROJECT / "params.yaml", tmp_path, [], sweep_space(params), store)


def test_proposals_are_seeded_by_trial_number(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    view = sweep.store.view()
    assert propose(sweep, view, 3) == propose(sweep, view, 3)
    assert propose(sweep, view, 3) != propose(sweep, view, 4)
    lists = _sweep(tmp_path, "sweep.space={model.hidden_units: {choices: [[8], [16, 8]]}}")
    assert propose(lists, lists.store.view(), 0)["model.hidden_units"] in ([8], [16, 8])


def test_an_orphan_is_resumed_first_under_its_number(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path, "sweep.n_trials=3")
    folder = sweep.store.folder
    folder.mkdir(parents=True)
    old = time.time() - 10
    gone = [
        {"op": "start", "host": "vm-gone", "pid": 1},
        {"op": "claim", "number": 0, "gen": 0, "params": {"model.dropout": 0.1}},
        {"op": "finish", "number": 0, "gen": 0, "state": "COMPLETE", "value": 0.3},
        {"op": "claim", "number": 1, "gen": 0, "params": {"model.dropout": 0.2}},
        {"op": "stop"},
    ]
    lines = [json.dumps({"ts": old + i, "session": "gone", **e}) for i, e in enumerate(gone)]
    (folder / "gone.jsonl").write_text("\n".join(lines) + "\n")
    sweep.store.open({})
    assert next_trial(sweep) == (1, 1, {"model.dropout": 0.2})  # its own number and values
    number, gen, _ = next_trial(sweep)
    assert (number, gen) == (2, 0)  # then a new one
    for n, g in ((1, 1), (2, 0)):
        sweep.store.append({"op": "finish", "number": n, "gen": g, "state": "PRUNED"})
    assert next_trial(sweep) is None  # all three finished
    sweep.store.close()


# -- whole sweeps ----------------------------------------------------------------------------------
def _trials(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_pruned_trial_best_promoted_and_dvc_does_not_train_again(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Three trials in this process (a grid: 3e-3 first, then two learning rates too small to
    learn in one epoch: pruned), then `sweep --best`; DVC then takes the promoted model as the
    train stage."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    project = copy_checkout(tmp_path / "project")
    (project / "data" / "external").mkdir(parents=True)  # a clone has it (.gitkeep): dvc.yaml's dep
    storage = tmp_path / "storage"
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(storage))
    monkeypatch.setenv("PROJECT_SWEEP_SETTLE_S", "0.2")
    env = {**cli_env(storage), "DVC_NO_ANALYTICS": "1", "PATH": _python_first(tmp_path)}
    for cmd in (
        ["git", "init", "-q"],
        [sys.executable, "-m", "dvc", "config", "--local", "core.check_update", "false"],
        [sys.executable, "-m", "dvc", "repro", "prepare"],
    ):
        done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    grid = [
        "sweep.sampler=grid",
        "sweep.n_trials=3",
        "sweep.startup_trials=1",
        "sweep.warmup_epochs=1",
        "sweep.keep_best=1",
        "train.epochs=2",
        *SMALL,
        "sweep.space={train.learning_rate: {choices: [3.0e-3, 1.0e-5, 2.0e-5]}}",
    ]
    args = ["--params", str(project / "params.yaml"), *sets(grid)]
    assert main(["sweep", *args]) == 0
    out = capsys.readouterr().out
    rows = _trials(project / "results/sweeps/lr-dropout/trials.csv")
    assert [r["number"] for r in rows] == ["0", "1", "2"]
    assert list(rows[0])[:4] == ["number", "state", "value", "train.learning_rate"]
    assert [r["state"] for r in rows] == ["COMPLETE", "PRUNED", "PRUNED"], out
    assert "Stopped early: trial 1 pruned" in out
    assert (project / "results/sweeps/lr-dropout/trials.png").stat().st_size > 1000
    assert (project / "results/sweeps/lr-dropout/1/models/model.keras").is_file()
    assert not (project / "results/models/model.keras").exists()  # trials write their own
    kept = sorted(p.name for p in (storage / "checkpoints").iterdir())
    assert kept == ["lr-dropout-0"]  # the best one's checkpoints only (keep_best: 1)

    before = (project / "params.yaml").read_text()
    shutil.rmtree(project / "results/sweeps/lr-dropout/0")  # trained on "another VM"
    assert main(["sweep", "--best", *args]) == 0
    out = capsys.readouterr().out
    assert "from the checkpoints of run 'lr-dropout-0'" in out and "Promoted trial 0" in out
    promoted = load_params(project / "params.yaml")
    assert promoted.run_name == "lr-dropout-0" and promoted.train.learning_rate == 3.0e-3
    assert promoted.train.epochs == 2 and promoted.sweep.n_trials == 20  # sweep.* not written
    after = (project / "params.yaml").read_text()
    comments = [line.split("#", 1)[1] for line in before.splitlines() if "#" in line]
    assert all(c in after for c in comments)  # every comment kept
    record = sorted((project / "results/runs").glob("*/manifest.json"))[-1]  # train.json's run
    assert json.loads(record.read_text())["facts"]["run_name"] == "lr-dropout-0"
    for cmd in (["commit", "--force", "train"], ["status", "train", "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "dvc", *cmd],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout or "{}") == {}  # `dvc repro` would not train again


def _python_first(tmp_path: Path) -> str:
    """PATH with a `python` that is this interpreter (dvc.yaml's stages run `python`)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return os.pathsep.join([str(bindir), os.environ.get("PATH", "")])


def _study(storage: Path, name: str):
    return fold(StudyStore(storage / "sweeps" / name, 0.0, 1.0).events())


# Four trials of 3 epochs x 179 steps (batch 8), a checkpoint every 20 steps; no pruning.
KILL = [
    "sweep.n_trials=4",
    "sweep.pruner=none",
    "sweep.sampler=random",
    "train.epochs=3",
    "train.batch_size=8",
    "train.steps_per_execution=10",
    "train.checkpoint_every_steps=20",
    "model.hidden_units=[16]",
    "sweep.name=kill",
]


@pytest.mark.slow
def test_sigkill_in_the_middle_of_trial_2_then_the_sweep_finishes_it_and_the_rest(
    tmp_path: Path,
) -> None:
    """The second trial (number 1) is killed mid-run; the sweep started again trains it on from
    its checkpoint, then the third and fourth: four trials, none twice."""
    project = copy_checkout(tmp_path / "project")
    storage = tmp_path / "storage"
    env = cli_env(storage, PROJECT_SWEEP_SETTLE_S="0.2", PROJECT_LEASE_HEARTBEAT_S="0.5")
    proc = cli(["sweep", *sets(KILL)], project, env)
    ckpt = storage / "checkpoints" / "kill-1"
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        steps = [s for s, _ in list_checkpoints(ckpt)]
        if steps and max(steps) >= 200:  # in its second epoch (179 steps each)
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    first = proc.communicate(timeout=60)[0]
    assert proc.returncode == -signal.SIGKILL, first
    killed_at = max(s for s, _ in list_checkpoints(ckpt))

    again = cli(["sweep", *sets(KILL)], project, env)
    second = again.communicate(timeout=900)[0]
    assert again.returncode == 0, second
    resumed = re.search(r"Resuming run 'kill-1' from its checkpoint at step (\d+)", second)
    assert resumed and int(resumed.group(1)) == killed_at, second  # not from scratch
    assert "Trial 1 of 4 (kill-1), again (generation 1)" in second
    assert "Trial 0 of 4" not in second  # finished before the kill: not run again
    both = first + second
    for n in range(4):  # each trial's run started from step 0 exactly once
        assert both.count(f"Starting run 'kill-{n}' from step 0") == 1, n
    view = _study(storage, "kill")
    assert sorted(view.trials) == [0, 1, 2, 3]
    assert all(t.state == "COMPLETE" for t in view.trials.values())
    assert [len(view.trials[n].owners) for n in range(4)] == [1, 2, 1, 1]
    rows = _trials(project / "results/sweeps/kill/trials.csv")
    assert [r["number"] for r in rows] == ["0", "1", "2", "3"]


@pytest.mark.slow
def test_two_sweep_processes_share_a_study_without_running_a_trial_twice(tmp_path: Path) -> None:
    """Session A is paused (SIGSTOP: alive but silent) in its first trial while session B starts
    and claims trials; then both go on together over the four trials."""
    project = copy_checkout(tmp_path / "project")
    storage = tmp_path / "storage"
    env = cli_env(storage, PROJECT_SWEEP_SETTLE_S="1", PROJECT_LEASE_HEARTBEAT_S="0.5")
    shared = [*KILL[:-1], "train.epochs=2", "sweep.name=shared"]
    a = cli(["sweep", *sets(shared)], project, env)
    b = None
    try:
        _wait_for(storage / "checkpoints" / "shared-0", a)
        a.send_signal(signal.SIGSTOP)
        b = cli(["sweep", *sets(shared)], project, env)
        _wait_for(storage / "checkpoints" / "shared-1", b)
    finally:
        a.send_signal(signal.SIGCONT)
    out_a, out_b = a.communicate(timeout=900)[0], b.communicate(timeout=900)[0]
    assert a.returncode == 0 and b.returncode == 0, out_a + out_b
    ran_a = set(re.findall(r"Trial (\d) of 4", out_a))
    ran_b = set(re.findall(r"Trial (\d) of 4", out_b))
    assert "0" in ran_a and "1" in ran_b and not ran_a & ran_b, (ran_a, ran_b)
    assert ran_a | ran_b == {"0", "1", "2", "3"}
    view = _study(storage, "shared")
    assert all(len(t.owners) == 1 and t.state == "COMPLETE" for t in view.trials.values())
    assert len(view.sessions) == 2


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.is_dir():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.05)
