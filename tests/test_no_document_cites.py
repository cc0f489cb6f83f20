"""Product code cites no issue, RFC or epic: a comment states the rule the code keeps, or
cites a section of docs/ARCHITECTURE.md, the design as it is in this repository.

Issue numbers and the documents of earlier sessions (the RFC, DESIGN.md, the specs) are
not in the repository, so a newcomer cannot follow such a cite; the story of a bug
belongs to its test and its commit message.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITE = re.compile(r"\bissue \d+|\bRFC v4\b|\bRFC §|\bEPIC-\d|\bIMP-\d+|\bDESIGN\.md\b|agent-world-architecture\.md"
                  r"|memid-active-memory\.md", re.IGNORECASE)


def product_files() -> list[Path]:
    """The server's Python and the Emacs side's elisp (tests may tell a bug's story)."""
    return sorted((ROOT / "amacs_server").rglob("*.py")) + sorted((ROOT / "elisp").glob("*.el"))


def test_product_code_cites_no_issue_rfc_or_epic():
    files = product_files()
    assert len(files) > 50 and any(f.suffix == ".el" for f in files)  # the globs still find the code
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in files for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if CITE.search(line)]
    assert found == [], "cite docs/ARCHITECTURE.md or state the rule instead:\n" + "\n".join(found)


def test_the_pattern_sees_each_kind_of_cite():
    for cite in ("(issue 12)", "Issue 11:", "RFC v4 §3.1", "RFC §7", "EPIC-002", "IMP-017", "DESIGN.md, Parse",
                 "agent-world-architecture.md", "memid-active-memory.md"):
        assert CITE.search(cite), cite
    assert not CITE.search("docs/ARCHITECTURE.md, The tick")
