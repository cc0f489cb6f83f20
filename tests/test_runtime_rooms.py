"""The Runtime is wiring, and what sits below it takes the parts it uses, not the runtime.

Its parts (``mind.py``, ``model_slot.py``, ``ledger.py``, ``turns.py``, the World, the Face
and the transcript) each have one job; the rooms below it (the primary's turn, the tools, the
views, the World) declare what they use as Protocols of parts (``TurnHost``, ``ToolHost``,
``ViewHost``, ``WorldHost``, docs/ARCHITECTURE.md, Layers; the turn's and the views' share a
base, ``RuntimeParts``).  Read from the source, a host's bases with it, so a new module, function
or host is held to it with no list to keep.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_import_graph import graph

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "amacs_server"
MAX_RUNTIME_LINES = 300
# The Protocols below the runtime through which a room reaches several parts at once.  A function
# that takes one uses more than two parts (the tools too: the table hands each the parts its
# family takes, tools/registry.py's TAKES).
HOSTS = {"RuntimeParts", "TurnHost", "ToolHost", "ViewHost"}
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


def _hosts(*trees: ast.AST) -> dict[str, dict[str, str]]:
    """Each host Protocol TREES declare: its members and their types, as written, with those of the
    Protocols it extends (a base of TREES; a base the check cannot read fails it)."""
    classes = {node.name: node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}

    def members(node: ast.ClassDef) -> dict[str, str]:
        out: dict[str, str] = {}
        for base in map(ast.unparse, node.bases):
            if base in ("Protocol", "typing.Protocol"):
                continue
            assert base in classes, f"{node.name} extends {base}, which the rooms check cannot read"
            out.update(members(classes[base]))
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                out[item.target.id] = ast.unparse(item.annotation)
            elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[item.name] = ast.unparse(item.returns) if item.returns else "None"
        return out

    return {name: members(node) for name, node in classes.items() if name in HOSTS}


def _loose(hosts: dict[str, dict[str, str]]) -> list[str]:
    """What is wrong with HOSTS: a member that is no part, or more members than one room uses."""
    wrong = []
    for name, members in sorted(hosts.items()):
        loose = {m: t for m, t in members.items() if t not in PARTS and PLAIN.get(m) != t}
        if loose:
            wrong.append(f"{name} declares members that are no part (take the part that owns them): {loose}")
        if len(members) > 8:
            wrong.append(f"{name} has {len(members)} members: a room that uses that much is two rooms")
    return wrong


def _uses_of_hosts(tree: ast.AST, hosts: set[str] = HOSTS) -> list[tuple[str, int, str, set[str], bool, str]]:
    """Each function of TREE with a parameter typed as one of HOSTS: its name, line, the parameter,
    the host's members it reads (``param.part``), whether it hands the host on whole, and the host."""
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for arg in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            host = "" if arg.annotation is None else ast.unparse(arg.annotation).strip("'\"")
            if host not in hosts:
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
            out.append((fn.name, fn.lineno, arg.arg, used, handed_on, host))
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


def _trees_below_runtime() -> list[ast.AST]:
    return [ast.parse(path.read_text()) for path in _below_runtime()]


def test_the_hosts_hold_parts_not_the_runtimes_members():
    hosts = _hosts(*_trees_below_runtime())
    assert set(hosts) == HOSTS
    assert _loose(hosts) == []


def _kept_reads(tree: ast.AST, hosts: set[str]) -> list[tuple[str, set[str]]]:
    """Each host a class of TREE keeps (``self.rt = rt``, RT typed as one of HOSTS) and the members
    its methods read of it: ``self.rt.part``, or ``rt.part`` after ``rt = self.rt``."""
    out = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        kept: dict[str, str] = {}  # self.ATTR -> its host
        for fn in ast.walk(cls):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                typed = {a.arg: ast.unparse(a.annotation).strip("'\"") for a in [*fn.args.args, *fn.args.kwonlyargs]
                         if a.annotation is not None}
                for node in ast.walk(fn):
                    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and \
                            typed.get(node.value.id) in hosts:
                        kept.update((ast.unparse(t), typed[node.value.id]) for t in node.targets)
        for attr, host in kept.items():
            used: set[str] = set()
            for fn in ast.walk(cls):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                aliases = {attr}
                for node in ast.walk(fn):  # rt = self.rt; rt, tick = self.rt, self.tick
                    if isinstance(node, ast.Assign):
                        for target in node.targets:
                            both = isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                            pairs = zip(target.elts, node.value.elts, strict=False) if both else [(target, node.value)]
                            aliases |= {ast.unparse(t) for t, v in pairs if ast.unparse(v) == attr}
                used |= {node.attr for node in ast.walk(fn)
                         if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases}
            out.append((host, used))
    return out


def _unread(trees: list[ast.AST]) -> dict[str, list[str]]:
    """Each host's members that no function taking it reads (nor a class keeping it).  A host no
    function takes is read through the hosts that extend it (a base); one neither taken nor
    extended reads nothing."""
    hosts = _hosts(*trees)
    read: dict[str, set[str]] = {}
    for tree in trees:
        for _fn, _line, _arg, used, _handed_on, host in _uses_of_hosts(tree, set(hosts)):
            read.setdefault(host, set()).update(used)
        for host, used in _kept_reads(tree, set(hosts)):
            read.setdefault(host, set()).update(used)
    extended = {base for tree in trees for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef) and node.name in hosts for base in map(ast.unparse, node.bases)}
    return {name: sorted(unread) for name, members in hosts.items()
            if (unread := set(members) - read[name] if name in read else
                set() if name in extended else set(members))}


def test_each_member_of_a_host_is_read_by_its_room():
    """A host declares what its room reads, no more: a member nobody reads is a part handed over
    for nothing (the views' host declared the transcript, which no view reads: they take it)."""
    assert _unread(_trees_below_runtime()) == {}


def _narrow_enough(source: str, hosts: set[str] = HOSTS) -> list[str]:
    """The functions of SOURCE that take one of HOSTS to use one or two of its parts."""
    return [f"{line} {fn}({arg}) uses only {sorted(used)}"
            for fn, line, arg, used, handed_on, _host in _uses_of_hosts(ast.parse(source), hosts)
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
        for fn, line, arg, used, handed_on, _host in _uses_of_hosts(ast.parse(path.read_text()), {"Runtime"}):
            if len(used) <= 2 and not handed_on:
                narrow_enough.append(f"{path.relative_to(ROOT)}:{line} {fn}({arg}) uses only {sorted(used)}")
    assert narrow_enough == [], "functions that take the Runtime to use one or two parts (take those):\n" + \
        "\n".join(narrow_enough)


def test_the_check_sees_a_host_taken_for_one_part():
    source = ("def one(rt: TurnHost) -> None:\n    rt.mind.save_consciousness()\n"
              "def two(rt: TurnHost) -> None:\n    rt.mind.save_consciousness(); rt.face.annotate('x')\n"
              "def on(rt: TurnHost) -> None:\n    helper(rt)\n"
              "def kept(rt: TurnHost) -> None:\n    self.rt, self.n = rt, 1\n")
    found = {fn: (used, handed) for fn, _line, _arg, used, handed, _host in _uses_of_hosts(ast.parse(source))}
    assert found == {"one": ({"mind"}, False), "two": ({"mind", "face"}, False), "on": (set(), True),
                     "kept": (set(), True)}


def _edited(tail: str, old: str, new: str) -> list[ast.AST]:
    """The trees below the runtime, with OLD (found once) made NEW in the module whose path ends in TAIL."""
    trees = []
    for path in _below_runtime():
        text = path.read_text()
        if path.as_posix().endswith(tail):
            assert text.count(old) == 1, f"{old!r} in {tail}"
            text = text.replace(old, new)
        trees.append(ast.parse(text))
    return trees


BASE = "class RuntimeParts(Protocol):\n"


def test_a_host_has_the_members_of_the_protocols_it_extends():
    source = ("class RuntimeParts(Protocol):\n    @property\n    def mind(self) -> Mind: ...\n"
              "class ViewHost(RuntimeParts, Protocol):\n    run_id: str\n")
    assert _hosts(ast.parse(source)) == {"RuntimeParts": {"mind": "Mind"},
                                         "ViewHost": {"mind": "Mind", "run_id": "str"}}
    with pytest.raises(AssertionError, match="ViewHost extends Elsewhere"):
        _hosts(ast.parse("class ViewHost(Elsewhere, Protocol):\n    run_id: str\n"))


def test_the_check_sees_a_host_grow_through_its_base():
    """A member added to the base grows every host that extends it, and is held to the rules there."""
    grown = _hosts(*_edited("loop/host.py", BASE, BASE + "    @property\n    def config(self) -> Config: ...\n"))
    loose = "declares members that are no part (take the part that owns them): {'config': 'Config'}"
    assert _loose(grown) == [f"RuntimeParts {loose}", f"TurnHost {loose}",
                             "TurnHost has 9 members: a room that uses that much is two rooms", f"ViewHost {loose}"]
    parts = "".join(f"    @property\n    def {m}(self) -> {t}: ...\n"
                    for m, t in [("face", "Face"), ("transcript", "Transcript"), ("settings", "Settings")])
    assert _loose(_hosts(*_edited("loop/host.py", BASE, BASE + parts))) == [
        "ViewHost has 10 members: a room that uses that much is two rooms"]


def test_the_check_sees_a_member_no_function_of_the_room_reads():
    """As the views' host was: it declared the transcript, and no view reads it (they take it)."""
    view_host = "class ViewHost(RuntimeParts, Protocol):\n"
    trees = _edited("views.py", view_host, view_host + "    @property\n    def transcript(self) -> Transcript: ...\n")
    assert _unread(trees) == {"ViewHost": ["transcript"]}
    alone = ast.parse("class ToolHost(Protocol):\n    mind: Mind\n")  # neither taken nor extended
    assert _unread([alone]) == {"ToolHost": ["mind"]}
    kept = ast.parse("class ToolHost(Protocol):\n    mind: Mind\n    world: AgentWorld\n"
                     "class Body:\n    def __init__(self, rt: ToolHost) -> None:\n        self.rt = rt\n"
                     "    def go(self) -> None:\n        rt, n = self.rt, 1\n        rt.world.wake()\n")
    assert _unread([kept]) == {"ToolHost": ["mind"]}


def test_the_check_sees_a_view_take_its_host_for_a_part_of_the_base():
    """A view of the model slot alone, taking the host (whose slot it extends from the base)."""
    for host in ("ViewHost", "RuntimeParts"):
        view = f"\n\ndef endpoint(rt: {host}) -> str:\n    return rt.slot.endpoint()\n"
        text = (PACKAGE / "views.py").read_text() + view
        assert [found.split(" ", 1)[1] for found in _narrow_enough(text)] == ["endpoint(rt) uses only ['slot']"]
