"""Brain tools for agents, talk and wait, as the agent's elisp calls them.

Emacs sends only the id of the eval a call runs in; who the caller is comes
from the server's own record of that eval (:func:`caller_of`), never from
Emacs, so nothing an eval binds changes who it acts as (docs/ARCHITECTURE.md, Agent and World).  The World
then knows who spawned what and which talks an eval made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, Protocol

from pydantic import BeforeValidator, Field, PositiveInt

from ..agents.agent import AgentError
from ..agents.kinds import PRIMARY
from ..agents.talk import Overloaded
from ..agents.world import AgentWorld
from ..arguments import Flag, Options, Strings, Text, checked
from .kit import Takes, ToolError, refusals

TAKES: Takes = ("world",)  # they act in the World, and need nothing else of the host
_refusals = refusals(AgentError)
_overload = refusals(Overloaded, prefix="overloaded: ")  # said as such, so the agent backs off


Control = Literal["pause", "resume", "cancel"]


def _one_id(value: object) -> object:
    return [value] if isinstance(value, int) and not isinstance(value, bool) else value


TalkIds = Annotated[list[PositiveInt], BeforeValidator(_one_id), Field(min_length=1)]
"""A TalkId, or a list of them."""


class TaskOptions(Options):
    """``agent-task``'s options: the actions and MCP tools it may use, whether it may ask the person,
    and the compulsions that watch it from its first step."""

    allowed: Strings | None = None
    tools: Strings | None = None
    request_input: Flag = False
    compulsions: Strings | None = None


class WaitOptions(Options):
    """``agent-wait-for``'s options: how long to sleep at most, in seconds."""

    timeout: Annotated[float, Field(gt=0, le=3600)] | None = None


class Evals(Protocol):
    """The server's record of the evals Emacs is running (the EmacsFace)."""

    def agent_of_eval(self, eval_id: int) -> str | None: ...

    def evals_outstanding(self) -> bool: ...


def caller_of(evals: Evals, eval_id: object) -> str:
    """Who a call from Emacs made in eval EVAL_ID acts as: the agent that eval runs for.

    No eval id is the person (outside any eval), who acts as the primary; but
    while an eval is running, a call without one is refused, since it may come
    from that eval.  An id that names no running eval is refused.
    """
    if eval_id is None:
        if evals.evals_outstanding():
            raise ToolError("agent functions called outside an eval are refused while an eval runs; "
                            "call them from inside your eval, where `amacs-current-eval' names it")
        return PRIMARY
    agent = evals.agent_of_eval(eval_id) if isinstance(eval_id, int) and not isinstance(eval_id, bool) else None
    if agent is None:
        raise ToolError(f"eval {eval_id!r} is not running (finished, stopped, or never sent); "
                        "agent functions act only inside the eval that calls them")
    return agent


def acting_as_its_eval(evals: Evals, tool: Callable[..., Any], takes: int = 1) -> Callable[..., Any]:
    """TOOL as Emacs calls it, with (PARTS... EVAL-ID ARGS...): the caller is the one EVALS say.

    PARTS are the TAKES parts of the host TOOL's family takes (tools/kit.py), handed on as they are:
    TOOL is called (PARTS... CALLER EVAL-ID ARGS...)."""

    def from_emacs(*given: Any) -> Any:
        held, sent = given[:takes], given[takes:]
        eval_id = sent[0] if sent else None
        return tool(*held, caller_of(evals, eval_id), eval_id, *sent[1:])

    from_emacs.__name__ = tool.__name__
    from_emacs.__doc__ = tool.__doc__
    return from_emacs


@checked(3)
@_overload
@_refusals
def agent_task(world: AgentWorld, caller: str, eval_id: int | None, template: str, prompt: Text,
               opts: TaskOptions | None = None) -> Any:
    """Start a Task from TEMPLATE with PROMPT; returns a handle at once (:allowed, :request-input,
    :tools, :compulsions)."""
    o = opts or TaskOptions()
    return world.task(caller, eval_id, template, prompt, o.allowed, o.request_input, o.tools, o.compulsions or ())


@checked(3)
@_overload
@_refusals
def agent_viewpoint(world: AgentWorld, caller: str, _eval: int | None, name: str, template: str) -> Any:
    """Start the Viewpoint NAME from TEMPLATE."""
    return world.viewpoint(caller, name, template)


@checked(3)
@_overload
@_refusals
def agent_consider(world: AgentWorld, caller: str, eval_id: int | None, prompt: Text) -> Any:
    """Ask every viewpoint about PROMPT in turn; the comments come back as one event."""
    return world.consider(caller, eval_id, prompt)


@checked(3)
@_refusals
def agent_discard(world: AgentWorld, caller: str, _eval: int | None, name: str) -> Any:
    """End the viewpoint NAME."""
    return world.discard(caller, name)


@checked(3)
@_overload
@_refusals
def agent_compulsion(world: AgentWorld, caller: str, _eval: int | None, template: str, prompt: str | None = None) -> Any:
    """Attach a Compulsion from TEMPLATE (with PROMPT) to the caller."""
    return world.compulsion(caller, template, prompt)


@checked(3)
@_refusals
def agent_quit(world: AgentWorld, caller: str, _eval: int | None) -> Any:
    """A compulsion removes itself."""
    return world.quit(caller)


@checked(3)
@_overload
@_refusals
def talk_user(world: AgentWorld, caller: str, eval_id: int | None, text: Text) -> Any:
    """Say TEXT to the person; returns a TalkId."""
    return world.talk_user(caller, eval_id, text)


@checked(3)
@_overload
@_refusals
def talk_agent(world: AgentWorld, caller: str, eval_id: int | None, target: str, text: Text) -> Any:
    """Say TEXT to agent TARGET; returns a TalkId."""
    return world.talk_agent(caller, eval_id, target, text)


@checked(3)
@_overload
@_refusals
def talk_brain(world: AgentWorld, caller: str, eval_id: int | None, brain: str, text: Text) -> Any:
    """Say TEXT to one of the caller's own subagents; returns a TalkId."""
    return world.talk_brain(caller, eval_id, brain, text)


@checked(3)
@_overload
@_refusals
def talk_log(world: AgentWorld, caller: str, eval_id: int | None, text: str) -> Any:
    """Write TEXT to the transcript log; returns a TalkId."""
    return world.talk_log(caller, eval_id, text)


@checked(3)
@_refusals
def wait_for(world: AgentWorld, caller: str, eval_id: int | None, talk_ids: TalkIds, opts: WaitOptions | None = None) -> Any:
    """After this eval, sleep until a reply to TALK-IDS (:timeout seconds)."""
    return world.post.wait_for(caller, eval_id, talk_ids, (opts or WaitOptions()).timeout)


class NotifyOptions(Options):
    """``agent-notify``'s options: the one viewpoint to tell (else all of the caller's)."""

    to: str | None = None


@checked(3)
@_refusals
def agent_notify(world: AgentWorld, caller: str, _eval: int | None, text: Text, opts: NotifyOptions | None = None) -> Any:
    """Share TEXT with the caller's viewpoint :to NAME, or with all of them, asking for no reply."""
    return world.notify(caller, text, (opts or NotifyOptions()).to)


@checked(3)
@_refusals
def agent_control(world: AgentWorld, caller: str, _eval: int | None, action: Control, agent_id: str) -> Any:
    """Pause, resume or cancel AGENT_ID (and, for cancel, its subagents): the primary any agent,
    an agent only those below it."""
    return world.control(caller, action, agent_id)


@checked(1)
def agents_list(world: AgentWorld, eval_id: object = None) -> Any:
    """Every live agent: id, type, template, state, cost.  Anyone may ask, in an eval or not:
    the answer does not depend on who asks (so it is not refused while an eval runs)."""
    return world.live()


TOOLS: dict[str, Callable[..., Any]] = {
    "agent_task": agent_task, "agent_viewpoint": agent_viewpoint, "agent_consider": agent_consider,
    "agent_discard": agent_discard, "agent_compulsion": agent_compulsion, "agent_quit": agent_quit,
    "talk_user": talk_user, "talk_agent": talk_agent, "talk_brain": talk_brain, "talk_log": talk_log, "wait_for": wait_for,
    "agent_notify": agent_notify, "agent_control": agent_control,
}
