"""The documentation a new engineer reads first stays whole: every relative link in the
README and docs/ reaches a file of the repository (and, with a #fragment, a heading of
that file, by GitHub's anchor rule), the README stays short enough to read, and the
architecture map exists. Links are the part of documentation that breaks silently when a
file or heading is renamed, so they are checked like code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 160

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation but hyphens dropped, spaces to
    hyphens."""
    text = heading.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {anchor(h) for h in _HEADING.findall(text)}


def links(page: Path) -> list[str]:
    """The link targets of `page` outside code blocks, web addresses left out."""
    text = _FENCE.sub("", page.read_text())
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(ROOT) or not dest.exists():
            broken.append(f"{target}: no such file in the repository")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_anchor_follows_githubs_rule() -> None:
    assert anchor("Where arrays live") == "where-arrays-live"
    assert anchor("`shmcoll run -n N`") == "shmcoll-run--n-n"
    assert anchor("A barrier releases CPU-mates in rank order; Bcast non-roots spin") == (
        "a-barrier-releases-cpu-mates-in-rank-order-bcast-non-roots-spin"
    )


def test_readme_is_short_and_the_architecture_map_exists() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    assert (ROOT / "docs" / "architecture.md").is_file()
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()
