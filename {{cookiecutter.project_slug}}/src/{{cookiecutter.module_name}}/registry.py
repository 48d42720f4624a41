"""Names in params.yaml -> the code that implements them.

A data source, an augmentation, an architecture and a task each register under a name where
they are defined, and params.yaml picks one by that name:

    @register("architecture", "resnet")           # src/<module>/resnet.py, a file you add
    def build_resnet(spec, num_outputs, cfg): ...

    model:
      architecture: resnet

The first lookup imports every module at the top of this package (model.py, task.py, ... and any
file you add beside them; not the subpackages), so a new file needs no other edit. An unknown
name is a one-line error that lists the registered ones. This module imports nothing heavy.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from .config import ConfigError

# What can be registered, and the params key that names it.
KINDS = {
    "source": "data.source",
    "augmentation": "data.augment",
    "architecture": "model.architecture",
    "task": "task.type",
}
_ENTRIES: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
_imported = False


def register(kind: str, name: str) -> Callable[[Any], Any]:
    """Decorator: make a function or class available as `name` for `kind` (see KINDS)."""
    if kind not in KINDS:
        raise ValueError(f"register: unknown kind {kind!r} (kinds: {', '.join(KINDS)})")

    def add(obj: Any) -> Any:
        _ENTRIES[kind][name] = obj
        return obj

    return add


def names(kind: str) -> list[str]:
    """The registered names of `kind`, sorted."""
    _import_top_level()
    return sorted(_ENTRIES[kind])


def lookup(kind: str, name: str) -> Any:
    """What is registered as `name` for `kind`, or a one-line ConfigError naming the key."""
    _import_top_level()
    entries = _ENTRIES[kind]
    if name not in entries:
        key, known = KINDS[kind], sorted(entries)
        example = f"[{known[0]}]" if kind == "augmentation" else known[0]
        raise ConfigError(
            f"{key}: {name!r} is not registered (registered: {', '.join(known)}; "
            f"example: --set {key}={example})"
        )
    return entries[name]


def check(params: Any) -> None:
    """Look up every name params gives (`data.source`, ...): one line for the first unknown one,
    before a command writes anything."""
    for kind, key in KINDS.items():
        value = params
        for part in key.split("."):
            value = getattr(value, part)
        for name in value if isinstance(value, list) else [value]:
            lookup(kind, name)


def _import_top_level() -> None:
    """Import every module at the top of the package, once: their decorators register."""
    global _imported
    if _imported:
        return
    _imported = True
    package = importlib.import_module(__package__)
    for module in pkgutil.iter_modules(package.__path__):
        if not module.ispkg and not module.name.startswith("_"):
            importlib.import_module(f"{__package__}.{module.name}")
