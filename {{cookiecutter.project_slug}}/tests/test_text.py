"""Text end to end on files written here: a CSV column for each task (classification, multilabel,
regression) and a folder of `.txt` files per class, through prepare -> train -> evaluate in this
process; then `predict` and `export` on raw strings in one fresh process. Also: the vocabulary is
the training split's, the text pipeline's steps do not depend on replicas and resume exactly,
a SIGKILL mid-run resumes bit-identically, a keras-hub preset trains offline, and the splits a
text data set brings (a split column, split files, split folders) are kept.

The data: three topics (sport, cooking, tech); each text has 1-2 topic words per topic among
5-12 filler words, some capitalised with punctuation; 5 % of the classification labels are
random (so about 0.97 is the best accuracy there is).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import random
import re
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import PARAMS, cli, cli_env, main_in_fresh_process, sets

from {{ cookiecutter.module_name }}.config import ConfigError, ModelConfig, load_params
from {{ cookiecutter.module_name }}.data import manifest
from {{ cookiecutter.module_name }}.data.pipeline import (
    example_ids,
    for_model,
    load_prepared,
    read_split,
    train_dataset,
)
from {{ cookiecutter.module_name }}.data.prepare import prepare
from {{ cookiecutter.module_name }}.data.text import learn_vocabulary
from {{ cookiecutter.module_name }}.evaluation import report
from {{ cookiecutter.module_name }}.evaluation.evaluate import evaluate
from {{ cookiecutter.module_name }}.model import build_model
from {{ cookiecutter.module_name }}.spec import DataSpec, load_spec
from {{ cookiecutter.module_name }}.task import Classification
from {{ cookiecutter.module_name }}.tasks.multilabel import Multilabel
from {{ cookiecutter.module_name }}.tasks.regression import Regression
from {{ cookiecutter.module_name }}.training.checkpoints import list_checkpoints
from {{ cookiecutter.module_name }}.training.trainer import train

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

TOPICS = {
    "cooking": "recipe oven flour sugar butter bake simmer garlic onion sauce dough roast chef",
    "sport": "match goal team coach league player stadium referee cup striker keeper medal",
    "tech": "software laptop server code bug cloud chip battery network app keyboard database",
}
FILLER_WORDS = (
    "the a an and or but with of in on at for to from by this that it was is very quite new "
    "old big small good bad today week year time people day café"
)
FILLER = FILLER_WORDS.split()
VALUES = {"cooking": 50.0, "sport": 80.0, "tech": 20.0}  # regression: a value per topic
ROWS = 1500  # 900 train, 300 validation, 300 test
UNIQUE = [f"uniqueword{i}" for i in range(10)]  # one row each: in the vocabulary iff in train
FIT = ["train.epochs=6", "train.batch_size=32", "train.learning_rate=0.005",
       "model.hidden_units=[32]", "model.embedding_dim=32", "data.sequence_length=32"]  # fmt: skip


def sentence(rng: random.Random, topics: list[str]) -> str:
    """1-2 words of each topic among 5-12 filler words; a third capitalised, with punctuation."""
    words = [rng.choice(TOPICS[t].split()) for t in topics for _ in range(rng.randint(1, 2))]
    words += rng.choices(FILLER, k=rng.randint(5, 12))
    rng.shuffle(words)
    text = " ".join(words)
    return f"{text.capitalize()}, «really»!" if rng.random() < 0.3 else text


def text_rows(task: str, n: int = ROWS, seed: int = 0) -> list[list[str]]:
    """[id, review, source, target] rows for `task` (the `source` column is not used)."""
    rng = random.Random(seed)
    names = sorted(TOPICS)
    rows = []
    for i in range(n):
        topics = rng.sample(names, rng.randint(1, 2) if task == "multilabel" else 1)
        text = sentence(rng, topics)
        if task == "classification":
            target = rng.choice(names) if rng.random() < 0.05 else topics[0]
            text = f"{text} {UNIQUE[i]}" if i < len(UNIQUE) else text
        elif task == "multilabel":
            target = "|".join(sorted(topics))
        else:
            target = f"{VALUES[topics[0]] + rng.gauss(0, 2):.2f}"
        rows.append([str(i), text, f"site{i % 3}", target])
    return rows


def write_csv(path: Path, rows: list[list[str]], header: list[str]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def write_text_files(folder: Path, per_class: int, seed: int = 1) -> Path:
    """One subfolder per topic, one .txt file per example (a UTF-8 BOM on some)."""
    rng = random.Random(seed)
    for topic in TOPICS:
        (folder / topic).mkdir(parents=True)
        for i in range(per_class):
            bom = "\ufeff" if i % 7 == 0 else ""
            (folder / topic / f"{i:03d}.txt").write_text(bom + sentence(rng, [topic]), "utf-8")
    return folder


def text_params(project: Path, data: Path, task: str, extra: list[str]) -> list[str]:
    label = {"classification": "topic", "multilabel": "tags", "regression": "score"}[task]
    return [
        "data.source=csv", f"data.path={data}", "data.text=review", f"data.label={label}",
        f"task.type={task}", "model.architecture=text", f"run_name={task}", *extra,
    ]  # fmt: skip


def new_project(root: Path, name: str) -> Path:
    project = root / name
    project.mkdir()
    shutil.copy(PARAMS, project / "params.yaml")
    return project


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict, dict]]:
    """Each task on a text CSV, and the .txt folder, prepared, trained and evaluated once:
    (project, train.json, evaluate.json)."""
    root = tmp_path_factory.mktemp("text")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROJECT_STORAGE_DIR", str(root / "storage"))
        for task in ("classification", "multilabel", "regression"):
            project = new_project(root, task)
            label = {"classification": "topic", "multilabel": "tags", "regression": "score"}
            data = write_csv(
                project / "reviews.csv", text_rows(task), ["id", "review", "source", label[task]]
            )
            overrides = text_params(project, data, task, FIT)
            out[task] = _run(project, overrides)
        project = new_project(root, "folders")
        data = write_text_files(project / "reviews", per_class=120)
        overrides = ["data.source=text", f"data.path={data}", "model.architecture=text",
                     "run_name=folders", *FIT]  # fmt: skip
        out["folders"] = _run(project, overrides)
    return out


def _run(project: Path, overrides: list[str]) -> tuple[Path, dict, dict]:
    params = load_params(project / "params.yaml", overrides)
    prepare(params, project)
    assert train(params, project).status == "completed"
    evaluation = evaluate(params, project)
    train_json = json.loads((project / "results/metrics/train.json").read_text())
    (project / "overrides.json").write_text(json.dumps(overrides))
    return project, train_json, evaluation


def test_classification_on_a_csv_text_column(trained) -> None:
    project, train_json, metrics = trained["classification"]
    spec = json.loads((project / "data/processed/spec.json").read_text())
    assert spec["kind"] == "text" and spec["input_shape"] == [32]
    assert spec["feature_names"] == ["review"] and spec["names"] == sorted(TOPICS)
    assert metrics["test_examples"] == ROWS // 5
    assert train_json["val_accuracy"] >= 0.85 and metrics["test_accuracy"] >= 0.85
    assert metrics["test_balanced_accuracy"] >= 0.85
    print(f"text classification: test accuracy {metrics['test_accuracy']:.4f}")
    overrides = json.loads((project / "overrides.json").read_text())
    table = report.worst_examples(project, load_params(project / "params.yaml", overrides), n=3)
    lines = [[cell.strip("| ") for cell in line.split(" | ")] for line in table.splitlines()]
    assert lines[2][:3] == ["id", "text", "target"] and len(lines) == 7
    texts = {row[0]: row[1] for row in csv.reader((project / "reviews.csv").open())}
    worst = lines[4]  # `id` is the row number; the id column counts from 0
    assert worst[1][:100] == " ".join(texts[str(int(worst[0].strip("| ")) - 1)].split())[:100]


def test_vocabulary_is_the_training_splits_and_in_the_manifest(trained, tmp_path: Path) -> None:
    project, _, _ = trained["classification"]
    vocabulary = (project / "data/processed/vocabulary.txt").read_text("utf-8").split("\n")[:-1]
    texts, _, _ = read_split(project / "data/processed", "train")
    words = {w for t in texts for w in re.sub(r"[^\w\s]", "", t.lower()).split()}
    assert set(vocabulary) == words  # every word of the training split, none from elsewhere
    assert "café" in vocabulary and "really" in vocabulary  # lower-cased, punctuation gone
    planted = [w for w in UNIQUE if w in vocabulary]
    assert 0 < len(planted) < len(UNIQUE)  # the rows that went to validation or test are out
    spec = json.loads((project / "data/processed/spec.json").read_text())
    assert spec["vocabulary"] == "vocabulary.txt"
    assert spec["vocabulary_size"] == len(vocabulary) + 2  # padding and [UNK]
    listed = {e["path"] for e in json.loads((project / "data/manifest.json").read_text())["files"]}
    assert "data/processed/vocabulary.txt" in listed
    copy = shutil.copytree(project / "data", tmp_path / "data")
    (copy / "processed/vocabulary.txt").write_text("\n".join(reversed(vocabulary)) + "\n")
    with pytest.raises(manifest.ManifestMismatch, match=r"^data/processed/vocabulary.txt: "):
        manifest.check(tmp_path)  # a reordered vocabulary is not trained on (or resumed)


def test_multilabel_and_regression_on_text(trained) -> None:
    _, train_json, metrics = trained["multilabel"]
    assert metrics["test_binary_accuracy"] >= 0.9 and metrics["test_auc"] >= 0.9
    project, train_json, metrics = trained["regression"]
    assert train_json["val_r2"] >= 0.8 and metrics["test_r2"] >= 0.8
    spec = json.loads((project / "data/processed/spec.json").read_text())
    assert 35 < spec["target_mean"] < 65


def test_text_files_in_class_folders(trained) -> None:
    project, _, metrics = trained["folders"]
    spec = json.loads((project / "data/processed/spec.json").read_text())
    assert spec["feature_names"] == ["text"] and spec["counts"]["train"] == 216
    texts, _, _ = read_split(project / "data/processed", "test")
    assert not any(t.startswith("\ufeff") for t in texts)  # the byte-order mark is not text
    assert metrics["test_accuracy"] >= 0.85


def test_predict_and_export_take_raw_strings(trained, tmp_path: Path) -> None:
    """One fresh process: predict for each model (a CSV with the text column among others, a
    folder of .txt files), and export; then the SavedModel serves strings here, and predict on
    the training CSV gives evaluate's rows of results/predictions/test.csv."""
    texts = ["the striker scored in the cup match", "bake the dough with butter",
             "the laptop code and the oven recipe", ""]  # fmt: skip
    new = write_csv(tmp_path / "new.csv", [[t, "a note"] for t in texts], ["review", "note"])
    folder = tmp_path / "txt"
    (folder / "more").mkdir(parents=True)
    (folder / "a.txt").write_text("the server and the database in the cloud", "utf-8")
    (folder / "more/b.txt").write_text("Le chef: «simmer the sauce»!", "utf-8")
    calls = [
        ["predict", str(new if task != "folders" else folder), "--output",
         str(tmp_path / f"{task}.csv"), "--params", str(project / "params.yaml")]
        for task, (project, _, _) in trained.items()
    ]  # fmt: skip
    models = trained["classification"][0] / "results/models"
    calls.append(["export", "--params", str(models.parents[1] / "params.yaml")])
    whole = models.parents[1] / "reviews.csv"  # the training CSV: evaluate's test rows are in it
    calls.append(["predict", str(whole), "--output", str(tmp_path / "whole.csv"), "--params",
                  str(models.parents[1] / "params.yaml")])  # fmt: skip
    proc = main_in_fresh_process(calls, tmp_path, tmp_path / "storage")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {task: list(csv.DictReader((tmp_path / f"{task}.csv").open())) for task in trained}
    assert [r["id"] for r in rows["classification"]] == ["1", "2", "3", "4"]
    assert [r["prediction"] for r in rows["classification"]][:2] == ["sport", "cooking"]
    assert rows["multilabel"][2]["prediction"] == "cooking|tech"
    values = [float(r["prediction"]) for r in rows["regression"]]
    assert abs(values[0] - 80) < 10 and abs(values[1] - 50) < 10
    assert [r["prediction"] for r in rows["folders"]] == ["tech", "cooking"]
    assert rows["folders"][0]["id"].endswith("a.txt")
    by_row = {r["id"]: r for r in csv.DictReader((tmp_path / "whole.csv").open())}
    test_rows = list(csv.DictReader((models.parents[1] / "results/predictions/test.csv").open()))
    assert len(test_rows) == ROWS // 5
    for row in test_rows:  # evaluate's rows are predict's on the same CSV rows
        again = by_row[row["id"]]
        assert row["prediction"] == again["prediction"]
        for c in sorted(TOPICS):
            assert abs(float(row[f"prob_{c}"]) - float(again[f"prob_{c}"])) < 1e-5
    served = tf.saved_model.load(str(models / "saved_model"))
    probs = served.serve(tf.constant(texts)).numpy()
    predicted = [[float(r[f"prob_{c}"]) for c in sorted(TOPICS)] for r in rows["classification"]]
    np.testing.assert_allclose(probs, predicted, atol=1e-5)


def test_text_steps_do_not_depend_on_replicas_and_resume_exactly(trained) -> None:
    """The text pipeline keeps the guarantees of the image one: a global step's examples are the
    same with 1 or 2 replicas, and a resumed run starts at the very next one."""
    project, _, _ = trained["classification"]
    data = load_prepared(project / "data/processed")  # no vectoriser: the batches hold strings

    def steps(replicas: int, start: int = 0, count: int = 40) -> list[list[bytes]]:
        ctx = tf.distribute.InputContext(num_replicas_in_sync=replicas)
        ds = train_dataset(ctx, data, 32, seed=5, start_step=start, epochs=2, augment=[])
        batches = [list(x.numpy()) for x, _ in ds.take(count * replicas)]
        return [sum(batches[i : i + replicas], []) for i in range(0, len(batches), replicas)]

    one = steps(1)  # 28 steps per epoch: crosses an epoch
    assert one == steps(2)
    assert steps(1, start=19, count=21) == one[19:]
    overrides = json.loads((project / "overrides.json").read_text())
    params = load_params(project / "params.yaml", overrides)
    vectorized = for_model(data, params.model)
    ctx = tf.distribute.InputContext(num_replicas_in_sync=2)
    x, y = next(iter(train_dataset(ctx, vectorized, 32, 5, 0, 1, [])))
    assert x.dtype == tf.int32 and x.shape == (16, 32) and y.shape == (16,)


def _prepared(project: Path, data: Path, extra: list[str], source: str = "csv") -> Path:
    """Prepare `data` in `project` with `extra` settings; return the processed folder."""
    overrides = text_params(project, data, "classification", extra)
    if source == "text":
        overrides = [o for o in overrides if not o.startswith(("data.text", "data.label"))]
        overrides += ["data.source=text"]
    prepare(load_params(project / "params.yaml", overrides), project)
    return project / "data/processed"


def _train_words(processed: Path) -> set[str]:
    texts, _, _ = read_split(processed, "train")
    return {w for t in texts for w in re.sub(r"[^\w\s]", "", t.lower()).split()}


def test_text_keeps_the_splits_the_data_gives(tmp_path: Path) -> None:
    """data.split column and files on a text CSV, folders on .txt files: each split is the
    data's own (validation carved out of train), the vocabulary is train's words alone, and each
    example keeps its id (what evaluate's results/predictions/test.csv names it by)."""
    rows = text_rows("classification", n=120)
    for k, row in enumerate(rows):
        row[2] = "test" if k % 4 == 0 else "train"  # the `source` column becomes the fold
    project = new_project(tmp_path, "column")
    data = write_csv(project / "reviews.csv", rows, ["id", "review", "fold", "topic"])
    processed = _prepared(project, data, ["data.split=column", "data.split_column=fold"])
    spec = load_spec(processed)
    assert spec.counts["test"] == 30 and spec.split["from"]["test"] == "column 'fold' = test"
    assert spec.split["carved"] == {"validation": 0.2}
    ids = example_ids(load_prepared(processed), "test")
    assert sorted(ids, key=int) == [str(k + 1) for k in range(0, 120, 4)]  # predict's numbering
    vocabulary = (processed / "vocabulary.txt").read_text("utf-8").split("\n")[:-1]
    assert set(vocabulary) == _train_words(processed)
    assert not {"uniqueword0", "uniqueword4", "uniqueword8"} & set(vocabulary)  # test rows

    project = new_project(tmp_path, "files")
    (project / "comp").mkdir()
    header = ["id", "review", "source", "topic"]
    write_csv(project / "comp/train.csv", rows[:90], header)
    write_csv(project / "comp/test.csv", rows[90:], header)
    processed = _prepared(project, project / "comp", ["data.split=files"])
    spec = load_spec(processed)
    assert spec.counts["test"] == 30 and spec.counts["train"] + spec.counts["validation"] == 90
    ids = example_ids(load_prepared(processed), "test")
    assert set(ids) == {f"test.csv:{k}" for k in range(1, 31)}

    project = new_project(tmp_path, "folders")
    write_text_files(project / "reviews/train", per_class=20)
    write_text_files(project / "reviews/test", per_class=4, seed=2)
    processed = _prepared(project, project / "reviews", ["data.split=folders"], source="text")
    spec = load_spec(processed)
    assert spec.counts["test"] == 12 and spec.split["from"]["test"] == "test/"
    ids = example_ids(load_prepared(processed), "test")
    assert sorted(ids)[:2] == ["test/cooking/000.txt", "test/cooking/001.txt"]
    vocabulary = (processed / "vocabulary.txt").read_text("utf-8").split("\n")[:-1]
    assert set(vocabulary) == _train_words(processed)


def test_notebook_01_shows_texts_as_a_table() -> None:
    x = np.array(["good | fine\nfilm", "bad film", "great", "x" * 200], dtype=object)
    table = report.text_examples(
        x, np.array([1, 0, 1, 0], np.int32), Classification(["neg", "pos"]), 1
    )
    squeezed = [" ".join(line.split()) for line in table.splitlines()]  # tabulate pads cells
    assert squeezed[0] == "| target | text |" and len(squeezed) == 4
    assert squeezed[2:] == ["| neg | bad film |", "| pos | good \\| fine film |"]
    tags = report.text_examples(x[:1], np.array([[1.0, 1.0]], np.float32), Multilabel(["a", "b"]))
    assert " ".join(tags.splitlines()[2].split()).startswith("| a\\|b | good")
    long = report.text_examples(x[3:], np.array([2.5], np.float32), Regression(["score"]))
    assert " ".join(long.splitlines()[2].split()) == f"| 2.5 | {'x' * 119}… |"


def test_speed_measures_text_on_token_ids(trained) -> None:
    from {{ cookiecutter.module_name }}.training.speed import speed

    project, _, _ = trained["classification"]
    overrides = json.loads((project / "overrides.json").read_text())
    figures = speed(load_params(project / "params.yaml", overrides), project, steps=6)
    assert figures["bottleneck"] in ("input", "compute")
    assert figures["together_examples_per_sec"] > 0


def test_litert_export_of_the_text_model_is_its_network_on_token_ids(trained) -> None:
    from {{ cookiecutter.module_name }}.evaluation.export import export_litert

    project, _, _ = trained["classification"]
    overrides = json.loads((project / "overrides.json").read_text())
    entry = export_litert(load_params(project / "params.yaml", overrides), project)
    assert entry["inputs"].startswith("token ids, int32") and entry["same_prediction"] == 1.0
    assert entry["max_abs_diff"] < 1e-4
    assert entry["tokenize"].startswith("lower-case it (every alphabet) and remove punctuation")
    written = (project / "results/models/vocabulary.txt").read_text("utf-8").split("\n")
    prepared = (project / "data/processed/vocabulary.txt").read_text("utf-8").split("\n")
    assert written[:2] == ["", "[UNK]"] and written[2:] == prepared  # line i = id i


def test_unicode_is_lower_cased_and_the_vocabulary_capped() -> None:
    texts = tf.data.Dataset.from_tensor_slices(["Über CAFÉ, «Bonjour»!", "über café 42 €", "x"])
    assert learn_vocabulary(texts, 20) == ["über", "café", "x", "bonjour", "42"]
    assert learn_vocabulary(texts, 4) == ["über", "café"]  # 4 with padding and [UNK]


# 900 training texts / 8 per step = 112 steps per epoch, 224 in all; a checkpoint every 6 steps,
# 3 per chunk; dropout on, so the RNG state must be restored too.
LONG = ["train.epochs=2", "train.batch_size=8", "train.steps_per_execution=3",
        "train.checkpoint_every_steps=6", "train.keep_checkpoints=2", "model.dropout=0.2",
        "model.hidden_units=[16]", "model.embedding_dim=16", "data.sequence_length=16",
        "repro.deterministic=true", "distribute.strategy=default", "run_name=kill"]  # fmt: skip


@pytest.mark.slow
def test_sigkill_at_a_random_step_then_resume_is_bit_identical_for_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_csv(tmp_path / "reviews.csv", text_rows("classification"),
                     ["id", "review", "source", "topic"])  # fmt: skip
    overrides = text_params(tmp_path, data, "classification", LONG)
    reference, killed = new_project(tmp_path, "reference"), new_project(tmp_path, "killed")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "reference-storage"))
    for project in (reference, killed):
        prepare(load_params(project / "params.yaml", overrides), project)
    ref = train(load_params(reference / "params.yaml", overrides), reference)  # uninterrupted
    total = 2 * (900 // 8)
    assert ref.status == "completed" and ref.step == total

    storage = tmp_path / "killed-storage"
    env = cli_env(storage)
    target = random.randint(7, total * 2 // 3)  # after at least one checkpoint
    proc = cli(["train", *sets(overrides)], killed, env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        steps = [s for s, _ in list_checkpoints(storage / "checkpoints" / "kill")]
        if steps and max(steps) >= target:
            time.sleep(random.uniform(0, 0.02))  # land anywhere: mid-chunk or mid-save
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == -signal.SIGKILL, f"not killed (target step {target}):\n{out}"
    resumed = cli(["train", *sets(overrides)], killed, env)
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, out
    match = re.search(r"Resuming run 'kill' from its checkpoint at step (\d+)", out)
    assert match and 6 <= int(match.group(1)) < total, out
    digest = ref.facts["weights_sha256"]
    assert f"Done: step {total}" in out and f"final weights sha256 {digest}" in out, out


def tiny_preset(folder: Path) -> Path:
    """A keras-hub preset made here: a 1-layer BERT with random weights and a WordPiece
    vocabulary of the data's words, saved as `save_to_preset` saves a downloaded one."""
    keras_hub = pytest.importorskip("keras_hub")
    import keras

    words = sorted({w for t in TOPICS.values() for w in t.split()} | set(FILLER))
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocabulary), num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=32,
    )  # fmt: skip
    backbone.save_to_preset(str(folder))
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    tokenizer.save_to_preset(str(folder))
    return folder


def test_a_keras_hub_preset_trains_offline_and_serves_strings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from {{ cookiecutter.module_name }}.training.saved_model import load_for_users

    preset = tiny_preset(tmp_path / "preset")
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path / "storage"))
    project = new_project(tmp_path, "hub")
    data = write_csv(project / "reviews.csv", text_rows("classification"),
                     ["id", "review", "source", "topic"])  # fmt: skip
    hub = ["model.architecture=backbone", f"model.backbone={preset}", "data.sequence_length=24",
           "train.epochs=6", "train.optimizer=adamw", "train.learning_rate=0.003"]  # fmt: skip
    params = load_params(project / "params.yaml", text_params(project, data, "classification", hub))
    prepare(params, project)
    assert train(params, project).status == "completed"
    metrics = evaluate(params, project)
    print(f"keras-hub tiny BERT from random weights: test accuracy {metrics['test_accuracy']:.4f}")
    from {{ cookiecutter.module_name }}.training.speed import speed

    assert speed(params, project, steps=3)["compute_examples_per_sec"] > 0  # ids from its tokenizer
    assert metrics["test_accuracy"] >= 0.6
    models = project / "results/models"
    shutil.move(preset, tmp_path / "moved")  # the saved model needs no preset
    model, info = load_for_users(models)
    assert info["tokenizer"] == "keras_hub" and info["input_kind"] == "text"
    texts = tf.constant(["the striker scored in the cup match", "bake the dough with butter"])
    probs = model.predict(texts, verbose=0)
    assert probs.shape == (2, 3) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    missing = model_cfg(architecture="backbone", backbone=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"^model.backbone: .*nope.* is not a keras-hub"):
        build_model(DataSpec("text", (24,), "classification"), 3, missing)
    moved = model_cfg(architecture="backbone", backbone=str(tmp_path / "moved"))
    with pytest.raises(ConfigError, match=r"^data.sequence_length: .* at most 32 tokens"):
        build_model(DataSpec("text", (64,), "classification"), 3, moved)


TEXT_SPEC = DataSpec(kind="text", input_shape=(6,), task="classification", vocabulary_size=20)
VECTORS = DataSpec(kind="vector", input_shape=(3,), task="classification")


def model_cfg(**changes: object) -> ModelConfig:
    """params.yaml's model section with `changes`."""
    return dataclasses.replace(load_params(PARAMS).model, **changes)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_the_text_network_averages_real_tokens_only(policy: str) -> None:
    """Padding (id 0) is left out of the mean, an empty text gives finite logits, and the
    logits stay float32 under mixed precision."""
    import keras

    keras.mixed_precision.set_global_policy(policy)
    try:
        cfg = model_cfg(architecture="text", hidden_units=[8], embedding_dim=4)
        model = build_model(TEXT_SPEC, 3, cfg)
        ids = tf.constant([[3, 5, 0, 0, 0, 0], [3, 5, 3, 5, 0, 0], [0] * 6], tf.int32)
        logits = model(ids, training=False)
        assert logits.dtype == "float32" and np.isfinite(logits.numpy()).all()
        np.testing.assert_allclose(logits[0], logits[1], atol=1e-2 if "16" in policy else 1e-6)
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize(
    ("spec", "architecture", "message"),
    [
        (TEXT_SPEC, "mlp", "model.architecture: the data is text"),
        (TEXT_SPEC, "cnn", "model.architecture: cnn needs images"),
        (VECTORS, "text", "model.architecture: text needs text"),
    ],
)
def test_an_architecture_for_other_inputs_is_a_one_line_error(spec, architecture, message) -> None:
    with pytest.raises(ConfigError) as info:
        build_model(spec, 3, model_cfg(architecture=architecture, hidden_units=[4]))
    text = str(info.value)
    assert text.startswith(message) and "\n" not in text
    assert text.endswith("=mlp)") if spec is VECTORS else text.endswith("=text)")
