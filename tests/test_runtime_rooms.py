"""The Runtime is wiring, and what sits below it takes the parts it uses, not the runtime.

Its parts (``mind.py``, ``model_slot.py``, ``ledger.py``, ``turns.py``, the World, the Face
and the transcript) each have one job; the rooms below it (the primary's turn, the tools, the
views, the World) declare what they use as Protocols of parts (``TurnHost``, ``ToolHost``,
``ViewHost``, ``WorldHost``, docs/ARCHITECTURE.md, Layers).  Read from the source, so a new
module, function or host is held to it with no list to keep.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_import_graph import graph

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "amacs_server"
MAX_RUNTIME_LINES = 300
# The Protocols below the runtime through which a room reaches several parts at once.  A function
# that takes one uses more than two parts (the tools too: the table hands each the parts its
# family takes, tools/registry.py's TAKES).
HOSTS = {"TurnHost", "ToolHost", "ViewHost"}
# What a host may declare: the parts, and the few plain values that belong to no part.
PARTS = {"Mind", "ModelSlot", "Ledger", "Turns", "AgentWorld", "Face", "Transcript", "Settings"}
PLAIN = {"run_id": "str", "startup_notes": "list[str]"}


def _below_runtime() -> list[Path]:
    g = graph()
    runtime = g.layer_of("runtime")
    return [p for p in sorted(PACKAGE.rglob("*.py"))
            if (layer := g.layer_of(g.unit(g.module_name(p)))) is not None and layer < runtime]


def _names_runtime(tree: ast.AST) -> list[int]:
    """The lines where TREE's code (not its docstrings) names ``Runtime``: a name, an import, an
    attribute, or an annotation written as a string (a type-only mention counts)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "Runtime" or \
                isinstance(node, ast.Attribute) and node.attr == "Runtime":
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any(a.name == "Runtime" for a in node.names):
            found.append(node.lineno)
        annotations: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            annotations += [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                  *([args.vararg] if args.vararg else []),
                                                  *([args.kwarg] if args.kwarg else [])]]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for ann in annotations:
            for sub in ast.walk(ann) if ann is not None else ():
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and \
                        "Runtime" in ast.dump(ast.parse(sub.value, mode="eval")):
                    found.append(sub.lineno)
    return sorted(found)


def _hosts(tree: ast.AST) -> dict[str, dict[str, str]]:
    """Each host Protocol TREE declares: its members and their types, as written."""
    out: dict[str, dict[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in HOSTS:
            members: dict[str, str] = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members[item.target.id] = ast.unparse(item.annotation)
                elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members[item.name] = ast.unparse(item.returns) if item.returns else "None"
            out[node.name] = members
    return out


def _uses_of_hosts(tree: ast.AST, hosts: set[str] = HOSTS) -> list[tuple[str, int, str, set[str], bool]]:
    """Each function of TREE with a parameter typed as one of HOSTS: its name, line, the parameter,
    the host's members it reads (``param.part``), and whether it hands the host on whole."""
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for arg in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            if arg.annotation is None or ast.unparse(arg.annotation).strip("'\"") not in hosts:
                continue
            used: set[str] = set()
            read: set[int] = set()  # the mentions that read a member (``param.part``)
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == arg.arg:
                    used.add(node.attr)
                    read.add(id(node.value))
            # any other mention hands the host on whole (to a call, or kept: ``self.rt = rt``)
            handed_on = any(isinstance(n, ast.Name) and n.id == arg.arg and isinstance(n.ctx, ast.Load)
                            and id(n) not in read for n in ast.walk(fn))
            out.append((fn.name, fn.lineno, arg.arg, used, handed_on))
    return out


def test_the_runtime_is_short():
    lines = len((PACKAGE / "runtime.py").read_text().splitlines())
    assert lines <= MAX_RUNTIME_LINES, f"runtime.py is {lines} lines: a part of it belongs in a part of its own"


def test_no_module_below_the_runtime_names_it():
    named = {str(p.relative_to(ROOT)): lines for p in _below_runtime()
             if (lines := _names_runtime(ast.parse(p.read_text())))}
    assert named == {}, f"modules below runtime.py that name Runtime (a type-only mention too): {named}"


def test_the_check_sees_a_type_only_mention():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..runtime import Runtime\n"
              "def f(rt: 'Runtime') -> None: ...\nx: 'list[Runtime]'\n")
    assert _names_runtime(ast.parse(source)) == [3, 4, 5]
    assert _names_runtime(ast.parse('"""The Runtime holds the parts."""\n')) == []


def test_the_hosts_hold_parts_not_the_runtimes_members():
    hosts: dict[str, dict[str, str]] = {}
    for path in _below_runtime():
        hosts.update(_hosts(ast.parse(path.read_text())))
    assert set(hosts) == HOSTS
    for name, members in hosts.items():
        loose = {m: t for m, t in members.items() if t not in PARTS and PLAIN.get(m) != t}
        assert loose == {}, f"{name} declares members that are no part (take the part that owns them): {loose}"
        assert len(members) <= 8, f"{name} has {len(members)} members: a room that uses that much is two rooms"


def _narrow_enough(source: str, hosts: set[str] = HOSTS) -> list[str]:
    """The functions of SOURCE that take one of HOSTS to use one or two of its parts."""
    return [f"{line} {fn}({arg}) uses only {sorted(used)}"
            for fn, line, arg, used, handed_on in _uses_of_hosts(ast.parse(source), hosts)
            if len(used) <= 2 and not handed_on]


def test_a_function_that_takes_a_host_uses_more_than_two_parts():
    """Where a function needs one part or two, it takes those: a host is for a room that uses more
    (or that hands the host on whole, to the functions that do).  The brain tools too."""
    narrow_enough = [f"{path.relative_to(ROOT)}:{found}" for path in _below_runtime()
                     for found in _narrow_enough(path.read_text())]
    assert narrow_enough == [], "functions that take a host to use one or two parts (take those):\n" + \
        "\n".join(narrow_enough)


def test_the_check_sees_a_tool_that_takes_the_host_for_one_part():
    """A brain tool that acts in the World alone takes the World, not the ToolHost (as every agent
    tool did while the table handed each tool the host whole)."""
    whole = ("@checked(3)\ndef agent_quit(rt: ToolHost, caller: str, _eval: int | None) -> Any:\n"
             "    return rt.world.quit(caller)\n"
             "def memory_tool(rt: ToolHost, caller: str, *args: Any) -> Any:\n"
             "    return _record(rt, caller, args)\n")
    assert _narrow_enough(whole) == ["2 agent_quit(rt) uses only ['world']"]
    part = "def agent_quit(world: AgentWorld, caller: str, _eval: int | None) -> Any:\n    return world.quit(caller)\n"
    assert _narrow_enough(part) == []


def test_no_function_takes_the_runtime_to_use_one_or_two_parts():
    """Above the runtime too: a function handed the Runtime uses more than two of its parts (or
    hands it on whole); one that needs the loop thread takes the Turns, and so on."""
    narrow_enough = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for fn, line, arg, used, handed_on in _uses_of_hosts(ast.parse(path.read_text()), {"Runtime"}):
            if len(used) <= 2 and not handed_on:
                narrow_enough.append(f"{path.relative_to(ROOT)}:{line} {fn}({arg}) uses only {sorted(used)}")
    assert narrow_enough == [], "functions that take the Runtime to use one or two parts (take those):\n" + \
        "\n".join(narrow_enough)


def test_the_check_sees_a_host_taken_for_one_part():
    source = ("def one(rt: TurnHost) -> None:\n    rt.mind.save_consciousness()\n"
              "def two(rt: TurnHost) -> None:\n    rt.mind.save_consciousness(); rt.face.annotate('x')\n"
              "def on(rt: TurnHost) -> None:\n    helper(rt)\n"
              "def kept(rt: TurnHost) -> None:\n    self.rt, self.n = rt, 1\n")
    found = {fn: (used, handed) for fn, _line, _arg, used, handed in _uses_of_hosts(ast.parse(source))}
    assert found == {"one": ({"mind"}, False), "two": ({"mind", "face"}, False), "on": (set(), True),
                     "kept": (set(), True)}
