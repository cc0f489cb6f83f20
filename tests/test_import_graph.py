"""The packages import one another in layers, and never in a circle; so do the elisp files.

scripts/import-graph.py reads every module's imports from its source (those inside functions,
those under ``if TYPE_CHECKING`` and the modules an ``importlib.import_module`` call names all
counted) and groups modules into units (a subpackage, or a top-level module).  Its LAYERS say
which unit sits above which (docs/ARCHITECTURE.md, Layers); an import that runs back up, or a
new package no layer names, fails here with the import that does it.  Its ELISP_LAYERS do the
same for the elisp files' ``require``s.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def graph() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import-graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_no_cycle_between_packages():
    g = graph()
    found = g.unit_cycles()
    assert found == [], "import cycles between packages:\n" + "\n".join(
        " <-> ".join(units) + ": " + ", ".join(f"{a} -> {b}" for a, b in inside) for units, inside in found)


def test_no_import_runs_back_up_the_layers():
    g = graph()
    up = g.upward()
    assert up == [], ("imports up the layers (scripts/import-graph.py LAYERS; a new package needs its layer "
                      "there):\n" + "\n".join(f"{a} -> {b}" for a, b in up))


def test_every_unit_has_a_layer():
    g = graph()
    units = {g.unit(m) for m in g.module_edges()} - {"amacs_server"}
    placed = {u for layer in g.LAYERS for u in layer}
    assert sorted(units - placed) == []


def _package(tmp_path: Path) -> Path:
    """A package of two units, state below agents: agents.world imports state.record."""
    pkg = tmp_path / "amacs_server"
    (pkg / "state").mkdir(parents=True)
    (pkg / "agents").mkdir()
    for init in (pkg / "__init__.py", pkg / "state" / "__init__.py", pkg / "agents" / "__init__.py"):
        init.write_text("")
    (pkg / "agents" / "world.py").write_text("from ..state.record import Record\n")
    (pkg / "state" / "record.py").write_text("class Record: ...\n")
    return pkg


def test_the_graph_sees_an_upward_import_and_a_cycle(tmp_path):
    """The reader itself: an import back up, function-level, is seen."""
    g = graph()
    pkg = _package(tmp_path)
    edges = g.module_edges(pkg)
    assert g.upward(edges) == [] and g.unit_cycles(edges) == []
    (pkg / "state" / "record.py").write_text("def f():\n    from ..agents import world\n")
    edges = g.module_edges(pkg)
    assert g.upward(edges) == [("amacs_server.state.record", "amacs_server.agents.world")]
    assert [units for units, _ in g.unit_cycles(edges)] == [["agents", "state"]]


def test_an_upward_type_only_import_fails(tmp_path):
    """An import under ``if TYPE_CHECKING`` runs never, but the module still names the one above
    it: it counts (a Protocol declared below is the way down)."""
    g = graph()
    pkg = _package(tmp_path)
    (pkg / "state" / "record.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..agents.world import World\n"
        "class Record: ...\n")
    edges = g.module_edges(pkg)
    assert g.upward(edges) == [("amacs_server.state.record", "amacs_server.agents.world")]
    assert [units for units, _ in g.unit_cycles(edges)] == [["agents", "state"]]


def test_an_importlib_cycle_fails(tmp_path):
    """``importlib.import_module`` with a name spelled in the module (relative, in an f-string's head,
    or through a name bound to it) is an import like any other."""
    g = graph()
    pkg = _package(tmp_path)
    (pkg / "state" / "record.py").write_text(
        "import importlib\nCOMMANDS = {'w': '.agents.world'}\n"
        "def run(name):\n    module = COMMANDS[name]\n    return importlib.import_module(module, 'amacs_server')\n")
    assert g.upward(g.module_edges(pkg)) == [("amacs_server.state.record", "amacs_server.agents.world")]
    assert [units for units, _ in g.unit_cycles(g.module_edges(pkg))] == [["agents", "state"]]
    (pkg / "state" / "record.py").write_text(
        "import importlib\ndef run(name):\n    return importlib.import_module(f'amacs_server.agents.{name}')\n")
    assert [units for units, _ in g.unit_cycles(g.module_edges(pkg))] == [["agents", "state"]]


def test_the_layered_diagram_draws_what_no_longer_path_makes(tmp_path):
    """``--layers``: each unit under its layer with the units it imports, an import one a longer path
    already makes left out, an import up the layers marked and never left out, a cycle named."""
    g = graph()
    pkg = _package(tmp_path)
    (pkg / "agents" / "world.py").write_text("from ..state.record import Record\nfrom ..errors import E\n")
    (pkg / "state" / "record.py").write_text("from ..errors import E\n")
    (pkg / "errors.py").write_text("class E(Exception): ...\n")
    lines = g.layers_diagram(pkg)
    assert lines[0].startswith("6 modules, 3 units, 3 imports between units (2 drawn, 1 made by a longer path); "
                               "0 cycles, 0 imports up the layers")
    drawn = {line.split()[0]: line.split("-> ")[1] for line in lines[1:] if "->" in line}
    assert drawn == {"agents": "state", "state": "errors", "errors": "-"}
    (pkg / "state" / "record.py").write_text("from ..errors import E\nfrom ..agents import world\n")
    lines = g.layers_diagram(pkg)
    assert "1 cycles, 1 imports up the layers (1 of modules)" in lines[0] and lines[1] == "cycle: agents <-> state"
    drawn = {line.split()[0]: line.split("-> ")[1] for line in lines[2:] if "->" in line}
    assert drawn == {"agents": "errors, state", "state": "^agents, errors", "errors": "-"}
    assert g.layers_diagram(pkg, sizes=False)[:3] == ["cycle: agents <-> state", "", "  agents  -> errors, state"]


def test_the_maps_diagram_is_the_scripts():
    """docs/ARCHITECTURE.md shows the graph as ``scripts/import-graph.py --layers --bare`` prints it."""
    g = graph()
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    shown = text.split("`scripts/import-graph.py --layers --bare` prints it", 1)[1].split("```text\n", 1)[1]
    shown = shown.split("```", 1)[0]
    assert shown.splitlines() == g.layers_diagram(sizes=False), \
        "the map's import graph is not the code's: paste `scripts/import-graph.py --layers --bare` into it"


def map_layers(text: str, after: str, known: set[str]) -> list[set[str]]:
    """The layers the map's indented list after the words AFTER shows, top first: each line at the
    list's indent opens a layer, a line indented deeper goes on with it; the names of KNOWN on a line,
    up to the first other word, are its units."""
    block = text.split(after, 1)[1].lstrip("\n").split("\n\n", 1)[0].splitlines()
    indent = len(block[0]) - len(block[0].lstrip())
    layers: list[set[str]] = []
    for line in block:
        units = set(itertools.takewhile(lambda word: word in known, line.split()))
        if len(line) - len(line.lstrip()) == indent:
            layers.append(units)
        else:
            layers[-1] |= units
    return layers


def test_the_maps_layer_lists_are_the_scripts():
    """docs/ARCHITECTURE.md's two lists of layers (the packages', the elisp files') are LAYERS and
    ELISP_LAYERS, top first: a unit moved in the script and not on the map fails here."""
    g = graph()
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    units = {u for layer in g.LAYERS for u in layer}
    assert map_layers(text, "`importlib.import_module` call names.", units) == [set(x) for x in reversed(g.LAYERS)]
    files = {f for layer in g.ELISP_LAYERS for f in layer}
    assert map_layers(text, "or a\nfile no layer places):", files) == [set(x) for x in reversed(g.ELISP_LAYERS)]


def test_the_layer_lists_reader_sees_a_moved_unit():
    listed = "Layers:\n\n    runtime    makes the parts\n    loop  turns    the turn\n      agents\n    errors\n\nmore"
    known = {"runtime", "loop", "turns", "agents", "errors"}
    assert map_layers(listed, "Layers:", known) == [{"runtime"}, {"loop", "turns", "agents"}, {"errors"}]


def test_elisp_requires_keep_the_layers():
    g = graph()
    assert g.elisp_upward() == [], "elisp requires up the layers (scripts/import-graph.py ELISP_LAYERS)"


def test_every_elisp_file_has_a_layer():
    g = graph()
    assert sorted(name for name in g.elisp_requires() if g.elisp_layer_of(name) is None) == []


def test_an_elisp_require_against_the_layers_fails(tmp_path):
    """A require of a higher layer fails at the top level; inside a function it fails too, unless
    ELISP_LAZY names it (a command that loads the rest once it runs); an unplaced file fails."""
    g = graph()
    (tmp_path / "amacs-transport.el").write_text("(require 'amacs-settings)\n")
    (tmp_path / "amacs-settings.el").write_text("(defvar amacs-x nil)\n")
    assert g.elisp_upward(g.elisp_requires(tmp_path)) == []
    (tmp_path / "amacs-settings.el").write_text("(require 'amacs-transport)  ; up\n")
    assert g.elisp_upward(g.elisp_requires(tmp_path)) == [("amacs-settings", "amacs-transport")]
    (tmp_path / "amacs-settings.el").write_text("(defun f ()\n  (require 'amacs-transport))\n")
    assert g.elisp_upward(g.elisp_requires(tmp_path)) == [("amacs-settings", "amacs-transport")]
    (tmp_path / "amacs-settings.el").write_text(";; (require 'amacs-transport) in a comment\n")
    assert g.elisp_upward(g.elisp_requires(tmp_path)) == []
    (tmp_path / "amacs-server.el").write_text("(defun amacs-connect ()\n  (require 'amacs))\n")
    (tmp_path / "amacs.el").write_text("(require 'amacs-server)\n")
    assert g.elisp_upward(g.elisp_requires(tmp_path)) == []
    (tmp_path / "amacs-server.el").write_text("(require 'amacs)\n")
    assert g.elisp_upward(g.elisp_requires(tmp_path)) == [("amacs-server", "amacs")]
    (tmp_path / "amacs-new.el").write_text("(require 'amacs-transport)\n")
    assert ("amacs-new", "amacs-transport") in g.elisp_upward(g.elisp_requires(tmp_path))


def test_every_module_opens_with_a_one_line_room_card():
    """A module's docstring opens with one line (what the room owns) and a blank line after it;
    ``scripts/import-graph.py --cards`` prints it with the units the module calls."""
    g = graph()
    long = []
    for path in sorted(g.ROOT.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        lines = doc.strip().splitlines()
        if not lines or len(lines[0]) > 100 or (len(lines) > 1 and lines[1].strip()):
            long.append(str(path.relative_to(g.ROOT.parent)))
    assert long == [], "open the docstring with one line of at most 100 characters, then a blank line"
    rooms = {m: (owns, calls) for m, owns, calls in g.cards()}
    assert rooms["amacs_server.records"][1] == []
    assert "runtime" not in rooms["amacs_server.loop.primary"][1]
