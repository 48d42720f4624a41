"""params.yaml -> typed, validated settings.

`params.yaml` is the one configuration of the project: the code, DVC and the notebooks read it.
`load_params` reads it, applies `--set dotted.key=value` overrides and checks every value, so a
typo stops the run at once with one line that names the key, instead of hours later.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

STRATEGIES = ("auto", "mirrored", "multiworker", "tpu", "default")
LR_SCALING = ("linear", "none")
DATA_SOURCES = ("digits", "csv", "images", "tfrecord", "tfds")
FEATURE_KINDS = ("vector", "image")
AUGMENTATIONS = ("flip", "rotation", "zoom", "contrast")
ARCHITECTURES = ("mlp", "cnn")


class ConfigError(ValueError):
    """A bad params file or override; the message is one line meant for the user."""


def _opt(default: Any, example: str, **checks: Any) -> Any:
    """A dataclass field with an example value (for error messages) and extra checks."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"example": example, **checks})
    return field(default=default, metadata={"example": example, **checks})


@dataclass
class DataConfig:
    validation_fraction: float = _opt(0.2, "0.2", gt=0.0, lt=1.0)
    # `prepare` (issue 4): where the data comes from and how it is split.
    source: str = _opt("digits", "csv", choices=DATA_SOURCES)
    path: str = _opt("data/external", "data/external/my.csv")
    label: str = _opt("label", "label")  # csv column / TFRecord feature with the class
    features: str = _opt("features", "features")  # TFRecord feature with the inputs
    feature_kind: str = _opt("vector", "image", choices=FEATURE_KINDS)  # TFRecord: floats / image
    name: str = _opt("mnist", "tf_flowers")  # tfds: the TensorFlow Datasets name
    image_size: list[int] = _opt([28, 28], "[64,64]", each_min=1)  # images: height, width
    image_channels: int = _opt(1, "3", min=1)  # images: 1 grayscale, 3 RGB
    test_fraction: float = _opt(0.2, "0.2", gt=0.0, lt=1.0)
    # Training only, seeded per example: any of flip / rotation / zoom / contrast; [] = off.
    augment: list[str] = _opt([], "[flip,rotation]", each_choice=AUGMENTATIONS)


@dataclass
class ModelConfig:
    architecture: str = _opt("mlp", "cnn", choices=ARCHITECTURES)  # cnn: a small conv net
    hidden_units: list[int] = _opt([64, 64], "[128,64]", each_min=1)
    dropout: float = _opt(0.1, "0.1", ge=0.0, lt=1.0)


@dataclass
class TrainConfig:
    epochs: int = _opt(10, "10", min=1)
    batch_size: int = _opt(32, "64", min=1)  # per replica
    learning_rate: float = _opt(0.001, "0.001", gt=0.0)
    lr_scaling: str = _opt("linear", "linear", choices=LR_SCALING)
    checkpoint_every_steps: int = _opt(500, "500", min=1)
    keep_checkpoints: int = _opt(3, "3", min=1)
    steps_per_execution: int = _opt(100, "100", min=1)
    mixed_precision: bool = _opt(False, "true")
    xla: bool = _opt(False, "true")
    time_budget_minutes: float = _opt(0.0, "690", ge=0.0)  # 0 = no budget


@dataclass
class DistributeConfig:
    strategy: str = _opt("auto", "mirrored", choices=STRATEGIES)
    logical_cpus: int = _opt(0, "2", min=0)
    gpus: list[int] = _opt([], "[0,1]", each_min=0)  # [] = every GPU found
    memory_growth: bool = _opt(True, "false")


@dataclass
class ReproConfig:
    deterministic: bool = _opt(True, "false")


@dataclass
class VertexConfig:
    """A Vertex AI custom job (`python -m <module> vertex`); vertex.py checks the values."""

    project: str = _opt("", "my-gcp-project")  # "" = gcloud's configured project
    region: str = _opt("us-central1", "europe-west4")
    display_name: str = _opt("", "colab-project-baseline")  # "" = <project_slug>-<run_name>
    machine_type: str = _opt("g2-standard-8", "n1-standard-8")
    accelerator_type: str = _opt("NVIDIA_L4", "NVIDIA_TESLA_T4")  # "" = CPU only
    accelerator_count: int = _opt(1, "1", min=0)  # per replica
    chief_replicas: int = _opt(1, "1", min=0)  # worker pool 0: always exactly 1
    worker_replicas: int = _opt(0, "1", min=0)  # worker pool 1: 0 = a single machine
    spot: bool = _opt(False, "true")  # Spot VMs: much cheaper, may be preempted (we resume)
    image_uri: str = _opt("", "us-central1-docker.pkg.dev/my-gcp-project/ml/app:0.1.0")
    python_package_uri: str = _opt("", "gs://my-bucket/dist/app-0.1.0.tar.gz")  # or an image
    executor_image_uri: str = _opt(  # the prebuilt image a python_package_uri runs in
        "", "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest"
    )
    bucket: str = _opt("", "gs://my-bucket/colab-project")  # checkpoints and results
    service_account: str = _opt("", "trainer@my-gcp-project.iam.gserviceaccount.com")
    output: str = _opt("results/vertex/job.yaml", "results/vertex/job.yaml")


@dataclass
class Params:
    seed: int = _opt(42, "1234", min=0)
    run_name: str = _opt("baseline", "lr-1e-3", pattern=r"[A-Za-z0-9][A-Za-z0-9._-]*")
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    distribute: DistributeConfig = field(default_factory=DistributeConfig)
    repro: ReproConfig = field(default_factory=ReproConfig)
    vertex: VertexConfig = field(default_factory=VertexConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Params:
    """Read `path`, apply `KEY=VALUE` overrides (dotted keys), validate, return typed params."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found (example: --params params.yaml)")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML ({first})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    for item in overrides or []:
        key, value = _parse_override(item)
        _set_dotted(raw, key, value)
    return _build(Params, raw, prefix="")


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE (example: --set train.epochs=5)")
    try:
        # YAML gives the same types on the command line as in the file: 5, 0.1, true, [0,1].
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    return key, value


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{key}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def _build(cls: type, raw: Any, prefix: str) -> Any:
    """Build dataclass `cls` from a mapping, checking every key and value."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.')}: expected a section of keys, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            known = ", ".join(fields)
            raise ConfigError(f"{prefix}{key}: unknown key (known here: {known})")
    values = {}
    for name, f in fields.items():
        if name not in raw:
            continue
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            values[name] = _build(hint, raw[name], prefix=f"{prefix}{name}.")
        else:
            values[name] = _check(f"{prefix}{name}", raw[name], hint, f.metadata)
    return cls(**values)


def _check(key: str, value: Any, hint: Any, meta: typing.Mapping[str, Any]) -> Any:
    """Return `value` converted to `hint`, or raise ConfigError naming `key`."""
    example = f"--set {key}={meta.get('example', '')}"

    def fail(expected: str) -> typing.NoReturn:
        raise ConfigError(f"{key}: expected {expected}, got {value!r} (example: {example})")

    if hint is bool:
        if not isinstance(value, bool):
            fail("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail(_int_words(meta))
        if value < meta.get("min", value):
            fail(_int_words(meta))
        return value
    if hint is float:
        if isinstance(value, str):  # YAML reads `3e-4` (no dot) as text
            try:
                value = float(value)
            except ValueError:
                fail("a number")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail("a number")
        value = float(value)
        if ("gt" in meta and not value > meta["gt"]) or ("ge" in meta and not value >= meta["ge"]):
            fail(f"a number {_range_words(meta)}")
        if "lt" in meta and not value < meta["lt"]:
            fail(f"a number {_range_words(meta)}")
        return value
    if hint is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # `run_name: 2024` is a name, not a number
        if not isinstance(value, str):
            fail("text")
        if "choices" in meta and value not in meta["choices"]:
            fail("one of " + " / ".join(meta["choices"]))
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            fail("letters, digits, '.', '_' or '-' (a folder name)")
        return value
    if typing.get_origin(hint) is list and typing.get_args(hint) == (str,):
        choices = meta.get("each_choice", ())
        if not isinstance(value, list) or any(v not in choices for v in value):
            fail("a list of " + " / ".join(choices))
        return list(value)
    if typing.get_origin(hint) is list:
        ok = isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= meta.get("each_min", v)
            for v in value
        )
        if not ok:
            fail(f"a list of integers >= {meta.get('each_min', 0)}")
        return list(value)
    raise TypeError(f"{key}: unsupported type {hint}")  # a bug in this file, not user input


def _int_words(meta: typing.Mapping[str, Any]) -> str:
    low = meta.get("min")
    if low == 1:
        return "a positive integer"
    if low == 0:
        return "an integer >= 0"
    return "an integer"


def _range_words(meta: typing.Mapping[str, Any]) -> str:
    parts = []
    if "gt" in meta:
        parts.append(f"> {meta['gt']}")
    if "ge" in meta:
        parts.append(f">= {meta['ge']}")
    if "lt" in meta:
        parts.append(f"< {meta['lt']}")
    return " and ".join(parts)
