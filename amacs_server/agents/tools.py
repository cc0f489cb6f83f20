"""Brain tools for agents, talk and wait, as the agent's elisp calls them.

Every call names its caller and the eval it runs in (Emacs passes both), so
the World knows who spawned what and which talks an eval made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..toolkit import options, refusals
from .talk import Overloaded
from .world import AgentError

if TYPE_CHECKING:
    from ..runtime import Runtime

_refusals = refusals(AgentError)
_overload = refusals(Overloaded, prefix="overloaded: ")  # said as such, so the agent backs off


def _eval_id(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@_overload
@_refusals
def agent_task(rt: Runtime, caller: Any, eval_id: Any, template: Any, prompt: Any, opts: Any = None) -> Any:
    """Start a Task from TEMPLATE with PROMPT; returns a handle at once (:allowed, :request-input)."""
    o = options(opts, {"allowed", "request_input"})
    return rt.world.task(str(caller), _eval_id(eval_id), template, prompt, o)


@_overload
@_refusals
def agent_viewpoint(rt: Runtime, caller: Any, _eval: Any, name: Any, template: Any) -> Any:
    """Start the Viewpoint NAME from TEMPLATE."""
    return rt.world.viewpoint(str(caller), name, template)


@_overload
@_refusals
def agent_consider(rt: Runtime, caller: Any, eval_id: Any, prompt: Any) -> Any:
    """Ask every viewpoint about PROMPT in turn; the comments come back as one event."""
    return rt.world.consider(str(caller), _eval_id(eval_id), prompt)


@_refusals
def agent_discard(rt: Runtime, caller: Any, _eval: Any, name: Any) -> Any:
    """End the viewpoint NAME."""
    return rt.world.discard(str(caller), name)


@_overload
@_refusals
def agent_compulsion(rt: Runtime, caller: Any, _eval: Any, template: Any, prompt: Any = None) -> Any:
    """Attach a Compulsion from TEMPLATE (with PROMPT) to the caller."""
    return rt.world.compulsion(str(caller), template, prompt)


@_refusals
def agent_quit(rt: Runtime, caller: Any, _eval: Any) -> Any:
    """A compulsion removes itself."""
    return rt.world.quit(str(caller))


@_overload
@_refusals
def talk_user(rt: Runtime, caller: Any, eval_id: Any, text: Any) -> Any:
    """Say TEXT to the person; returns a TalkId."""
    return rt.world.talk_user(str(caller), _eval_id(eval_id), text)


@_overload
@_refusals
def talk_agent(rt: Runtime, caller: Any, eval_id: Any, target: Any, text: Any) -> Any:
    """Say TEXT to agent TARGET; returns a TalkId."""
    return rt.world.talk_agent(str(caller), _eval_id(eval_id), target, text)


@_overload
@_refusals
def talk_brain(rt: Runtime, caller: Any, eval_id: Any, brain: Any, text: Any) -> Any:
    """Say TEXT to one of the caller's own subagents; returns a TalkId."""
    return rt.world.talk_brain(str(caller), _eval_id(eval_id), brain, text)


@_overload
@_refusals
def talk_log(rt: Runtime, caller: Any, eval_id: Any, text: Any) -> Any:
    """Write TEXT to the transcript log; returns a TalkId."""
    return rt.world.talk_log(str(caller), _eval_id(eval_id), text)


@_refusals
def wait_for(rt: Runtime, caller: Any, eval_id: Any, talk_ids: Any, opts: Any = None) -> Any:
    """After this eval, sleep until a reply to TALK-IDS (:timeout seconds)."""
    o = options(opts, {"timeout"})
    return rt.world.wait_for(str(caller), _eval_id(eval_id), talk_ids, o.get("timeout"))


def agents_list(rt: Runtime, _caller: Any = None, _eval: Any = None) -> Any:
    """Every live agent: id, type, template, state, cost."""
    return rt.world.live()


TOOLS = {
    "agent_task": agent_task, "agent_viewpoint": agent_viewpoint, "agent_consider": agent_consider,
    "agent_discard": agent_discard, "agent_compulsion": agent_compulsion, "agent_quit": agent_quit,
    "talk_user": talk_user, "talk_agent": talk_agent, "talk_brain": talk_brain, "talk_log": talk_log, "wait_for": wait_for,
    "agents_list": agents_list,
}
