"""The documentation: the generated project's, as the template promises it (checks a user who trims
the docs should not inherit, so they run here rather than in the project's own tests), and the
template's own: the README for a person choosing a template, and the site `make docs` builds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 250
TOPICS = ("training", "data", "reproducibility", "scaling", "troubleshooting", "customise")
TEMPLATE_README_MAX_LINES = 120
SITE_PAGES = ("getting-started", "questions", "what-you-get", "updates", "colab-pins", "benchmark",
              "troubleshooting", "contributing")  # fmt: skip
PICTURE = re.compile(r"!\[[^\]]+\]\(([^)\s]+\.png)\)")
REPRODUCE = ("make screenshots", "scripts/screenshots.py")


def test_readme_is_short_and_links_every_docs_page(default_project: Path) -> None:
    readme = (default_project / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    pages = sorted((default_project / "docs").glob("*.md"))
    assert {p.stem for p in pages} >= set(TOPICS)
    for page in pages:
        assert f"](docs/{page.name}" in readme, f"README does not link docs/{page.name}"


def test_template_readme_is_for_a_person_choosing_a_template() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= TEMPLATE_README_MAX_LINES
    first_screen = "\n".join(lines[:20])
    for command in ("cruft create ", "cookiecutter gh:", "copier copy --trust "):
        assert command in first_screen, f"{command!r} is not in the README's first 20 lines"
    pictures = PICTURE.findall(text)
    assert pictures and text[: text.index(pictures[0])].count("\n") < 25, "no picture near the top"
    assert "| `tracking` | tensorboard |" in text  # the questions table
    what_you_get = text.split("\n## What you get\n")[1].split("\n## ")[0]
    assert len(what_you_get.strip().splitlines()) <= 15
    develop = text.split("\n## Develop the template\n")[1].split("\n## ")[0]
    assert "make demo" in develop and "make test" in develop
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_and_site_links_resolve_and_pictures_name_their_command() -> None:
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    shown = {(page.parent / picture).resolve() for page in pages for picture in PICTURE.findall(page.read_text())}
    assert set((ROOT / "docs").rglob("*.png")) <= shown, "a picture in docs/ that no page shows"
    for page in pages:
        text = page.read_text(encoding="utf-8")
        # On GitHub too: a link into the project is to the template's folder (the site's hook
        # turns it into the default bake's page under project/).
        for target in re.findall(r"\]\((?![a-z]+:|#)([^)#\s]+)", text):
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links {target}, which is missing"
        for picture in PICTURE.findall(text):
            png = (page.parent / picture).read_bytes()
            assert png.startswith(b"\x89PNG") and len(png) > 20_000, f"{picture} is not a picture"
            after = text[text.index(picture):][:600]
            assert any(c in after for c in REPRODUCE), f"{page.name}: {picture} does not name the command that makes it"


def test_make_docs_builds_the_site_strict_with_the_generated_projects_pages(default_project: Path,
                                                                           tmp_path: Path) -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndocs:", 1)[1].split("\n\n")[0]
    assert "-m mkdocs build --strict --site-dir site" in recipe
    # The recipe's build, into a temporary folder (site/ belongs to the person running the suite).
    site = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                         cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    assert run.returncode == 0 and not warnings, run.stdout + run.stderr
    for page in SITE_PAGES:
        assert (site / page / "index.html").is_file(), page
    assert (site / "images" / "notebooks.png").is_file()
    # The generated project's README and guides, from this build's own bake: what a bake writes today.
    readme = (site / "project" / "index.html").read_text(encoding="utf-8")
    assert 'id="colab-in-five-minutes"' in readme
    baked = (default_project / "README.md").read_text(encoding="utf-8")
    for heading in re.findall(r"^## (.+)$", baked, flags=re.MULTILINE):
        assert heading.replace("&", "&amp;") in readme, heading
    for page in (default_project / "docs").glob("*.md"):
        assert (site / "project" / "docs" / page.stem / "index.html").is_file(), page.name
