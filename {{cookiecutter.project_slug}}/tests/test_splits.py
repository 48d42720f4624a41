"""`data.split` and `train.class_weight` through the command line (`__main__.main` in this process)
on data each test writes: split folders, files and a split column are kept as the data has them,
a missing validation or test split is carved out of train (stratified, seeded), bad layouts are
one line; class weights come from the training split's counts and change what an imbalanced
set's rare class gets."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import PARAMS, sets
from test_bad_input import _snapshot

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import ConfigError, load_params
from {{ cookiecutter.module_name }}.data.pipeline import read_split
from {{ cookiecutter.module_name }}.data.split import describe, split_examples
from {{ cookiecutter.module_name }}.evaluation import report
from {{ cookiecutter.module_name }}.sources import Source
from {{ cookiecutter.module_name }}.spec import DataSpec, load_spec
from {{ cookiecutter.module_name }}.task import make_task

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

IMAGES = ["data.source=images", "data.path=data/external/pets", "data.image_size=[8,8]"]
TINY_TRAIN = ["train.epochs=1", "train.batch_size=8", "model.hidden_units=[8]"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder (the template's params.yaml, its own storage root) as the working dir."""
    folder = tmp_path / "project"
    (folder / "data/external").mkdir(parents=True)
    (folder / "params.yaml").write_text((PARAMS).read_text())
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.chdir(folder)
    return folder


def run(project: Path, *args: str) -> None:
    """`python -m <module> ARGS` in this process; it must succeed."""
    assert main([*args, "--params", str(project / "params.yaml")]) == 0


class Greys:
    """8x8 PNGs of one grey level each, unique across a test: a split's images can be told by
    their level (`read_split` gives them back, unchanged at 8x8)."""

    def __init__(self) -> None:
        self.level = 0

    def write(self, folder: Path, counts: dict[str, int]) -> dict[str, set[int]]:
        from PIL import Image

        levels: dict[str, set[int]] = {}
        for name, n in counts.items():
            (folder / name).mkdir(parents=True, exist_ok=True)
            for _ in range(n):
                self.level += 2
                Image.new("L", (8, 8), self.level).save(folder / name / f"{self.level}.png")
                levels.setdefault(name, set()).add(self.level)
        return levels


def split_levels(project: Path, split: str) -> set[int]:
    x, _, _ = read_split(project / "data/processed", split)
    return {int(v) for v in x.reshape(len(x), -1).mean(axis=1)}


def test_image_folders_with_all_three_splits_are_kept(project: Path, capsys) -> None:
    greys, pets = Greys(), project / "data/external/pets"
    given = {s: greys.write(pets / s, {"cat": n, "dog": n + 1}) for s, n in
             (("train", 20), ("validation", 4), ("test", 5))}  # fmt: skip
    run(project, "prepare", *sets([*IMAGES, "data.split=folders"]))
    spec = load_spec(project / "data/processed")
    assert spec.counts == {"train": 41, "validation": 9, "test": 11}
    assert spec.split["from"] == {"train": "train/", "validation": "validation/", "test": "test/"}
    assert spec.split["carved"] == {} and spec.train_counts == {"cat": 20, "dog": 21}
    for split, levels in given.items():  # each split is its folder, image for image
        assert split_levels(project, split) == levels["cat"] | levels["dog"]
    info = json.loads((project / "data/manifest.json").read_text())
    assert info["split"] == spec.split and info["counts"] == spec.counts
    assert "test 11 (test/)" in capsys.readouterr().out
    assert describe(spec, "test") == "the published test split: test/, 11 examples"


def test_a_missing_validation_folder_is_carved_out_of_train(project: Path, tmp_path: Path) -> None:
    greys, pets = Greys(), project / "data/external/pets"
    train = greys.write(pets / "train", {"cat": 20, "dog": 30})
    test = greys.write(pets / "test", {"cat": 5, "dog": 5})
    run(project, "prepare", *sets([*IMAGES, "data.split=folders"]))
    spec = load_spec(project / "data/processed")
    # 20 % of each class of train/ (stratified): 4 cats and 6 dogs; test/ untouched.
    assert spec.counts == {"train": 40, "validation": 10, "test": 10}
    assert spec.split["carved"] == {"validation": 0.2}
    assert spec.split["from"]["validation"] == "train/"
    assert split_levels(project, "test") == test["cat"] | test["dog"]
    validation = split_levels(project, "validation")
    assert len(validation & train["cat"]) == 4 and len(validation & train["dog"]) == 6
    assert validation | split_levels(project, "train") == train["cat"] | train["dog"]
    assert describe(spec, "validation") == (
        "a random 20 % of train/ (seed 42, stratified by class), 10 examples"
    )
    # Deterministic from the seed: the same shards in another project; another seed, others.
    again = tmp_path / "again"
    again.mkdir()
    (again / "params.yaml").write_text((project / "params.yaml").read_text())
    elsewhere = [*IMAGES[:1], f"data.path={pets}", *IMAGES[2:], "data.split=folders"]
    run(again, "prepare", *sets(elsewhere))
    digests = [
        {e["path"]: e["sha256"] for e in json.loads((p / "data/manifest.json").read_text())["files"]
         if e["path"].startswith("data/processed")}
        for p in (project, again)
    ]  # fmt: skip
    assert digests[0] == digests[1]
    run(again, "prepare", *sets([*elsewhere, "seed=7"]))
    assert split_levels(again, "validation") != validation
    assert split_levels(again, "test") == test["cat"] | test["dog"]


def _table(rows: range, label: str = "label", order: tuple[str, str] = ("x1", "x2")) -> str:
    """Rows with x2 = 10 x x1 (a misaligned column shows) and a label `a` / `b`."""
    values = {"x1": lambda i: i, "x2": lambda i: 10 * i}
    lines = [",".join([*order, label])]
    lines += [",".join([*(str(values[c](i)) for c in order), "ab"[i % 2]]) for i in rows]
    return "\n".join(lines) + "\n"


def test_csv_files_are_the_splits_and_evaluate_names_its_test_split(project: Path, capsys) -> None:
    folder = project / "data/external/comp"
    folder.mkdir()
    (folder / "train.csv").write_text(_table(range(60)))
    (folder / "valid.csv").write_text(_table(range(100, 120)))
    (folder / "test.csv").write_text(_table(range(200, 220), order=("x2", "x1")))  # other order
    (folder / "sample_submission.csv").write_text("id,label\n1,a\n")  # not a split: not read
    data = ["data.source=csv", "data.path=data/external/comp", "data.split=files"]
    run(project, "prepare", *sets(data))
    spec = load_spec(project / "data/processed")
    assert spec.counts == {"train": 60, "validation": 20, "test": 20}
    assert spec.split["from"] == {
        "train": "train.csv", "validation": "valid.csv", "test": "test.csv"
    }  # fmt: skip
    assert spec.feature_names == ["x1", "x2"]
    # Notebook 01's tables: each split and where it came from; the training split's balance.
    shown = " ".join(report.split_table(project).split())
    assert "| test | 20 | the published test split: test.csv |" in shown
    params = load_params(project / "params.yaml", data)
    balance = " ".join(report.class_balance(project, params).split())
    assert balance.startswith("Training split, train.class_weight: none")
    assert "| class | examples | share | weight |" in balance
    x, _, _ = read_split(project / "data/processed", "test")
    np.testing.assert_array_equal(x[:, 1], 10 * x[:, 0])  # test.csv's columns in train's order
    assert sorted(x[:, 0].astype(int)) == list(range(200, 220))
    run(project, "train", *sets([*data, *TINY_TRAIN]))
    capsys.readouterr()
    run(project, "evaluate", *sets(data))
    scored = "the published test split: test.csv, 20 examples"  # a fact: in the card
    assert f"\n\nOn {scored} (" in (project / "results/reports/model_card.md").read_text()
    assert f"on {scored}; wrote" in capsys.readouterr().out
    metrics = json.loads((project / "results/metrics/evaluate.json").read_text())
    assert all(isinstance(value, int | float) for value in metrics.values())  # numbers only


def test_a_split_column_and_tfrecord_files_per_split(project: Path) -> None:
    rows = ["x1,x2,fold,label"]
    folds = ["train"] * 6 + ["Val", "test", "dev", "TEST"]  # names as people write them
    rows += [f"{i},{10 * i},{folds[i % 10]},{'ab'[i % 2]}" for i in range(100)]
    (project / "data/external/data.csv").write_text("\n".join(rows) + "\n")
    column = ["data.source=csv", "data.path=data/external/data.csv", "data.split=column"]
    run(project, "prepare", *sets([*column, "data.split_column=fold"]))
    spec = load_spec(project / "data/processed")
    assert spec.counts == {"train": 60, "validation": 20, "test": 20}
    assert spec.feature_names == ["x1", "x2"]  # the split column is no feature
    assert spec.split["from"]["test"] == "column 'fold' = test"

    folder = project / "data/external/records"
    folder.mkdir()
    files = {"train-00000-of-00002.tfrecord": range(0, 30), "train-00001-of-00002.tfrecord":
             range(30, 60), "test.tfrecord": range(60, 75)}  # fmt: skip
    for name, ids in files.items():
        with tf.io.TFRecordWriter(str(folder / name)) as writer:
            for i in ids:
                feature = {
                    "features": tf.train.Feature(float_list=tf.train.FloatList(value=[i, -i])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3])),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    records = ["data.source=tfrecord", "data.path=data/external/records", "data.split=files"]
    run(project, "prepare", *sets(records))
    spec = load_spec(project / "data/processed")
    assert spec.counts == {"train": 48, "validation": 12, "test": 15}  # 20 % of each class
    x, _, _ = read_split(project / "data/processed", "test")
    assert sorted(x[:, 0].astype(int)) == list(range(60, 75))


def test_the_split_rule_for_multilabel_and_regression_is_seeded_not_stratified() -> None:
    params = load_params(PARAMS, ["data.split=column"])
    labels = (np.random.default_rng(0).random((50, 3)) > 0.7).astype(np.float32)
    given = {"train": np.arange(40), "test": np.arange(40, 50)}
    source = Source("vector", "multilabel", labels, ["a", "b", "c"], lambda i: [i], str,
                    input_shape=(1,), splits=given,
                    split_from={"train": "col = train", "test": "col = test"})  # fmt: skip
    idx, record = split_examples(source, params.data, 42, "data.csv")
    assert list(idx["test"]) == list(range(40, 50)) and len(idx["validation"]) == 8
    assert set(idx["validation"]) | set(idx["train"]) == set(range(40))
    assert record["stratified"] is False and record["carved"] == {"validation": 0.2}
    again, _ = split_examples(source, params.data, 42, "data.csv")
    assert all(np.array_equal(idx[s], again[s]) for s in idx)
    spec = DataSpec("vector", (1,), "multilabel", ["a", "b", "c"], {"validation": 8}, split=record)
    assert describe(spec, "validation") == (
        "a random 20 % of col = train (seed 42, not stratified), 8 examples"
    )


# --- one-line errors -------------------------------------------------------------------------


def _folders(layout: dict[str, dict[str, int]], loose: str = "") -> list[str]:
    greys = Greys()
    for split, counts in layout.items():
        greys.write(Path("data/external/pets") / split, counts)
        if not counts:
            (Path("data/external/pets") / split).mkdir(parents=True)
    if loose:  # images right in a split folder: no class folders, no labels
        greys.write(Path("data/external/pets"), {loose: 3})
    return ["prepare", *sets([*IMAGES, "data.split=folders"])]


def _files(test_header: str) -> list[str]:
    folder = Path("data/external/comp")
    folder.mkdir()
    (folder / "train.csv").write_text(_table(range(20)))
    (folder / "test.csv").write_text(f"{test_header}\n1,10\n2,20\n")
    data = ["data.source=csv", "data.path=data/external/comp", "data.split=files"]
    return ["prepare", *sets(data)]


def _column(values: list[str], column: str = "split") -> list[str]:
    rows = [f"x1,{column},label"]
    rows += [f"{i},{values[i % len(values)]},{'ab'[i % 2]}" for i in range(20)]
    Path("data/external/data.csv").write_text("\n".join(rows) + "\n")
    return ["prepare", *sets(["data.source=csv", "data.path=data/external/data.csv",
                              "data.split=column"])]  # fmt: skip


def _prepared_then_train(*overrides: str, task: str = "classification") -> list[str]:
    label = "ab" if task == "classification" else "12"
    suffix = (lambda i: str(i)) if task == "regression" else (lambda i: "")
    rows = ["x1,label"] + [f"{i},{label[i % 2]}{suffix(i)}" for i in range(40)]
    Path("data/external/data.csv").write_text("\n".join(rows) + "\n")
    data = ["data.source=csv", "data.path=data/external/data.csv", f"task.type={task}"]
    assert main(["prepare", *sets(data)]) == 0
    return ["train", *sets([*data, *TINY_TRAIN, *overrides])]


ERRORS = {
    "class-in-test-not-in-train": (
        lambda: _folders({"train": {"cat": 5, "dog": 5}, "test": {"cat": 2, "owl": 2}}),
        "class 'owl' is in test",
    ),
    "empty-split-folder": (lambda: _folders({"train": {"cat": 5, "dog": 5}, "test": {}}), "test/"),
    "no-train-folder": (lambda: _folders({"cat": {"a": 3}, "dog": {"b": 3}}), "no train/ folder"),
    "stray-folder": (
        lambda: _folders({"train": {"cat": 5, "dog": 5}, "extra": {"x": 2}}),
        "extra/",
    ),
    "unlabelled-test-images": (
        lambda: _folders({"train": {"cat": 5, "dog": 5}}, loose="test"),
        "predict",
    ),
    "unlabelled-test-csv": (lambda: _files("x1,x2"), "predict"),
    "unknown-split-name": (
        lambda: _column(["train", "holdout"]),
        "data.csv line 3, column 'split' (data.split_column): 'holdout'",
    ),
    "no-split-column": (lambda: _column(["train"], column="fold"), "data.split_column"),
    "split-layout-on-digits": (lambda: ["prepare", "--set", "data.split=folders"], "data.split"),
    "class-weight-unknown-class": (
        lambda: _prepared_then_train("train.class_weight={a: 2, zebra: 5}"),
        "'zebra'",
    ),
    "class-weight-for-regression": (
        lambda: _prepared_then_train("train.class_weight=balanced", task="regression"),
        "train.class_weight",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_bad_split_or_weight_is_one_line(case: str, project: Path, capsys) -> None:
    setup, names = ERRORS[case]
    args = setup()
    before = _snapshot(project)
    capsys.readouterr()
    code = main([*args, "--params", str(project / "params.yaml")])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.strip() and "%|" not in line]
    assert code != 0, err
    assert len(errors) == 1 and errors[0].startswith("error: "), err
    assert names in errors[0] and "Traceback" not in err, errors[0]
    assert _snapshot(project) == before  # nothing half-written
    assert not (project.parent / "storage" / "checkpoints").exists()  # no run started


# --- class weights -------------------------------------------------------------------------


def _spec(task: str, train_counts: dict[str, int], n: int) -> DataSpec:
    return DataSpec("vector", (2,), task, list(train_counts), {"train": n},
                    train_counts=train_counts)  # fmt: skip


def test_class_weights_from_the_training_counts() -> None:
    from sklearn.utils.class_weight import compute_class_weight

    def weights(task: str, setting: str, counts: dict[str, int], n: int) -> tuple:
        overrides = [f"task.type={task}", f"train.class_weight={setting}"]
        params = load_params(PARAMS, overrides)
        return make_task(params, _spec(task, counts, n)).class_weights

    counts = {"a": 950, "b": 40, "c": 10}
    y = np.repeat([0, 1, 2], list(counts.values()))
    expected = compute_class_weight("balanced", classes=np.arange(3), y=y)
    np.testing.assert_allclose(weights("classification", "balanced", counts, 1000), expected)
    assert weights("classification", "{c: 5}", counts, 1000) == (1.0, 1.0, 5.0)
    assert weights("classification", "none", counts, 1000) == ()
    # Multilabel: negatives / positives per label.
    assert weights("multilabel", "balanced", {"x": 20, "y": 50}, 100) == (4.0, 1.0)
    with pytest.raises(ConfigError, match=r"^train\.class_weight: 'zebra' is not a class"):
        weights("classification", "{zebra: 2}", counts, 1000)
    with pytest.raises(ConfigError, match=r"^train\.class_weight: balanced weighs classes"):
        make_task(
            load_params(PARAMS, ["task.type=regression", "train.class_weight=balanced"]),
            DataSpec("vector", (2,), "regression", ["price"], {"train": 1000}),
        )
    params = load_params(PARAMS, ["train.class_weight=balanced"])
    # evaluate's task is unweighted: test_loss stays the plain loss.
    unweighted = make_task(params, _spec("classification", counts, 1000), weighted=False)
    assert unweighted.class_weights == ()


def test_weighted_losses_and_their_mean_over_two_replicas() -> None:
    params = load_params(PARAMS, [])
    spec = _spec("classification", {"a": 1, "b": 1, "c": 1}, 3)
    plain = make_task(params, spec)
    weighted = dataclasses.replace(plain, class_weights=(0.5, 1.0, 4.0))
    rng = np.random.default_rng(3)
    y, logits = rng.integers(0, 3, 16), rng.normal(size=(16, 3)).astype("float32")
    np.testing.assert_allclose(
        weighted.loss(y, logits), np.array([0.5, 1.0, 4.0])[y] * plain.loss(y, logits), rtol=1e-6
    )
    multilabel = make_task(load_params(PARAMS, ["task.type=multilabel"]),
                           _spec("multilabel", {"a": 1, "b": 1}, 3))  # fmt: skip
    targets = (rng.random((16, 2)) > 0.5).astype("float32")
    logits2 = rng.normal(size=(16, 2)).astype("float32")
    ones = dataclasses.replace(multilabel, class_weights=(1.0, 1.0))
    np.testing.assert_allclose(ones.loss(targets, logits2), multilabel.loss(targets, logits2),
                               rtol=1e-5)  # fmt: skip
    positive = dataclasses.replace(multilabel, class_weights=(3.0, 0.5))
    reference = tf.reduce_mean(tf.nn.weighted_cross_entropy_with_logits(
        targets, logits2, pos_weight=tf.constant([3.0, 0.5])), axis=-1)  # fmt: skip
    np.testing.assert_allclose(positive.loss(targets, logits2), reference, rtol=1e-5)

    # Per-example weights are constants of the step: two replicas' average losses add up to the
    # single device's (what the loop computes, tf.nn.compute_average_loss over the global batch).
    strategy = tf.distribute.MirroredStrategy(
        [d.name for d in tf.config.list_logical_devices("CPU")[:2]]
    )
    single = float(tf.nn.compute_average_loss(weighted.loss(y, logits), global_batch_size=16))
    data = tf.data.Dataset.from_tensor_slices((y, logits)).batch(16)
    total = 0.0
    for yy, ll in strategy.experimental_distribute_dataset(data):
        per_replica = strategy.run(
            lambda a, b: tf.nn.compute_average_loss(weighted.loss(a, b), global_batch_size=16),
            args=(yy, ll),
        )
        total += float(strategy.reduce("SUM", per_replica, axis=None))
    assert total == pytest.approx(single, rel=1e-5)
    keras.backend.clear_session()


def _imbalanced_csv(path: Path) -> None:
    """95/5: class a around (0, 0), class b around (1.5, 1.5), unit spread: they overlap."""
    rng = np.random.default_rng(0)
    rows = ["f1,f2,label"]
    for label, n, centre in (("a", 1900, 0.0), ("b", 100, 1.5)):
        rows += [f"{x:.4f},{y:.4f},{label}" for x, y in rng.normal(centre, 1.0, size=(n, 2))]
    path.write_text("\n".join(rows) + "\n")


def test_balanced_class_weight_lifts_the_rare_class(project: Path, capsys) -> None:
    """Same data, split, seed and model; only train.class_weight differs. Reported in the note:
    the rare class's test recall and the balanced accuracy without and with weights."""
    _imbalanced_csv(project / "data/external/imbalanced.csv")
    data = ["data.source=csv", "data.path=data/external/imbalanced.csv"]
    run(project, "prepare", *sets(data))
    train = ["train.epochs=5", "train.batch_size=32", "model.hidden_units=[16]"]
    found = {}
    for setting in ("none", "balanced"):
        capsys.readouterr()
        run(project, "train", *sets([*data, *train, f"train.class_weight={setting}",
                                     f"run_name={setting}"]))  # fmt: skip
        out = capsys.readouterr().out
        run(project, "evaluate", *sets(data))
        results = project / "results"
        scores = json.loads((results / "metrics/evaluate.json").read_text())  # the headline
        card = (results / "reports/model_card.md").read_text()  # every metric
        balanced = re.search(r"\| balanced_accuracy +\| ([0-9.]+)", card)[1]
        scores["test_balanced_accuracy"] = float(balanced)
        per_class = (results / "plots/per_class.csv").read_text().splitlines()
        recall_b = float(next(r for r in per_class if r.startswith("b,")).split(",")[2])
        trained = json.loads((results / "metrics/train.json").read_text())
        found[setting] = (scores, recall_b, trained, out)
    (none, recall_none, train_none, out_none), (bal, recall_bal, train_bal, out_bal) = (
        found["none"],
        found["balanced"],
    )
    print(
        f"imbalance 95/5, test b: recall {recall_none:.3f} -> {recall_bal:.3f}, balanced accuracy "
        f"{none['test_balanced_accuracy']:.3f} -> {bal['test_balanced_accuracy']:.3f}, accuracy "
        f"{none['test_accuracy']:.3f} -> {bal['test_accuracy']:.3f}, macro F1 "
        f"{none['test_f1']:.3f} -> {bal['test_f1']:.3f}"
    )
    assert recall_bal >= recall_none + 0.3
    assert bal["test_balanced_accuracy"] >= none["test_balanced_accuracy"] + 0.1
    # The note before the unweighted run, the weights before the weighted one (1140 a, 60 b).
    note = "NOTE: preflight: the training split is imbalanced: class 'b' has 60 examples"
    assert note in out_none
    assert "Preflight: train.class_weight balanced: weights per class a 0.526, b 10" in out_bal
    # The loss's weights are in the run record (train.json holds the metrics).
    runs = project / "results/runs"
    weights = {
        s: json.loads(sorted(runs.glob(f"*-{s}-*/manifest.json"))[-1].read_text())["class_weight"]
        for s in found
    }
    assert weights["none"] is None and "class_weight" not in train_none
    assert weights["balanced"] == {"a": pytest.approx(1200 / 2280), "b": 10.0}
    assert "class_weight" not in train_bal
