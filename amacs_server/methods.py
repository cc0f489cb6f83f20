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
from .agents.kinds import PERSON_KEY, PRIMARY
from .arguments import Flag, Text, build_models, checked
from .errors import AmacsError, Refused
from .face import Face
from .persistence.transcript import Transcript
from .records import ControlRefused, ControlUnattributed
from .runtime import Runtime
from .tools import registry
from .tools.agents import Control, acting_as_its_eval
from .tools.kit import Takes, parts
from .tools.work import PERSON_TAKES, person_add_buffer
from .transport.emacs_face import EmacsFace
from .transport.server import CALL_CONTEXT, AmacsEPCServer
from .turns import Turns

T = TypeVar("T")
LOOP_CALL_TIMEOUT = 5.0
HISTORY_TIMEOUT = 60.0  # a rewind waits for the running turn and the pending commits


def _on_loop(turns: Turns, fn: Callable[[], T]) -> T:
    """Run FN on the loop thread of TURNS (where state lives) and return its value."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except Exception as err:  # passed to the EPC thread, which reports it
            future.set_exception(err)

    turns.call_in_loop(run)
    return future.result(LOOP_CALL_TIMEOUT)


class NotYours(AmacsError, PermissionError):
    """A call on what is not the caller's: the person's powers, or the primary's own state."""


# Each method that acts for the person, and what it changes, as the shell and the transcript say it.
PERSON_POWERS: dict[str, Callable[..., str]] = {
    "submit": lambda text, *_: f"input was sent to the agent as yours: {text!r}",
    "set_budget": lambda limit, *_: f"the budget limit was set to ${float(limit):.2f}",
    "set_model": lambda backend, model, *_: f"the model was switched to {model} on {backend}",
    "interrupt": lambda *_: "the agent's turn was interrupted",
    "rewind": lambda tick, *_: f"the mind was rewound to tick {tick}",
    "fork": lambda tick, dest, *_: f"the mind at tick {tick} was forked into {dest}",
    "person_agent_control": lambda action, agent_id, *_: f"{agent_id} was {action}d" if action != "cancel"
    else f"{agent_id} was cancelled",
    "person_agent_talk": lambda agent_id, text, *_: f"{text!r} was said to {agent_id} as yours",
    "person_add_buffer": lambda buffer, *_: f"the buffer {buffer} was added to the active thread",
    "settings": lambda settings, *_: f"the settings were changed: {settings!r}",
}


def _origin(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """ARGS without the origin Emacs puts last on a call that acts for the person, and that origin
    ({} when there is none: a call made past Emacs's own functions)."""
    if args and isinstance(args[-1], dict) and "origin" in args[-1]:
        return args[:-1], args[-1]
    return args, {}


def person_power(rt: Runtime, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """METHOD (published as NAME) acts for the person: the server decides who called it.

    Refused, with a ``control_refused`` event in the transcript of the agent named, when the
    server's record says an agent's eval was running in Emacs as the call was sent (read in
    the order Emacs sent its messages, :data:`~amacs_server.transport.server.CALL_CONTEXT`), or
    Emacs says it came from inside one.  In an experiment run (no person) refused but for the
    driver's own inputs.  Otherwise done; and when Emacs cannot say a key of the person's did it
    (a timer, a filter, a hook), the shell says at once what changed and that no key of the
    person's did it, and the transcript records the same (``control_unattributed``).
    (docs/ARCHITECTURE.md, Trust.)"""

    def gated(*raw: Any) -> Any:
        args, origin = _origin(raw)
        try:
            what = PERSON_POWERS[name](*args)
        except (TypeError, ValueError):  # arguments the method itself refuses: said by it
            what = f"{name} was called"
        running = CALL_CONTEXT.get()
        agents = [agent for _rid, agent in running] if isinstance(running, tuple) else []
        by = agents[-1] if agents else (origin.get("agent") or PRIMARY) if origin.get("origin") == "eval" else None
        if by is not None:
            refuse(by, what, f"{name} acts for the person, and {by}'s eval called it: an agent's code may not "
                             "use the person's powers (budget, model, rewind, interrupt, the hub's controls, "
                             "input as the person's); ask the person with agent-talk-user")
        driver = rt.config.driver_turns
        if driver is not None:
            if not (name == "submit" and origin.get("origin") == "program" and rt.turns.take_driver_turn(args[0])):
                refuse("code in Emacs", what, f"{name} acts for the person, and this experiment run has none: "
                                              "only its driver acts, and only to type the run's turns")
            return method(*args)
        answer = method(*args)
        if origin.get("origin") not in ("key", "program"):
            via = origin.get("via") or "a call past Emacs's own functions"
            rt.transcript.write(ControlUnattributed(method=name, change=what, via=via, note="no key of the person's did it"))
            rt.face.annotate(f"{what[0].upper()}{what[1:]}: no key of yours did it (code running in Emacs did, "
                             f"from {via}: perhaps a timer or hook an agent's eval left).", "warning")
        return answer

    def refuse(by: str, what: str, message: str) -> None:
        identity = rt.world.identity(by) if by in rt.world.agents or by == PRIMARY else rt.world.identity(PRIMARY)
        rt.transcript.write(ControlRefused(by=by, method=name, change=what, person_only=True),
                            agent=identity)
        raise NotYours(f"refused: {message}")

    gated.__name__, gated.__doc__ = method.__name__, method.__doc__
    return gated


def eval_running() -> str | None:
    """The agent whose eval Emacs was running when the current call was sent (the innermost, as
    the server saw it, :data:`CALL_CONTEXT`), or None outside any eval."""
    running = CALL_CONTEXT.get()
    return running[-1][1] if isinstance(running, tuple) and running else None


# The primary's own state that the agent functions below change: a subagent has none of it.
PRIMARYS_OWN = {"set_consciousness": "consciousness settings", **{
    name: "threads" for name in ("thread_create", "thread_switch", "thread_complete", "thread_add_buffer",
                                 "thread_remove_buffer", "skill_bind", "skill_unbind")}}


def the_primarys(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """METHOD (published as NAME) changes the primary's own state: refused when a subagent's eval
    calls it, which would change the primary's (docs/ARCHITECTURE.md, Trust)."""

    def own(*args: Any) -> Any:
        agent = eval_running()
        if agent is not None and agent != PRIMARY:
            what = PRIMARYS_OWN[name]
            raise NotYours(f"refused: {name} changes the primary's {what}, and {agent} is not the primary; "
                             f"a subagent has no {what} of its own (its template sets how it works), "
                             "so it may not change the primary's")
        return method(*args)

    own.__name__, own.__doc__ = method.__name__, method.__doc__
    return own


def by_no_eval(transcript: Transcript, face: Face, name: str, method: Callable[..., Any], *,
               eval_first: bool) -> Callable[..., Any]:
    """METHOD (published as NAME) is an agent function: it acts as the agent whose eval calls it.

    A call in no eval (no eval id and, as the server saw it, no eval running in Emacs) acts as the
    primary only when Emacs says a key of the person's or a batch Emacs's own program made it: its
    origin comes in the eval id's place (EVAL_FIRST) or last.  Any other such call (a timer or hook
    an agent's eval left, a call past Emacs's own functions) is refused, never silently: it may be a
    subagent's, and would act as the primary (talk to the person, change its threads, memory,
    consciousness).  The shell says so at once and the transcript records it
    (``control_unattributed``).  (docs/ARCHITECTURE.md, Trust.)"""

    def gated(*raw: Any) -> Any:
        if eval_first:
            first = raw[0] if raw else None
            origin = first if isinstance(first, dict) else {}
            args = (None if isinstance(first, dict) else first, *raw[1:])
            in_an_eval = first is not None and not isinstance(first, dict)
        else:
            args, origin = _origin(raw)
            in_an_eval = False
        if not in_an_eval and eval_running() is None and origin.get("origin") not in ("key", "program"):
            via = origin.get("via") or "a call past Emacs's own functions"
            shown = ", ".join(repr(a) for a in args if a is not None)
            what = f"{name}({shown[:120]}{'…' if len(shown) > 120 else ''})"
            transcript.write(ControlUnattributed(method=name, change=f"{what} was refused", via=via,
                                                 note="no key of the person's and no agent's eval did it"))
            face.annotate(f"Refused {what}: no key of yours and no agent's eval called it (code running in "
                             f"Emacs did, from {via}: perhaps a timer or hook an agent's eval left).", "warning")
            raise NotYours(f"refused: {name} is an agent function and no agent's eval called it (from {via}); "
                           "it acts only inside the eval of the agent it acts for, or from a key of the person's")
        if in_an_eval or eval_running() is not None or origin.get("origin") != "key":
            return method(*args)
        # A key of the person's (M-:): it acts with the primary's rights, and the record names the person.
        token = PERSON_KEY.set(str(origin.get("command") or "a key"))
        try:
            return method(*args)
        finally:
            PERSON_KEY.reset(token)

    gated.__name__, gated.__doc__ = method.__name__, method.__doc__
    return gated


def publish(server: AmacsEPCServer, rt: Runtime, face: EmacsFace) -> None:
    """Register every method Emacs may call but hello (:func:`~amacs_server.hello.greet`)."""

    @checked()
    def submit(text: Text) -> bool:
        """Queue the person's input for the agent; returns at once."""
        rt.turns.submit(text)
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
    def eval_started(rid: int) -> bool:
        """Emacs begins to run eval RID: calls it reads from now until RID's result came from it."""
        face.started(rid)
        return True

    @checked()
    def set_budget(limit: NonNegativeFloat) -> dict[str, Any]:
        """The person raises (or lowers) the budget limit, in dollars.  Returns the ``limit`` and,
        when it now lets the agent go on after it refused the person's last input, that input
        (``refused``): the shell puts it back at the prompt.  Refused, in one line, for a model
        nobody priced that is not served on this machine: a limit could not count its dollars."""

        def apply() -> dict[str, Any]:
            unkeepable = rt.ledger.budget_unkeepable()
            if unkeepable is not None:
                raise Refused(unkeepable)
            stopped = rt.world.budget_stop("the primary agent") is not None
            rt.ledger.set_limit(limit)
            goes_on = stopped and rt.world.budget_stop("the primary agent") is None
            return {"limit": limit, "refused": views.budget_refused_input(rt.mind.memory) if goes_on else None}

        return _on_loop(rt.turns, apply)

    @checked()
    def set_model(backend: str, model: str, base_url: str | None = None, window: int | None = None) -> dict[str, Any]:
        """Switch backend (anthropic or openai) and model, from the next model call on; WINDOW, the
        model's input window in tokens as the person knows it (beats what its server reports)."""
        def switch() -> dict[str, Any]:
            now = rt.set_model(backend, model, base_url, window)
            unkept = views.unkept_limit(rt.ledger)  # said at the switch, not only at the next greeting
            return {**now, "unkept": unkept} if unkept is not None else now

        return _on_loop(rt.turns, switch)

    @checked()
    def interrupt() -> bool:
        """Cancel the running turn; True if there was one."""
        return _on_loop(rt.turns, lambda: rt.turns.interrupt(queued=True))

    @checked()
    def rewind(tick: PositiveInt) -> dict[str, Any]:
        """Return the mind to the end of TICK, in place; the abandoned future stays on a git ref."""
        return asyncio.run_coroutine_threadsafe(rt.rewind(tick), rt.loop).result(HISTORY_TIMEOUT)

    @checked()
    def fork(tick: PositiveInt | Literal["now"], dest: Text) -> dict[str, Any]:
        """Make the new home DEST holding this mind at the end of TICK (``"now"``: the last tick)."""
        return rt.fork(None if tick == "now" else tick, Path(dest).expanduser())

    @checked()
    def settings(raw: object) -> bool:
        """The person changed a setting since hello (setopt, customize, set-variable): Emacs sends
        them all (as at hello) before its next input, and the turn that input starts runs by them."""
        apply = rt.emacs_settings
        if apply is None:
            raise Refused("settings: no hello has been answered yet")
        apply(raw)
        return True

    @checked()
    def status() -> dict[str, Any]:
        """Runtime status for the shell."""
        return _on_loop(rt.turns, lambda: views.status(rt))

    @checked()
    def past_inputs(before: PositiveInt | None = None) -> dict[str, Any]:
        """The newest past inputs of the home (of those before tick BEFORE), newest first, each
        with its tick (to rewind or fork before) and when it was typed; whether older ones are left."""
        return _on_loop(rt.turns, lambda: views.past_inputs(rt.mind.chat_log, before))

    @checked()
    def hub_state() -> dict[str, Any]:
        """What the hub shows."""
        return _on_loop(rt.turns, lambda: views.hub_state(rt))

    @checked()
    def agent_transcript(agent_id: str) -> str:
        """One agent's transcript of this session, as text."""
        return _on_loop(rt.turns, lambda: views.agent_transcript(rt.transcript, agent_id))

    @checked()
    def memory_item(mem_id: Text, version: PositiveInt | None = None) -> dict[str, Any]:
        """One version of a memory item, for the person to read (MEM_ID with or without its
        <EOT>s; VERSION, or the one it names, or the latest); the agent's memory is not changed."""
        return _on_loop(rt.turns, lambda: views.memory_item(rt.mind.ltm, mem_id, version))

    @checked()
    def memory_find(query: Text) -> list[dict[str, Any]]:
        """The person's search of long-term memory (M-x amacs-memory-search)."""
        return _on_loop(rt.turns, lambda: views.memory_search(rt.mind.ltm, rt.mind.memory.agent, query))

    @checked()
    def consciousness() -> str:
        """The consciousness alist, as text Emacs can `read'."""
        return _on_loop(rt.turns, rt.mind.consciousness.to_elisp)

    @checked()
    def set_consciousness(name: str, value: object) -> object:
        """Change a RAM field; harness fields are refused with a message."""
        new = _on_loop(rt.turns, lambda: rt.mind.agent_set(name, value))
        return Symbol("t") if new is True else new

    @checked()
    def person_agent_control(action: Control, agent_id: str, confirmed: Flag = False) -> dict[str, Any]:
        """The person (the hub) pauses, resumes or cancels an agent and, for cancel, its subtree
        (a compulsion only CONFIRMED: the hub asks first)."""
        return _on_loop(rt.turns, lambda: rt.world.person_control(action, agent_id, confirmed))

    @checked()
    def person_agent_talk(agent_id: str, text: Text, from_hub: Flag = False) -> dict[str, Any]:
        """The person says TEXT to a subagent (FROM_HUB: the shell shows it, as @NAME typed
        there); its answer is shown in the shell."""
        return _on_loop(rt.turns, lambda: rt.world.person_talk(agent_id, text, from_hub))

    @checked()
    def ping(value: object) -> object:
        """Echo VALUE (transport checks and benchmarks)."""
        faults.bug("ping.bug")
        return value

    def brain_tool(fn: Callable[..., Any], takes: Takes) -> Callable[..., Any]:
        """A tool, handed the parts it TAKES, run on the loop thread where the state it acts on lives."""

        def call(*args: Any) -> Any:
            return _on_loop(rt.turns, lambda: fn(*parts(rt, takes), *args))

        call.__name__ = fn.__name__
        call.__doc__ = fn.__doc__
        return call

    @checked(name="agent-tool")
    def tool_call(eval_id: object = None, name: object = None, args: object = None) -> Any:
        """An MCP tool call from an eval, on this EPC thread (it may take seconds): tools/mcp.py."""
        return registry.ON_ITS_THREAD["agent_tool"](*parts(rt, registry.TAKES["agent_tool"]), face,
                                                    lambda fn: _on_loop(rt.turns, fn), eval_id, name, args)

    methods: dict[str, Callable[..., Any]] = {
        "submit": submit,
        "emacs_reply": emacs_reply,
        "eval_hold": eval_hold,
        "eval_started": eval_started,
        "person_add_buffer": brain_tool(person_add_buffer, PERSON_TAKES),
        "person_agent_control": person_agent_control,
        "person_agent_talk": person_agent_talk,
        "status": status,
        "settings": settings,
        "interrupt": interrupt,
        "rewind": rewind,
        "fork": fork,
        "past_inputs": past_inputs,
        "set_budget": set_budget,
        "set_model": set_model,
        "hub_state": hub_state,
        "agent_transcript": agent_transcript,
        "memory_item": memory_item,
        "memory_find": memory_find,
        "consciousness": consciousness,
        "set_consciousness": set_consciousness,
        "ping": ping,
        # The agent's tools, from the one registry (tools/registry.py).
        **{name: brain_tool(fn, registry.TAKES[name]) for name, fn in registry.ON_THE_LOOP.items()},
        "agent_tool": tool_call,  # registry.ON_ITS_THREAD: run on this EPC thread
        "history_search": lambda *args: registry.ON_ITS_THREAD["history_search"](
            *parts(rt, registry.TAKES["history_search"]), *args),
        # Who calls an agent or memory tool is the server's record of the eval it runs in;
        # a memory tool acts in that agent's own RAM.
        **{name: brain_tool(acting_as_its_eval(face, fn, len(registry.TAKES[name])), registry.TAKES[name])
           for name, fn in registry.AS_ITS_EVAL.items()},
    }
    for name in PERSON_POWERS:
        methods[name] = person_power(rt, name, methods[name])
    for name in PRIMARYS_OWN:
        methods[name] = by_no_eval(rt.transcript, rt.face, name, the_primarys(name, methods[name]), eval_first=False)
    for name in [*registry.AS_ITS_EVAL, "agent_tool"]:
        methods[name] = by_no_eval(rt.transcript, rt.face, name, methods[name], eval_first=True)
    server.call_context = lambda method: face.call_read(method, method in PERSON_POWERS)
    for name, fn in methods.items():
        server.register(name, fn)


class _StandIn:
    """What :func:`prepare_models` publishes to: a server that registers nothing, a runtime and a
    face never called (publish only hands them to the methods it makes)."""

    call_context: Callable[[str], object] | None = None
    transcript = face = None

    def register(self, _name: str, _fn: Callable[..., Any]) -> None:
        """Registers nothing."""


def prepare_models() -> None:
    """Build the argument models of the methods :func:`publish` makes, with no runtime: publish run
    against a stand-in (it only defines the methods), then every model built.  The warm server
    does it before it forks (``research.forkserver.preload``): a fork's publish finds them built."""
    stand_in: Any = _StandIn()
    publish(stand_in, stand_in, stand_in)
    build_models()
