"""README.md stays a short front door, links in README.md, CHANGELOG.md and docs/*.md lead to files
(and headings) that exist, and the pages written for readers do not speak of how the project is
run. (That their examples run is tests/system/test_readme.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
# Pages a reader meets first, whose words this test checks; FORMAT.md and CLI.md are references
# (FORMAT.md escapes run ids such as `issue 78/x`; CLI.md is generated from the commands' help).
READER_PAGES = [p for p in PAGES if p.name not in ("FORMAT.md", "CLI.md")]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
PROCESS_WORDS = re.compile(r"\bstop \d+|\bissue #?\d+|(?<![\w&])#\d+\b|\bwork diary|\bsession \d+", re.I)


def _prose(text: str) -> str:
    """The text without fenced blocks and inline code, where brackets are not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slugs(path: Path) -> set[str]:
    """The anchors GitHub makes for a page's headings (lower case, punctuation dropped, spaces to
    hyphens, a repeated one suffixed -1, -2 ...)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.*?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        base, n = slug, 0
        while slug in found:
            n += 1
            slug = f"{base}-{n}"
        found.add(slug)
    return found


def links(path: Path) -> list[str]:
    """The relative link targets of a page (web and mail addresses left out)."""
    return [t for t in LINK.findall(_prose(path.read_text(encoding="utf-8")))
            if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_readme_is_a_short_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    headings = re.findall(r"^## (.*)$", text, re.M)
    assert headings[:2] == ["Install", "Quickstart"], headings
    for page in ("docs/GUIDE.md", "docs/CLI.md", "docs/FORMAT.md", "docs/SECURITY.md", "docs/BENCHMARKS.md",
                 "CHANGELOG.md"):
        assert page in links(ROOT / "README.md"), page


def test_changelog_has_an_unreleased_section() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "Keep a Changelog" in text
    assert re.search(r"^## \[Unreleased\]$", text, re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_lead_to_files_and_headings_that_exist(page: Path) -> None:
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.name}: link to {target}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in slugs(dest), f"{page.name}: link to {target}: no such heading"


def test_the_link_check_sees_links() -> None:
    """The check is not vacuous: README links to the guides, and a heading's anchor is computed as
    GitHub does."""
    assert "docs/GUIDE.md" in links(ROOT / "README.md")
    assert "sharing-runs-push-pull-bundles-ci" in slugs(ROOT / "docs" / "GUIDE.md")
    assert "workspace-snapshots-files" in slugs(ROOT / "docs" / "FORMAT.md")


@pytest.mark.parametrize("page", READER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_do_not_speak_of_how_the_project_is_run(page: Path) -> None:
    found = PROCESS_WORDS.findall(page.read_text(encoding="utf-8"))
    assert not found, f"{page.name}: {found}"
