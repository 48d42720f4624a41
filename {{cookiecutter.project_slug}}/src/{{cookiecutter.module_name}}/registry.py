"""Names in params.yaml -> the code that implements them, with the component's own arguments.

`@register(kind, name)` where a source, augmentation, architecture or task is defined; params.yaml
picks it by that name, its own arguments under `model.args`, `data.args` or its `data.augment`
entry (docs/customise.md). The first lookup imports every module of the package's top and of the
built-ins' subpackages, so a new file needs no other edit. This module imports nothing heavy.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
import shlex
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .config import ConfigError, Params, flat, sweep_space, yaml_text

# What can be registered: the params key that names it and the subpackage of the built-ins.
KINDS = {
    "source": ("data.source", "readers"),
    "augmentation": ("data.augment", "augmentations"),
    "architecture": ("model.architecture", "architectures"),
    "task": ("task.type", "tasks"),
}
# How many arguments every function of a kind gets first; its own keyword arguments follow.
FIXED = {"source": 3, "augmentation": 2, "architecture": 3}  # (path, data, kind), (image, key), ...
# Where a component's own arguments are given, and the kind of that component.
ARGUMENTS = {"model.args": "architecture", "data.args": "source"}
# A source's options (`sources.source` says what they mean) and their defaults.
SOURCE_OPTIONS = {"reads_path": True, "patterns": False, "takes": "", "example": ""}
_ENTRIES: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}


def register(kind: str, name: str, **options: Any) -> Callable[[Any], Any]:
    """Decorator: make a function or class available as `name` for `kind` (see KINDS). A source
    gets `options` (SOURCE_OPTIONS) as attributes; one not given keeps the reader's own (an
    alias of a built-in reader) or its default."""
    if kind not in KINDS:
        raise ConfigError(f"register: unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    unknown = sorted(set(options) - set(SOURCE_OPTIONS if kind == "source" else ()))
    if unknown:
        raise ConfigError(
            f"register({kind!r}, {name!r}): no option {unknown[0]!r} (a source's options: "
            f"{', '.join(SOURCE_OPTIONS)}; example: @source({name!r}, takes='file'))"
        )
    takes = options.get("takes", "")
    if takes not in ("", "file", "folder"):  # a typo would refuse what the reader reads
        raise ConfigError(
            f"@source({name!r}): takes={takes!r} is not 'file', 'folder' or '' (either) "
            f"(example: @source({name!r}, takes='folder'))"
        )

    def add(obj: Any) -> Any:
        # Another object under a taken name (a copy of a built-in that kept its name) would win
        # or lose by the order of the imports; the same one again (a reloaded module) replaces.
        old = _ENTRIES[kind].get(name)
        if old is not None and _qualified(old) != _qualified(obj):
            raise ConfigError(
                f"register: {kind} {name!r} is registered twice: {_qualified(old)} and "
                f"{_qualified(obj)}; give yours another name (example: "
                f"@register({kind!r}, 'my_{name}'))"
            )
        if kind == "source":
            for option, default in SOURCE_OPTIONS.items():
                setattr(obj, option, options.get(option, getattr(obj, option, default)))
        _ENTRIES[kind][name] = obj
        return obj

    return add


def _qualified(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def names(kind: str) -> list[str]:
    """The registered names of `kind`, sorted."""
    import_all()
    return sorted(_ENTRIES[kind])


def lookup(kind: str, name: str) -> Any:
    """What is registered as `name` for `kind`, or a one-line ConfigError naming the key."""
    import_all()
    entries = _ENTRIES[kind]
    if name not in entries:
        key, known = KINDS[kind][0], sorted(entries)
        example = f"[{known[0]}]" if kind == "augmentation" else known[0]
        raise ConfigError(
            f"{key}: {name!r} is not registered (registered: {', '.join(known)}; "
            f"example: --set {key}={example})"
        )
    return entries[name]


def entry(item: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A `data.augment` entry as (name, arguments): `flip`, or `{rotation: {factor: 0.2}}`."""
    if isinstance(item, str):
        return item, {}
    ((name, args),) = item.items()
    return name, dict(args or {})


def bound(kind: str, name: str, args: dict[str, Any], key: str) -> Callable[..., Any]:
    """The function registered as `name` with its own arguments `args` (given at `key`) checked
    and bound, keeping its attributes (a reader's `reads_path`)."""
    function = lookup(kind, name)
    partial = functools.partial(function, **arguments(kind, name, args, key))
    return functools.update_wrapper(partial, function)


def arguments(kind: str, name: str, args: dict[str, Any], key: str) -> dict[str, Any]:
    """`args` checked against the keyword arguments that `name` declares after the FIXED ones:
    the values as its annotations take them, or one line naming `<key>.<argument>`."""
    function = lookup(kind, name)
    own = list(inspect.signature(function, eval_str=True).parameters.values())[FIXED[kind] :]
    declared = {p.name: p for p in own if p.kind is not p.VAR_KEYWORD}
    checked = {}
    for arg, value in args.items():
        if arg not in declared:
            known = ", ".join(declared) or "none"
            raise ConfigError(
                f"{key}.{arg}: {kind} {name!r} has no argument {arg!r} (its arguments: {known}) "
                f"(example: {_example(key, arg, declared)})"
            )
        checked[arg] = _typed(key, declared[arg], value)
    missing = [p for p in declared.values() if p.default is p.empty and p.name not in args]
    if missing:
        example = _setting(key, missing[0].name, "...")
        raise ConfigError(f"{key}.{missing[0].name}: {kind} {name!r} needs it (example: {example})")
    return checked


def _typed(key: str, parameter: inspect.Parameter, value: Any) -> Any:
    """`value` as the parameter's annotation takes it (strictly: `true` is no integer)."""
    if parameter.annotation is parameter.empty:
        return value
    try:
        return TypeAdapter(parameter.annotation).validate_python(value, strict=True)
    except ValidationError:
        default = "..." if parameter.default is parameter.empty else parameter.default
        annotation = inspect.formatannotation(parameter.annotation)
        raise ConfigError(
            f"{key}.{parameter.name}: expected {annotation}, got {value!r} (example: "
            f"{_setting(key, parameter.name, default)})"
        ) from None


def _example(key: str, arg: str, declared: dict[str, inspect.Parameter]) -> str:
    """A valid setting of one of the declared arguments, or none (another component's arguments
    left in params.yaml), or how to declare `arg`."""
    for parameter in declared.values():
        if parameter.default is not parameter.empty:
            return _setting(key, parameter.name, parameter.default)
    if key in ARGUMENTS:
        return f"--set {key}={yaml_text({})}"
    return f"declare it after the fixed arguments: `{arg}: int = 1`"


def _setting(key: str, arg: str, value: Any) -> str:
    """How a user sets `arg` at `key`, as one shell word: `--set model.args.width=8`; an
    augmentation's in its entry of the list: `--set "data.augment=[{rotation: {factor: 0.1}}]"`;
    a searched one as a choice: `--set "sweep.space={model.args.width: {choices: [8]}}"`."""
    if key.startswith("data.augment."):
        setting = f"data.augment={yaml_text([{key.split('.')[2]: {arg: value}}])}"
    elif key.startswith("sweep.space."):
        searched = f"{key.removeprefix('sweep.space.')}.{arg}"
        setting = f"sweep.space={yaml_text({searched: {'choices': [value]}})}"
    else:
        setting = f"{key}.{arg}={yaml_text(value)}"
    if shlex.quote(setting) == setting:  # nothing in it a shell reads
        return f"--set {setting}"
    if re.search(r'["$`\\!]', setting):  # what a shell reads inside double quotes too
        return f"--set {shlex.quote(setting)}"
    return f'--set "{setting}"'


def check(params: Params, space: bool = False) -> None:
    """Look up every name params gives and check the components' own arguments (with `space`,
    also those the sweep searches): one line for the first problem, before a command writes
    anything. Only a sweep checks its space: `train --set model.architecture=mlp` is no sweep."""
    values = flat(params.to_dict())
    for kind, (key, _) in KINDS.items():
        items = values[key] if isinstance(values[key], list) else [values[key]]
        for item in items:
            name, args = entry(item)
            lookup(kind, name)
            if kind == "augmentation":
                arguments(kind, name, args, f"{key}.{name}")
    space = sweep_space(params) if space else {}
    for key, kind in ARGUMENTS.items():
        name, given = values[KINDS[kind][0]], getattr(params, key.split(".")[0]).args
        arguments(kind, name, given, key)
        for searched, dist in space.items():
            if searched.startswith(f"{key}."):
                spec = params.sweep.space[searched]  # the choices as written, not as Optuna's
                for value in spec.get("choices") or [dist.low, dist.high]:
                    arg = searched.removeprefix(f"{key}.")
                    arguments(kind, name, {**given, arg: value}, f"sweep.space.{key}")


@functools.cache  # once; a module that failed to import fails again at the next lookup
def import_all() -> None:
    """Import every module at the top of the package and of the built-ins' subpackages, once:
    their decorators register (and Keras learns their custom layers, for loading a model)."""
    package = importlib.import_module(__package__)
    for module in pkgutil.iter_modules(package.__path__):
        if not module.ispkg and not module.name.startswith("_"):
            importlib.import_module(f"{__package__}.{module.name}")
    for _, folder in KINDS.values():
        sub = importlib.import_module(f"{__package__}.{folder}")
        for module in pkgutil.iter_modules(sub.__path__):
            importlib.import_module(f"{__package__}.{folder}.{module.name}")
