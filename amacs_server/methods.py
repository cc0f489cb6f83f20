"""The methods Emacs may call, published over EPC once the token is checked."""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from sexpdata import Symbol

from . import views, work_tools
from .agents import tools as agent_tools
from .agents.world import PRIMARY
from .errors import Refused
from .inference.pricing import Price
from .memory import tools
from .runtime import Runtime
from .transport.emacs_face import EmacsFace
from .transport.server import AmacsEPCServer

T = TypeVar("T")
log = logging.getLogger("amacs.methods")
LOOP_CALL_TIMEOUT = 5.0


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


def _price_entry(entry: Any) -> tuple[str, Price] | None:
    """One `amacs-price-table' row, or None (logged) when it is malformed."""
    try:
        return entry["model"], Price(float(entry["input"]), float(entry["output"]),
                                     float(entry["cache_write"]), float(entry["cache_read"]))
    except (TypeError, KeyError, ValueError):
        log.warning("ignoring a malformed amacs-price-table entry: %r", entry)
        return None


def publish(server: AmacsEPCServer, rt: Runtime, face: EmacsFace) -> None:
    """Register every method Emacs may call."""

    def hello(settings: dict[str, Any]) -> dict[str, Any]:
        if isinstance(settings.get("max_steps"), int) and settings["max_steps"] > 0:
            rt.settings.max_steps = settings["max_steps"]
        prices = settings.get("prices")
        if isinstance(prices, list):
            rt.prices = dict(filter(None, map(_price_entry, prices)))
        if isinstance(settings.get("eval_timeout"), int | float) and settings["eval_timeout"] > 0:
            rt.settings.eval_timeout = float(settings["eval_timeout"])
            face.eval_timeout = rt.settings.eval_timeout
        return views.status(rt)

    def submit(text: Any) -> bool:
        """Queue the person's input for the agent; returns at once."""
        if not isinstance(text, str) or not text.strip():
            raise Refused("submit takes a non-empty string")
        rt.submit(text)
        return True

    def emacs_reply(rid: Any, result: Any) -> bool:
        """Emacs answers request RID (an eval, a buffer read) with a plist."""
        if not isinstance(rid, int) or not isinstance(result, dict):
            raise Refused("emacs_reply takes an id and a plist")
        face.deliver(rid, result)
        return True

    def eval_hold(rid: Any, holding: Any) -> bool:
        """Emacs asks the person about eval RID: its time limit waits (HOLDING), or restarts."""
        if not isinstance(rid, int):
            raise Refused("eval_hold takes a request id and a flag")
        face.hold(rid, bool(holding))
        return True

    def set_budget(limit: Any) -> float:
        """The person raises (or lowers) the budget limit, in dollars."""
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 0:
            raise Refused("the budget limit is a number of dollars, 0 or more")

        def apply() -> float:
            rt.consciousness.budget.budget_limit = float(limit)
            rt.memory.sync_state(rt.consciousness)
            rt.save_consciousness()
            return float(limit)

        return _on_loop(rt, apply)

    def set_model(backend: Any, model: Any, base_url: Any = None) -> dict[str, Any]:
        """Switch backend (anthropic or openai) and model, from the next model call on."""
        if not isinstance(backend, str) or not isinstance(model, str):
            raise Refused("set_model takes a backend and a model name")
        if base_url is not None and not isinstance(base_url, str):
            raise Refused("the base URL must be a string")
        return _on_loop(rt, lambda: rt.set_model(backend, model, base_url))

    def interrupt() -> bool:
        """Cancel the running turn; True if there was one."""
        return _on_loop(rt, rt.interrupt)

    def status() -> dict[str, Any]:
        """Runtime status for the shell."""
        return _on_loop(rt, lambda: views.status(rt))

    def hub_state() -> dict[str, Any]:
        """What the hub shows."""
        return _on_loop(rt, lambda: views.hub_state(rt))

    def agent_transcript(agent_id: Any) -> str:
        """One agent's transcript of this session, as text."""
        if not isinstance(agent_id, str):
            raise Refused("agent_transcript takes an agent id")
        return _on_loop(rt, lambda: views.agent_transcript(rt, agent_id))

    def consciousness() -> str:
        """The consciousness alist, as text Emacs can `read'."""
        return _on_loop(rt, rt.consciousness.to_elisp)

    def set_consciousness(name: Any, value: Any) -> Any:
        """Change a RAM field; harness fields are refused with a message."""
        if not isinstance(name, str):
            raise Refused("the field name must be a symbol or string")
        new = _on_loop(rt, lambda: rt.agent_set(name, value))
        return Symbol("t") if new is True else new

    def person_agent_control(action: Any, agent_id: Any) -> dict[str, Any]:
        """The person (the hub) pauses, resumes or cancels an agent and, for cancel, its subtree."""
        return _on_loop(rt, lambda: rt.world.control(PRIMARY, action, agent_id, by="the person (hub)"))

    def person_agent_talk(agent_id: Any, text: Any) -> dict[str, Any]:
        """The person (the hub) says TEXT to a subagent; its answer is shown in the shell."""
        return _on_loop(rt, lambda: rt.world.person_talk(agent_id, text))

    def ping(value: Any) -> Any:
        """Echo VALUE (transport checks and benchmarks)."""
        return value

    def brain_tool(fn: Callable[..., Any]) -> Callable[..., Any]:
        """A memory tool, run on the loop thread where memory lives."""

        def call(*args: Any) -> Any:
            return _on_loop(rt, lambda: fn(rt, *args))

        call.__name__ = fn.__name__
        call.__doc__ = fn.__doc__
        return call

    server.on_hello = hello
    def emacs_gone() -> None:
        rt.call_in_loop(rt.emacs_gone)  # first: the turn and the subagents stop, no more model calls
        face.fail_all("Emacs disconnected during the eval")

    server.on_emacs_gone = emacs_gone
    methods: dict[str, Callable[..., Any]] = {
        "submit": submit,
        "emacs_reply": emacs_reply,
        "eval_hold": eval_hold,
        "person_add_buffer": brain_tool(work_tools.person_add_buffer),
        "person_agent_control": person_agent_control,
        "person_agent_talk": person_agent_talk,
        "status": status,
        "interrupt": interrupt,
        "set_budget": set_budget,
        "set_model": set_model,
        "hub_state": hub_state,
        "agent_transcript": agent_transcript,
        "consciousness": consciousness,
        "set_consciousness": set_consciousness,
        "ping": ping,
        "thread_create": brain_tool(work_tools.thread_create),
        "thread_switch": brain_tool(work_tools.thread_switch),
        "thread_complete": brain_tool(work_tools.thread_complete),
        "thread_add_buffer": brain_tool(work_tools.thread_add_buffer),
        "thread_remove_buffer": brain_tool(work_tools.thread_remove_buffer),
        "skills_list": brain_tool(work_tools.skills_list),
        "skill_bind": brain_tool(work_tools.skill_bind),
        "skill_unbind": brain_tool(work_tools.skill_unbind),
        # Who calls an agent or memory tool is the server's record of the eval it runs in (issue 11);
        # a memory tool acts in that agent's own RAM.
        **{name: brain_tool(agent_tools.acting_as_its_eval(face, fn)) for name, fn in agent_tools.TOOLS.items()},
        **{name: brain_tool(agent_tools.acting_as_its_eval(face, fn)) for name, fn in tools.TOOLS.items()},
    }
    for name, fn in methods.items():
        server.register(name, fn)
