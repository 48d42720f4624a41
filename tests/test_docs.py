"""The generated project's documentation, as the template promises it (checks a user who trims
the docs should not inherit, so they run here rather than in the project's own tests)."""

from __future__ import annotations

from pathlib import Path

README_MAX_LINES = 250
TOPICS = ("training", "data", "reproducibility", "scaling", "troubleshooting", "customise")


def test_readme_is_short_and_links_every_docs_page(default_project: Path) -> None:
    readme = (default_project / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    pages = sorted((default_project / "docs").glob("*.md"))
    assert {p.stem for p in pages} >= set(TOPICS)
    for page in pages:
        assert f"](docs/{page.name}" in readme, f"README does not link docs/{page.name}"
