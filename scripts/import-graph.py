#!/usr/bin/env python3
"""The import graph of amacs_server, read from its source (nothing is imported).

Each module's imports of other amacs_server modules are edges, every one counted:
an import under ``if TYPE_CHECKING:`` (the one module is read to understand the
other), one inside a function (it runs when the function does), and the module
an ``importlib.import_module`` call names.  Modules are grouped into units: a subpackage (``agents``, ``loop``...)
or a top-level module (``runtime``, ``methods``...).

    scripts/import-graph.py            the cycles and upward imports, then each unit's edges
    scripts/import-graph.py --cycles   only the cycles and upward imports (exit 1 when there is one)
    scripts/import-graph.py --cards    each module's room card (its docstring's first line: what it
                                       owns) and the units it calls
    scripts/import-graph.py --layers   the graph as a text diagram: each layer's units, top first, with
                                       the units each imports that no longer path already reaches
                                       (``--bare``: without the totals and the units' sizes, as
                                       docs/ARCHITECTURE.md shows it)

LAYERS says which units sit above which; tests/test_import_graph.py asserts
there is no cycle between units and no import up the layers.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "amacs_server"
# The layers, lowest first (docs/ARCHITECTURE.md, Layers): a unit imports only units of lower layers.
LAYERS = (
    ("errors",),  # AmacsError, the base of every expected failure
    ("faults", "scrub", "config", "arguments", "skills", "threads", "text", "files", "warm_launch", "records"),  # warm_launch: the launcher, standard library only; records: the transcript's events, written from every layer above
    ("state", "hello_settings"),  # state: the agent's state record and the eval's result, read by every layer above; hello_settings: hello's declared model
    ("inference", "memory", "tools_mcp"),
    ("persistence", "context", "local_model", "demo_model", "transport", "face"),  # persistence: git, the org logs, rewind; face: Emacs as the agents see it (a Protocol)
    ("mind", "model_slot"),  # the mind in its home; the model in use (the runtime's parts)
    ("ledger",),  # cost and budget, counted on the mind by the model's price
    ("agents", "transcripts"),  # Agent, World, the one loop, a subagent's run; transcripts: DuckDB over many, through the records
    ("turns",),  # the loop host: the loop thread, the inbox, the running turn (the runtime's part)
    ("loop",),  # the primary's turn
    ("tools", "views"),  # what agents call from evals; what Emacs is shown
    ("runtime",),
    ("methods", "hello"),  # what Emacs may call; hello, answered before the methods are published
    ("serve",),  # the server's start, life and exit
    ("research",),  # runs servers (its fork server runs serve in each fork)
    ("warm",),  # the warm server: forks ready servers (research's fork server's parts, serve in each)
    ("__main__",),  # the command line: serve, or one of the commands (history, transcripts, research's)
)
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
ELISP = ROOT.parent / "elisp"
# The elisp files' layers, lowest first: a file's ``require``s name only files of lower layers.
ELISP_LAYERS = (
    ("amacs-settings", "amacs-install", "amacs-render", "amacs-warm"),  # the defcustoms; finding the server;
    # org text; asking the warm server
    ("amacs-transport",),  # a home's connection: the wire (EPC), its state, the events it carries
    ("amacs-server", "amacs-eval", "amacs-buffers", "amacs-history", "amacs-shell-output"),  # the process; evals; buffers; history; the shell's output
    ("amacs-agent", "amacs-local", "amacs-research", "amacs-changes", "amacs-shell-header",
     "amacs-shell-input", "amacs-shell-start"),  # the agent API; the local model; the shell's parts
    ("amacs-shell-stream",),  # a reply streamed into the shell
    ("amacs-shell",),  # the shell
    ("amacs",),  # the package: everything a person loads
    ("amacs-hub", "amacs-batch"),  # the hub (the whole mind at a glance); batch Emacs for tests and runs
)
# The requires inside a function that load a higher layer when a command first runs: each is the
# one way a command reaches the files above it (the server starts first, then the rest loads).
ELISP_LAZY = {
    ("amacs-server", "amacs"): "amacs-connect: the client's handlers, once a server is named",
    ("amacs-shell", "amacs"): "amacs-shell--open: the agent API and buffer reads, while the server starts",
    ("amacs-shell-start", "amacs-shell"): "amacs-shell--start: the shell, after starting the server",
}


def module_name(path: Path, root: Path = ROOT) -> str:
    """PATH's dotted module name (``amacs_server.agents.world``) in the package at ROOT."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """The unit MODULE belongs to: its subpackage, or itself when it is a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _strings(node: ast.AST | None) -> Iterator[str]:
    """The module names NODE may spell: its string constants, and each f-string's literal head
    (``f".research.{name}"`` names ``.research``, the package it is under)."""
    for sub in ast.walk(node) if node is not None else ():
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value
        elif isinstance(sub, ast.JoinedStr) and sub.values and isinstance(sub.values[0], ast.Constant):
            yield str(sub.values[0].value).rstrip(".")


def _bindings(tree: ast.AST) -> dict[str, list[ast.expr]]:
    """Each name of TREE -> the expressions bound to it (assignments, and ``for NAME in X``'s X)."""
    out: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        pairs: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, (ast.For, ast.comprehension)):
            pairs = [(node.target, node.iter)]
        for target, value in pairs:
            if isinstance(target, ast.Name):
                out.setdefault(target.id, []).append(value)
    return out


def _dynamic(call: ast.Call, bindings: dict[str, list[ast.expr]]) -> Iterator[str]:
    """The module names an ``importlib.import_module(...)`` CALL may import (its argument followed
    through the names bound to it); empty for any other call."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in ("import_module", "__import__", "run_module") or not call.args:
        return
    todo, seen = [call.args[0]], set()
    while todo:
        arg = todo.pop()
        if isinstance(arg, ast.Name):
            if arg.id not in seen:
                seen.add(arg.id)
                todo.extend(bindings.get(arg.id, []))
            continue
        for sub in ast.walk(arg):
            if isinstance(sub, ast.Name) and sub.id not in seen:
                seen.add(sub.id)
                todo.extend(bindings.get(sub.id, []))
        yield from _strings(arg)


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import of TREE: at the top, inside functions, under ``if TYPE_CHECKING`` (a type-only
    import still ties the two modules: the one reads the other to be understood), and each module an
    ``importlib.import_module`` call may import, as the ``import`` it stands for."""
    bindings = _bindings(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.Call):
            anchor = node.args[1] if len(node.args) > 1 else None  # import_module(NAME, PACKAGE)
            package = anchor.value if isinstance(anchor, ast.Constant) and isinstance(anchor.value, str) else None
            for name in _dynamic(node, bindings):
                if name.startswith(".") and package:  # relative to the package the call names
                    name = package + name
                if name.startswith("."):  # relative to the importing module's package (``__package__``)
                    level = len(name) - len(name.lstrip("."))
                    yield ast.ImportFrom(module=name.lstrip(".") or None, names=[ast.alias(name="*")],
                                         level=level)
                elif name.partition(".")[0] == PACKAGE:
                    yield ast.Import(names=[ast.alias(name=name)])


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
        edges[module] = {t for node in _imports(tree) for t in _targets(module, is_package, node, known)
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


def elisp_requires(root: Path = ELISP) -> dict[str, list[tuple[str, bool]]]:
    """Each elisp file under ROOT (not its tests) -> the amacs files it requires, each with whether
    at the top level (a line that opens with ``(require`` or ``(eval-when-compile (require``) or
    inside a form (a function's: it loads when the function runs)."""
    out: dict[str, list[tuple[str, bool]]] = {}
    for path in sorted(root.glob("*.el")):
        found = []
        for line in path.read_text(encoding="utf-8").splitlines():
            code = line.split(";", 1)[0]
            for match in re.finditer(r"\(require '(amacs[\w-]*)", code):
                top = re.match(r"\((eval-when-compile \()?require '", line) is not None and match.start() <= 19
                found.append((match.group(1), top))
        out[path.stem] = found
    return out


def elisp_layer_of(name: str) -> int | None:
    """The index of elisp file NAME's layer in ELISP_LAYERS, or None when it has none."""
    return next((i for i, names in enumerate(ELISP_LAYERS) if name in names), None)


def elisp_upward(requires: dict[str, list[tuple[str, bool]]] | None = None) -> list[tuple[str, str]]:
    """The requires that name a file of the same or a higher layer (but those ELISP_LAZY names, inside
    a function), or from or to a file ELISP_LAYERS does not place."""
    out = set()
    for source, targets in (elisp_requires() if requires is None else requires).items():
        for target, top in targets:
            la, lb = elisp_layer_of(source), elisp_layer_of(target)
            if la is None or lb is None or (lb >= la and (top or (source, target) not in ELISP_LAZY)):
                out.add((source, target))
    return sorted(out)


def card(path: Path) -> str:
    """The room card of the module at PATH: its docstring's first line (what it owns)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def cards(root: Path = ROOT) -> list[tuple[str, str, list[str]]]:
    """Each module: its card (what it owns) and the units it calls (imports), from the graph."""
    edges = module_edges(root)
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    return [(m, card(paths[m]), sorted({unit(t) for t in edges[m]} - {unit(m)})) for m in sorted(paths)]


def implied(pairs: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges of PAIRS that a longer path between the same two nodes already makes (what a
    transitive reduction leaves out)."""
    graph: dict[str, set[str]] = {}
    for a, b in pairs:
        graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str) -> bool:
        todo, seen = [start], {start}
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            new = graph.get(node, set()) - seen
            seen |= new
            todo.extend(new)
        return False

    return {(a, b) for a, b in pairs if any(reaches(c, b) for c in graph[a] if c != b)}


def layers_diagram(root: Path = ROOT, sizes: bool = True) -> list[str]:
    """The import graph of the package at ROOT as text: the totals, the cycles, then each layer of
    LAYERS from the top, each unit (with its modules and lines) and the units it imports (an import
    up the layers marked ``^``, one a longer path already makes left out, as a count).  Not SIZES:
    without the totals and the sizes, only what changes when the drawn graph does."""
    edges = module_edges(root)
    by_unit = unit_edges(edges)
    pairs = set(by_unit)
    up_imports = upward(edges)
    up = {(unit(a), unit(b)) for a, b in up_imports}
    found = unit_cycles(edges)
    # A cycle's units are one node for the reduction (every edge inside a cycle is drawn).
    node = {u: "+".join(component) for component, _ in found for u in component}
    condensed = implied({(node.get(a, a), node.get(b, b)) for a, b in pairs if node.get(a, a) != node.get(b, b)})
    drop = {(a, b) for a, b in pairs if (node.get(a, a), node.get(b, b)) in condensed} - up
    counts: dict[str, list[int]] = {}
    for path in root.rglob("*.py"):
        size = counts.setdefault(unit(module_name(path, root)), [0, 0])
        size[0] += 1
        size[1] += len(path.read_text(encoding="utf-8").splitlines())
    counts.pop(PACKAGE, None)
    label = {u: f"{u} ({n}, {lines})" if sizes else u for u, (n, lines) in counts.items()}
    out = [] if not sizes else [f"{len(edges)} modules, {len(counts)} units, {len(pairs)} imports between units "
           f"({len(pairs - drop)} drawn, {len(drop)} made by a longer path); "
           f"{len(found)} cycles, {len(up)} imports up the layers ({len(up_imports)} of modules)"]
    out += ["cycle: " + " <-> ".join(component) for component, _ in found]
    placed = list(reversed(LAYERS))
    unplaced = sorted(set(counts) - {u for names in LAYERS for u in names})
    if unplaced:
        placed.append(tuple(unplaced))
    width = max(map(len, label.values()))
    for names in placed:
        present = [n for n in names if n in counts]
        if out and present:
            out.append("")
        for name in present:
            calls = sorted(b for a, b in pairs - drop if a == name)
            shown = ", ".join(("^" if (name, b) in up else "") + b for b in calls) or "-"
            out.append(f"  {label[name]:<{width}}  -> {shown}")
    return out


def main(argv: list[str]) -> int:
    if "--layers" in argv:  # the graph as a layered text diagram
        print("\n".join(layers_diagram(sizes="--bare" not in argv)))
        return 0
    if "--cards" in argv:  # every module's room card: what it owns; what it calls
        for module, owns, calls in cards():
            print(f"{module}: {owns}\n    calls: {', '.join(calls) or 'nothing of the package'}")
        return 0
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
    elisp = elisp_upward()
    for source, target in elisp:
        print(f"elisp: a require up a layer (or a file ELISP_LAYERS does not place): {source} -> {target}")
    if "--cycles" not in argv:
        print()
        by_unit = unit_edges(edges)
        for source in sorted({a for a, _ in by_unit}):
            print(f"{source} -> {', '.join(sorted(b for a, b in by_unit if a == source))}")
    return 1 if found or up or elisp else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
