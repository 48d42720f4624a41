"""The README and docs/: every command they show is one this project has, every link resolves."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from {{ cookiecutter.module_name }}.__main__ import build_parser

MODULE = "{{ cookiecutter.module_name }}"
PROJECT = Path(__file__).resolve().parents[1]
PAGES = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]


def code_of(page: Path) -> str:
    """The text of every fenced block and inline code span of a Markdown page."""
    text = page.read_text(encoding="utf-8")
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return "\n".join([*blocks, *re.findall(r"`([^`\n]+)`", rest)])


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(actions[0].choices)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_make_target_and_command_shown_exists(page):
    makefile = (PROJECT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    commands = subcommands(build_parser())
    code = code_of(page)
    # A command: `make X` at the start of a line or after a shell separator or prompt (not prose
    # such as a printed "... to make room").
    for target in re.findall(r"(?:^|[;&|(]\s*|\$\s*)make ([a-z][a-z-]*)", code, flags=re.M):
        assert target in targets, f"{page.name}: `make {target}` is not a Makefile target"
    for command in re.findall(rf"python -m {MODULE} ([a-z][a-z-]*)", code):
        assert command in commands, f"{page.name}: `python -m {MODULE} {command}` does not exist"
    dvc = pytest.importorskip("dvc.cli.parser")
    dvc_commands = subcommands(dvc.get_main_parser())
    for command in re.findall(r"(?<![\w.-])dvc ([a-z][a-z-]*)", code):
        assert command in dvc_commands, f"{page.name}: `dvc {command}` is not a DVC command"


def test_the_command_line_table_lists_every_command():
    page = (PROJECT / "docs" / "training.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([a-z]+)", page, flags=re.M))
    assert subcommands(build_parser()) - listed == set()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{page.name}: link to missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.name}: no heading for #{anchor} in {path}"
