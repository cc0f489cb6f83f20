"""Agents sharing one World (docs/ARCHITECTURE.md, Agent and World).

Beyond the primary loop, everything is an :class:`Agent` with a text template
(a skill of kind ``task``, ``viewpoint`` or ``compulsion``).  A Task, a
Viewpoint and a Compulsion differ only in how they are used: their default
action is ``done`` (return the last reply), which is never written into their
transcript.  They share the World: Emacs (their evals), files, the person.

Long operations started from an eval return a handle at once; their results
arrive as events that wake the caller.  Every bound (depth, tasks at once,
queue sizes) fails at once with :class:`Overloaded`; model calls share a pool.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..inference.pricing import dollars
from ..memory.active import ActiveMemory, MemoryRefused
from ..memory.memid import BRAIN
from ..records import (
    AgentEnd,
    AgentStart,
    Blocked,
    Cancelled,
    ControlRefused,
    EventRefused,
    Interrupted,
    Notified,
    Paused,
    Posted,
    Refused,
    Resumed,
    TalkLog,
)
from ..skills import Skill, SkillError
from ..tools_mcp import calls as mcp_calls
from .agent import Agent, AgentError, AgentStopped
from .files_seen import FilesSeen
from .kinds import PERSON_KEY, PRIMARY, AgentState, AgentType, acting, blocked_reason
from .post import Post
from .registry import Registry
from .saved import agent_from_state, agent_state
from .subagent import respond
from .talk import Event as AgentEvent
from .talk import EventType, Overloaded

if TYPE_CHECKING:
    from ..face import Face
    from ..inference.pricing import Usage
    from ..ledger import Ledger
    from ..mind import Mind
    from ..model_slot import ModelSlot
    from ..persistence.transcript import Transcript
    from ..tools_mcp.hub import McpHub

log = logging.getLogger("amacs.agents")

PERSON = "the person (hub)"  # who the transcript says acted, when the person did from the hub
ALL_ACTIONS = frozenset({"eval", "task", "viewpoint", "consider", "compulsion", "talk", "request_input", "quit"})
DEFAULT_ACTIONS = {
    AgentType.TASK: frozenset({"eval", "task", "viewpoint", "consider", "talk"}),
    AgentType.VIEWPOINT: frozenset({"eval", "task", "talk"}),
    AgentType.COMPULSION: frozenset({"eval", "task", "talk", "quit"}),
}
SAY_WAIT = 0.5  # seconds a model call waits on the tool servers before the header says so
REPORT_INTERVAL = 0.2  # seconds between reports of the agents at work to the person's shell


def _speaker(caller: str) -> str:
    """How an agent told something by CALLER names who said it: ``person`` when a key of the
    person's made the call (their M-:), as their @NAME does, else CALLER."""
    return "person" if acting(caller) != caller else caller


class WorldHost(Protocol):
    """What the World asks of whoever runs the primary's turns (the runtime's Turns): to wake
    the primary, to send the person's next input to an agent, to show a task's end, to keep a
    line of the agents' talk the shell showed."""

    def wake(self) -> None: ...

    def expect_user_reply(self, agent_id: str, talk_id: int) -> None: ...

    def task_ended(self, agent_id: str, state: str, ok: bool, text: str) -> None: ...

    def talk_shown(self, line: str) -> None: ...


@dataclass
class Limits:
    """The World's bounds (server configuration)."""

    pool: int = 8  # model calls of subagents at once
    max_tasks: int = 50  # tasks queued or running at once
    max_depth: int = 3  # primary = 0
    max_agents: int = 100  # live subagents of every kind
    max_steps: int = 8  # model calls in one response of one subagent
    wait_timeout: float = 60.0  # default for agent-wait-for
    event_queue: int = 100  # events (and results still to come) one agent may have waiting


class AgentWorld(Registry):
    """Every subagent, the bounds they live under, and the events between them: a
    :class:`~.registry.Registry` of agents that acts.

    Longer than the rule of thumb (~300 lines) for a reason: its public methods are the
    agents' actions, one each (task, viewpoint, consider, discard, compulsion, quit, talk
    to an agent, a brain, the person or the log, notify, wait, pause, resume, cancel, the
    compulsions' hooks), each a few lines over what they all share: the registry, the
    bounds, the asyncio tasks that drive each agent, and the rule that an agent never has
    more rights than its parent.  What has state of its own is in its own module: who is
    who (``registry.py``), the Agent record (``agent.py``), a subagent's run
    (``subagent.py``), talk and wait (``post.py``), the files each agent has seen
    (``files_seen.py``).
    """

    def __init__(self, mind: Mind, slot: ModelSlot, ledger: Ledger, face: Face, transcript: Transcript,
                 turns: WorldHost, limits: Limits, tools: McpHub | None = None) -> None:
        # What the agents share: the primary's mind (its brain names theirs; one LTM), the model
        # in use, the one budget ledger, Emacs, the transcript; and the primary's turns.
        self.mind, self.slot, self.ledger = mind, slot, ledger
        self.face, self.transcript, self.turns = face, transcript, turns
        self.limits = limits
        # The connections to MCP servers, one per server, shared by every agent (tools_mcp/hub.py).
        self.tools = tools
        # The primary is an Agent as every other is: its record holds its counters
        # and talk ids; its loop is loop/primary.py's body, run by the runtime for each turn.
        super().__init__(Agent(id=PRIMARY, type=AgentType.PRIMARY, template="core", parent="", depth=0,
                               allowed=ALL_ACTIONS, tools=mcp_calls.ALL_TOOLS))
        self._report_pending = False
        # Talk and wait: each agent's TalkIds and queue, the results owed, each eval's talks (post.py).
        self.post = Post(limits.event_queue, limits.wait_timeout, self._record_event, lambda: self.turns.wake())
        self.post.open(PRIMARY, self.primary.talk_ids)
        self.bus = self.post.bus
        self.pool = asyncio.Semaphore(limits.pool)
        self.answers = asyncio.Lock()  # subagents' answers taken further one per turn (inference/model_call.answer_turn)
        self.numbered = 0  # the last number a subagent's id took (`task-3'): ids go on across restarts
        self.tasks_live = 0
        self.blocks = 0
        self._running: dict[str, set[asyncio.Task[Any]]] = {}  # the asyncio tasks that drive each agent
        self.files_seen = FilesSeen()  # per agent: the files its evals read or wrote

    def _record_event(self, to: str, event: AgentEvent) -> None:
        """An event posted to TO, in TO's transcript."""
        self.transcript.write(Posted(**event.to_dict()), agent=self.identity(to))

    def _spawn(self, coro: Coroutine[Any, Any, None], *agent_ids: str) -> asyncio.Task[Any]:
        """Run CORO as a task that drives AGENT_IDS (cancelled with any of them); not as the
        person's call that started it, if one did (its agents act as themselves)."""
        context = contextvars.copy_context()
        context.run(PERSON_KEY.set, None)
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro, context=context)
        for agent_id in agent_ids:
            self._running.setdefault(agent_id, set()).add(task)
        def forget(done: asyncio.Task[Any]) -> None:
            for agent_id in agent_ids:
                self._running.get(agent_id, set()).discard(done)

        task.add_done_callback(forget)
        return task

    # -- MCP tools: who may call what -------------------------------------------------------

    def may_use_tool(self, agent_id: str, full_name: str) -> bool:
        """Whether AGENT_ID may call FULL_NAME (``server/tool``): its own tools and every ancestor's allow it."""
        chain = self.lineage(agent_id)
        return bool(chain) and all(mcp_calls.allows(a.tools, full_name) for a in chain)

    def tool_grant(self, agent_id: str) -> str:
        """AGENT_ID's tool patterns, in words (for a refusal)."""
        agent = self.agents.get(agent_id)
        return ", ".join(agent.tools) if agent and agent.tools else "none"

    def tool_listing(self, agent_id: str) -> str:
        """The ``<tools>`` section for AGENT_ID's context: the tools it may call, as the servers listed them."""
        if self.tools is None:
            return ""
        # Scrubbed as a whole: what a server says of itself may quote what mcp.json gave it.
        return str(self.tools.scrub(mcp_calls.listing(((s, t) for s, t in self.tools.tools()
                                                        if self.may_use_tool(agent_id, f"{s}/{t.name}")),
                                                       mcp_calls.ALL_TOOLS)))

    async def tools_ready(self, waiting: Callable[[str], None] | None = None) -> None:
        """Before a model call: the MCP servers not yet tried are started and list their tools
        (bounded wait), and an edited mcp.json is read again, so the listing is current.
        WAITING is told what the call waits on, if it waits a while ("": no longer)."""
        future = self.tools.ready_future() if self.tools is not None else None
        if future is None:
            return
        said: list[str] = []
        try:
            waited = asyncio.wrap_future(future)
            while not (await asyncio.wait({waited}, timeout=SAY_WAIT))[0]:
                names = self.tools.waits_for() if waiting is not None and self.tools else []
                if waiting is not None and names and names != said:  # as each server comes up or fails
                    waiting(f"starting tool server{'s' if len(names) > 1 else ''} {', '.join(names)}…")
                    said = names
            await waited
        except Exception as err:  # noqa: BLE001 - a server that did not start is said in the shell and the hub
            log.warning("listing the MCP tools: %r", err)
        finally:
            if said and waiting is not None:
                waiting("")

    def _template(self, template: str, kind: AgentType) -> Skill:
        try:
            skill = self.mind.skills.get(template)
        except SkillError as err:
            raise AgentError(str(err)) from err
        if skill.kind != kind:
            raise AgentError(f"skill {skill.name!r} is of kind {skill.kind}, not {kind}")
        return skill

    def _new_agent(self, caller: str, kind: AgentType, template: str, name: str | None = None,
                   allowed: Sequence[str] | None = None, request_input: bool = False,
                   tools: Sequence[str] | None = None, asked_by: str | None = None) -> Agent:
        self._caller(asked_by or caller, kind)  # ASKED_BY: who set it on CALLER (a task's compulsions)
        parent = self._known(caller)
        skill = self._template(template, kind)
        tmpl = skill.name
        depth = self.depth(caller) + 1
        if depth > self.limits.max_depth:
            raise Overloaded(f"subagent depth limit reached ({self.limits.max_depth}): {caller} may not spawn")
        live = self._live_count(self.limits.max_agents)
        if live >= self.limits.max_agents:
            raise Overloaded(f"{live} agents are live (limit {self.limits.max_agents}); discard some first")
        # A subagent never has more rights than its parent: what the caller asks for beyond its
        # own actions or tools is refused, by name; a template's or type's defaults are cut to them.
        given = allowed is not None
        allowed = skill.allowed if allowed is None else allowed  # given, or the template's `allowed:'
        actions = DEFAULT_ACTIONS[kind] if allowed is None else frozenset(allowed)  # or the type's defaults
        unknown = actions - ALL_ACTIONS
        if unknown:
            raise AgentError(f"unknown action(s) {sorted(unknown)}; actions are {sorted(ALL_ACTIONS)}")
        if request_input:
            actions |= {"request_input"}
        asked = (actions if given else frozenset()) | ({"request_input"} if request_input else frozenset())
        refused = sorted(asked - parent.allowed)
        if refused:
            raise AgentError(f"{caller} may not give {', '.join(refused)}: a subagent's actions are a subset of "
                             f"its parent's, and {caller} has {', '.join(sorted(parent.allowed))}")
        actions &= parent.allowed
        grant = mcp_calls.patterns(tools)
        if grant is not None:
            beyond = mcp_calls.beyond(grant, parent.tools)
            if beyond:
                raise AgentError(f"{caller} may not give the tools {', '.join(beyond)}: a subagent's tools are a "
                                 f"subset of its parent's, and {caller} has {', '.join(parent.tools) or 'none'}")
        else:
            grant = mcp_calls.patterns(skill.tools) or ()  # the template's, narrowed by every ancestor's at a call
        if depth >= self.limits.max_depth:
            actions -= {"task", "viewpoint", "compulsion"}
        if not name:
            self.numbered += 1
        agent = Agent(id=f"{kind}-{name or self.numbered}", type=kind, template=tmpl, parent=caller,
                      depth=depth, name=name, allowed=actions, tools=grant, request_input=request_input,
                      model=skill.model)
        try:  # its own RAM from the start: what it is told are items of it, never plain text
            agent.memory = ActiveMemory.for_subagent(self.mind.ltm, self.mind.memory.agent, agent.id)
        except MemoryRefused as err:
            raise AgentError(f"{agent.id} was not started: {err}") from err
        self._register(agent)
        self.post.open(agent.id, agent.talk_ids)
        starter = acting(asked_by or caller)
        self.transcript.write(AgentStart(allowed=sorted(actions), tools=list(grant), depth=depth, name=name,
                                         started_by=starter if starter != (asked_by or caller) else None),
                                 agent=agent.identity)
        return agent

    # -- the tick state (persistence.history): the live subagents -------------------------

    def subagents_state(self) -> dict[str, Any]:
        """The live subagents, the id counter and the primary's last TalkId, for the tick state
        (agents/saved.py)."""
        return {"numbered": self.numbered, "primary_talk_id": self.primary.talk_ids.last,
                "agents": [agent_state(a, self.bus.peek(a.id)) for a in self.subagents() if a.state.live]}

    def restore_subagents(self, data: dict[str, Any]) -> list[str]:
        """Replace every subagent by the live ones DATA (:meth:`subagents_state`) recorded, after
        a restart, a rewind or a fork (no subagent at work); the ids of those that were at work
        at the tick and come back idle or interrupted."""
        for agent in list(self.subagents()):
            self.post.forget(agent.id)
            self.files_seen.forget(agent.id)
        self.agents = {PRIMARY: self.primary}
        self._maybe_live, self._compulsions, self._running = {}, {}, {}
        self.tasks_live = 0
        self.numbered = int(data.get("numbered", 0))
        if "primary_talk_id" in data:  # the primary's talks go on numbered as before
            self.primary.talk_ids.go_on(int(data["primary_talk_id"]))
        stopped = []
        for saved in data.get("agents", []):
            agent, queued = agent_from_state(saved, self.mind.ltm, self.mind.memory.agent)
            if saved["state"] == AgentState.RUNNING:
                stopped.append(agent.id)
            self._register(agent)
            self.post.open(agent.id, agent.talk_ids)
            for event in queued:
                self.bus.post(agent.id, event, reserved=True)
        return stopped

    # -- rules every agent obeys --------------------------------------------------------

    def budget_stop(self, who: str) -> str | None:
        """The message that stops WHO (an agent's description) when the one ledger is spent, else None."""
        spent, limit = self.ledger.spent(), self.ledger.limit()
        if spent < limit:
            return None
        return (f"Budget spent (${spent:.4f} of {dollars(limit)}): {who} wanted another "
                "model call and was stopped; raise the limit with M-x amacs-set-budget to go on.")

    def cancel(self, agent_id: str, reason: str) -> list[str]:
        """Stop AGENT_ID and its subtree: model calls and eval chains end now; each transcript says why.

        Returns the ids of the agents that were at work."""
        stopped = []
        for agent in self.subtree(agent_id):
            tasks = self._at_work(agent)
            if agent.state.live or tasks:
                if agent.state is AgentState.RUNNING or tasks:
                    stopped.append(agent.id)
                agent.state = AgentState.CANCELLED
                agent.resumed.set()
                self.transcript.write(Cancelled(reason=reason), agent=agent.identity)
                if not tasks:  # an idle agent ends now; one at work ends when its task does
                    self._free(agent)
            for task in tasks:
                task.cancel()
        if stopped:
            self.report_working()
        return stopped

    def _at_work(self, agent: Agent) -> list[asyncio.Task[Any]]:
        """The asyncio tasks still driving AGENT."""
        return [t for t in self._running.get(agent.id, set()) if not t.done()]

    def cancel_all(self, reason: str) -> list[str]:
        """Interrupt every subagent at work (C-c C-c, or Emacs gone); idle ones stay."""
        stopped = []
        for agent in list(self.subagents()):  # the primary's turn is the runtime's to cancel
            tasks = self._at_work(agent)
            if agent.state is AgentState.RUNNING or tasks:
                for task in tasks:
                    task.cancel()
                if agent.type is AgentType.TASK:
                    agent.state = AgentState.INTERRUPTED
                self.transcript.write(Interrupted(reason=reason), agent=agent.identity)
                stopped.append(agent.id)
        if stopped:
            self.report_working()
        return stopped

    async def settle(self, timeout: float) -> None:
        """Wait, TIMEOUT seconds at most, until the subagents' tasks that were cancelled have
        ended: each says so as it ends (the shell's ✗ line, agent-chat.org), before what comes
        next (a rewind cuts agent-chat.org back to a tick before them)."""
        cancelled = {t for agent in self.subagents() for t in self._at_work(agent) if t.cancelling()}
        if cancelled:
            await asyncio.wait(cancelled, timeout=timeout)

    def pause(self, agent_id: str, by: str = PRIMARY) -> dict[str, Any]:
        """AGENT_ID makes no model call until resumed (the one under way finishes); BY asked."""
        agent = self._live(agent_id)
        agent.resumed.clear()
        self.transcript.write(Paused(by=by), agent=agent.identity)
        self.report_working()  # the shell shows it paused, not working
        return {"paused": agent.id}

    def resume(self, agent_id: str, by: str = PRIMARY) -> dict[str, Any]:
        """AGENT_ID goes on; BY asked."""
        agent = self._live(agent_id)
        agent.resumed.set()
        self.transcript.write(Resumed(by=by), agent=agent.identity)
        self.report_working()
        return {"resumed": agent.id}

    def control(self, caller: str, action: str, agent_id: str) -> dict[str, Any]:
        """CALLER, an agent, pauses, resumes or cancels AGENT_ID: the primary any agent but a
        compulsion, an agent only those below it.

        A compulsion obeys no agent (only it decides to end itself): the agent it watches and every agent above
        it are refused, and the refusal is written to the compulsion's transcript.  Its
        watched agent ending (cancelled itself) ends it too: nothing is left to watch."""
        agent = self._subagent(agent_id)
        if caller != PRIMARY and caller not in self._ancestors(agent.id):
            raise AgentError(f"{caller} may control only its own subagents, not {agent.id}")
        who = acting(caller)
        if agent.type is AgentType.COMPULSION:
            self.transcript.write(ControlRefused(by=who, action=action), agent=agent.identity)
            if who != caller:  # the person's M-: of agent-cancel: an agent function, with the primary's rights
                raise AgentError(f"{agent.id} ({agent.template}) is a compulsion watching {agent.parent}: it obeys no "
                                 f"agent, and agent-{action} acts with {caller}'s rights, even from your "
                                 f"{PERSON_KEY.get()}. Only it ends itself (agent-quit); you can pause or cancel it "
                                 "from the hub (C-c C-v, then z or k).")
            raise AgentError(f"{agent.id} ({agent.template}) is a compulsion watching {agent.parent}: it obeys no "
                             f"agent, so {caller} may not {action} it. Only it ends itself (agent-quit); the person "
                             "can pause or cancel it from the hub.")
        return self._apply(action, agent, who)

    def person_control(self, action: str, agent_id: str, confirmed: bool = False) -> dict[str, Any]:
        """The person, from the hub, pauses, resumes or cancels AGENT_ID and, for cancel, its subtree.

        A compulsion is paused or cancelled only CONFIRMED (the hub asks first): it is the one
        authority over it besides itself."""
        agent = self._subagent(agent_id)
        if agent.type is AgentType.COMPULSION and action != "resume" and not confirmed:
            raise AgentError(f"{agent.id} ({agent.template}) is a compulsion watching {agent.parent} and only it "
                             f"ends itself; confirm to {action} it anyway")
        return self._apply(action, agent, PERSON)

    def _apply(self, action: str, agent: Agent, by: str) -> dict[str, Any]:
        if action == "pause":
            return self.pause(agent.id, by)
        if action == "resume":
            return self.resume(agent.id, by)
        if action == "cancel":
            self._live(agent.id)
            return {"cancelled": self.cancel(agent.id, f"cancelled by {by}") or [agent.id]}
        raise AgentError(f"unknown control {action!r}: pause, resume or cancel")

    def person_talk(self, agent_id: str, text: str, from_hub: bool = False) -> dict[str, Any]:
        """The person says TEXT to AGENT_ID (a viewpoint, by id or name, a compulsion or a task),
        from the hub (FROM_HUB: the shell shows it, as it shows @NAME typed there) or with @NAME
        in the shell.  agent-chat.org keeps what was said and the answer, each naming who.

        Its answer is shown in the shell, labelled with its id.  An agent at work reads TEXT only
        once that work is done (a run of its loop of its own, after the one that holds its lock),
        and the reply says so (``queued``); a paused one once resumed."""
        if agent_id not in self.agents and f"viewpoint-{agent_id}" in self.agents:
            agent_id = f"viewpoint-{agent_id}"  # @skeptic in the shell: a viewpoint by its name
        if agent_id not in self.agents:
            live = [a.id for a in self.subagents() if a.state.live]
            raise AgentError(f"no agent {agent_id!r}; live: {', '.join(live) or 'none'}")
        agent = self._subagent(agent_id)
        if not agent.state.live:
            raise AgentError(f"{agent.id} has already ended ({agent.state})")
        if not text.strip():
            raise AgentError("say something")
        self.transcript.write(Posted(type="User", source="person", content=text),
                                 agent=agent.identity)
        if from_hub:
            self.face.annotate(f"You said to {agent.id} (from the hub): {text}", "agent")
        self.turns.talk_shown(f"the person to {agent.id}: {text}")
        busy = agent.lock.locked()  # it answers once its current response is done
        self._spawn(self._run_person_talk(agent, text), agent.id)
        # A paused agent reads it only once resumed: the person is told so, not that it is at work.
        return {"to": agent.id, "queued": busy, "paused": not agent.resumed.is_set()}

    async def _run_person_talk(self, agent: Agent, text: str) -> None:
        try:
            answer = await self.respond(agent, f"[person] {text}")
        except asyncio.CancelledError:
            self.face.annotate(f"{agent.id} was stopped before it answered you: {text!r} is in its "
                                  "transcript.", "warning")
            return
        except Exception as err:  # noqa: BLE001 - said to the person
            self.face.annotate(f"{agent.id} could not answer you ({err}); your message {text!r} "
                                  "is in its transcript.", "error")
            return
        self.face.reply(f"[{agent.id}] {answer or '(no answer)'}")
        self.turns.talk_shown(f"{agent.id} ({agent.template}) to the person: {answer or '(no answer)'}")

    def counted(self, agent: Agent, usage: Usage, dollars: float) -> None:
        """One model call of AGENT: its steps, tokens and cost (every agent's, the primary's too)."""
        agent.steps += 1
        agent.input_tokens += usage.input_tokens
        agent.output_tokens += usage.output_tokens
        agent.cost += dollars

    # -- the actions -------------------------------------------------------------------

    def task(self, caller: str, eval_id: int | None, template: str, prompt: str,
             allowed: Sequence[str] | None = None, request_input: bool = False,
             tools: Sequence[str] | None = None, compulsions: Sequence[str] = ()) -> dict[str, Any]:
        """Start a Task (with ALLOWED actions, or its template's; REQUEST_INPUT: it may ask the
        person; COMPULSIONS: templates of compulsions that watch it from before its first step);
        its final reply comes back to CALLER as an Agent event."""
        if not prompt.strip():
            raise AgentError("agent-task needs a non-empty PROMPT")
        if self.tasks_live >= self.limits.max_tasks:
            raise Overloaded(f"{self.tasks_live} tasks are queued or running (limit {self.limits.max_tasks}); "
                             "wait for some to finish")
        if compulsions:  # set by the caller, so its rights are checked, before anything is made
            self._caller(caller, AgentType.COMPULSION)
            for watcher in compulsions:
                self._template(watcher, AgentType.COMPULSION)
            if self.depth(caller) + 2 > self.limits.max_depth:
                raise Overloaded(f"subagent depth limit reached ({self.limits.max_depth}): a compulsion on "
                                 f"{caller}'s task would be deeper")
        self.post.reserve(caller)
        try:
            agent = self._new_agent(caller, AgentType.TASK, template, allowed=allowed, request_input=request_input,
                                    tools=tools)
        except Exception:
            self.post.release(caller)
            raise
        for watcher in compulsions:  # before its first step, so they see what it is told
            self._new_agent(agent.id, AgentType.COMPULSION, watcher, asked_by=caller)
        talk_id = self.post.talk(caller, eval_id)
        self.tasks_live += 1
        self._spawn(self._run_task(agent, prompt, caller, talk_id), agent.id)
        return {"handle": agent.id, "talk_id": talk_id, "template": agent.template}

    async def _run_task(self, agent: Agent, prompt: str, caller: str, talk_id: int) -> None:
        wake = True
        try:
            reply = await self.respond(agent, prompt)
            agent.state = AgentState.DONE
            content = {"handle": agent.id, "template": agent.template, "status": agent.status, "reply": reply}
        except asyncio.CancelledError:  # interrupted or cancelled: said in its transcript already
            if agent.state not in (AgentState.INTERRUPTED, AgentState.CANCELLED):
                agent.state = AgentState.CANCELLED
            content = {"handle": agent.id, "template": agent.template, "status": agent.state,
                       "error": f"the task was {agent.state}"}
            wake = False  # the result waits for the caller's next turn; it does not start one
        except AgentStopped as err:
            agent.state = AgentState.STOPPED
            content = {"handle": agent.id, "template": agent.template, "status": agent.state, "error": str(err)}
        except Exception as err:  # a failed task is a result too
            log.exception("task %s failed", agent.id)
            agent.state = AgentState.FAILED
            content = {"handle": agent.id, "template": agent.template, "status": agent.state, "error": str(err)}
        finally:
            self.tasks_live -= 1
        self._end(agent, agent.state)
        said = content.get("reply") or content.get("error") or "(no reply)"
        self.turns.task_ended(agent.id, agent.state, agent.state is AgentState.DONE,
                           f"{agent.id} ({agent.template}) {agent.state}: {' '.join(str(said).split())}")
        self.post.deliver_result(caller, AgentEvent(EventType.AGENT, agent.id, content, talk_id), wake=wake)

    def viewpoint(self, caller: str, name: str, template: str) -> dict[str, Any]:
        """Start a named, persistent Viewpoint for CALLER."""
        if not name.replace("-", "").replace("_", "").isalnum() or not name.islower():
            raise AgentError(f"a viewpoint name is lowercase letters, digits, - and _; got {name!r}")
        longest = BRAIN.max_len - len("viewpoint-")
        if len(name) > longest:  # its id names its memory brain: what it is told are items there
            raise AgentError(f"a viewpoint name is at most {longest} characters (its id, viewpoint-NAME, names "
                             f"its memory, at most {BRAIN.max_len}); {name[:20]!r}… has {len(name)}")
        if f"viewpoint-{name}" in self.agents and self.agents[f"viewpoint-{name}"].state is not AgentState.DISCARDED:
            raise AgentError(f"a viewpoint named {name!r} exists already")
        panel = self.viewpoints_of(caller)
        agent = self._new_agent(caller, AgentType.VIEWPOINT, template, name=name)
        for other in panel:
            other.notice(f"{name} has joined the chat")
        if panel:
            agent.notice(f"You join a chat with {', '.join(str(a.name) for a in panel)}")
        return {"handle": agent.id, "name": name, "template": agent.template}

    def _panel(self, caller: str, text: str, empty: str, use: str) -> list[Agent]:
        """CALLER's viewpoints, for a consider or notify of TEXT (EMPTY: the refusal of no text)."""
        self._caller(caller, "consider")
        if not text.strip():
            raise AgentError(empty)
        panel = self.viewpoints_of(caller)
        if not panel:
            raise AgentError(f"there are no viewpoints to {use}; make some with agent-viewpoint")
        return panel

    def consider(self, caller: str, eval_id: int | None, prompt: str) -> dict[str, Any]:
        """Ask CALLER's viewpoints about PROMPT, in turn; the comments come back as one event."""
        panel = self._panel(caller, prompt, "agent-consider needs a non-empty PROMPT", "consider with")
        self.post.reserve(caller)
        talk_id = self.post.talk(caller, eval_id)
        self._spawn(self._run_consider(caller, panel, prompt, talk_id, _speaker(caller)), *(a.id for a in panel))
        return {"talk_id": talk_id, "viewpoints": [a.name for a in panel]}

    async def _run_consider(self, caller: str, panel: list[Agent], prompt: str, talk_id: int,
                            asker: str) -> None:
        for agent in panel:
            agent.tell(f"[{asker}] {prompt}")
        comments: list[str] = []
        for agent in panel:
            if agent.state in (AgentState.DISCARDED, AgentState.CANCELLED):
                continue
            try:
                comment = await self.respond(agent, None)
            except asyncio.CancelledError:
                self.post.deliver_result(caller, AgentEvent(EventType.AGENT, "consider", {
                    "prompt": prompt, "comments": comments, "status": AgentState.INTERRUPTED}, talk_id), wake=False)
                return
            except Exception as err:  # one failing viewpoint does not stop the debate
                comment = f"(no comment: {err})"
            line = f"[{agent.name}] {comment}"
            comments.append(line)
            self.face.annotate(f"{agent.id} ({agent.template}) said: {' '.join(line.split())}", "agent")
            self.turns.talk_shown(f"{agent.id} ({agent.template}) said: {line}")
            for other in panel:
                if other is not agent and other.state is not AgentState.DISCARDED:
                    other.tell(line)
        self.post.deliver_result(caller, AgentEvent(EventType.AGENT, "consider",
                                                {"prompt": prompt, "comments": comments}, talk_id))

    def discard(self, caller: str, name: str) -> dict[str, Any]:
        """End CALLER's viewpoint NAME; the others hear that it left."""
        self._caller(caller, "viewpoint")
        agent = self.agents.get(f"viewpoint-{name}")
        if agent is None or agent.parent != caller or agent.state is AgentState.DISCARDED:
            raise AgentError(f"{caller} has no viewpoint named {name!r}")
        self._end(agent, AgentState.DISCARDED)
        for other in self.viewpoints_of(caller):
            other.notice(f"{name} has left the chat")
        return {"discarded": name}

    def compulsion(self, caller: str, template: str, prompt: str | None) -> dict[str, Any]:
        """Attach a Compulsion to CALLER: it sees each result and each action, and may block."""
        agent = self._new_agent(caller, AgentType.COMPULSION, template)
        if prompt and prompt.strip():
            agent.tell(prompt)
        return {"handle": agent.id, "template": agent.template}

    def quit(self, caller: str) -> dict[str, Any]:
        """Only a compulsion may quit; it is removed after this response."""
        agent = self.agents.get(caller)
        if agent is None or agent.type is not AgentType.COMPULSION:
            raise AgentError("only a compulsion can agent-quit")
        self._end(agent, AgentState.QUIT)
        return {"quit": agent.id}

    def _end(self, agent: Agent, state: AgentState) -> None:
        """AGENT ends in STATE: its transcript's last record says so (``agent_end``, with its
        summary), and it is freed.  Every end of a subagent comes here, but a cancel of an idle
        one: its ``cancelled`` record is its end, and it is only freed."""
        agent.state = state
        self.transcript.write(AgentEnd(state=agent.state, summary=agent.summary()), agent=agent.identity)
        self._free(agent)

    def _free(self, agent: Agent) -> None:
        """An agent that ended keeps its summary and transcript; its queue and bookkeeping go."""
        self.post.forget(agent.id)
        self.files_seen.forget(agent.id)

    # -- talk and wait -----------------------------------------------------------------

    def talk_agent(self, caller: str, eval_id: int | None, target: str, text: str) -> dict[str, Any]:
        """Send TEXT to agent TARGET (an id or a viewpoint name); its reply comes back as an event.

        The primary, or an agent at work, gets TEXT as an Agent event in its queue instead
        (it answers, if it wants, by talking back); a full queue is an overload error."""
        self._caller(caller, "talk")
        if target == PRIMARY and caller != PRIMARY:
            return self._message(caller, eval_id, PRIMARY, text)
        agent = self.agents.get(target) or self.agents.get(f"viewpoint-{target}")
        if agent is None or not agent.state.live:
            raise AgentError(f"no live agent {target!r}")
        if agent.lock.locked():  # at work: it reads the message with its next step's events
            return self._message(caller, eval_id, agent.id, text)
        self.post.reserve(caller)
        talk_id = self.post.talk(caller, eval_id)
        self._spawn(self._run_talk(caller, agent, text, talk_id, _speaker(caller)), agent.id)
        return {"talk_id": talk_id, "to": agent.id}

    def _message(self, caller: str, eval_id: int | None, to: str, text: str) -> dict[str, Any]:
        """TEXT from CALLER as an event in TO's queue; TO answers only by talking back.

        The sender's TalkId travels in the content, not as the event's TalkId: the
        receiver's waits match replies to its own talks only."""
        talk_id = self.post.talk(caller, eval_id)
        self.post.deliver(to, AgentEvent(EventType.AGENT, caller, {"message": text, "from_talk_id": talk_id}))
        return {"talk_id": talk_id, "to": to, "reply": "none: the receiver answers by talking back"}

    def talk_brain(self, caller: str, eval_id: int | None, brain: str, text: str) -> dict[str, Any]:
        """Send TEXT to one of CALLER's own subagents, by its name or id."""
        mine = [a for a in self.agents.values() if a.parent == caller and brain in (a.id, a.name)]
        if not mine:
            raise AgentError(f"{caller} has no subagent named {brain!r}")
        return self.talk_agent(caller, eval_id, mine[0].id, text)

    async def _run_talk(self, caller: str, agent: Agent, text: str, talk_id: int, speaker: str) -> None:
        try:
            reply: dict[str, Any] = {"reply": await self.respond(agent, f"[{speaker}] {text}")}
        except asyncio.CancelledError:
            self.post.deliver_result(caller, AgentEvent(EventType.AGENT, agent.id, {"error": "interrupted"}, talk_id),
                                 wake=False)
            return
        except Exception as err:
            reply = {"error": str(err)}
        self.post.deliver_result(caller, AgentEvent(EventType.AGENT, agent.id, reply, talk_id))

    def talk_user(self, caller: str, eval_id: int | None, text: str) -> dict[str, Any]:
        """Show TEXT to the person, labelled; their next input is the reply.  A subagent may talk
        to the person only when started with ``:request-input`` (the person's attention is theirs
        to give: docs/ARCHITECTURE.md, Trust)."""
        self._caller(caller, "talk")
        asker = self.agents.get(caller)
        if caller != PRIMARY and asker is not None and not asker.request_input:
            self.transcript.write(Refused(action="talk-user", text=text), agent=asker.identity)
            raise AgentError(f"{caller} may not talk to the person: it was started without :request-input t. "
                             f"Say it to {asker.parent or 'your caller'} (agent-talk-agent), or in your reply")
        talk_id = self.post.talk(caller, eval_id)
        label = "" if caller == PRIMARY else f"[{caller}] "
        self.face.reply(f"{label}{text}")
        self.turns.talk_shown(f"{caller} to the person: {text}")
        self.turns.expect_user_reply(caller, talk_id)
        return {"talk_id": talk_id, "to": "user"}

    def talk_log(self, caller: str, eval_id: int | None, text: str) -> dict[str, Any]:
        """Write TEXT into the transcript log; its acknowledgement is an event (the queue bound holds)."""
        self.post.reserve(caller)  # a full queue refuses at once, as for every result to come
        talk_id = self.post.talk(caller, eval_id)
        self.transcript.write(TalkLog(talk_id=talk_id, text=text), agent=self.identity(caller))
        self.post.deliver_result(caller, AgentEvent(EventType.HOOK, "log", {"logged": text}, talk_id))
        return {"talk_id": talk_id, "to": "log"}

    def notify(self, caller: str, text: str, to: str | None = None) -> dict[str, Any]:
        """Share TEXT with CALLER's viewpoint TO, or with all of them, without asking for a reply
        (``viewpoint.notify(message)``)."""
        panel = self._panel(caller, text, "agent-notify needs a non-empty string", "notify")
        if to is not None:
            panel = [a for a in panel if to in (a.name, a.id)]
            if not panel:
                raise AgentError(f"{caller} has no viewpoint named {to!r}; its viewpoints: "
                                 f"{', '.join(str(a.name) for a in self.viewpoints_of(caller))}")
        for agent in panel:
            agent.tell(f"[{_speaker(caller)}] {text}")
            self.transcript.write(Notified(sender=acting(caller), text=text, to=to or "all"),
                                     agent=agent.identity)
        return {"notified": [a.name for a in panel]}

    # -- a subagent's run (subagent.py) ---------------------------------------------------

    async def respond(self, agent: Agent, text: str | None) -> str:
        """Run AGENT's loop on TEXT until its default action (done) and return its last reply."""
        return await respond(self, agent, text)

    def report_working(self, agent: Agent | None = None, doing: str | None = None) -> None:
        """Tell the person's shell, soon, which subagents are at work and what each is doing.

        Reports are coalesced: at most one per REPORT_INTERVAL, so fifty tasks starting at
        once cost Emacs one redraw, not fifty lists of fifty.
        """
        if agent is not None and doing is not None:
            agent.doing = doing
        if self._report_pending:
            return
        self._report_pending = True
        asyncio.get_running_loop().call_later(REPORT_INTERVAL, self._send_report)

    def _send_report(self) -> None:
        """The running subagents, each with its shown state: a paused one says paused (its
        state stays running: it goes on with the same call once resumed)."""
        self._report_pending = False
        self.face.agents([{"id": a.id, "type": a.type, "template": a.template,
                              "state": AgentState.RUNNING if a.resumed.is_set() else AgentState.PAUSED,
                              "doing": (a.doing or None) if a.resumed.is_set() else "paused (z in the hub resumes it)",
                              "steps": a.steps}
                             for a in self.subagents() if a.state is AgentState.RUNNING],
                            self.ledger.spending())

    # -- hooks on the primary loop (compulsions) ----------------------------------------

    async def before_model_call(self, agent_id: str, last: str) -> None:
        """Each compulsion sees the last result; a non-empty reply is injected (a Hook event)."""
        if agent_id == PRIMARY:  # the compulsions' calls list the tools: the header says what they wait on
            await self.tools_ready(self.face.preparing)
        for comp in self.compulsions_of(agent_id):
            try:
                note = await self.respond(comp, f"[before model call] The last result was:\n{last}")
            except Exception as err:  # a failing compulsion must not stop the agent
                log.warning("compulsion %s failed: %s", comp.id, err)
                continue
            if note.strip() and comp.state is not AgentState.QUIT:
                try:
                    self.post.deliver(agent_id, AgentEvent(EventType.HOOK, comp.id, {"message": note}))
                except Overloaded as err:  # said to the sender, in its transcript: never dropped silently
                    comp.tell(f"[overloaded] Your note to {agent_id} was not delivered: {err}")
                    self.transcript.write(EventRefused(to=agent_id, reason=str(err)),
                                             agent=comp.identity)

    async def before_action(self, agent_id: str, form: str, kind: str = "eval") -> str | None:
        """Each compulsion sees the action; the first non-empty reply blocks it, with that reason.

        KIND is ``eval`` (FORM is elisp) or ``reply`` (FORM is what the agent says to its
        interlocutor: a reply is an action too, so a compulsion can hold it back).  Before
        an eval, the compulsion also sees the files the agent has read or written, and
        whether each changed on disk since."""
        for comp in self.compulsions_of(agent_id):
            what = {"eval": "wants to evaluate", "tool": "wants to call an MCP tool (in its eval)"}.get(
                kind, "wants to reply to its interlocutor")
            files = f"\n\n{self.files_seen.text(agent_id)}" if kind == "eval" else ""
            try:
                reason = await self.respond(comp, f"[before action] The agent {what}:\n{form}{files}")
            except Exception as err:
                log.warning("compulsion %s failed: %s", comp.id, err)
                continue
            if reason.strip() and comp.state is not AgentState.QUIT:
                self.blocks += 1
                self.transcript.write(Blocked(by=comp.id, template=comp.template, action=kind, form=form, reason=reason),
                                         agent=self.identity(agent_id))
                return blocked_reason(comp.id, comp.template, reason)
        return None

