"""The one model call is driven by the agent, never handed anything to call back: what it is
given is data and the objects below it (its backend, its catalog), and what happens comes back
up as the steps it yields, each acted on in the agent's own frame.

Read from the source (the annotations are strings, some names only imported for the type
checker): no parameter, field or Protocol member of the call's path names a callable type; every
parameter and field of the call's module is typed from the data it takes and the objects below
it (a new object, an agent's, fails until it is named here); the call's module makes no closure
(no function defined in a function, no lambda); and no transcript event anywhere is written as a
kind and a dict: each is made by its record's class (amacs_server/records.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "amacs_server"
# The call's path: the agent's side gives its data and objects here, and the call reaches the
# catalog and the request's making through these.
PATH = ["inference/model_call.py", "inference/catalog.py", "inference/request.py", "context/assemble.py"]


def callable_aliases() -> set[str]:
    """Callable and every module-level name of the package that stands for a Callable type."""
    names = {"Callable"}
    for path in ROOT.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and "Callable" in ast.unparse(node.value) \
                    and all(isinstance(t, ast.Name) for t in node.targets):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def names_in(annotation: ast.expr | None) -> set[str]:
    if annotation is None:
        return set()
    text = annotation.value if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str) \
        else ast.unparse(annotation)
    return {n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)} | \
           {n.attr for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Attribute)}


def public_callables(tree: ast.Module) -> list[tuple[str, ast.expr | None]]:
    """(where, annotation) of every parameter of a public function or method, and every
    annotated field of a public class."""
    found: list[tuple[str, ast.expr | None]] = []

    def function(where: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if arg.arg not in ("self", "cls"):
                found.append((f"{where}({arg.arg})", arg.annotation))

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            function(node.name, node)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        (not member.name.startswith("_") or member.name == "__init__"):
                    function(f"{node.name}.{member.name}", member)
                elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    found.append((f"{node.name}.{member.target.id}", member.annotation))
    return found


def test_no_parameter_or_field_on_the_calls_path_is_a_function() -> None:
    aliases = callable_aliases()
    assert {"TextSink", "StatusSink", "Notice"} <= aliases  # the reading sees the package's aliases
    handed = [where for path in PATH
              for where, annotation in public_callables(ast.parse((ROOT / path).read_text()))
              if names_in(annotation) & aliases and not where.endswith("(notice)")]
    # A context's NOTICE is memory's (ActiveMemory.notice, a layer below): called down, never up.
    assert handed == [], f"a function handed to the model call is called back up: {handed}"


def test_the_model_call_makes_no_closure() -> None:
    """Nor do the catalog and the request's making it calls."""
    made = {path: closures(ast.parse((ROOT / path).read_text())) for path in PATH[:3]}
    assert made == {path: [] for path in PATH[:3]}, "the model call makes closures"


def closures(tree: ast.Module) -> list[str]:
    """Every lambda, and every function defined in a function, of TREE."""
    made = [f"lambda at line {node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Lambda)]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            made += [f"{inner.name} in {node.name}" for inner in ast.walk(node)
                     if inner is not node and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return made


def test_the_reading_finds_a_function_handed_down(tmp_path: Path) -> None:
    """The checks above would see a callback come back: a Callable parameter, an alias of one, a closure."""
    tree = ast.parse("from collections.abc import Callable\n"
                     "def call_adapting(catalog, build: Callable[[int], dict], say: 'TextSink') -> None: ...\n"
                     "class Reader:\n    read: Callable[[str], int]\n")
    found = [w for w, a in public_callables(tree) if names_in(a) & {"Callable", "TextSink"}]
    assert found == ["call_adapting(build)", "call_adapting(say)", "Reader.read"]
    assert closures(ast.parse("async def _one():\n    def build(caps): ...\n    f = lambda r: r\n")) == [
        "lambda at line 3", "build in _one"]


# What the call's module takes and keeps, by the names in its annotations: data, the objects below
# it that it calls down (the backend, the catalog, the request's making, the streamer), and its
# own steps.  An object of the agent's handed down (the Caller and Messages it once was given)
# would be a name not here.
TAKES = {
    "Any", "None", "str", "int", "bool", "float", "dict", "list", "tuple", "type", "Exception", "ValueError", "T",
    "ApiSettings", "Usage", "ModelResult", "ModelBackend", "ModelCatalog", "ReplyStreamer", "Adapting", "TooLong",
    "asyncio", "Semaphore", "Lock", "Ask", "Show", "Read", "Step", "Streamed", "WindowRefusal",
    "AgentResponse",
}


def taken(tree: ast.Module) -> list[tuple[str, set[str]]]:
    """(where, names) of every parameter of every function and method, and every annotated field
    of every class, of TREE (private ones too: the call's whole module is its path)."""
    found: list[tuple[str, set[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            found += [(f"{node.name}({arg.arg})", names_in(arg.annotation))
                      for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs] if arg.arg not in ("self", "cls")]
        elif isinstance(node, ast.ClassDef):
            found += [(f"{node.name}.{member.target.id}", names_in(member.annotation)) for member in node.body
                      if isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name)]
    return found


def test_the_call_takes_data_and_the_objects_below_it_and_yields_what_happens() -> None:
    tree = ast.parse((ROOT / "inference/model_call.py").read_text())
    call = next(n for n in tree.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "model_call")
    assert [a.arg for a in call.args.args] == ["ask"], "the call is given ASK, its data, and nothing else"
    assert any(isinstance(n, ast.Yield) for n in ast.walk(call)), "the call yields what happens"
    handed = [(where, names - TAKES) for where, names in taken(tree) if names - TAKES]
    assert handed == [], f"an object handed down to the model call: {handed}"


def test_the_reading_finds_an_object_handed_down() -> None:
    """The check above would see the Caller and Messages the call was once given."""
    tree = ast.parse("async def model_call(ask: Ask[T], messages: Messages, caller: Caller) -> Reply[T]: ...\n"
                     "class Ask:\n    reader: Reader[T]\n")
    assert [(w, n - TAKES) for w, n in taken(tree) if n - TAKES] == [
        ("model_call(messages)", {"Messages"}), ("model_call(caller)", {"Caller"}), ("Ask.reader", {"Reader"})]


def dict_writes(tree: ast.Module) -> list[str]:
    """Every event written as a kind and a dict in TREE: a record made from a dict through the
    kinds' table (``KINDS[kind].of(data)``), or a string kind handed with a dict (``note("x", {...})``)."""
    found: list[tuple[int, str]] = []
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: n.lineno):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "of" and isinstance(func.value, ast.Subscript) \
                and isinstance(func.value.value, ast.Name) and func.value.value.id == "KINDS":
            found.append((node.lineno, f"KINDS[...].of at line {node.lineno}"))
        elif len(node.args) >= 2 and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and isinstance(node.args[1], ast.Dict) and isinstance(func, ast.Attribute) \
                and func.attr in ("note", "write", "record", "event"):
            found.append((node.lineno, f"{func.attr}({node.args[0].value!r}, {{...}}) at line {node.lineno}"))
    return [what for _, what in found]


def test_no_event_is_written_as_a_kind_and_a_dict() -> None:
    """Every transcript event is made by its record's class; only records.py reads a line's dict
    back into its record (``parse``)."""
    found = {str(path.relative_to(ROOT)): dict_writes(ast.parse(path.read_text())) for path in ROOT.rglob("*.py")
             if path.name != "records.py"}
    assert {path: writes for path, writes in found.items() if writes} == {}


def test_the_reading_finds_a_dict_shaped_event_write() -> None:
    tree = ast.parse("def note(self, event, data):\n    self.transcript.write(KINDS[event].of(data), tick=1)\n"
                     "caller.note('model_response', {'raw': text})\n")
    assert dict_writes(tree) == ["KINDS[...].of at line 2", "note('model_response', {...}) at line 3"]
