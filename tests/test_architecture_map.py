"""docs/ARCHITECTURE.md is a true map: every code file it names exists, every elisp file is on it,
and it leans on no document outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "ARCHITECTURE.md"
# What the map may name of the code: Python modules, the elisp files, documents (a home's files,
# such as consciousness.el or agent-chat.org, are not the code's and are not checked).
NAMED = re.compile(r"(?<![\w./-])([\w./-]*(?:\.py|amacs[\w-]*\.el|\.md))\b")
OUTSIDE = re.compile(r"\bDESIGN\.md\b|\bSTYLE\.md\b|\bRFC\b|\bissue \d+|/work/|notes/sessions", re.IGNORECASE)


def repo_files() -> list[str]:
    skip = {".git", ".venv", ".venv-local", ".mcp-servers", "__pycache__", ".elc", "node_modules"}
    return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
            if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts)]


def named(text: str) -> set[str]:
    return {m.group(1).strip("./") if m.group(1).startswith("./") else m.group(1) for m in NAMED.finditer(text)}


def missing(text: str, files: list[str]) -> list[str]:
    """The code files TEXT names that no file of FILES is (a name matches a path's tail)."""
    return sorted(n for n in named(text) if not any(f == n or f.endswith("/" + n) for f in files))


def test_every_file_the_map_names_exists():
    assert missing(MAP.read_text(encoding="utf-8"), repo_files()) == []


def test_every_elisp_file_is_on_the_map():
    text = MAP.read_text(encoding="utf-8")
    assert sorted(p.name for p in (ROOT / "elisp").glob("*.el") if p.name not in named(text)) == []


def test_the_map_leans_on_nothing_outside_the_repository():
    text = MAP.read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if OUTSIDE.search(line)] == []


def test_the_checks_see_a_wrong_name():
    """The check itself: a module that moved, or an elisp file the map leaves out, is seen."""
    files = ["amacs_server/text/lisp.py", "elisp/amacs-shell.el", "docs/ARCHITECTURE.md"]
    assert missing("goes through `transport/lisp.py`, shown by amacs-shell.el", files) == ["transport/lisp.py"]
    assert missing("goes through `text/lisp.py` (docs/ARCHITECTURE.md)", files) == []
    assert "amacs-hub.el" not in named("amacs-shell.el and amacs-hub")
    assert OUTSIDE.search("leans on a DESIGN.md that is not here")
