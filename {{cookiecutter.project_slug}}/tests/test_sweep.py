"""`sweep` on one machine: the search space, the study's journal (a cut last line, an old study),
seeds per trial, pruning, `--best`, a SIGKILL in the middle of a trial, the sweep's lease.
The database and its workers: test_sweep_database.py."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pandas as pd
import pytest
import tensorflow as tf
from conftest import PARAMS, PROJECT, cli, cli_env, copy_checkout, sets
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import COMMAND, ConfigError, load_params, sweep_space
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.training import checkpoints
from {{ cookiecutter.module_name }}.training import sweep as sweep_module
from {{ cookiecutter.module_name }}.training.checkpoints import list_checkpoints
from {{ cookiecutter.module_name }}.training.run_record import find_run
from {{ cookiecutter.module_name }}.training.sweep_results import (
    keep_best_checkpoints,
    plot_trials,
)
from {{ cookiecutter.module_name }}.training.sweep_study import (
    JOURNAL,
    Sweep,
    journal_storage,
    make_sampler,
    study_folder,
)
from {{ cookiecutter.module_name }}.training.trainer import TrainResult

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

# Small trials on the bundled digits: 1438 training examples.
SMALL = ["train.batch_size=32", "train.steps_per_execution=11", "model.hidden_units=[16]"]


def params_with(*overrides: str):
    return load_params(PARAMS, list(overrides))


# -- the search space ------------------------------------------------------------------------------
BAD_SPACES = [
    ("{trian.lr: {low: 0.1, high: 1.0}}", "sweep.space.trian.lr: not a params key"),
    ("{train: {low: 0.1, high: 1.0}}", "sweep.space.train: a section"),
    ("{run_name: {choices: [a, b]}}", "sweep.space.run_name: run_name cannot be searched"),
    (
        "{train.learning_rate: {low: 0.0, high: 0.1, log: true}}",
        "`low > 0` must hold for `log=True`",
    ),
    (
        "{train.learning_rate: {low: 0.1, high: 0.01}}",
        "`low <= high` must hold, but got (low=0.1, high=0.01)",
    ),
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
    assert dims["train.epochs"] == optuna.distributions.IntDistribution(2, 8)
    assert dims["train.learning_rate"] == optuna.distributions.FloatDistribution(
        1e-4, 1e-2, log=True
    )
    assert dims["model.hidden_units"].choices == ("[64]", "[128, 64]")  # Optuna stores text
    assert set(sweep_space(params_with())) == {
        "train.learning_rate",
        "model.dropout",
        "train.optimizer",
    }


def test_a_bad_space_stops_the_command_with_exit_2(capsys) -> None:
    space = "sweep.space={train.learning_rate: {low: 0, high: 1, log: true}}"
    code = main(["sweep", "--params", str(PARAMS), "--set", space])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: sweep.space.train.learning_rate:")
    assert len(err.splitlines()) == 1


def test_a_bad_component_argument_stops_the_sweep_before_any_trial(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """The registry's check runs at the sweep's start, as train's: not one failed trial each."""
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path))
    space = "sweep.space={model.args.height: {choices: [8, 16]}}"
    code = main(["sweep", "--params", str(PARAMS), "--set", space])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: sweep.space.model.args.height: "), err
    assert len(err.splitlines()) == 1 and not list(tmp_path.iterdir())


# -- the study on the storage root -----------------------------------------------------------------
def _journal(folder: Path, trials: int):
    """A journal with `trials` finished trials, written by Optuna itself."""
    storage = journal_storage(folder, mend=True)
    study = optuna.create_study(storage=storage, study_name="s")
    for _ in range(trials):
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        study.tell(trial, trial.params["x"])
    return folder / JOURNAL


def test_a_journal_cut_in_its_last_line_is_mended_before_the_next_write(tmp_path: Path) -> None:
    """Drive can lose a VM's last bytes: Optuna's reader fails once a line follows a cut one."""
    path = _journal(tmp_path / "cut", 2)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"op_code":4,"worker_id":"gone","tri')  # a cut append
    control = tmp_path / "control" / JOURNAL
    control.parent.mkdir()
    control.write_bytes(path.read_bytes())
    # The control, unmended: the next line glued to the cut one is unreadable (ValueError), or
    # the trial it made is missing when Optuna looks it up (AttributeError).
    with pytest.raises((ValueError, AttributeError)):
        for _ in range(2):  # append after the cut line, then read again
            storage = optuna.storages.journal.JournalStorage(
                optuna.storages.journal.JournalFileBackend(str(control))
            )
            study = optuna.load_study(study_name="s", storage=storage)
            study.tell(study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 0.5)
    study = optuna.load_study(study_name="s", storage=journal_storage(path.parent, mend=True))
    assert path.read_bytes() == whole
    study.tell(study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 0.5)
    again = optuna.load_study(study_name="s", storage=journal_storage(path.parent, mend=False))
    assert [t.state.name for t in again.get_trials()] == ["COMPLETE"] * 3


def test_a_study_of_the_old_event_files_is_refused_and_kept(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path))
    old = tmp_path / "sweeps" / "lr-dropout" / "sessions"
    old.mkdir(parents=True)
    (old / "vm-1-2-3.jsonl").write_text('{"op": "start"}\n')
    with pytest.raises(ConfigError) as err:
        study_folder(PROJECT, "lr-dropout")
    assert str(err.value).startswith("sweep.name: the study in ") and "\n" not in str(err.value)
    assert "--set sweep.name=lr-dropout-2" in str(err.value)
    assert [p.name for p in old.parent.iterdir()] == ["sessions"] and len(list(old.iterdir())) == 1


def test_proposals_are_seeded_by_trial_number_not_by_worker(tmp_path: Path, monkeypatch) -> None:
    """Two workers asking at once (two samplers, one study) get different values; the same
    trial number gets the same values from any sampler."""
    params = params_with("sweep.sampler=random")
    dims = sweep_space(params)
    storage = optuna.storages.InMemoryStorage()
    studies = [
        optuna.create_study(
            storage=storage, study_name="s", sampler=make_sampler(params, dims), load_if_exists=True
        )
        for _ in range(2)
    ]
    first, second = (s.ask(dims) for s in studies)
    assert (first.number, second.number) == (0, 1) and first.params != second.params
    again = optuna.create_study(sampler=make_sampler(params, dims)).ask(dims)
    assert again.params == first.params
    lists = params_with("sweep.space={model.hidden_units: {choices: [[8], [16, 8]]}}")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path))
    sweep = Sweep(lists, PARAMS, PROJECT, [])
    trial = sweep.study.ask(sweep.space)
    assert sweep.values(trial.params)["model.hidden_units"] in ([8], [16, 8])


# -- whole sweeps ----------------------------------------------------------------------------------
def test_the_figure_shows_choices_in_the_spaces_order_numbers_sorted() -> None:
    """Not in the order the trials first took them (64 before 32)."""
    space = {
        "train.batch_size": CategoricalDistribution([64, 32, 128]),
        "train.optimizer": CategoricalDistribution(["sgd", "adam"]),
        "train.learning_rate": FloatDistribution(1e-4, 1e-1, log=True),
    }
    table = pd.DataFrame(
        {
            "number": [0, 1, 2, 3],
            "state": ["COMPLETE", "COMPLETE", "PRUNED", "RUNNING"],
            "train.batch_size": [64.0, 32.0, 128.0, None],  # as Optuna's table holds them
            "train.optimizer": ["adam", "sgd", "adam", None],
            "train.learning_rate": [1e-3, 1e-2, 1e-4, None],
            "val_loss": [0.5, 0.4, 0.9, None],
        }
    )
    sweep = SimpleNamespace(monitor="val_loss", direction="minimize", space=space)
    _, sizes, optimizers, rates = plot_trials(sweep, table).axes
    assert [t.get_text() for t in sizes.get_xticklabels()] == ["32", "64", "128"]
    assert [t.get_text() for t in optimizers.get_xticklabels()] == ["sgd", "adam"]
    complete, pruned = (c.get_offsets()[:, 0].tolist() for c in sizes.collections)
    assert (complete, pruned) == ([1, 0], [2])  # 64 at 64's place
    assert optimizers.collections[0].get_offsets()[:, 0].tolist() == [1, 0]
    assert rates.get_xscale() == "log"


def test_the_figure_numbers_trials_in_whole_numbers() -> None:
    """Three trials: ticks 0, 1, 2 (not 0.5, 1.5 between them)."""
    space = {"train.learning_rate": FloatDistribution(1e-4, 1e-1, log=True)}
    table = pd.DataFrame(
        {
            "number": [0, 1, 2],
            "state": ["COMPLETE", "COMPLETE", "COMPLETE"],
            "train.learning_rate": [1e-3, 1e-2, 1e-4],
            "val_loss": [0.5, 0.4, 0.9],
        }
    )
    sweep = SimpleNamespace(monitor="val_loss", direction="minimize", space=space)
    figure = plot_trials(sweep, table)
    figure.draw_without_rendering()  # the labels are set when drawn
    labels = [t.get_text().lstrip("−") for t in figure.axes[0].get_xticklabels()]
    assert labels and all(label.isdigit() for label in labels), labels


def test_the_figure_of_a_sweep_whose_trials_all_failed_so_far_is_drawn() -> None:
    """The first trial failed (diverged, or out of memory): a searched key's log axis has no
    trial to draw and spans the space's range (matplotlib found no positive value to scale it
    by, and the sweep stopped with a traceback after the trial's line)."""
    space = {"train.learning_rate": FloatDistribution(1e-4, 1e-1, log=True)}
    table = pd.DataFrame(
        {"number": [0], "state": ["FAIL"], "train.learning_rate": [0.05], "val_loss": [None]}
    )
    sweep = SimpleNamespace(monitor="val_loss", direction="minimize", space=space)
    figure = plot_trials(sweep, table)
    figure.savefig(io.BytesIO(), format="png")  # as write_trials saves it
    assert figure.axes[1].get_xlim() == (1e-4, 1e-1)


def test_the_figures_value_axis_spans_the_complete_trials_pruned_ones_at_its_edge() -> None:
    """A pruned trial's value is of an early epoch, often far off: the axis is the complete
    trials' (0.07 to 0.23), not squashed at its bottom by a pruned 2.2 drawn in full."""
    space = {"train.learning_rate": FloatDistribution(1e-4, 1e-1, log=True)}
    table = pd.DataFrame(
        {
            "number": [0, 1, 2, 3],
            "state": ["COMPLETE", "PRUNED", "COMPLETE", "PRUNED"],
            "train.learning_rate": [1e-3, 1e-4, 1e-2, 1e-1],
            "val_loss": [0.07, 2.2, 0.23, 0.15],
        }
    )
    sweep = SimpleNamespace(monitor="val_loss", direction="minimize", space=space)
    for ax in plot_trials(sweep, table).axes:
        low, high = ax.get_ylim()
        assert 0.05 < low < 0.07 and 0.23 < high < 0.3, (low, high)
        assert ax.collections[1].get_offsets()[:, 1].tolist() == [high, 0.15]  # 2.2 at the edge


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
    assert list(rows[0]) == ["number", "state", "train.learning_rate", "val_loss"]
    assert [r["state"] for r in rows] == ["COMPLETE", "PRUNED", "PRUNED"], out
    assert "Trial 1 (lr-dropout-1): train.learning_rate=1e-05 -> pruned: val_loss " in out, out
    assert f"`{COMMAND} sweep --best --set=sweep.sampler=grid --set=sweep.n_trials=3 " in out
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
    assert (project / "results/models/model.keras").is_file()
    # The model's run record, as the model card finds it: trial 0's run (its results written
    # again from its checkpoints, in new bytes, by a session that recorded them)
    trained = find_run(project / "results", "models/model.keras")
    assert trained["facts"]["run_name"] == "lr-dropout-0"
    # As printed (no terminal to confirm): the train stage recorded, only evaluate runs, and
    # then every stage is up to date (evaluate.json, plots and card of the promoted model).
    (record,) = re.findall(r"`(dvc commit [^`]+)`", out)
    said = []
    for cmd in (record, "dvc status --json"):
        done = subprocess.run(
            cmd.replace("dvc ", f"{shlex.quote(sys.executable)} -m dvc "),
            shell=True,
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        said.append(done.stdout)
    assert "Stage 'train' didn't change, skipping" in said[0], said[0]
    assert "Running stage 'evaluate'" in said[0], said[0]
    assert json.loads(said[1] or "{}") == {}


def pruning_grid(name: str, n_trials: int) -> list[str]:
    """A grid whose first trial learns (3e-3) and whose later ones barely move: the pruner prunes
    trial 1 at epoch 1, after one startup trial and one warm-up epoch."""
    return [
        "sweep.sampler=grid",
        f"sweep.n_trials={n_trials}",
        "sweep.startup_trials=1",
        "sweep.warmup_epochs=1",
        f"sweep.name={name}",
        "train.epochs=3",
        *SMALL,
        "sweep.space={train.learning_rate: {choices: [3.0e-3, 1.0e-5, 2.0e-5]}}",
    ]


def test_a_trial_interrupted_as_it_is_pruned_stays_pruned_at_that_epoch(
    tmp_path: Path, tiny_project: Path, monkeypatch, capsys
) -> None:
    """Ctrl-C during the epoch at whose end the pruner prunes trial 1 (the signal lands in the
    epoch's last chunk; sent here at that epoch's end, before the trainer looks): the sweep stops
    (exit 130) with trial 1 pruned at epoch 1, as without the Ctrl-C; the sweep started again
    goes on with trial 2 and trains no epoch 2 of trial 1."""
    grid = pruning_grid("ctrl-c", n_trials=3)
    args = ["--params", str(tiny_project / "params.yaml"), *sets(grid)]
    prepare(load_params(tiny_project / "params.yaml"), tiny_project)
    real_train, sent = sweep_module.train, []

    def train_with_ctrl_c(params, project_dir, **kwargs):
        hooks, verdict = kwargs["hooks"], kwargs["hooks"].on_epoch

        def on_epoch(record):
            if params.run_name == "ctrl-c-1" and record["epoch"] == 1 and not sent:
                sent.append(record["epoch"])
                os.kill(os.getpid(), signal.SIGINT)  # the trainer's Stopper takes it
            return verdict(record)

        kwargs["hooks"] = dataclasses.replace(hooks, on_epoch=on_epoch)
        return real_train(params, project_dir, **kwargs)

    monkeypatch.setattr(sweep_module, "train", train_with_ctrl_c)
    assert main(["sweep", *args]) == 130
    first = capsys.readouterr().out
    assert main(["sweep", *args]) == 0
    both = first + capsys.readouterr().out
    assert re.findall(r"Trial 1 \(ctrl-c-1\).* pruned: val_loss \S+ at epoch (\d+)", both) == ["1"]
    assert "Trial 1 (ctrl-c-1) was cut off" not in both
    rows = _trials(tiny_project / "results/sweeps/ctrl-c/trials.csv")
    assert [r["state"] for r in rows] == ["COMPLETE", "PRUNED", "PRUNED"], both


def test_a_sweep_taken_over_writes_no_more_to_its_study(
    tmp_path: Path, tiny_project: Path, monkeypatch, capsys
) -> None:
    """Another session takes the sweep over (`sweep --take-over`; here its lease is written at
    trial 0's first epoch end): this one reports no more epochs to the study, asks for no new
    trial, tells it nothing of the trial (that session trains it on) and stops with exit code 5,
    naming that session."""
    grid = pruning_grid("taken", n_trials=3)
    args = ["--params", str(tiny_project / "params.yaml"), *sets(grid)]
    prepare(load_params(tiny_project / "params.yaml"), tiny_project)
    folder = tmp_path / "storage" / "sweeps" / "taken"
    real_train = sweep_module.train

    def train_taken_over(params, project_dir, **kwargs):
        verdict = kwargs["hooks"].on_epoch

        def on_epoch(record):
            other = {"host": "other-vm", "pid": 4242, "heartbeat": time.time(), "token": "x"}
            (folder / "lease.json").write_text(json.dumps(other))
            return verdict(record)

        kwargs["hooks"] = dataclasses.replace(kwargs["hooks"], on_epoch=on_epoch)
        return real_train(params, project_dir, **kwargs)

    monkeypatch.setattr(sweep_module, "train", train_taken_over)
    assert main(["sweep", *args]) == 5
    out = capsys.readouterr().out
    said = "-> stopped: sweep 'taken' was taken over by host other-vm, pid 4242"
    assert said in out and "Trial 1" not in out, out
    study = optuna.load_study(study_name="taken", storage=journal_storage(folder, mend=False))
    (trial,) = study.get_trials()
    assert trial.state == TrialState.RUNNING and trial.intermediate_values == {}, trial


class Killed(BaseException):
    """A SIGKILL at a chosen point: nothing after it runs (no `except Exception` takes it)."""


def test_a_trial_killed_after_it_is_pruned_is_told_pruned_without_training_again(
    tmp_path: Path, tiny_project: Path, monkeypatch, capsys
) -> None:
    """The session dies after trial 1's run stopped as pruned at epoch 1 (its epoch-end
    checkpoint saved) and before the study is told: the sweep started again tells it pruned at
    epoch 1 and trains no epoch 2 of it."""
    grid = pruning_grid("killed", n_trials=2)
    args = ["--params", str(tiny_project / "params.yaml"), *sets(grid)]
    prepare(load_params(tiny_project / "params.yaml"), tiny_project)
    real_train = sweep_module.train

    def train_then_die(params, project_dir, **kwargs):
        result = real_train(params, project_dir, **kwargs)
        if params.run_name == "killed-1":
            raise Killed  # before run_trial tells the study
        return result

    monkeypatch.setattr(sweep_module, "train", train_then_die)
    with pytest.raises(Killed):
        main(["sweep", *args])
    storage = journal_storage(study_folder(tiny_project, "killed"), mend=False)
    trial = optuna.load_study(study_name="killed", storage=storage).trials[1]
    assert "pruned" in trial.user_attrs and trial.state == TrialState.RUNNING
    monkeypatch.setattr(sweep_module, "train", real_train)
    assert main(["sweep", *args]) == 0
    second = capsys.readouterr().out
    assert "Resuming run 'killed-1'" not in second, second
    assert re.search(r"Trial 1 \(killed-1\) pruned: val_loss \S+ at epoch 1 ", second), second
    trial = optuna.load_study(study_name="killed", storage=storage).trials[1]
    assert (trial.state, list(trial.intermediate_values)) == (TrialState.PRUNED, [1]), second


def _python_first(tmp_path: Path) -> str:
    """PATH with a `python` that is this interpreter (dvc.yaml's stages run `python`)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return os.pathsep.join([str(bindir), os.environ.get("PATH", "")])


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
    """The second trial (number 1) is killed mid-run; the sweep started again takes it up under
    its own number and trains it on from its checkpoint, then the third and fourth: four trials,
    all complete, none twice."""
    project = copy_checkout(tmp_path / "project")
    storage = tmp_path / "storage"
    env = cli_env(storage, PROJECT_LEASE_HEARTBEAT_S="0.5")
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
    assert "Trial 1 (kill-1) was cut off; resuming it with its values" in second
    resumed = re.search(r"Resuming run 'kill-1' from its checkpoint at step (\d+)", second)
    assert resumed and int(resumed.group(1)) == killed_at, second  # not from scratch
    assert "Trial 0 " not in second  # finished before the kill: not run again
    both = first + second
    for n in range(4):  # each trial ended once, in one line
        assert both.count(f"Trial {n} (kill-{n}): ") == 1, n
    rows = _trials(project / "results/sweeps/kill/trials.csv")
    assert [(r["number"], r["state"]) for r in rows] == [(str(n), "COMPLETE") for n in range(4)]
    values = {tuple(r.values())[2:-1] for r in rows}
    assert len(values) == 4  # four points, none twice
    print(f"killed at step {killed_at};", *re.findall(r".*(?:kill-1\)|'kill-1' from).*", second))


@pytest.mark.slow
def test_a_sweep_of_many_trials_prints_a_line_per_trial_and_no_retracing_warning(
    tmp_path: Path, monkeypatch, capsys, caplog
) -> None:
    """One line per trial (its values to 4 significant digits, its result), train's preamble
    once, a note that holds for every trial once (train.mixed_precision on the CPU), no epoch
    lines, the checkpoints deleted said once. Each trial builds its model and training function
    afresh, on purpose: TensorFlow's warning of excessive retracing, from the sixth trial on, is
    not shown."""
    project = copy_checkout(tmp_path / "project")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    many = ["sweep.n_trials=7", "sweep.pruner=none", "train.epochs=1", "train.mixed_precision=true"]
    many += SMALL
    args = ["--params", str(project / "params.yaml"), *sets(many)]
    assert main(["prepare", *args]) == 0
    assert main(["sweep", *args]) == 0
    out = capsys.readouterr().out
    assert "Sweep 'lr-dropout': 7 trials (7 complete)" in out
    lines = out.splitlines()
    trials = [line for line in lines if line.startswith("Trial ")]
    said = [len(trials), out.count("Seed 42"), out.count("epoch 1/1"), out.count("Checkpoints")]
    said.append(out.count("Note: train.mixed_precision is ignored on CPU"))
    assert said == [7, 1, 0, 1, 1] and len(lines) <= 20, out
    assert all(re.fullmatch(r"Trial \d \(lr-dropout-\d\): .* -> val_loss \S+", t) for t in trials)
    rates = re.findall(r"train\.learning_rate=(\S+)", out)
    assert rates and all(rate == f"{float(rate):.4g}" for rate in rates), rates
    assert "kept for the 3 best (sweep.keep_best: Drive's quota)" in out
    assert not [r for r in caplog.records if "retracing" in r.getMessage()]  # TensorFlow's logger


@pytest.mark.slow
def test_a_line_that_holds_for_every_trial_is_said_once(tmp_path: Path, monkeypatch, capsys):
    """Without `prepare` (the bundled digits' note) and with a setting this hardware ignores
    (distribute.logical_cpus: the strategy's note), each trial would say the same lines: the
    sweep says each once, with its strategy line, and then one line per trial."""
    project = copy_checkout(tmp_path / "project")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    cpus = ["distribute.strategy=default", "distribute.logical_cpus=2"]
    three = ["sweep.n_trials=3", "sweep.pruner=none", "train.epochs=1", *cpus, *SMALL]
    assert main(["sweep", "--params", str(project / "params.yaml"), *sets(three)]) == 0
    out = capsys.readouterr().out
    lines = ["Note: data/manifest.json not found", "Note: distribute.logical_cpus is ignored"]
    lines += ["(distribute.strategy=default)", "Seed 42 "]
    assert [out.count(line) for line in lines] == [1, 1, 1, 1], out
    assert sum(line.startswith("Trial ") for line in out.splitlines()) == 3, out


def room_for_three(folder: Path) -> int:
    """Free space of a disk that holds three of the run's checkpoints but not a fourth."""
    sizes = [sum(f.stat().st_size for f in step.rglob("*")) for step in folder.glob("step-*")]
    return int(3.5 * max(sizes)) - sum(sizes) if sizes else 2**30


@pytest.mark.slow
def test_each_trial_says_its_pruned_checkpoints_and_its_divergence(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """A line said once for the sweep (`said_once`) is not one a trial's own news shares: two
    trials that diverge (a train.learning_rate far too high, not searched) on a disk that holds
    three checkpoints each both prune their run's step-000000011 and fail; each trial says which
    run's checkpoint went, and its line says why it failed and what to lower."""
    project = copy_checkout(tmp_path / "project")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setattr(checkpoints, "free_bytes", room_for_three)
    space = "sweep.space={model.dropout: {low: 0.0, high: 0.5}}"
    diverge = ["train.learning_rate=1e30", "train.optimizer=sgd", "train.epochs=1"]
    two = [space, *diverge, "sweep.n_trials=2", "train.checkpoint_every_steps=11", *SMALL]
    assert main(["sweep", "--params", str(project / "params.yaml"), *sets(two)]) == 0
    out = capsys.readouterr().out
    why = "val_loss is nan at epoch 1: training diverged; lower train.learning_rate"
    said = [line for line in out.splitlines() if line.startswith(("Pruning", "Trial", "Stopped"))]
    assert [line.split(": ")[0].split(" early")[0] for line in said] == [
        "Pruning lr-dropout-0/step-000000011",
        "Trial 0 (lr-dropout-0)",
        "Pruning lr-dropout-1/step-000000011",
        "Trial 1 (lr-dropout-1)",
    ], out
    assert all(
        f"-> failed: {why} (example: --set train.learning_rate=1e+29)" in t for t in said[1::2]
    )


@pytest.mark.slow
def test_a_trial_that_diverged_where_the_space_searches_the_rate_says_to_lower_its_range(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """When sweep.space searches train.learning_rate, the trial's value overrides any --set: a
    diverged trial's line says to lower the space's range, with a valid example below its value,
    in a new study (the same study refuses a changed space); following it, the sweep starts.
    The trial fails though train.monitor (val_accuracy) is a number: its weights are NaN."""
    project = copy_checkout(tmp_path / "project")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    space = "sweep.space={train.learning_rate: {low: 1.0e29, high: 1.0e30}}"
    rest = ["train.optimizer=sgd", "train.epochs=1", "train.monitor=val_accuracy", *SMALL]
    sweep = ["sweep", "--params", str(project / "params.yaml"), *sets(["sweep.n_trials=1", *rest])]
    assert main([*sweep, *sets([space])]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("Trial 0 ")]
    rate = line.split("train.learning_rate=")[1].split()[0]  # as the line shows it
    why = "val_loss is nan at epoch 1: training diverged; lower sweep.space's train.learning_rate"
    assert f"-> failed: {why} below {rate} (example: train.learning_rate: " in line, out
    assert "--set train.learning_rate" not in out
    example, study = line.split("(example: ")[1:]
    example = example.removesuffix("), in a new study ")
    lower = sweep_space(params_with("sweep.space={" + example + "}"))["train.learning_rate"]
    assert lower.high < float(rate), line
    assert study == "--set sweep.name=lr-dropout-2)", line
    lowered = sets(["sweep.space={" + example + "}"])
    assert main([*sweep, *lowered]) == 2  # the same study: refused
    assert "or start a new study" in capsys.readouterr().err
    assert main([*sweep, *lowered, *shlex.split(study.removesuffix(")"))]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Trial")]
    assert line.startswith("Trial 0 (lr-dropout-2-0): train.learning_rate="), line


@pytest.mark.slow
def test_a_later_trial_says_its_own_warnings_and_no_trial_leaves_a_bar(
    tmp_path: Path, monkeypatch, capsys, bars
) -> None:
    """Train's first lines are said once, with the first trial, but a note its own values cause
    is said for the trial it holds for, a later one too (train.mixed_precision on the CPU: here
    trial 1). Each trial's progress bar goes when the trial ends, a pruned one's too (Colab's
    widget stays, red, when a bar that should go ends short of its total)."""
    project = copy_checkout(tmp_path / "project")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setattr(optuna.trial.Trial, "should_prune", lambda trial: True)  # at epoch 1 of 2
    space = "sweep.space={train.mixed_precision: {choices: [false, true]}}"
    grid = ["sweep.sampler=grid", space, "sweep.n_trials=2", "seed=1", "train.epochs=2", *SMALL]
    args = ["--params", str(project / "params.yaml"), *sets(grid)]
    assert main(["prepare", *args]) == 0
    assert main(["sweep", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    said, start = [], 0  # each trial's values, and whether the note is among its lines
    for end in (n for n, line in enumerate(lines) if line.startswith("Trial ")):
        note = any(line.startswith("Note: train.mixed_precision") for line in lines[start:end])
        said.append((lines[end].split(": ")[1].split(" -> ")[0], note))
        start = end
    want = [("train.mixed_precision=false", False), ("train.mixed_precision=true", True)]
    assert said == want and "-> pruned: " in lines[start], lines
    assert sum(line.startswith(("Seed 1 ", "Global batch", "Preflight:")) for line in lines) == 5
    assert [(bar.leave, bar.total - bar.n) for bar in bars] == [(False, 0)] * 2  # none short


@pytest.mark.slow
def test_a_second_session_on_the_sweep_is_refused_naming_the_holder(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """The sweep's lease is the run lease on the study's folder: a live holder refuses another
    session (exit 4, one line); `--take-over` takes it."""
    storage = tmp_path / "storage"
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(storage))
    folder = storage / "sweeps" / "held"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], env=cli_env(storage), stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"held"
        args = ["--params", str(PARAMS), "--set", "sweep.name=held"]
        assert main(["sweep", *args]) == 4
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: sweep 'held' is run by another session (host ")
        assert f"pid {holder.pid}" in err and "`sweep --take-over`" in err
        assert len(err.splitlines()) == 1
        assert not (folder / "journal.log").exists()
    finally:
        holder.kill()
        holder.wait()


HOLD = """
import sys, time
from pathlib import Path
from {{ cookiecutter.module_name }}.training.lease import Lease
Lease.acquire(Path(sys.argv[1]), "held", kind="sweep").start_heartbeat()
print("held", flush=True)
time.sleep(600)
"""


def test_a_stopped_trials_continue_command_pastes_into_a_shell(tmp_path, monkeypatch) -> None:
    """The `Continue with:` line of a trial cut off keeps each `--set` whole: a path with spaces,
    a space in braces."""
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.delenv("PROJECT_RESULTS_DIR", raising=False)
    overrides = [
        "data.path=/content/drive/MyDrive/Colab Notebooks/my data.csv",
        "sweep.space={model.dropout: {low: 0.0, high: 0.5}}",
    ]
    params = params_with(*overrides)
    lease = SimpleNamespace(lost="", check=lambda: True)  # one session's sweep, its lease held
    sweep = Sweep(params, PARAMS, tmp_path, overrides, lease)
    seen = {}

    def stopped(params, project_dir, resume_command="", **kwargs):
        seen["command"] = resume_command
        return TrainResult("stopped", 5, 3, "time budget reached")

    monkeypatch.setattr(sweep_module, "train", stopped)
    assert sweep_module.run_trial(sweep, sweep.study.ask(sweep.space), False, None, False) == 3
    expected = [*COMMAND.split(), "sweep", *(f"--set={item}" for item in overrides)]
    assert shlex.split(seen["command"]) == expected


def test_a_trial_out_of_memory_fails_and_the_sweep_goes_on(tmp_path, monkeypatch, capsys) -> None:
    """A point that does not fit the accelerator (a batch or model too large) is a FAIL of its
    trial, said in one line; not a crash that a sweep started again would repeat on that very
    trial, taken up again each time."""
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.delenv("PROJECT_RESULTS_DIR", raising=False)
    sweep = Sweep(params_with(), PARAMS, tmp_path, [], SimpleNamespace(lost="", check=lambda: True))

    def out_of_memory(params, project_dir, **kwargs):
        raise tf.errors.ResourceExhaustedError(
            None, None, "OOM when allocating tensor with shape[65536,4096] and type float"
        )

    monkeypatch.setattr(sweep_module, "train", out_of_memory)
    trial = sweep.study.ask(sweep.space)
    assert sweep_module.run_trial(sweep, trial, False, None, False) == 0
    assert sweep.study.get_trials()[0].state == optuna.trial.TrialState.FAIL
    out = capsys.readouterr().out
    assert "-> failed: ResourceExhaustedError: OOM when allocating tensor" in out, out
    rate = re.search(r"Trial 0 \(lr-dropout-0\): train\.learning_rate=(\S+) ", out)
    assert rate and rate.group(1) == f"{float(rate.group(1)):.4g}", out  # 4 significant digits


def test_checkpoints_of_finished_trials_go_but_the_best_and_what_the_project_did_not_write(
    tmp_path, monkeypatch
) -> None:
    """Drive's quota: after a trial, every finished run's checkpoints (a failed one's too: its
    loss went NaN) are deleted but the `keep_best` best, with what a save or a lease write left
    cut short; a file of the user's stays, and so does its folder."""
    storage = tmp_path / "storage"
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(storage))
    params = params_with("sweep.keep_best=1")
    sweep = Sweep(params, PARAMS, tmp_path, [], SimpleNamespace(lost="", check=lambda: True))
    point = {"train.learning_rate": 1e-3, "model.dropout": 0.1, "train.optimizer": "adam"}
    ends = {
        "best": (TrialState.COMPLETE, 0.1),
        "worse": (TrialState.COMPLETE, 0.5),
        "nan": (TrialState.FAIL, None),
        "mine": (TrialState.PRUNED, None),
    }
    for run, (state, value) in ends.items():
        sweep.study.add_trial(
            optuna.trial.create_trial(
                state=state,
                value=value,
                params=point,
                distributions=sweep.space,
                user_attrs={"run": run},
                intermediate_values={0: 0.9},
            )
        )
        folder = storage / "checkpoints" / run
        for name in (
            "step-000000010",
            "step-000000020",
            ".tmp-step-000000030-7",
            "damaged-step-000000005-1",
        ):
            (folder / name).mkdir(parents=True)
            (folder / name / "ckpt.index").write_bytes(b"x")
    (storage / "checkpoints" / "mine" / "notes.md").write_text("kept")
    assert sorted(keep_best_checkpoints(sweep)) == ["mine", "nan", "worse"]
    left = sorted(p.relative_to(storage).as_posix() for p in storage.glob("checkpoints/*/*"))
    best = [p for p in left if p.startswith("checkpoints/best/")]
    assert len(best) == 4 and sorted(set(left) - set(best)) == ["checkpoints/mine/notes.md"]
