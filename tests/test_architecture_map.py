"""docs/ARCHITECTURE.md is a true map: every code file and code name it names exists, every elisp
file is on it, and it leans on no document outside the repository."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "ARCHITECTURE.md"
# What the map may name of the code: Python modules, the elisp files, documents (a home's files,
# such as consciousness.el or agent-chat.org, are not the code's and are not checked).
NAMED = re.compile(r"(?<![\w./-])([\w./-]*(?:\.py|amacs[\w-]*\.el|\.md))\b")
# The names of code the map cites (a function, a class, a variable): elisp's ``amacs-...``, Python's
# snake_case and CamelCase, a private ``_name``.  A plain word (``Turns``, ``Outbox``) is not checked.
CODE_NAME = re.compile(r"(?<![\w/-])(amacs-[a-z][\w-]*[a-z]|_*[a-z]+(?:_[a-z0-9]+)+|_[a-z]+|_?[A-Z][a-z]+(?:[A-Z][a-z]*)+"
                       r"|_[A-Z][a-z]+)(?![\w-])")
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


def code_text() -> str:
    files = [*(ROOT / "amacs_server").rglob("*.py"), *(ROOT / "elisp").glob("*.el"), *(ROOT / "scripts").iterdir()]
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files if p.is_file())


def unknown_names(text: str, code: str) -> list[str]:
    """The code names TEXT cites that CODE never spells."""
    return sorted({n for n in (m.group(1) for m in CODE_NAME.finditer(text))
                   if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", code)})


def test_every_file_the_map_names_exists():
    assert missing(MAP.read_text(encoding="utf-8"), repo_files()) == []


def test_every_elisp_file_is_on_the_map():
    text = MAP.read_text(encoding="utf-8")
    assert sorted(p.name for p in (ROOT / "elisp").glob("*.el") if p.name not in named(text)) == []


def test_the_map_leans_on_nothing_outside_the_repository():
    text = MAP.read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if OUTSIDE.search(line)] == []


def test_every_code_name_the_map_cites_exists():
    """A function, class or variable the map names (its path of the person's input among them)
    is one the code has: a rename leaves no stale name on the map."""
    assert unknown_names(MAP.read_text(encoding="utf-8"), code_text()) == []


# A global variable of the elisp files with a value (not buffer-local, not a forward declaration);
# keymaps and hooks are code, not state.
GLOBAL_VARIABLE = re.compile(r"^\(defvar (amacs[\w-]*[a-z])(?<!-map)(?<!-hook)(?<!-functions)\s+(?!\))", re.M)


def global_variables(texts: list[str]) -> set[str]:
    return {name for text in texts for name in GLOBAL_VARIABLE.findall(text)}


def stays_global(text: str) -> set[str]:
    """The variables the map's "What stays global" names."""
    part = text.split("- **What stays global.**", 1)[1].split("\n- **", 1)[0]
    return set(re.findall(r"`(amacs[\w-]*)`", part))


def test_every_global_elisp_variable_is_placed_with_its_reason():
    """A variable one for the whole Emacs holds state for every home at once: the map says why each
    is (held for one call, one per Emacs on purpose), and a new one fails here until it does."""
    found = global_variables([p.read_text(encoding="utf-8") for p in (ROOT / "elisp").glob("*.el")])
    listed = stays_global(MAP.read_text(encoding="utf-8"))
    assert sorted(found - listed) == [], "global variables the map's 'What stays global' does not place"
    # (a name the list keeps after its variable is gone fails test_every_code_name_the_map_cites_exists)


def test_the_checks_see_a_wrong_name():
    """The check itself: a module that moved, or an elisp file the map leaves out, is seen."""
    files = ["amacs_server/text/lisp.py", "elisp/amacs-shell.el", "docs/ARCHITECTURE.md"]
    assert missing("goes through `transport/lisp.py`, shown by amacs-shell.el", files) == ["transport/lisp.py"]
    assert missing("goes through `text/lisp.py` (docs/ARCHITECTURE.md)", files) == []
    assert "amacs-hub.el" not in named("amacs-shell.el and amacs-hub")
    assert OUTSIDE.search("leans on a DESIGN.md that is not here")
    code = "def _route_input(self): ...\nclass TickCall: ...\n(defun amacs-shell--on-reply (event))\n"
    assert unknown_names("`Turns._route_input`, `TickCall`, amacs-shell--on-reply and Outbox", code) == []
    assert unknown_names("`Turns._route_text`, `TickCalls`, amacs-shell--on-replies", code) == [
        "TickCalls", "_route_text", "amacs-shell--on-replies"]
    elisp = ("(defvar amacs--new-state nil\n  \"Doc.\")\n(defvar amacs-x-map (make-sparse-keymap))\n"
             "(defvar amacs-done-hook nil)\n(defvar amacs--declared)\n(defvar-local amacs--mine nil)\n")
    assert global_variables([elisp]) == {"amacs--new-state"}
    assert stays_global("- **What stays global.** `amacs--a` and\n  `amacs--b`.\n- **Next.** `amacs--c`") == {
        "amacs--a", "amacs--b"}


def _package_index(package: Path) -> tuple[set[str], dict[str, set[str]], set[str]]:
    """PACKAGE's modules (dotted), each class's members (methods, class attributes, ``self.x``
    set in its methods) and every name defined or assigned anywhere in it."""
    modules: set[str] = set()
    classes: dict[str, set[str]] = {}
    names: set[str] = set()
    for path in package.rglob("*.py"):
        modules.add(".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            names.update(t.id for t in targets if isinstance(t, ast.Name))
            if isinstance(node, ast.ClassDef):
                members = classes.setdefault(node.name, set())
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        members.add(sub.name)
                    elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                        for t in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                            if isinstance(t, ast.Name) or isinstance(t, ast.Attribute) and \
                                    isinstance(t.value, ast.Name) and t.value.id == "self":
                                members.add(t.id if isinstance(t, ast.Name) else t.attr)
    return modules, classes, names


CROSS_REF = re.compile(r":(meth|class|func|data|attr|mod|exc):`~?\.?([\w.]+)`")


def unresolved_refs(package: Path) -> list[str]:
    """The cross-references (``:meth:`~x.Y.z```) of PACKAGE's sources that name nothing it has: a
    module (by its dotted tail), a name, a class's member.  A reference into another package (its
    head importable, not ours) is not checked."""
    modules, classes, names = _package_index(package)
    tails = {".".join(m.split(".")[i:]) for m in modules for i in range(len(m.split(".")))}
    wrong = []
    for path in sorted(package.rglob("*.py")):
        for role, ref in CROSS_REF.findall(path.read_text(encoding="utf-8")):
            parts = ref.split(".")
            k = next((k for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in tails), 0)
            rest = parts[k:]
            if role == "mod":
                ok = not rest
            elif k == 0 and len(parts) > 1 and parts[0] != package.name and importlib.util.find_spec(parts[0]):
                ok = True  # another package's (concurrent.futures.Future)
            elif k == 0 and parts[0] == package.name:
                ok = False  # a module of ours that is not there
            elif len(rest) >= 2:  # Class.member
                ok = rest[-1] in classes.get(rest[-2], set())
            else:
                ok = not rest or rest[-1] in names
            if not ok:
                wrong.append(f"{path.relative_to(package.parent)}: {ref}")
    return wrong


def test_the_docstrings_cross_references_name_what_exists():
    """A docstring's ``:meth:``/``:class:``/``:func:``/``:mod:`` reference is a small map: after the
    Runtime's split, two still sent the reader to ``Runtime.spending`` (the Ledger's now)."""
    assert unresolved_refs(ROOT / "amacs_server") == []


def test_the_cross_reference_check_sees_a_member_gone(tmp_path):
    package = tmp_path / "amacs_server"
    package.mkdir()
    (package / "ledger.py").write_text("class Ledger:\n    def spending(self): ...\n")
    (package / "face.py").write_text('"""Sees :meth:`~amacs_server.runtime.Runtime.spending`, :mod:`.ledger`,\n'
                                     ':meth:`~amacs_server.ledger.Ledger.spending`, :class:`concurrent.futures.Future`,\n'
                                     ':meth:`Ledger.spent`, :func:`tally` and :mod:`.gone`."""\n')
    assert unresolved_refs(package) == ["amacs_server/face.py: amacs_server.runtime.Runtime.spending",
                                        "amacs_server/face.py: Ledger.spent", "amacs_server/face.py: tally",
                                        "amacs_server/face.py: gone"]
