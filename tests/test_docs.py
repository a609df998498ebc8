"""The docs against the code, checked mechanically: what a reader follows literally exists.

Each part holds one kind of reference in the docs to what it names (a link to its heading,
a metric to the one served, ...): each had drifted once, a knob or a metric added, a test
renamed, a heading retitled, without a word in the docs.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md")


# --- links ------------------------------------------------------------------------------


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces as ``-``."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#{1,6} ", line):
            found.add(re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-"))
    return found


def test_links_between_the_docs_resolve() -> None:
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            if not linked.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken
