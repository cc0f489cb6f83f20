"""The one model call is given data and objects, never a function to call back: an agent's tick
goes down into it once and comes back up once with its answer.

Read from the source (the annotations are strings, some names only imported for the type
checker): no parameter, field or Protocol member of the call's path names a callable type,
and the call's module makes no closure (no function defined in a function, no lambda).
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
