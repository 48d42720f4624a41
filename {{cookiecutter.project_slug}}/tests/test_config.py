"""params.yaml loading (every value is there: config.py holds none), --set overrides and their
error messages."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import MODULE, PARAMS, PROJECT, cli_env

from {{ cookiecutter.module_name }}.config import (
    ConfigError,
    Params,
    flat,
    load_params,
    parse_assignment,
)

PARAMS = PARAMS


def test_template_params_load_with_the_keys_the_checks_use() -> None:
    p = load_params(PARAMS)
    assert isinstance(p, Params)
    assert isinstance(p.seed, int) and isinstance(p.run_name, str)
    assert p.train.batch_size > 0 and p.train.epochs > 0
    assert p.train.checkpoint_every_steps > 0 and p.train.steps_per_execution > 0
    assert isinstance(p.train.mixed_precision, bool)
    assert p.train.time_budget_minutes >= 0
    assert p.distribute.strategy == "auto"
    assert isinstance(p.distribute.logical_cpus, int)
    assert isinstance(p.repro.deterministic, bool)


def test_overrides_are_typed_like_yaml() -> None:
    p = load_params(
        PARAMS,
        [
            "train.batch_size=64",
            "train.mixed_precision=true",
            "train.learning_rate=3e-4",
            "train.time_budget_minutes=1",
            "distribute.gpus=[0, 1]",
            "run_name=2024",
            "distribute.strategy=mirrored",
        ],
    )
    assert p.train.batch_size == 64
    assert p.train.mixed_precision is True
    assert p.train.learning_rate == pytest.approx(3e-4)
    assert p.train.time_budget_minutes == 1.0
    assert p.distribute.gpus == [0, 1]
    assert p.run_name == "2024"
    assert p.distribute.strategy == "mirrored"


def test_a_text_that_yaml_reads_as_empty_stays_as_written() -> None:
    """`|` and `>` start YAML block text and `#` a comment: as values they are the text itself,
    not an empty string a reader would take (`str.split("")`). `""` and an empty value stay ''."""
    given = {"|": "|", ">": ">", "#": "#", '""': "", "": "", "null": None}
    for text, value in given.items():
        assert parse_assignment(f"data.label={text}", "--set", "x=1") == ("data.label", value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "train.batch_size=abc",
            "train.batch_size: expected a positive integer, got 'abc' "
            "(example: --set train.batch_size=64)",
        ),
        ("train.batch_size=0", "train.batch_size: expected a positive integer, got 0"),
        ("train.epochs=2.5", "train.epochs: expected a positive integer, got 2.5"),
        ("train.mixed_precision=maybe", "train.mixed_precision: expected true or false"),
        ("distribute.strategy=gpu", "distribute.strategy: expected one of auto / mirrored"),
        ("distribute.gpus=0", "distribute.gpus: expected a list of integers >= 0"),
        ("train.learning_rate=-1", "train.learning_rate: expected a number > 0.0"),
        ("train.learning_rate=inf", "train.learning_rate: expected a number > 0.0, got 'inf'"),
        ("train.weight_decay=.inf", "train.weight_decay: expected a number >= 0.0, got inf"),
        ("train.class_weight={cat: 1e400}", "train.class_weight: expected none, balanced or"),
        ("run_name=a/b", "run_name: expected letters, digits"),
        ("train.batchsize=64", "train.batchsize: unknown key (known here: epochs, batch_size"),
        ("trian.epochs=1", "trian: unknown key"),
        ("train=5", "train: expected a section of keys, got 5"),
        ("train.epochs", "--set 'train.epochs': expected KEY=VALUE"),
    ],
)
def test_bad_values_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_params(PARAMS, [override])
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_unknown_key_in_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "params.yaml"
    bad.write_text(PARAMS.read_text() + "\nextra_key: 1\n")
    with pytest.raises(ConfigError, match=r"^extra_key: unknown key"):
        load_params(bad)


def test_a_key_missing_from_the_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "params.yaml"
    bad.write_text(re.sub(r"(?m)^  split_column: .*$", "  #", PARAMS.read_text()))
    with pytest.raises(ConfigError) as info:
        load_params(bad)
    assert str(info.value) == (
        "data.split_column: missing; the params file needs every key (example: split_column: fold)"
    )


def test_a_key_given_twice_in_the_file_is_named(tmp_path: Path) -> None:
    # YAML would keep the last value silently (and DVC refuses the file): one line instead.
    bad = tmp_path / "params.yaml"
    bad.write_text(PARAMS.read_text().replace("\ntrain:\n", "\ntrain:\n  epochs: 3\n", 1))
    with pytest.raises(ConfigError) as info:
        load_params(bad)
    message = str(info.value)
    assert message.startswith("train.epochs: given twice in the params file (lines ")
    assert "\n" not in message and "example: " in message


def test_a_name_of_digits_keeps_them(tmp_path: Path) -> None:
    # Unquoted, YAML reads 0123 as the octal number 83 and 1.10 as 1.1: a name keeps its text.
    params_file = tmp_path / "params.yaml"
    params_file.write_text(re.sub(r"(?m)^run_name: \S+", "run_name: 0123", PARAMS.read_text()))
    assert load_params(params_file).run_name == "0123"
    assert load_params(PARAMS, ["run_name=1.10", "sweep.name=007"]).run_name == "1.10"
    assert load_params(PARAMS, ["sweep.name=007"]).sweep.name == "007"
    # YAML 1.1 reads on, off, yes and no as true and false: a name keeps them too.
    assert load_params(PARAMS, ["run_name=on"]).run_name == "on"


def test_the_params_file_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweep loads it for every trial: one YAML parse of the file, not two.
    calls = []
    compose = yaml.composer.Composer.compose_document
    monkeypatch.setattr(
        yaml.composer.Composer, "compose_document", lambda self: calls.append(1) or compose(self)
    )
    load_params(PARAMS)
    assert len(calls) == 1


def test_augmentations_with_their_own_arguments() -> None:
    p = load_params(PARAMS, ["data.augment=[flip, {rotation: {factor: 0.2}}]"])
    assert p.data.augment == ["flip", {"rotation": {"factor": 0.2}}]
    with pytest.raises(ConfigError, match=r"^data\.augment: expected a list of augmentation names"):
        load_params(PARAMS, ["data.augment=[{flip: {}, zoom: {}}]"])
    assert flat({"a": {"b": 1, "c": {}}, "d": [1]}) == {"a.b": 1, "a.c": {}, "d": [1]}


def test_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="params file not found"):
        load_params(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(broken)
    broken.write_text("seed: 1\x07\n")  # a control character: refused by YAML's reader
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(broken)


def test_a_yaml_mistake_is_named_by_its_line_and_cause(tmp_path: Path) -> None:
    """A tab in the indentation, a list left open: the line where YAML stopped (after an open list:
    the next one, and the list's own), and what it found."""
    text = re.sub(r"(?m)^  epochs: .*$", "  epochs: 20", PARAMS.read_text())  # yours, any value
    line = text.splitlines().index("  epochs: 20") + 1
    broken = tmp_path / "params.yaml"
    broken.write_text(text.replace("  epochs: 20", "\tepochs: 20"))
    said = rf"^{broken} line {line}: not valid YAML \(found character '\\t' that cannot start"
    with pytest.raises(ConfigError, match=said):
        load_params(broken)
    broken.write_text(text.replace("  epochs: 20", "  epochs: [20"))
    said = (
        rf"^{broken} line {line + 1}: not valid YAML \(expected ',' .* sequence from line {line}\)"
    )
    with pytest.raises(ConfigError, match=said):
        load_params(broken)


def test_cli_config_error_is_one_line_exit_2(tmp_path: Path) -> None:
    """No traceback, exit code 2, the key and an example (and no TensorFlow import needed)."""
    proc = subprocess.run(
        [sys.executable, "-m", MODULE, "train", "--set", "train.batch_size=abc"],
        cwd=PROJECT,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: train.batch_size: expected a positive integer, got 'abc' "
        "(example: --set train.batch_size=64)"
    ]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_lists_of_any_scalar_optional_values_and_nested_sections() -> None:
    p = load_params(
        PARAMS,
        [
            "data.augment=[flip, zoom]",
            "task.metrics=[auc, mean_squared_error]",
            "model.weights=null",
            "train.fine_tune.frozen_epochs=3",
            "train.fine_tune.learning_rate_factor=0.05",
            "train.profile_steps=[10, 20]",
        ],
    )
    assert p.data.augment == ["flip", "zoom"]
    assert p.task.metrics == ["auc", "mean_squared_error"]
    assert p.model.weights is None
    assert p.train.fine_tune.frozen_epochs == 3
    assert p.train.fine_tune.learning_rate_factor == pytest.approx(0.05)
    assert p.train.profile_steps == [10, 20]
    assert p.to_dict()["train"]["fine_tune"]["frozen_epochs"] == 3


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "train.fine_tune.frozen=1",
            "train.fine_tune.frozen: unknown key (known here: frozen_epochs, unfreeze_layers, "
            "learning_rate_factor)",
        ),
        (
            "train.fine_tune.frozen_epochs=x",
            "train.fine_tune.frozen_epochs: expected an integer >= 0, got 'x' "
            "(example: --set train.fine_tune.frozen_epochs=3)",
        ),
        ("train.fine_tune=3", "train.fine_tune: expected a section of keys, got 3"),
        ("model.weights=imagenet21k", "model.weights: expected imagenet or null"),
        ("train.profile_steps=[5]", "train.profile_steps: expected [] or [from, to]"),
        ("train.profile_steps=[9, 3]", "train.profile_steps: expected [] or [from, to]"),
        ("train.momentum=1.5", "train.momentum: expected a number >= 0.0 and < 1.0, got 1.5"),
        ("data.image_size=[64, 0.5]", "data.image_size: expected [height, width] in pixels"),
        ("data.image_size=[64]", "data.image_size: expected [height, width] in pixels, got [64]"),
        ("data.image_channels=4", "data.image_channels: expected 1 (grayscale) or 3 (RGB), got 4"),
    ],
)
def test_bad_new_values_name_the_full_dotted_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_params(PARAMS, [override])
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_list_of_floats_and_a_typo_in_a_nested_section_of_the_file(tmp_path: Path) -> None:
    import dataclasses

    from {{ cookiecutter.module_name }}.config import _field, schema

    @schema
    class Widths:
        scales: list[float] = _field("[0.25,0.5]", "a list of numbers")

    assert Widths(scales=[1, 2.5]).scales == [1.0, 2.5]
    with pytest.raises(ValueError):
        Widths(scales=["wide"])
    bad = tmp_path / "params.yaml"
    bad.write_text(PARAMS.read_text().replace("    frozen_epochs:", "    frozen_epoch:"))
    with pytest.raises(ConfigError, match=r"^train\.fine_tune\.frozen_epoch: unknown key"):
        load_params(bad)
    # Still plain dataclasses: `dataclasses.replace` validates the new value too.
    train = dataclasses.replace(load_params(PARAMS).train, epochs=3)
    assert train.epochs == 3
    with pytest.raises(ValueError):
        dataclasses.replace(train, epochs=0)


def test_class_names_of_digits_keep_them(tmp_path: Path) -> None:
    # Class folders 01, 02: a key of train.class_weight is a class name, kept as written (YAML
    # reads 01 as the number 1, 1.10 as 1.1 and on as true), in the file and from --set.
    params_file = tmp_path / "params.yaml"
    weights = "class_weight: {01: 2.0, 1.10: 3, on: 0.5}"
    params_file.write_text(re.sub(r"(?m)^  class_weight: .*$", f"  {weights}", PARAMS.read_text()))
    expected = {"01": 2.0, "1.10": 3.0, "on": 0.5}
    assert load_params(params_file).train.class_weight == expected
    overrides = ["train.class_weight={01: 2.0, 010: 1}"]
    assert load_params(PARAMS, overrides).train.class_weight == {"01": 2.0, "010": 1.0}
    # A sweep over class weights: each choice is a value of train.class_weight.
    from {{ cookiecutter.module_name }}.config import sweep_space

    space = "sweep.space={train.class_weight: {choices: [none, {01: 2.0}]}}"
    (_, choice) = sweep_space(load_params(PARAMS, [space]))["train.class_weight"].choices
    assert yaml.safe_load(choice) == {"01": 2.0}
