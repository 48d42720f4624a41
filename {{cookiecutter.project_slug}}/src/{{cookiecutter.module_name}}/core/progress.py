"""Progress that suits where the output goes (`bar_kind`): in a log file, CI, a papermill report or
a notebook without widgets no bar, only the caller's own lines; a text bar there would be a pile of
carriage returns, a widget a line of placeholder text."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TextIO

from tqdm import tqdm

from .storage import on_colab


def bar_kind(stream: TextIO | None = None) -> str:
    """'widget' in Colab's notebook kernel, 'text' on a terminal (`stream`: stderr, where tqdm
    draws), else 'lines'."""
    ipython = sys.modules.get("IPython")  # loaded in every notebook kernel; never imported here
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None and "IPKernelApp" in shell.config:
        return "widget" if on_colab() and importlib.util.find_spec("ipywidgets") else "lines"
    return "text" if (stream or sys.stderr).isatty() else "lines"


def progress_bar(total: int, disable: bool = False, **options: Any) -> tqdm:
    """A tqdm bar of the kind `bar_kind` says (disabled when 'lines', or when `disable`)."""
    kind = bar_kind()
    if kind == "widget":
        # Imported only here: tqdm.notebook loads ipywidgets, which only Colab's kernel draws.
        from tqdm.notebook import tqdm as widget_bar

        return widget_bar(total=total, disable=disable, **options)
    return tqdm(total=total, disable=disable or kind == "lines", dynamic_ncols=True, **options)


# The lines said so far within `said_once`; None outside it (every line is said).
_said: ContextVar[set[str] | None] = ContextVar("said", default=None)


@contextlib.contextmanager
def said_once() -> Iterator[None]:
    """Within it, a line already said is not said again: a sweep's trials say the lines that
    hold for each of them (the strategy, the seed, a note, a warning) once for the sweep."""
    token = _said.set(set())
    try:
        yield
    finally:
        _said.reset(token)


def say(line: str) -> None:
    """Print `line` now, above any bar (a terminal's bar would otherwise write over it), unless
    said before within `said_once`."""
    said = _said.get()
    if said is not None:
        if line in said:
            return
        said.add(line)
    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()
