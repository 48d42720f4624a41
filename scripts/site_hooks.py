"""MkDocs hooks (mkdocs.yml `hooks:`): the site shows the generated project's own pages.

Each build bakes the default project into a temporary folder and adds its README.md and docs/*.md
to the site under `project/`, unchanged, so what the site says a project holds is what the
template writes today: they cannot drift. Files those pages link to (outside docs/, e.g.
params.yaml) come along, so every link of theirs resolves and `mkdocs build --strict` fails on
one that does not. The nav entry `project/README.md` becomes a section: the README, then its docs
pages in the order of the README's reading list.
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

SCRIPTS = Path(__file__).resolve().parent
PREFIX = "project"
README = f"{PREFIX}/README.md"
# A Markdown link's target: ](target) or ](target#anchor), relative (no scheme, no leading /).
LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|/|#)([^)#\s]+)")

_pages: dict[str, bytes] = {}


def bake(folder: Path) -> Path:
    """The default project baked into `folder` by scripts/project_env.py, in a child process (the
    template's hook prints its next steps, which have no place in the build's log)."""
    code = "import sys, project_env; print(project_env.bake(sys.argv[1]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SCRIPTS), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-c", code, str(folder)], env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise PluginError(f"site_hooks: baking the default project failed:\n{run.stdout}{run.stderr}")
    return Path(run.stdout.splitlines()[-1])


def bake_pages() -> dict[str, bytes]:
    """{site path: content}: the default bake's README.md, docs/*.md and the files they link."""
    with tempfile.TemporaryDirectory(prefix="site-bake-") as tmp:
        project = bake(Path(tmp))
        names = ["README.md", *sorted(p.relative_to(project).as_posix() for p in (project / "docs").glob("*.md"))]
        pages = {name: (project / name).read_bytes() for name in names}
        for name in list(pages):
            for target in LINK.findall(pages[name].decode("utf-8")):
                linked = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
                if linked not in pages and not linked.startswith("..") and (project / linked).is_file():
                    pages[linked] = (project / linked).read_bytes()
    return {f"{PREFIX}/{name}": content for name, content in pages.items()}


def nav_section(pages: dict[str, bytes]) -> list[str]:
    """The README, then its docs pages in the order of its reading list (the section of the README
    that links the most of them), then any others in the order the README first links them."""
    readme = pages[README].decode("utf-8")
    links = {name: f"](docs/{posixpath.basename(name)}" for name in pages
             if name.startswith(f"{PREFIX}/docs/") and name.endswith(".md")}  # fmt: skip
    reading_list = max(readme.split("\n## "), key=lambda section: sum(link in section for link in links.values()))

    def place(name: str) -> tuple[int, int, str]:
        for rank, text in enumerate((reading_list, readme)):
            if links[name] in text:
                return rank, text.index(links[name]), name
        return 2, 0, name

    return [README, *sorted(links, key=place)]


def _expand(nav: Any, section: list[str]) -> Any:
    """The nav with the entry whose page is README replaced by `section`."""
    if isinstance(nav, list):
        return [_expand(item, section) for item in nav]
    if isinstance(nav, dict):
        return {title: section if value == README else _expand(value, section) for title, value in nav.items()}
    return nav


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    _pages.clear()
    _pages.update(bake_pages())
    config.nav = _expand(config.nav, nav_section(_pages))
    return config


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """A page's link into the template's project folder (`../{{cookiecutter.project_slug}}/`,
    which GitHub shows as it is) leads on the site to the default bake's page under project/."""
    return markdown.replace("](../{{cookiecutter.project_slug}}/", f"]({PREFIX}/")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for name, content in _pages.items():
        files.append(File.generated(config, name, content=content))
    return files
