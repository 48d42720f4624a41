"""The generated package's layout: data flows one way, and no module reaches back up.

Tiers, lowest first; a module imports only from its own tier or lower ones:
0. config.py, registry.py, spec.py: the vocabulary (params, names, what the data is);
1. core/: atomic files, where things live, what the program runs on;
2. the files a user edits: sources.py, augment.py, model.py, task.py, optim.py, loop.py (and any
   file the user adds beside them), and the built-ins beside their worked examples:
   architectures/, readers/, augmentations/, tasks/;
3. data/: prepare and the tf.data pipeline;
4. training/: the trainer and what keeps a run safe;
5. evaluation/: what comes after training;
6. colab/, cloud/ and __main__.py: the ways in.
(registry.py imports the tier-2 modules dynamically at its first lookup: the plug-in mechanism.)
"""

from __future__ import annotations

import ast
from pathlib import Path

TIERS = {"config": 0, "registry": 0, "spec": 0, "core": 1, "data": 3, "training": 4,
         "evaluation": 5, "colab": 6, "cloud": 6, "__main__": 6, "__init__": 6}
USER = 2  # every other top-level module


def tier(parts: tuple[str, ...]) -> int:
    """The tier of a module given by its path inside the package (`("training", "trainer")`)."""
    return TIERS.get(parts[0], USER)


def imported(path: Path, package: Path) -> list[tuple[str, ...]]:
    """The package modules `path` imports, as paths inside the package."""
    here = path.relative_to(package).with_suffix("").parts
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[: len(here) - node.level]
            target = (*base, *(node.module.split(".") if node.module else ()))
            names = [alias.name for alias in node.names] if not node.module else [""]
            found += [tuple(p for p in (*target, n) if p) for n in names]
    return [t for t in found if t]


def test_no_module_reaches_back_up(default_project: Path) -> None:
    package = default_project / "src" / "colab_project"
    wrong = []
    for path in sorted(package.rglob("*.py")):
        own = path.relative_to(package).with_suffix("").parts
        for target in imported(path, package):
            if tier(target) > tier(own):
                wrong.append(f"{'/'.join(own)} imports {'.'.join(target)}")
    assert wrong == []


def test_the_files_a_user_edits_are_at_the_top(default_project: Path) -> None:
    package = default_project / "src" / "colab_project"
    top = {p.stem for p in package.glob("*.py")}
    assert {"model", "task", "sources", "augment", "optim", "loop"} <= top
    folders = {p.name for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"}
    built_ins = {"architectures", "readers", "augmentations", "tasks"}
    assert folders == {"core", "data", "training", "evaluation", "colab", "cloud", *built_ins}


def test_ruff_format_decides_the_line_breaks(default_project: Path) -> None:
    """The package's line count is honest: no statement is held packed against `ruff format`."""
    package = default_project / "src" / "colab_project"
    held = [f"{p.relative_to(package)}:{n}" for p in sorted(package.rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if "# fmt: " in line]
    assert held == []
