"""Every relative link in the repository's Markdown leads to a file or directory that exists, so a
moved result or tool cannot leave a README or a result's doc pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def documents() -> list[Path]:
    """Markdown files of the repository, not of the tools and caches beside it (.venv, .cache)."""
    return sorted(
        path
        for path in REPO.rglob("*.md")
        if not any(part.startswith(".") for part in path.relative_to(REPO).parts)
    )


def relative_links(document: Path) -> list[str]:
    """Link targets outside code blocks that name a path, without their #anchor."""
    text = FENCE.sub("", document.read_text(encoding="utf-8"))
    targets = (match.group(1).split("#", 1)[0] for match in LINK.finditer(text))
    return [target for target in targets if target and not re.match(r"^[a-z]+:", target)]


def test_the_readmes_and_results_are_found() -> None:
    found = {str(path.relative_to(REPO)) for path in documents()}
    assert {"README.md", "research/README.md", "docs/perf/dualpath-h200.md"} <= found


@pytest.mark.parametrize("document", documents(), ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_resolves(document: Path) -> None:
    broken = [link for link in relative_links(document) if not (document.parent / link).exists()]
    assert not broken, f"{document.relative_to(REPO)} links to what is not there: {broken}"
