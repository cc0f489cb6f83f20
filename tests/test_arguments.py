"""Arguments from Emacs are validated once, at the boundary, against declared types (issue 14)."""

from __future__ import annotations

import threading
from typing import Annotated, Any

import pytest
from pydantic import Field
from sexpdata import Symbol

from amacs_server import methods
from amacs_server.arguments import Flag, Options, Strings, Text, checked, prepare
from amacs_server.errors import Refused
from amacs_server.text.lisp import from_lisp
from amacs_server.tools import agents as agent_tools
from amacs_server.tools import registry
from tests.test_memory import silent_runtime


class WaitOptions(Options):
    timeout: Annotated[float, Field(gt=0, le=60)] | None = None
    tags: Strings | None = None


@checked(1)
def tool(rt: object, names: Strings, text: Text, flag: Flag = False, opts: WaitOptions | None = None) -> Any:
    return names, text, flag, opts


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((3, "x"), "tool: NAMES must be a list, got 3"),
        (("a", " \n"), "tool: TEXT must not be empty"),
        (("a",), "tool: TEXT is required"),
        (("a", 3.5), "tool: TEXT must be a string, got 3.5"),
        (("a", "x", None, {"timeout": 0}), "tool: :timeout must be greater than 0, got 0"),
        (("a", "x", None, {"timeout": "5"}), "tool: :timeout must be a number, got '5'"),
        (("a", "x", None, {"colour": 1}), "tool: OPTS has unknown option(s) :colour; allowed: :timeout, :tags"),
        (("a", "x", None, {"tags": ["a", 3]}), "tool: :tags item 1 must be a string, got 3"),
        (("a", "x", None, "fast"), "tool: OPTS must be a plist, got 'fast'"),
        (("a", "x", None, None, 5), "tool takes NAMES TEXT FLAG OPTS; got 5 argument(s)"),
    ],
)
def test_a_wrong_call_is_refused_with_one_line_naming_the_argument(args, message):
    with pytest.raises(Refused) as err:
        tool(None, *args)
    assert str(err.value) == message


def test_a_validator_is_built_at_first_use_or_when_prepared():
    """Models are built when first needed (issue 10, start-up); prepare builds one ahead, same checks."""

    @checked()
    def ahead(opts: WaitOptions | None) -> Any:
        return opts

    spec = ahead._amacs_signature
    assert "model" not in vars(spec)  # nothing built at definition
    prepare(ahead)
    assert spec.model.__pydantic_complete__
    assert ahead({"timeout": 5}).timeout == 5
    with pytest.raises(Refused, match=r"ahead: :timeout must be less than or equal to 60, got 61"):
        ahead({"timeout": 61})
    prepare(len)  # not a checked method: nothing to do


def test_elisp_values_arrive_as_the_declared_types():
    # nil is false and t (any non-nil) true; one string is a list of one; a plist is the options model
    names, text, flag, opts = tool(None, "a", "x", from_lisp([]), from_lisp([Symbol(":timeout"), 5]))
    assert (names, text, flag, opts) == (["a"], "x", False, WaitOptions(timeout=5.0))
    assert tool(None, ["a", "b"], "x", True)[2] is True
    assert tool(None, ["a"], "x")[3] is None


def test_talk_ids_take_one_id_or_a_list_and_never_a_bool_or_zero():
    ids = checked(0)(_ids)
    assert ids(7) == [7] and ids([1, 2]) == [1, 2]
    for bad in (True, 0, [], "7"):
        with pytest.raises(Refused, match="TALK-IDS"):
            ids(bad)


def _ids(talk_ids: agent_tools.TalkIds) -> list[int]:
    return talk_ids


class Recorder:
    """Stands in for the EPC server: keeps what ``methods.publish`` registers."""

    def __init__(self) -> None:
        self.methods: dict[str, Any] = {}

    def register(self, name: str, fn: Any) -> None:
        self.methods[name] = fn


class NoEvals:
    def agent_of_eval(self, eval_id: int) -> str | None:
        return None

    def evals_outstanding(self) -> bool:
        return False


def test_every_method_emacs_may_call_checks_its_arguments(tmp_path):
    """Each registered method refuses a call with too many arguments by its own declared
    signature: none takes arguments unchecked (a method without :func:`checked` would
    raise a TypeError, an internal error, or take them)."""
    rt = silent_runtime(tmp_path / "home")
    loop = threading.Thread(target=rt.loop.run_forever, daemon=True)
    loop.start()
    server = Recorder()
    try:
        methods.publish(server, rt, NoEvals())  # type: ignore[arg-type]
        assert len(server.methods) > 30
        program = {"origin": "program"}  # a batch Emacs's own program: an agent function in no eval may act
        for name, fn in server.methods.items():
            # An agent function's origin comes first, in its eval id's place; the person's own
            # methods (the hub's memory_item, memory_find) take none.
            first = [program] if name in registry.AS_ITS_EVAL else []
            with pytest.raises(Refused, match=r" takes .*; got 9 argument\(s\)"):
                fn(*first, *[0] * 9, *([program] if name in methods.PRIMARYS_OWN else []))
    finally:
        rt.loop.call_soon_threadsafe(rt.loop.stop)
        loop.join(5)
        rt.mind.ltm.close()


def test_tools_made_by_one_wrapper_keep_their_own_arguments():
    """A signature is kept per definition (the warm server builds them before it forks); the tools
    ``kit.refusals`` wraps share the wrapper's code, and were all given the first one's: every such
    tool then said ``thread-create: THREAD-ID is required`` (the debate's agent-list-available-skills
    among them)."""
    from amacs_server.tools.kit import refusals

    @checked()
    @refusals(ValueError)
    def first_tool(thread_id: str) -> str:
        return thread_id

    @checked()
    @refusals(ValueError)
    def second_tool() -> str:
        return "second"

    assert first_tool("t") == "t" and second_tool() == "second"
    with pytest.raises(Refused, match="first-tool: THREAD-ID is required"):
        first_tool()
