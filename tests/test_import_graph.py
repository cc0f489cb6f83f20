"""The packages import one another in layers, and never in a circle.

scripts/import-graph.py reads every module's imports from its source (those
under ``if TYPE_CHECKING`` left out, those inside functions counted) and groups
modules into units (a subpackage, or a top-level module).  Its LAYERS say which
unit sits above which (docs/ARCHITECTURE.md, Layers); an import that runs back
up, or a new package no layer names, fails here with the import that does it.
"""

from __future__ import annotations

import importlib.util
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


def test_the_graph_sees_an_upward_import_and_a_cycle(tmp_path):
    """The reader itself: an import back up, function-level, is seen; one under TYPE_CHECKING is not."""
    g = graph()
    pkg = tmp_path / "amacs_server"
    (pkg / "state").mkdir(parents=True)
    (pkg / "agents").mkdir()
    for init in (pkg / "__init__.py", pkg / "state" / "__init__.py", pkg / "agents" / "__init__.py"):
        init.write_text("")
    (pkg / "agents" / "world.py").write_text("from ..state.record import Record\n")
    (pkg / "state" / "record.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..agents.world import World\n"
        "class Record: ...\n")
    edges = g.module_edges(pkg)
    assert g.upward(edges) == [] and g.unit_cycles(edges) == []
    (pkg / "state" / "record.py").write_text("def f():\n    from ..agents import world\n")
    edges = g.module_edges(pkg)
    assert g.upward(edges) == [("amacs_server.state.record", "amacs_server.agents.world")]
    assert [units for units, _ in g.unit_cycles(edges)] == [["agents", "state"]]
