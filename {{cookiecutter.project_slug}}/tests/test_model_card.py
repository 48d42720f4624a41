"""The model card `evaluate` writes (results/reports/model_card.md): its content from the data,
the run record, train.json and the test metrics; the user's section kept through `evaluate` and
`export`; dvc.yaml keeps it between runs."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import PARAMS, PROJECT, TINY

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.core.files import file_sha256
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.evaluation import export, model_card
from {{ cookiecutter.module_name }}.evaluation.evaluate import evaluate
from {{ cookiecutter.module_name }}.evaluation.model_card import (
    USER_BEGIN,
    USER_END,
    card_markdown,
    metrics_section,
)
from {{ cookiecutter.module_name }}.tasks.base import Evaluation, per_name_table
from {{ cookiecutter.module_name }}.training.run_record import list_runs
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

MINE = "Only for 8x8 scans of digits.\n\n| not for | why |\n| --- | --- |\n| letters | unseen |"


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory):
    """The bundled digits prepared, a run stopped by its time budget and resumed, trained again
    (already complete: no step), evaluated."""
    project = tmp_path_factory.mktemp("card")
    (project / "params.yaml").write_text((PARAMS).read_text())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROJECT_STORAGE_DIR", str(project / "storage"))
        params = load_params(project / "params.yaml", TINY)
        prepare(params, project)
        stopped = load_params(project / "params.yaml", [*TINY, "train.time_budget_minutes=0.00005"])
        assert train(stopped, project).status == "stopped"
        assert train(params, project).status == "completed"
        assert train(params, project).status == "completed"  # already complete: trains no step
        evaluate(params, project)
    return project, params


def _sections(card: str) -> dict[str, str]:
    """The card's sections by title, runs of spaces squeezed (tabulate pads table columns)."""
    parts = re.split(r"^## (.+)$", re.sub(r" {2,}", " ", card), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_card_says_what_the_model_is_trained_on_and_how(evaluated) -> None:
    project, _ = evaluated
    card = (project / "results/reports/model_card.md").read_text()
    assert card == card_markdown(project)
    sections = _sections(card)
    assert list(sections) == ["Model", "Data", "Training", "Test metrics", "Exported files",
                              "Intended use and limits"]  # fmt: skip
    spec = json.loads((project / "data/processed/spec.json").read_text())
    data = sections["Data"]
    assert f"sha256 `{file_sha256(project / 'data/manifest.json')[:12]}`" in data
    assert "| split | `data.split: random`; " in data
    assert "test: a random 20 % of digits (seed 42, stratified by class)" in data
    train, validation, test = (spec["counts"][s] for s in ("train", "validation", "test"))
    assert f"train {train}, validation {validation}, test {test}" in data
    balance = re.findall(r"^\| \d \| (\d+) \| \d+ \| \d+ \|$", data, flags=re.MULTILINE)
    assert len(balance) == 10 and sum(map(int, balance)) == train

    assert "| task | classification |" in sections["Model"]  # its kind too: said once
    training = sections["Training"]
    # A record per session that trained: the card's is the one that completed the run. Their
    # order is not asserted: run ids sort by the second a session started, and two sessions
    # that start within one second sort by their random hex digits.
    assert sorted(r["status"] for r in list_runs(project)) == ["completed", "stopped"]
    run = next(r for r in list_runs(project) if r["status"] == "completed")
    assert f"`{run['run_id']}` (completed)" in training
    assert "| resumes | 1 (this session started at step " in training
    assert "| seed | 42 " in training and "| hardware | CPU, " in training
    assert "| `train.epochs` | `2` | `20` |" in training
    assert "| `model.hidden_units` | `[16]` | `[64, 64]` |" in training
    assert "`seed`" not in training and "time_budget" not in training  # defaults, left out

    metrics = json.loads((project / "results/metrics/evaluate.json").read_text())
    tested = sections["Test metrics"]
    assert f"| accuracy | {metrics['test_accuracy']:.4f} |" in tested
    assert "scored_on" not in metrics  # a fact, in the card: what was scored
    assert tested.startswith("\n\nOn a random 20 % of digits (seed 42, stratified by class), ")
    assert "| class weights | none (unweighted) |" in training
    assert tested.count("\n| ") >= 10 + 9  # every class: precision, recall, f1, support
    assert "| `results/models/model.keras` | " in sections["Exported files"]


def test_the_test_metrics_read_as_evaluate_prints_them() -> None:
    """4 decimals, as `evaluate` prints them: not 4 significant digits (a top-5 accuracy of
    0.99996 read `1`, a loss of 2.34567 `2.346`, 12345 examples `1.234e+04`)."""
    metrics = {"test_top5_accuracy": 0.99996, "test_loss": 2.34567, "test_examples": 12345}
    per_class = per_name_table("class", ["a", "b"], np.array([0, 1, 1]), np.array([0, 1, 0]))
    text = re.sub(r" {2,}", " ", metrics_section(Evaluation(metrics, {}, per_class), "x"))
    assert "| top5_accuracy | 1.0000 |\n| loss | 2.3457 |\n| examples | 12345 |" in text
    assert "| a | 0.5000 | 1.0000 | 0.6667 | 1 |\n| b | 1.0000 | 0.5000 | 0.6667 | 2 |" in text


def test_the_users_section_survives_evaluate_and_export(evaluated, capsys) -> None:
    project, params = evaluated
    path = project / "results/reports/model_card.md"
    card = path.read_text()
    start, end = card.index(USER_BEGIN) + len(USER_BEGIN), card.index(USER_END)
    path.write_text(card[:start] + "\n" + MINE + "\n" + card[end:])
    at = ["--params", str(project / "params.yaml"), *(a for o in TINY for a in ("--set", o))]

    assert main(["export", "--format", "litert", "--quantize", "int8", *at]) == 0
    exported = _sections(path.read_text())
    assert "| `results/models/model.tflite` | " in exported["Exported files"]
    assert "| int8 (dynamic range) | " in exported["Exported files"]  # beside the Keras model
    assert "| same prediction |" in exported["Exported files"]
    assert MINE in exported["Intended use and limits"]

    capsys.readouterr()
    assert main(["evaluate", *at]) == 0
    # Its line: each score to 4 decimals, so 1.0000 stands as a score beside 0.9526, not `1`.
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Test (")]
    scores = line.split("): ")[1].split(" on ")[0].split(", ")
    assert [s for s in scores if not re.fullmatch(r"\w+ \d+\.\d{4}", s)] == [], line
    again = path.read_text()
    assert MINE in _sections(again)["Intended use and limits"]
    assert "| `results/models/model.tflite` | " in again  # export.json: exports are kept

    path.write_text(again.replace(USER_END, ""))  # the closing marker deleted: all after is kept
    assert main(["evaluate", *at]) == 0
    assert MINE in _sections(path.read_text())["Intended use and limits"]
    assert not (project / "results/reports/model_card.previous.md").exists()

    path.write_text("# my own card\n" + MINE)  # no markers at all: the old card is kept beside
    assert main(["evaluate", *at]) == 0
    assert (project / "results/reports/model_card.previous.md").read_text().endswith(MINE)
    assert "_Fill this in" in path.read_text()
    capsys.readouterr()


@pytest.mark.parametrize(
    "command", [["evaluate"], ["export", "--format", "litert"]], ids=["evaluate", "litert"]
)
def test_a_model_is_scored_only_with_the_loss_its_run_trained_with(
    evaluated, capsys, command: list[str]
):
    """`evaluate` (and a LiteRT export's parity check) with another train.label_smoothing (or
    task.type) than the model's run stops in one line and writes nothing."""
    project, _ = evaluated
    at = ["--params", str(project / "params.yaml"), *(a for o in TINY for a in ("--set", o))]
    written = {p: p.read_bytes() for p in (project / "results").rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*command, *at, "--set", "train.label_smoothing=0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: train.label_smoothing: 0.1, but the saved model was trained ")
    assert err.endswith("(example: --set train.label_smoothing=0.0)") and "\n" not in err, err
    assert {p: p.read_bytes() for p in (project / "results").rglob("*") if p.is_file()} == written


def test_dvc_keeps_the_card_between_runs_and_git_tracks_it() -> None:
    """persist: DVC does not delete it before `evaluate` reads the user's section back;
    cache: false: git versions it (and .gitignore lets it in)."""
    stages = yaml.safe_load((PROJECT / "dvc.yaml").read_text())["stages"]
    outs = {k: v for o in stages["evaluate"]["outs"] if isinstance(o, dict) for k, v in o.items()}
    assert outs["results/reports/model_card.md"] == {"cache": False, "persist": True}
    assert "!/results/reports/model_card.md" in (PROJECT / ".gitignore").read_text().splitlines()


def test_export_and_the_model_card_do_not_import_each_other() -> None:
    """Either can be read, changed and tested without the other: what both need (export.json's
    place) is in core/storage.py."""
    for module, other in ((export, "model_card"), (model_card, "export")):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + [
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        ]
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
        assert other not in [m.split(".")[-1] for m in imported] + names, module.__name__
