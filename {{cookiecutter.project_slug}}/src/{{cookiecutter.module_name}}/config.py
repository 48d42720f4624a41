"""params.yaml -> typed, validated settings.

This module says what each key of params.yaml takes and holds no values, so nothing silently
falls back to a value written elsewhere; a bad, missing or misspelt key stops the run with one
line that names it. A setting of the package's own is one field here plus its line in
params.yaml; a component's own settings (`model.args`, `data.args`, a `data.augment` entry) need
neither: registry.py checks them against the function.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pydantic import (
    AllowInfNan,
    BeforeValidator,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic import dataclasses as pydantic_dataclasses

# How a user runs this package: messages quote it.
COMMAND = "python -m {{ cookiecutter.module_name }}"

# Keys a sweep cannot search: each trial sets its own run_name; the rest do not train a model.
NOT_SEARCHABLE = ("run_name", "sweep", "distribute"{% if cookiecutter.vertex_ai %}, "vertex"{% endif %})


class ConfigError(ValueError):
    """A bad params file or override; the message is one line meant for the user."""


def _number_from_text(value: Any) -> Any:
    """YAML reads `3e-4` (no dot) as text; accept it as the number it is."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _text_from_number(value: Any) -> Any:
    """`run_name: 2024` is a name, not a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


# Strict: YAML already gives typed values, so `true` is not 1 and `2.5` is not an integer.
# A number is finite: `.inf` (or 1e400) would train on NaNs.
Int = Annotated[int, Strict()]
Float = Annotated[float, BeforeValidator(_number_from_text), Strict(), AllowInfNan(False)]
Text = Annotated[str, BeforeValidator(_text_from_number), Strict()]
Bool = Annotated[bool, Strict()]
NonNegInt = Annotated[Int, Field(ge=0)]
PosInt = Annotated[Int, Field(ge=1)]
PosFloat = Annotated[Float, Field(gt=0.0)]


def _field(example: str, expect: str = "", **constraints: Any) -> Any:
    """A key of params.yaml (no default: its value is there), an example and what it expects."""
    return Field(json_schema_extra={"example": example, "expect": expect}, **constraints)


# Unknown keys are errors: a typo must not silently fall back to a default. The classes stay
# plain dataclasses (`dataclasses.replace`, `asdict`).
schema = pydantic_dataclasses.dataclass(config={"extra": "forbid"})
# A component's own keyword arguments (registry.py checks them against its signature).
Arguments = dict[Text, Any]
# An augmentation: its name, or {name: {argument: value}} (one name each).
Augmentation = Text | Annotated[dict[Text, Arguments], Field(min_length=1, max_length=1)]


@schema
class DataConfig:
    validation_fraction: Float = _field("0.2", gt=0.0, lt=1.0)
    source: Text = _field("csv", "the name of a registered source (sources.py, readers/)")
    args: Arguments = _field("{}", "a mapping of the source's own arguments ({delimiter: ';'})")
    path: Text = _field("data/external/my.csv")
    name: Text = _field("mnist")
    label: Text = _field("label")
    features: Text = _field("features")
    feature_kind: Literal["vector", "image"] = _field("image")
    image_size: list[PosInt] = _field(
        "[64,64]", "[height, width] in pixels", min_length=2, max_length=2
    )
    image_channels: Int = _field("3", "1 (grayscale) or 3 (RGB)", ge=1, le=3)
    augment: list[Augmentation] = _field(
        "[flip,{rotation: {factor: 0.2}}]", "a list of augmentation names or {name: {arg: value}}"
    )
    test_fraction: Float = _field("0.2", gt=0.0, lt=1.0)
    text: Text = _field("review")
    max_tokens: Int = _field("50000", ge=3)
    sequence_length: Int = _field("256", ge=1)
    split: Literal["random", "folders", "files", "column"] = _field("folders")
    split_column: Text = _field("fold")


@schema
class ModelConfig:
    architecture: Text = _field("cnn", "the name of a registered architecture (model.py)")
    args: Arguments = _field("{width: 24}", "a mapping of the architecture's own arguments")
    backbone: Text = _field("EfficientNetV2B0")
    weights: Literal["imagenet"] | None = _field("null", "imagenet or null")
    hidden_units: list[PosInt] = _field("[128,64]", "a list of integers >= 1")
    filters: list[PosInt] = _field("[32,64,128]", "a list of integers >= 1")
    dropout: Float = _field("0.1", ge=0.0, lt=1.0)
    embedding_dim: Int = _field("128", ge=1)


@schema
class TaskConfig:
    type: Text = _field("my_task", "the name of a registered task (task.py, tasks/)")
    metrics: list[Text] = _field("[auc]", "a list of keras metric names")


@schema
class FineTuneConfig:
    frozen_epochs: Int = _field("3", ge=0)  # 0 = no phase change
    unfreeze_layers: Int = _field("20", ge=0)  # 0 = the whole backbone
    learning_rate_factor: Float = _field("0.1", gt=0.0, le=1.0)


@schema
class TrainConfig:
    epochs: Int = _field("10", ge=1)
    batch_size: Int = _field("64", ge=1)  # per replica
    learning_rate: Float = _field("0.001", gt=0.0)
    lr_scaling: Literal["linear", "none"] = _field("linear")
    optimizer: Literal["adam", "adamw", "sgd"] = _field("adamw")
    momentum: Float = _field("0.9", ge=0.0, lt=1.0)  # sgd
    schedule: Literal["constant", "cosine"] = _field("cosine")
    warmup_steps: Int = _field("500", ge=0)  # cosine: linear warm-up steps
    weight_decay: Float = _field("0.01", ge=0.0)  # decoupled, any optimizer (usual with adamw)
    clip_norm: Float = _field("1.0", ge=0.0)  # 0 = no clipping
    label_smoothing: Float = _field("0.1", ge=0.0, lt=1.0)
    class_weight: Literal["none", "balanced"] | dict[Text, PosFloat] = _field(
        "balanced", "none, balanced or a map of class name to a weight > 0 ({cat: 2.0})"
    )
    fine_tune: FineTuneConfig = Field()  # a section: required, like every key
    monitor: Text = _field("val_accuracy")
    early_stopping_patience: Int = _field("5", ge=0)  # 0 = off
    profile_steps: list[NonNegInt] = _field("[10,20]", "[] or [from, to] with from <= to")
    checkpoint_every_steps: Int = _field("500", ge=1)
    keep_checkpoints: Int = _field("3", ge=1)
    steps_per_execution: Int = _field("100", ge=1)
    mixed_precision: Bool = _field("true")
    xla: Bool = _field("true")
    time_budget_minutes: Float = _field("690", ge=0.0)  # 0 = no budget

    @field_validator("profile_steps")
    @classmethod
    def _window(cls, value: list[int]) -> list[int]:
        if value and (len(value) != 2 or value[0] > value[1]):
            raise ValueError("not a [from, to] window")
        return value


@schema
class DistributeConfig:
    strategy: Literal["auto", "mirrored", "multiworker", "tpu", "default"] = _field("mirrored")
    logical_cpus: Int = _field("2", ge=0)
    gpus: list[NonNegInt] = _field("[0,1]", "a list of integers >= 0")  # [] = every GPU
    memory_growth: Bool = _field("false")
    require_accelerator: Bool = _field("true")  # refuse to train on a CPU-only machine


@schema
class ReproConfig:
    deterministic: Bool = _field("false")
{%- if cookiecutter.vertex_ai %}


@schema
class VertexConfig:
    """A Vertex AI custom job (`python -m <module> vertex`); vertex.py checks the values."""

    project: Text = _field("my-gcp-project")  # "" = gcloud's configured project
    region: Text = _field("europe-west4", "a region name", min_length=1)
    display_name: Text = _field("{{ cookiecutter.project_slug }}-baseline")
    machine_type: Text = _field("n1-standard-8", "a machine type name", min_length=1)
    accelerator_type: Text = _field("NVIDIA_TESLA_T4")  # "" = CPU only
    accelerator_count: Int = _field("1", ge=0)  # per replica
    chief_replicas: Int = _field("1", ge=0)  # worker pool 0: always exactly 1
    worker_replicas: Int = _field("1", ge=0)  # worker pool 1: 0 = a single machine
    spot: Bool = _field("true")  # Spot VMs: much cheaper, may be preempted (we resume)
    image_uri: Text = _field("us-central1-docker.pkg.dev/my-gcp-project/ml/app:0.1.0")
    python_package_uri: Text = _field("gs://my-bucket/dist/app-0.1.0.tar.gz")  # or an image
    executor_image_uri: Text = _field(
        "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest"
    )
    bucket: Text = _field("gs://my-bucket/{{ cookiecutter.project_slug }}")
    service_account: Text = _field("trainer@my-gcp-project.iam.gserviceaccount.com")
    output: Text = _field("results/vertex/job.yaml")
    parallel_trials: Int = _field("4", ge=1)  # `vertex --sweep`: tuning trials run at once
{%- endif %}


@schema
class SweepConfig:
    """A hyperparameter search (`python -m <module> sweep`); `sweep_space` checks the space."""

    name: Text = _field(
        "lr-dropout",
        "letters, digits, '.', '_' or '-' (trials are runs named <name>-<number>)",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
    )
    n_trials: Int = _field("20", ge=1)
    sampler: Literal["tpe", "random", "grid"] = _field("random")
    pruner: Literal["median", "none"] = _field("none")
    startup_trials: Int = _field("5", ge=0)  # drawn at random, never pruned
    warmup_epochs: Int = _field("2", ge=0)  # a trial trains this many epochs before pruning
    keep_best: Int = _field("3", ge=1)  # finished trials whose checkpoints are kept
    time_budget_minutes: Float = _field("690", ge=0.0)  # 0 = no budget
    storage: Text = _field("postgresql://user@host:5432/db")
    space: dict[Text, dict[Text, Any]] = _field(
        "{train.learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}}",
        "a mapping of dotted params keys to {low, high[, log]} or {choices: [...]}",
    )


@schema
class Params:
    seed: Int = _field("1234", ge=0)
    run_name: Text = _field(
        "lr-1e-3",
        "letters, digits, '.', '_' or '-' (a folder name)",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
    )
    data: DataConfig = Field()
    model: ModelConfig = Field()
    task: TaskConfig = Field()
    train: TrainConfig = Field()
    distribute: DistributeConfig = Field()
    repro: ReproConfig = Field()
    sweep: SweepConfig = Field()
{%- if cookiecutter.vertex_ai %}
    vertex: VertexConfig = Field()
{%- endif %}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_PARAMS = TypeAdapter(Params)


def load_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Params:
    """Read `path`, apply `KEY=VALUE` overrides (dotted keys), validate, return typed params."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found (example: --params params.yaml)")
    try:  # one parse: the checks read the nodes, the values are built from the same nodes
        loader = yaml.SafeLoader(path.read_text(encoding="utf-8"))
        node = loader.get_single_node()
        _check_tree(node)
        raw = loader.construct_document(node) if node is not None else {}
    except yaml.YAMLError as exc:  # where YAML stopped, and what it was reading (an open list)
        mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context", None)
        where = f"{path} line {mark.line + 1}" if mark else str(path)
        why = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if context and exc.context_mark:
            why += f"; {context} from line {exc.context_mark.line + 1}"
        raise ConfigError(f"{where}: not valid YAML ({why})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    for item in overrides or []:
        _set_dotted(raw, *parse_assignment(item, "--set", "train.epochs=5"))
    try:
        params = _PARAMS.validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, raw)) from None
    sweep_space(params)  # a bad search space stops every command, as any other bad key does
    return params


def _check_tree(node: yaml.Node | None, prefix: str = "") -> None:
    """Stop at a key given twice in one section (YAML keeps the last value silently, DVC refuses
    the file) with one line naming it and both lines; a text key keeps its number as written."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_tree(item, prefix)
    if not isinstance(node, yaml.MappingNode):
        return
    lines: dict[str, int] = {}
    for key_node, value_node in node.value:
        key, line = f"{prefix}{key_node.value}", key_node.start_mark.line + 1
        if key in lines:
            value = value_node.value if isinstance(value_node, yaml.ScalarNode) else "..."
            raise ConfigError(
                f"{key}: given twice in the params file (lines {lines[key]} and {line}); keep "
                f"one (example: {key_node.value}: {value})"
            )
        lines[key] = line
        _keep_written(key, value_node)
        _check_tree(value_node, f"{key}.")


def _keep_written(key: str, node: yaml.Node) -> None:
    """A name keeps the text it was given: `run_name: 0123` is not the octal number 83, `1.10`
    not 1.1, `on` not true. YAML's number or boolean in a text key stays the text written; so
    do the keys of a mapping key's value (class names: `train.class_weight: {01: 2.0}`), and a
    `sweep.space` choice as the value of its key."""
    annotation = getattr(_field_of(key), "annotation", None)
    names = [node] if annotation is str else []
    # `train.class_weight`, `model.args`: every mapping of the schema is keyed by text.
    mapping = dict in map(get_origin, (annotation, *get_args(annotation)))
    if isinstance(node, yaml.MappingNode) and mapping:
        names += [key_node for key_node, _ in node.value]
    if key == "sweep.space" and isinstance(node, yaml.MappingNode):
        for searched, spec in node.value:
            for field, choices in spec.value if isinstance(spec, yaml.MappingNode) else []:
                if field.value == "choices" and isinstance(choices, yaml.SequenceNode):
                    for choice in choices.value:
                        _keep_written(searched.value, choice)
    for name in names:
        if isinstance(name, yaml.ScalarNode) and name.tag.endswith((":int", ":float", ":bool")):
            name.tag = "tag:yaml.org,2002:str"


def parse_assignment(item: str, flag: str, example: str) -> tuple[str, Any]:
    """`KEY=VALUE` (`--set` here, `-p` for notebooks) -> (key, value of the YAML type); a text
    key keeps the text written, as in the file."""
    key, sep, text = item.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise ConfigError(f"{flag} {item!r}: expected KEY=VALUE (example: {flag} {example})")
    try:  # YAML gives the same types on the command line as in the file: 5, 0.1, true, [0,1]
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        _keep_written(key, node)
        value = loader.construct_document(node) if node is not None else ""
    except yaml.YAMLError:
        value = text
    if value == "" and text not in ("", '""', "''"):  # YAML's `|`, `>`, `#`: the text written
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


def _one_line(exc: ValidationError, raw: dict[str, Any]) -> str:
    """The first problem pydantic found, as `key: expected ..., got ... (example: --set ...)`; a
    misspelt key before the key it leaves missing."""
    errors = exc.errors()
    error = next((e for e in errors if e["type"] != "missing"), errors[0])
    node: Any = raw
    names: list[str] = []
    for part in error["loc"]:
        fields = _fields(".".join(names))
        if fields is None or not isinstance(part, str):
            break  # inside a list or a mapping: the problem is the field's whole value
        if part not in fields:
            return f"{'.'.join([*names, part])}: unknown key (known here: {', '.join(fields)})"
        names.append(part)
        node = node.get(part) if isinstance(node, dict) else node
    key = ".".join(names)
    info, cls = _field_of(key), _fields(key)
    if error["type"] == "missing":
        example = (info.json_schema_extra or {}).get("example", "...")
        return f"{key}: missing; the params file needs every key (example: {names[-1]}: {example})"
    if cls is not None:
        return f"{key}: expected a section of keys, got {node!r}"
    extra = info.json_schema_extra or {}
    expect = extra.get("expect") or _expect(info)
    return f"{key}: expected {expect}, got {node!r} (example: --set {key}={extra['example']})"


def flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"train": {"epochs": 3}} -> {"train.epochs": 3}: dotted keys, as `--set` takes them. An
    empty mapping stays a value (`model.args: {}`); lists stay values."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _expect(info: Any) -> str:
    """Words for what a field takes, from its type and constraints."""
    annotation = info.annotation
    bounds = {
        k: getattr(m, k) for m in info.metadata for k in ("gt", "ge", "lt", "le") if hasattr(m, k)
    }
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return {1: "a positive integer", 0: "an integer >= 0"}.get(bounds.get("ge"), "an integer")
    if annotation is float:
        words = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
        limits = " and ".join(f"{words[k]} {float(v)}" for k, v in bounds.items())
        return f"a number {limits}".rstrip()
    choices = getattr(annotation, "__args__", ())
    if choices and all(isinstance(c, str) for c in choices):
        return "one of " + " / ".join(choices)
    return "text"


# -- the search space of `sweep` ------------------------------------------------------------------
SPACE_FIELDS = ("low", "high", "log", "choices")
RANGE_EXAMPLE = "{low: 1.0e-4, high: 1.0e-2, log: true}"
CHOICES_EXAMPLE = "{choices: [adam, adamw]}"


def yaml_text(value: Any) -> str:
    """`value` as one line of YAML that reads back as the same value: 0.001, adam, [64, 32]."""
    return yaml.safe_dump([value], default_flow_style=True, width=1 << 20).strip()[1:-1]


def sweep_space(params: Params) -> dict[str, BaseDistribution]:
    """`sweep.space` checked (one line naming `sweep.space.<key>`), as Optuna's distributions; a
    choice Optuna cannot store (a list, a mapping) is its YAML text."""
    cfg = params.sweep
    space = {key: _distribution(key, spec, params) for key, spec in cfg.space.items()}
    if cfg.sampler == "grid":
        for key, dist in space.items():
            if not isinstance(dist, CategoricalDistribution):
                example = "{choices: [1.0e-4, 1.0e-3, 1.0e-2]}"
                raise _refused(key, "the grid sampler needs choices", example)
        points = math.prod(len(dist.choices) for dist in space.values())
        if cfg.n_trials > points:
            raise ConfigError(
                f"sweep.n_trials: {cfg.n_trials}, but the grid has {points} points "
                f"(example: --set sweep.n_trials={points})"
            )
    return space


def _refused(key: str, problem: str, example: str) -> ConfigError:
    return ConfigError(f"sweep.space.{key}: {problem} (example: {example})")


def _distribution(key: str, spec: Any, params: Params) -> BaseDistribution:
    """One entry of `sweep.space`, checked against the params schema."""
    section = key.split(".")[0]
    if section in NOT_SEARCHABLE:
        why = "each trial is its own run on this machine"
        raise _refused(key, f"{section} cannot be searched ({why})", "train.learning_rate")
    info = None if _is_argument(key) else _field_of(key)  # an argument: registry.check checks it
    if not _is_argument(key) and (info is None or dataclasses.is_dataclass(info.annotation)):
        what = "a section" if info is not None else "not a params key"
        raise _refused(key, what, f"train.learning_rate: {RANGE_EXAMPLE}")
    unknown = [name for name in spec if name not in SPACE_FIELDS]
    if unknown:
        known = ", ".join(SPACE_FIELDS)
        raise _refused(key, f"unknown field {unknown[0]!r} (known: {known})", RANGE_EXAMPLE)
    if "choices" in spec:
        return _choices(key, spec, params)
    return _range(key, spec, info, params)


def _choices(key: str, spec: dict[str, Any], params: Params) -> CategoricalDistribution:
    choices = spec["choices"]
    if set(spec) - {"choices"}:
        raise _refused(key, "give either low and high or choices, not both", CHOICES_EXAMPLE)
    if not isinstance(choices, list) or not choices:
        raise _refused(key, "choices must be a non-empty list", CHOICES_EXAMPLE)
    if len({yaml_text(c) for c in choices}) != len(choices):
        raise _refused(key, "a choice is listed twice", CHOICES_EXAMPLE)
    for value in choices:
        _check_value(key, value, params)
    encoded = any(isinstance(c, (list, dict)) for c in choices)
    return CategoricalDistribution([yaml_text(c) for c in choices] if encoded else choices)


def _range(key: str, spec: dict[str, Any], info: Any, params: Params) -> BaseDistribution:
    low, high = _number_from_text(spec.get("low")), _number_from_text(spec.get("high"))
    integer = info.annotation is int if info else all(type(v) is int for v in (low, high))
    if info is not None and info.annotation not in (int, float):
        raise _refused(key, f"{key} is not a number, so give choices", CHOICES_EXAMPLE)
    if "low" not in spec or "high" not in spec:
        raise _refused(key, "give low and high, or choices", RANGE_EXAMPLE)
    log = spec.get("log", False)
    example = "{low: 16, high: 256, log: true}" if integer else RANGE_EXAMPLE
    kinds = (int,) if integer else (int, float)
    if not all(type(v) in kinds for v in (low, high)):  # YAML's true is no number
        raise _refused(key, f"low and high must be {'integers' if integer else 'numbers'}", example)
    if not isinstance(log, bool):
        raise _refused(key, "log must be true or false", example)
    try:  # Optuna checks the range itself: low <= high, low > 0 on a log scale
        dist = (IntDistribution if integer else FloatDistribution)(low, high, log=log)
    except ValueError as exc:
        raise _refused(key, str(exc).rstrip("."), example) from None
    for value in (low, high):
        _check_value(key, value, params)
    return dist


def _check_value(key: str, value: Any, params: Params) -> None:
    """Refuse a value that `key` does not take, with the schema's own words."""
    trial = params.to_dict()  # a copy: asdict copies every value
    _set_dotted(trial, key, value)
    try:
        _PARAMS.validate_python(trial)
    except ValidationError as exc:
        problem = _one_line(exc, trial)
        raise ConfigError(f"sweep.space.{key}: {yaml_text(value)} is refused: {problem}") from None


def _is_argument(key: str) -> bool:
    """True for a component's own argument: `model.args.width`, `data.args.delimiter`."""
    section, _, rest = key.partition(".args.")
    return bool(rest) and "." not in section and _field_of(f"{section}.args") is not None


def _field_of(key: str) -> Any:
    """The schema field of a dotted key (None when there is none)."""
    section, _, name = key.rpartition(".")
    return (_fields(section) or {}).get(name)


def _fields(section: str) -> dict[str, Any] | None:
    """The schema fields of a dotted section ("": the top level); None when it is no section."""
    cls = getattr(_field_of(section), "annotation", None) if section else Params
    return getattr(cls, "__pydantic_fields__", None)
