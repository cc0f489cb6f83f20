#!/usr/bin/env python3
"""The import graph of amacs_server, read from its source (nothing is imported).

Each module's imports of other amacs_server modules are edges; an import under
``if TYPE_CHECKING:`` is left out (it never runs).  An import inside a function
counts: it runs when the function does, and it still points one package at
another.  Modules are grouped into units: a subpackage (``agents``, ``loop``...)
or a top-level module (``runtime``, ``methods``...).

    scripts/import-graph.py            the cycles and upward imports, then each unit's edges
    scripts/import-graph.py --cycles   only the cycles and upward imports (exit 1 when there is one)

LAYERS says which units sit above which; tests/test_import_graph.py asserts
there is no cycle between units and no import up the layers.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "amacs_server"
# The layers, lowest first (docs/ARCHITECTURE.md, Layers): a unit imports only units of lower layers.
LAYERS = (
    ("errors",),  # AmacsError, the base of every expected failure
    ("faults", "scrub", "config", "arguments", "skills", "threads", "text", "files", "warm_launch"),  # warm_launch: the launcher, standard library only
    ("state", "transcripts", "hello_settings"),  # state: the agent's state record and the eval's result, read by every layer above; hello_settings: hello's declared model
    ("inference", "memory", "tools_mcp"),
    ("persistence", "context", "local_model", "demo_model", "transport"),  # persistence: git, the org logs, rewind
    ("agents",),  # Agent, World, the one loop, a subagent's run
    ("loop",),  # the primary's turn
    ("tools", "views"),  # what agents call from evals; what Emacs is shown
    ("runtime",),
    ("methods", "hello"),  # what Emacs may call; hello, answered before the methods are published
    ("__main__",),
    ("research",),  # runs servers (its fork server runs __main__ in each fork); __main__ names its commands
    ("warm",),  # the warm server: forks ready servers (research's fork server's parts, __main__ in each)
)
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def module_name(path: Path, root: Path = ROOT) -> str:
    """PATH's dotted module name (``amacs_server.agents.world``) in the package at ROOT."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """The unit MODULE belongs to: its subpackage, or itself when it is a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of TREE that run (not those under ``if TYPE_CHECKING``)."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> Iterator[str]:
    """The amacs_server modules NODE (in MODULE) imports."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        # `from .x import y': y is a module when amacs_server has one by that name, else a name in x.
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name.startswith(PACKAGE) and name != PACKAGE:
            yield name


def module_edges(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports at run time."""
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    known = set(paths)
    edges: dict[str, set[str]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        edges[module] = {t for node in _runtime_imports(tree) for t in _targets(module, is_package, node, known)
                         if t != module}
    return edges


def unit_edges(edges: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(unit, unit it imports) -> the module imports that make that edge."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for source, targets in edges.items():
        for target in targets:
            if unit(source) != unit(target):
                out.setdefault((unit(source), unit(target)), []).append((source, target))
    return out


def cycles(pairs: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node of the graph PAIRS (Tarjan)."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(pairs):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return out


def unit_cycles(edges: dict[str, set[str]] | None = None) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """Each cycle between units, with the module imports inside it."""
    by_unit = unit_edges(module_edges() if edges is None else edges)
    out = []
    for component in cycles(set(by_unit)):
        inside = sorted(m for (a, b), ms in by_unit.items() if a in component and b in component for m in ms)
        out.append((component, inside))
    return out


def layer_of(name: str) -> int | None:
    """The index of UNIT NAME's layer in LAYERS, or None when it has none."""
    return next((i for i, units in enumerate(LAYERS) if name in units), None)


def upward(edges: dict[str, set[str]] | None = None) -> list[tuple[str, str]]:
    """The module imports that point at a unit of the same or a higher layer, or from or to
    a unit LAYERS does not place (a new package must be given its layer)."""
    out = []
    for (a, b), inside in sorted(unit_edges(module_edges() if edges is None else edges).items()):
        la, lb = layer_of(a), layer_of(b)
        if la is None or lb is None or lb >= la:
            out.extend(inside)
    return sorted(out)


def main(argv: list[str]) -> int:
    edges = module_edges()
    found = unit_cycles(edges)
    for component, inside in found:
        print("cycle: " + " <-> ".join(component))
        for source, target in inside:
            print(f"    {source} -> {target}")
    if not found:
        print("no cycle between units")
    up = upward(edges)
    for source, target in up:
        print(f"up a layer (or a unit LAYERS does not place): {source} -> {target}")
    if "--cycles" not in argv:
        print()
        by_unit = unit_edges(edges)
        for source in sorted({a for a, _ in by_unit}):
            print(f"{source} -> {', '.join(sorted(b for a, b in by_unit if a == source))}")
    return 1 if found or up else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
