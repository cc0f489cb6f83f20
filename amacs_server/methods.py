"""The methods Emacs may call, published over EPC once the token is checked.

Hello itself is answered by :mod:`.hello` (without this module's imports: pydantic among them);
the server publishes these just after it, and a call that comes sooner waits for them."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import NonNegativeFloat, PositiveInt
from sexpdata import Symbol

from . import faults, views
from .arguments import Flag, Text, checked
from .runtime import Runtime
from .tools import registry
from .tools.agents import Control, acting_as_its_eval
from .tools.mcp import agent_tool
from .tools.work import person_add_buffer
from .transport.emacs_face import EmacsFace
from .transport.server import AmacsEPCServer

T = TypeVar("T")
LOOP_CALL_TIMEOUT = 5.0
HISTORY_TIMEOUT = 60.0  # a rewind waits for the running turn and the pending commits


def _on_loop(rt: Runtime, fn: Callable[[], T]) -> T:
    """Run FN on the runtime's loop thread (where state lives) and return its value."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except Exception as err:  # passed to the EPC thread, which reports it
            future.set_exception(err)

    rt.call_in_loop(run)
    return future.result(LOOP_CALL_TIMEOUT)


def publish(server: AmacsEPCServer, rt: Runtime, face: EmacsFace) -> None:
    """Register every method Emacs may call but hello (:func:`~amacs_server.hello.greet`)."""

    @checked()
    def submit(text: Text) -> bool:
        """Queue the person's input for the agent; returns at once."""
        rt.submit(text)
        return True

    @checked()
    def emacs_reply(rid: int, result: dict[str, object]) -> bool:
        """Emacs answers request RID (an eval, a buffer read) with a plist."""
        face.deliver(rid, result)
        return True

    @checked()
    def eval_hold(rid: int, holding: Flag) -> bool:
        """Emacs asks the person about eval RID: its time limit waits (HOLDING), or restarts."""
        face.hold(rid, holding)
        return True

    @checked()
    def set_budget(limit: NonNegativeFloat) -> dict[str, Any]:
        """The person raises (or lowers) the budget limit, in dollars.  Returns the ``limit`` and,
        when it now lets the agent go on after it refused the person's last input, that input
        (``refused``): the shell puts it back at the prompt."""

        def apply() -> dict[str, Any]:
            stopped = rt.world.budget_stop("the primary agent") is not None
            rt.set_limit(limit)
            goes_on = stopped and rt.world.budget_stop("the primary agent") is None
            return {"limit": limit, "refused": views.budget_refused_input(rt) if goes_on else None}

        return _on_loop(rt, apply)

    @checked()
    def set_model(backend: str, model: str, base_url: str | None = None, window: int | None = None) -> dict[str, Any]:
        """Switch backend (anthropic or openai) and model, from the next model call on; WINDOW, the
        model's input window in tokens as the person knows it (beats what its server reports)."""
        return _on_loop(rt, lambda: rt.set_model(backend, model, base_url, window))

    @checked()
    def interrupt() -> bool:
        """Cancel the running turn; True if there was one."""
        return _on_loop(rt, rt.interrupt)

    @checked()
    def rewind(tick: PositiveInt) -> dict[str, Any]:
        """Return the mind to the end of TICK, in place; the abandoned future stays on a git ref."""
        return asyncio.run_coroutine_threadsafe(rt.rewind(tick), rt.loop).result(HISTORY_TIMEOUT)

    @checked()
    def fork(tick: PositiveInt | Literal["now"], dest: Text) -> dict[str, Any]:
        """Make the new home DEST holding this mind at the end of TICK (``"now"``: the last tick)."""
        return rt.fork(None if tick == "now" else tick, Path(dest).expanduser())

    @checked()
    def status() -> dict[str, Any]:
        """Runtime status for the shell."""
        return _on_loop(rt, lambda: views.status(rt))

    @checked()
    def past_inputs() -> dict[str, Any]:
        """Every past input of the home, newest first, with its tick (to rewind or fork before)."""
        return _on_loop(rt, lambda: views.past_inputs(rt))

    @checked()
    def hub_state() -> dict[str, Any]:
        """What the hub shows."""
        return _on_loop(rt, lambda: views.hub_state(rt))

    @checked()
    def agent_transcript(agent_id: str) -> str:
        """One agent's transcript of this session, as text."""
        return _on_loop(rt, lambda: views.agent_transcript(rt, agent_id))

    @checked()
    def consciousness() -> str:
        """The consciousness alist, as text Emacs can `read'."""
        return _on_loop(rt, rt.consciousness.to_elisp)

    @checked()
    def set_consciousness(name: str, value: object) -> object:
        """Change a RAM field; harness fields are refused with a message."""
        new = _on_loop(rt, lambda: rt.agent_set(name, value))
        return Symbol("t") if new is True else new

    @checked()
    def person_agent_control(action: Control, agent_id: str, confirmed: Flag = False) -> dict[str, Any]:
        """The person (the hub) pauses, resumes or cancels an agent and, for cancel, its subtree
        (a compulsion only CONFIRMED: the hub asks first)."""
        return _on_loop(rt, lambda: rt.world.person_control(action, agent_id, confirmed))

    @checked()
    def person_agent_talk(agent_id: str, text: Text) -> dict[str, Any]:
        """The person (the hub) says TEXT to a subagent; its answer is shown in the shell."""
        return _on_loop(rt, lambda: rt.world.person_talk(agent_id, text))

    @checked()
    def ping(value: object) -> object:
        """Echo VALUE (transport checks and benchmarks)."""
        faults.bug("ping.bug")
        return value

    def brain_tool(fn: Callable[..., Any]) -> Callable[..., Any]:
        """A tool, run on the loop thread where the state it acts on lives."""

        def call(*args: Any) -> Any:
            return _on_loop(rt, lambda: fn(rt, *args))

        call.__name__ = fn.__name__
        call.__doc__ = fn.__doc__
        return call

    @checked(name="agent-tool")
    def tool_call(eval_id: object = None, name: object = None, args: object = None) -> Any:
        """An MCP tool call from an eval, on this EPC thread (it may take seconds): tools/mcp.py."""
        return agent_tool(rt, face, lambda fn: _on_loop(rt, fn), eval_id, name, args)

    methods: dict[str, Callable[..., Any]] = {
        "submit": submit,
        "emacs_reply": emacs_reply,
        "eval_hold": eval_hold,
        "person_add_buffer": brain_tool(person_add_buffer),
        "person_agent_control": person_agent_control,
        "person_agent_talk": person_agent_talk,
        "status": status,
        "interrupt": interrupt,
        "rewind": rewind,
        "fork": fork,
        "past_inputs": past_inputs,
        "set_budget": set_budget,
        "set_model": set_model,
        "hub_state": hub_state,
        "agent_transcript": agent_transcript,
        "consciousness": consciousness,
        "set_consciousness": set_consciousness,
        "ping": ping,
        # The agent's tools, from the one registry (tools/registry.py).
        **{name: brain_tool(fn) for name, fn in registry.ON_THE_LOOP.items()},
        "agent_tool": tool_call,  # registry.ON_ITS_THREAD: run on this EPC thread
        "history_search": lambda *args: registry.ON_ITS_THREAD["history_search"](rt, *args),
        # Who calls an agent or memory tool is the server's record of the eval it runs in;
        # a memory tool acts in that agent's own RAM.
        **{name: brain_tool(acting_as_its_eval(face, fn)) for name, fn in registry.AS_ITS_EVAL.items()},
    }
    for name, fn in methods.items():
        server.register(name, fn)
