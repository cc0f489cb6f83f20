"""A subagent's run: a task, viewpoint or compulsion answering, in the one agent loop.

The run is :func:`respond`: it takes the agent's lock, drives a
:class:`SubagentBody` through :func:`~amacs_server.agents.loop.run_agent` and
returns the agent's last reply.  The body calls the model with the agent's own
messages and evaluates its forms in Emacs.  It reaches the World only through
:class:`SubagentHost` (docs/ARCHITECTURE.md, Agent and World), as the World
reaches the runtime only through ``WorldHost``.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from ..context.assemble import notice_text, section
from ..inference.model_call import (
    Answered,
    Ask,
    Charge,
    Compact,
    Read,
    Ready,
    Reply,
    Show,
    Working,
    model_call,
    read_as_agent,
)
from ..inference.parse import MAX_PARSE_RETRIES, AgentResponse, cut_stand_in, fallback_response
from ..records import BudgetStop, ModelRequest, Record, StepLimit
from ..skills import SkillError
from .agent import Agent, AgentError, AgentStopped
from .kinds import AgentState, AgentType
from .loop import Watchers, run_agent
from .talk import EventType

if TYPE_CHECKING:
    from ..face import Face
    from ..inference.pricing import Usage
    from ..ledger import Ledger
    from ..mind import Mind
    from ..model_slot import ModelSlot
    from ..persistence.transcript import Transcript
    from ..state.consciousness import EvalResult
    from .files_seen import FilesSeen
    from .post import Post
    from .talk import Wait
    from .world import Limits, WorldHost

PROTOCOL_SKILL = "subagent-core"
FALLBACK_CHARS = 2000  # of a subagent's answer that was never valid JSON, passed on to its asker


class SubagentHost(Watchers, Protocol):
    """What a subagent's run uses of the World: the runtime's shared state, the model pool,
    the post (its events, its evals' talks and waits), the files its evals touched, the one
    budget, its counters, the reports of who is at work, and the MCP tools it may call; and,
    as every agent's loop does, the compulsions watching it."""

    mind: Mind  # the primary's (its brain names the subagents' brains; one LTM) and the skills
    slot: ModelSlot  # the model in use
    ledger: Ledger  # the one budget
    face: Face
    transcript: Transcript
    turns: WorldHost  # the primary's turns: the person's next input may answer a subagent
    limits: Limits
    pool: asyncio.Semaphore  # model calls of subagents at once
    answers: asyncio.Lock  # the turn of the loop an answer is taken further in (inference/model_call.answer_turn)
    post: Post  # its events, its evals' talks and the wait an eval registers
    files_seen: FilesSeen

    def budget_stop(self, who: str) -> str | None: ...

    def counted(self, agent: Agent, usage: Usage, dollars: float) -> None: ...

    def report_working(self, agent: Agent | None = None, doing: str | None = None) -> None: ...

    def tool_listing(self, agent_id: str) -> str: ...

    async def tools_ready(self) -> None: ...


async def respond(host: SubagentHost, agent: Agent, text: str | None) -> str:
    """Run AGENT's loop on TEXT until its default action (done) and return its last reply."""
    async with agent.lock:
        if agent.state in (AgentState.DISCARDED, AgentState.QUIT, AgentState.CANCELLED,
                           AgentState.INTERRUPTED, AgentState.STOPPED):
            raise AgentError(f"{agent.id} is {agent.state}")
        before = agent.state  # a finished task answering the person stays finished
        agent.state = AgentState.RUNNING
        host.report_working()
        if text is not None:
            # Its item commits with the others told in this turn (200 tasks started at once: one
            # commit, not 200), before this agent's request leaves (model_call).
            agent.tell(text, soon=True)
        try:
            body = SubagentBody(host, agent)
            outcome = await run_agent(body, host)
            agent.status = outcome.status
            return body.reply
        finally:
            if agent.state is AgentState.RUNNING:
                agent.state = before if before in (AgentState.DONE, AgentState.FAILED) else AgentState.IDLE
            host.report_working(agent, "")


def system_prompt(host: SubagentHost, agent: Agent) -> str:
    """The shared subagent protocol, then the agent's template (both skills: editable text)."""
    mind = host.mind
    parts = []
    try:
        parts.append(mind.skills.get(PROTOCOL_SKILL).body)
    except SkillError:
        pass
    parts.append(f"You are {agent.id}, a {agent.type} (template {agent.template}). "
                 f"Allowed actions: {', '.join(sorted(agent.allowed))}.")
    parts.append(f"Your memory is your own: agent-memory-create names an item <EOT>{mind.memory.agent}:"
                 f"{agent.id}:NAME:VERSION<EOT>, and <memory> shows your items when they change. Long-term "
                 "memory is shared: agent-memory-search and agent-memory-load reach every agent's items.")
    parts.append(mind.skills.get(agent.template).body)
    tools = host.tool_listing(agent.id)
    if tools:
        parts.append(tools)
    return "\n\n".join(parts)


def show_memory(agent: Agent) -> None:
    """Append to AGENT's newest message what is new or changed in its own RAM since its last
    request, as a ``<memory>`` section of items (as the primary's context shows them).  The
    system prompt and the earlier messages stay byte-identical: the request's cached prefix holds."""
    if agent.memory is None:
        return
    new = [i for i in agent.memory.memory_items(agent.received())
           if agent.memory_shown.get(i.mem_id.base) != i.render()]
    if new:
        agent.memory_shown.update((i.mem_id.base, i.render()) for i in new)
        agent.tell(section("memory", new), as_item=False)


def api_messages(messages: list[dict[str, Any]], system_role: bool) -> list[dict[str, Any]]:
    """An agent's MESSAGES as its backend takes them.

    With SYSTEM_ROLE (OpenAI's chat completions) a notice stays a system message.  The
    Messages API takes a system prompt only before the conversation: there a notice is
    user text ``[system] ...``, joined to the user message next to it (user and assistant
    alternate), in the order it came."""
    if system_role:
        return messages
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "system":
            m = {"role": "user", "content": f"[system] {m['content']}"}
        if m["role"] == "user" and out and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{m['content']}"}
        else:
            out.append(m)
    return out


async def _unless_stopped_while_paused(agent: Agent) -> None:
    """Wait while AGENT is paused; one interrupted or cancelled meanwhile (a cancel lost in a
    wait_for too) goes no further: no model call, no action, nothing delivered."""
    await agent.resumed.wait()
    if agent.state in (AgentState.INTERRUPTED, AgentState.CANCELLED):
        raise asyncio.CancelledError(agent.state)


class SubagentBody:
    """A task, viewpoint or compulsion in the one agent loop: its messages are its transcript.

    Its default action is ``done`` (its last reply is its answer), unless it may
    request input and did not say it is done: then the person answers it."""

    def __init__(self, host: SubagentHost, agent: Agent) -> None:
        self.host, self.agent = host, agent
        self.id = agent.id
        self.allowed: frozenset[str] | None = agent.allowed
        self.max_steps = host.limits.max_steps
        self.reply = ""
        self.last: str | None = None  # the previous action's result, for the compulsions
        self.step = 0
        self.wait: Wait | None = None

    # -- the loop's Body -------------------------------------------------------------------

    def halted(self) -> bool:
        return self.agent.state in (AgentState.INTERRUPTED, AgentState.CANCELLED)

    def begin_step(self, step: int) -> None:
        self.step = step

    def last_result(self, step: int) -> str | None:
        if step > 0:
            return self.last
        # Its first step: what it was told since it last answered (its prompt, a message, the
        # events waiting for it) is what its compulsions see before its model call.
        self._tell_events()
        told = []
        for message in reversed(self.agent.messages):
            if message["role"] == "assistant":
                break
            if message["role"] == "user":
                told.append(message["content"])
        return f"{self.id} was told:\n" + "\n\n".join(reversed(told)) if told else None

    async def infer(self) -> AgentResponse:
        self._tell_events()  # the compulsions' notes among them; at the first step too
        return await self._infer()

    async def say(self, response: AgentResponse) -> None:
        self.reply = response.reply or self.reply

    async def evaluate(self, form: str) -> EvalResult:
        """Emacs evaluates FORM for the agent; the wait it registered (agent-wait-for) is kept."""
        host = self.host
        host.post.begin_eval(self.id)
        result = await host.face.evaluate(form, self.id)
        host.files_seen.note(self.id, result)
        self.wait = host.post.end_eval(self.id)
        return result

    def note(self, event: Record) -> None:
        self.host.transcript.write(event, agent=self.agent.identity)

    def record(self, response: AgentResponse, result: EvalResult) -> None:
        if result.skipped:
            return  # a reply said: nothing to tell the agent back
        self.last = json.dumps({"lastEvalResult": result.to_dict()})
        self.agent.tell("<last-eval-result>\n" + self.last + "\n</last-eval-result>")

    async def after_eval(self) -> bool:
        if self.agent.state is AgentState.QUIT:
            return False
        wait, self.wait = self.wait, None
        if wait is not None:
            await self.host.post.sleep_until(self.id, wait)
        self._tell_events()
        return True

    async def default_action(self, response: AgentResponse) -> bool:
        if self.agent.request_input and not response.done:
            self.agent.tell(await self._ask_person(response.reply or ""))
            self.last = "the person answered"
            return False
        return True  # done: its last reply is its answer (not written to its transcript)

    def interrupted(self) -> None:
        pass  # AgentWorld.cancel and cancel_all wrote it to the transcript

    def out_of_steps(self) -> None:
        self.note(StepLimit(max_steps=self.max_steps))

    # -- its own steps -----------------------------------------------------------------------

    def _tell_events(self) -> None:
        events = self.host.post.bus.drain(self.id)
        if events:
            self.agent.tell("<events>\n" + "\n".join(json.dumps(e.to_dict()) for e in events) + "\n</events>")

    async def _ask_person(self, text: str) -> str:
        agent, host, bus = self.agent, self.host, self.host.post.bus
        talk_id = agent.talk_ids.next()
        host.face.reply(f"[{agent.id} {agent.template}] {text}")
        host.turns.expect_user_reply(agent.id, talk_id)
        await bus.wait_for(agent.id, frozenset({talk_id}), 24 * 3600)
        events = bus.drain(agent.id)
        return "\n".join(str(e.content) for e in events if e.type is EventType.USER) or "(no answer)"

    async def _infer(self) -> AgentResponse:
        """One response, from the one model call every agent makes (inference/model_call.py)."""
        host, agent = self.host, self.agent
        slot = host.slot
        await host.tools_ready()  # its system prompt lists the MCP tools it may call
        ask = Ask[AgentResponse](slot.backend, slot.catalog, agent.model or slot.model, system_prompt(host, agent),
                                 host.mind.consciousness.api_settings, openai_room=slot.backend_name == "openai",
                                 pool=host.pool, answers=host.answers)  # nothing of its reply streams: one JSON answer costs less
        reply = await StepCall(host, agent).made(ask)
        # Paused while its model call was under way: the answer waits until it is resumed, so a
        # paused agent acts on nothing and delivers nothing.
        await _unless_stopped_while_paused(agent)
        if reply.value is not None:
            return reply.value
        fallback = fallback_response(reply.text)
        if agent.type is AgentType.COMPULSION:  # its unparsed text must not block the agent it watches
            return fallback
        # its asker hears what it said
        return replace(fallback, reply=f"(answer not valid JSON after {MAX_PARSE_RETRIES} retries) "
                                       f"{reply.text[:FALLBACK_CHARS]}")


class StepCall:
    """A subagent's step making the one model call: it drives the call and acts on each of its
    steps here (its messages: its own transcript, kept with every answer and every prompt that
    asked again; its transcript events; the hub's line of what it does; the one budget its cost
    rolls up to).  The shell is the primary's: a subagent's lines (a model adapted, a retry) are
    its transcript's only."""

    def __init__(self, host: SubagentHost, agent: Agent) -> None:
        self.host, self.agent = host, agent

    async def made(self, ask: Ask[AgentResponse]) -> Reply[AgentResponse]:
        """ASK's call made for this step, each of its steps acted on as it comes."""
        host, agent = self.host, self.agent
        async with aclosing(model_call(ask)) as steps:
            async for step in steps:
                match step:
                    case Reply():
                        return step
                    case Ready():
                        await self.ready()
                    case Show():
                        show_memory(agent)
                        agent.asked = len(agent.messages)
                        step.messages = api_messages(agent.shown_messages(), host.slot.backend_name == "openai")
                    case Compact():
                        step.squeeze = self.compact(step.window)
                    case Answered():
                        self.answered(step)
                    case Read():
                        read_as_agent(step)
                    case Charge():
                        step.dollars = host.ledger.charge(step.usage, agent.model)  # rolled up to the one budget
                        agent.doing = ""
                        host.counted(agent, step.usage, step.dollars or 0.0)
                    case ModelRequest():
                        host.mind.ltm.commit()  # what it was told is in long-term memory before the model reads it
                        host.transcript.write(step, agent=agent.identity)
                    case Record():
                        host.transcript.write(step, agent=agent.identity)
                    case Working():
                        host.report_working(agent, f"thinking (step {agent.steps + 1})" if step.doing == "thinking"
                                            else step.doing)
        raise AssertionError("the model call ended without its reply")

    def answered(self, step: Answered) -> None:
        # An answer cut at its length limit is kept as its start only, as the primary's.
        result = step.result
        self.agent.answered({"role": "assistant", "content": cut_stand_in(result.text) if step.cut
                             else result.assistant_content()})
        if step.retry is not None:  # the harness's format correction, a notice item of its memory, as the primary's
            self.agent.tell(notice_text(self.agent.memory, "retry", step.retry), as_item=False)

    def compact(self, window: int | None) -> int | None:
        """Leave out the older half of its messages after its task (from an answer on: user and
        assistant still alternate), said in a notice where they were."""
        messages = self.agent.messages
        rest, earlier, times = messages[1:], 0, 0
        if rest and rest[0].get("compacted"):  # the notice of an earlier compaction: said anew
            rest, earlier, times = rest[1:], int(rest[0]["compacted"]), int(rest[0]["times"])
        cut = next((i for i, m in enumerate(rest) if m["role"] == "assistant" and i >= max(1, len(rest) // 2)), None)
        if cut is None:
            return None
        left_out = earlier + len([m for m in rest[:cut] if m["role"] != "system"])
        where = f" of {window:,} tokens" if window else ""
        text = (f"Your context was compacted to fit this model's window{where}: the {left_out} oldest messages "
                "after your task are left out. What you received as memory items is in long-term memory: find "
                "it with agent-memory-search, bring it back with agent-memory-load.")
        memory = self.agent.memory  # a notice item of its memory when it has one, as its panel's notices
        notice = {"role": "system", "content": text, "compacted": left_out, "times": times + 1,
                  "parts": [memory.notice("context-window", text) if memory is not None else text]}
        messages[1:] = [notice, *rest[cut:]]
        return times + 1

    async def ready(self) -> None:
        host, agent = self.host, self.agent
        await _unless_stopped_while_paused(agent)  # paused: no model call until resumed
        stop = host.budget_stop(f"{agent.id} ({agent.type} {agent.template})")
        if stop is not None:
            if not agent.budget_told:
                agent.budget_told = True
                host.face.annotate(stop, "error")
            self.host.transcript.write(BudgetStop(message=stop), agent=agent.identity)
            raise AgentStopped("the budget limit is reached")
        await host.tools_ready()
