"""The primary agent: one human turn is one or more ticks of the one agent loop.

``event -> observe -> infer -> parse -> act -> record -> persist -> commit -> next``
(docs/ARCHITECTURE.md, The tick).  The loop and its rules are :mod:`amacs_server.agents.loop`, shared
with every subagent; :class:`PrimaryBody` is what the primary does at each
point of it, each step one call into its own function here.
"""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import faults
from ..agents.kinds import PRIMARY, AgentState, is_blocked
from ..agents.loop import run_agent
from ..agents.talk import began_by
from ..context.assemble import Context, assemble, notice_text, reassemble
from ..errors import AmacsError
from ..files import PersistenceError, deferred_sync
from ..inference.capabilities import Capabilities
from ..inference.catalog import request_chars
from ..inference.model_call import (
    Abandon,
    Answered,
    Ask,
    Charge,
    Compact,
    Read,
    Ready,
    Rejected,
    Reply,
    Show,
    Status,
    Streamed,
    Thinking,
    model_call,
    read_as_agent,
)
from ..inference.parse import MAX_PARSE_RETRIES, AgentResponse, cut_stand_in, fallback_response
from ..inference.pricing import Tally
from ..inference.request import build_request, constrained, ignored_settings
from ..inference.retry import InferenceError, Retrying
from ..persistence.chat_log import ChatEval
from ..persistence.git_repo import commit_message
from ..persistence.scratchpad import ScratchpadEntry
from ..records import (
    Eval,
    Interrupted,
    ModelRequest,
    Parsed,
    Record,
    ReplyBlocked,
    TickEnd,
    TickStart,
)
from ..skills import SkillError, SkillLibrary
from ..state.consciousness import ApiSettings, EvalResult
from .host import TurnHost

if TYPE_CHECKING:
    from ..agents.world import AgentWorld
    from ..face import Face
    from ..mind import Mind
    from ..model_slot import ModelSlot


class TurnAborted(AmacsError):
    """The turn cannot go on; the message has been shown in the shell."""


async def run_turn(rt: TurnHost, text: str | None) -> None:
    """One turn, for the person's TEXT or (None) for events that woke the agent.

    The primary runs the one agent loop (:mod:`amacs_server.agents.loop`), a tick per step,
    until a response without ``eval`` (its default action: request input) or
    the step limit.  After an eval that called agent-wait-for, the agent sleeps
    until the reply (or the timeout) before its next tick.
    """
    faults.point("turn.start")
    rt.face.turn_started()
    rt.world.primary.state = AgentState.RUNNING
    body = PrimaryBody(rt, text)
    try:
        await run_agent(body, rt.world)
    except TurnAborted:
        pass
    except asyncio.CancelledError:
        if body.human_saved or text is None:
            kept = "Your input is kept in agent-chat.org; the" if body.human_saved else "The"
            rt.face.annotate(f"Interrupted. {kept} tick is recorded as interrupted.", "warning")
        else:  # before the write-ahead: said only where it is
            rt.face.annotate("Interrupted before your input was saved; it is in the shell history (M-p).",
                             "warning")
        raise
    finally:
        rt.world.primary.state = AgentState.IDLE
        faults.point("turn.done")
        rt.face.turn_done(rt.mind.consciousness.current_tick)


class PrimaryBody:
    """The primary agent in the one loop: a step is a tick (docs/ARCHITECTURE.md, The tick).

    ``event -> observe -> infer -> parse -> act -> record -> persist -> commit``:
    the person's input is written ahead, the context is assembled from memory,
    the reply streams to the shell (unless a compulsion watches), and each tick
    ends in the org files, memory.db and a git commit.  Each step is one call
    into its own function below (benchmarks time them by name)."""

    allowed: frozenset[str] | None = None  # every action

    def __init__(self, rt: TurnHost, human: str | None) -> None:
        self.rt = rt
        self.id = PRIMARY
        self.max_steps = rt.settings.max_steps
        self.human = human
        self.tick = 0
        self.step = 0
        self.streamed = False
        self.evaluating = False  # an eval of this tick is under way in Emacs
        self.waiting = False  # this tick's eval is done and the agent sleeps on its wait (agent-wait-for)
        self.human_saved = False  # the person's input is in agent-chat.org (the write-ahead)
        self.reply_written = False  # this tick's reply is in agent-chat.org (written when said)
        self.evaluated = False  # this tick's eval was run, or refused or blocked (not a held reply's)
        self.headed = False  # this tick's ``* Tick`` heading is in agent-chat.org
        self.began: str | None = None  # the events that began this tick, when no input of the person's did
        self.blocked: tuple[str, str] | None = None  # the action a compulsion blocked this tick, and why

    def halted(self) -> bool:
        return bool(self.rt.turns.halted)

    def begin_step(self, step: int) -> None:
        self.step = step
        self.reply_written = self.evaluated = self.waiting = False
        self.blocked = None
        human = self.human if step == 0 else None
        self.began = None if human is not None else began_by(self.rt.world.bus.peek(PRIMARY))
        self.tick = begin(self.rt, human, self.began)
        self.headed = human is not None or self.began is not None
        self.rt.face.step_started(step + 1, self.max_steps)
        self.human_saved = self.human_saved or (step == 0 and self.human is not None)

    def last_result(self, step: int) -> str | None:
        if step == 0 and self.human is not None:
            return f"The person said: {self.human}"
        # The events are results too (a task's answer, a consider's comments): the compulsions
        # see them, as the agent will in its context (a debate closer reads the comments).
        result = self.rt.mind.consciousness.last_eval_result
        return json.dumps({"lastEvalResult": result.to_dict() if result else None,
                           "events": [e.to_dict() for e in self.rt.world.bus.peek(PRIMARY)]})

    async def infer(self) -> AgentResponse | None:
        user_message = await observe(self.rt, self.tick)
        faults.point("observe.done")
        response, self.streamed = await infer_and_parse(self.rt, self.tick, user_message)
        if response is None:
            return None
        if response.reply:  # org, for the shell, agent-chat.org and memory
            # Imported by the first reply, not at start-up: 20 regexes.
            from ..text.org_markup import markdown_to_org

            response = replace(response, reply=markdown_to_org(response.reply))
        self.rt.mind.consciousness.mood = response.mood
        self.rt.mind.consciousness.confidence = response.confidence
        return response

    async def say(self, response: AgentResponse) -> None:
        # Written before it is shown: a reply the person saw is in agent-chat.org even if the
        # tick dies afterwards, in its eval say; persist does not write it again.
        write_reply(self.rt.mind, self.rt.face, self.tick, response.reply or "", human_written=self.headed)
        self.reply_written = self.headed = True
        faults.point("say.written")
        self.rt.face.reply(response.reply or "", streamed=self.streamed)
        faults.point("say.shown")

    async def evaluate(self, form: str) -> EvalResult:
        world = self.rt.world
        world.post.begin_eval(PRIMARY)
        faults.point_later("eval.running", 0.3)
        self.evaluating = True
        result = await self.rt.face.evaluate(form)
        self.evaluating = False
        faults.point("eval.result")
        world.files_seen.note(PRIMARY, result)
        return result

    def human_written(self) -> bool:
        """This tick's ``* Tick`` heading is in agent-chat.org: the write-ahead wrote it."""
        return self.human is not None and self.step == 0

    def note(self, event: Record) -> None:
        self.rt.transcript.write(event, tick=self.tick)
        if isinstance(event, Eval):  # its result goes to agent-chat.org with the tick (persist)
            self.evaluated = True
        if isinstance(event, ReplyBlocked):  # the person does not see it; the agent hears why, and its turn goes on
            self.rt.face.annotate(f"A reply was held back: {event.reason}", "agent")
            self.blocked = ("reply", event.reason)
            try:  # in the reply's place: the tick's record says what was blocked, and by whom
                with deferred_sync():
                    self.rt.mind.chat_log.write_blocked(self.tick, self.rt.mind.consciousness.current_time,
                                                        f"A reply was held back: {event.reason}",
                                                        with_heading=not self.headed)
                self.headed = True
            except PersistenceError as err:
                self.rt.face.annotate(f"Could not save the block of tick {self.tick}: {err.strerror}", "error")

    def record(self, response: AgentResponse, result: EvalResult) -> None:
        rt, tick = self.rt, self.tick
        rt.mind.consciousness.last_eval_result = result
        if response.eval is not None:
            rt.mind.last_eval = (tick, result)  # the hub's last eval, blocked or refused ones too
        if response.eval is not None and self.blocked is None and is_blocked(result.error):
            self.blocked = ("eval", result.error or "")
        record(rt, tick, response, result)
        faults.point("record.done")
        persist(rt.mind, rt.face, tick, response, human_written=self.headed,
                reply_written=self.reply_written or self.blocked is not None and self.blocked[0] == "reply",
                evaluated=result if self.evaluated else None)
        self.headed = True
        faults.point("persist.done")
        held = self.blocked is not None and self.blocked[0] == "reply"  # then its eval was not run either
        commit(rt, tick, replace(response, eval=None) if held else response,
               said=self.human if self.human_written() else None, began=self.began, blocked=self.blocked)
        faults.point("commit.queued")

    async def after_eval(self) -> bool:
        wait = self.rt.world.post.end_eval(PRIMARY)
        if wait is not None:
            self.waiting = True
            await self.rt.world.post.sleep_until(PRIMARY, wait)  # still waiting until the next tick begins
        return True

    async def default_action(self, response: AgentResponse) -> bool:
        return True  # request input: the turn ends, the person has the prompt

    def interrupted(self) -> None:
        rt, tick = self.rt, self.tick
        rt.face.reply_abandon("interrupted")
        rt.transcript.write(Interrupted(), tick=tick)
        # The next turn's context must not show this tick's eval (or an older one) as the last
        # result, as if it answered the person's next input: an eval cut short says it was
        # interrupted; with none under way there is no last result (a newcomer saw the agent
        # told of a failed eval that never ran).
        reason = rt.turns.halted or "by the person"
        rt.mind.consciousness.last_eval_result = (
            EvalResult(False, error=f"interrupted ({reason})") if self.evaluating
            else EvalResult(False, error=f"interrupted ({reason}) while it waited for its subagents' replies")
            if self.waiting else EvalResult.skipped_result())
        # Why, as the shell said it: C-c C-c is the person's; a restart stops the server.
        finish_unanswered(rt, tick, rt.turns.halted or "interrupted by the person", began=self.began,
                          waited=self.waiting)

    def out_of_steps(self) -> None:
        self.rt.face.annotate(
            f"Step limit reached ({self.max_steps} ticks this turn); the agent waits for you. "
            "Type to let it continue.",
            "warning",
        )


def begin(rt: TurnHost, human: str | None, began: str | None = None) -> int:
    """Event: stamp the new tick; write the human's input to disk before anything else (or,
    for a tick the events BEGAN, its heading and what began it)."""
    c = rt.mind.consciousness
    tick = c.current_tick + 1
    c.begin_tick(tick)
    rt.ledger.tick_tally = Tally()
    if human is not None:
        try:
            rt.mind.chat_log.write_human(tick, c.current_time, human)
        except PersistenceError as err:
            c.current_tick = tick - 1
            rt.face.input_taken(saved=False)  # it leaves the queue, not saved:
            rt.face.annotate(f"Not sent: {err.strerror}. Your input is in the shell history (M-p).", "error")
            raise TurnAborted from err
        faults.point("write-ahead.done")
        # Only now is the input taken, and the shell may say it is saved: it is on disk.
        rt.face.input_taken()
        faults.point_soon("write-ahead.confirmed")
    elif began is not None:
        try:
            with deferred_sync():
                rt.mind.chat_log.write_event(tick, c.current_time, began)
        except PersistenceError as err:
            rt.face.annotate(f"Could not save what began tick {tick}: {err.strerror}", "error")
    with rt.mind.ltm.transaction():
        rt.mind.memory.sync_state(c, budget=True)  # the one point the budget item is versioned
        if human is not None:
            rt.mind.memory.begin_chat(tick, human)
    rt.transcript.write(TickStart(human=human, consciousness=c.to_dict(), wrote=rt.mind.memory.take_written()), tick=tick)
    return tick


async def observe(rt: TurnHost, tick: int | None = None) -> Context:
    """Observe: read the active thread's buffers and skills, then assemble the context from items."""
    thread = rt.mind.active_thread()
    buffers = await rt.face.hydrate(list(thread.buffers)) if thread and thread.buffers else []
    visited = tuple(os.path.expanduser(b["file"]) for b in buffers if isinstance(b.get("file"), str))
    if visited:  # the thread's file buffers are in the context: the agent has read them (The World)
        rt.world.files_seen.note(PRIMARY, EvalResult(True, files_read=visited))
    skills = []
    for name in thread.skills if thread else ():
        try:
            skill = rt.mind.skills.get(name)
            skills.append({"name": skill.name, "kind": skill.kind, "description": skill.description,
                           "body": skill.body})
        except SkillError as err:
            skills.append({"name": name, "kind": "missing", "description": "", "body": f"[{err}]"})
    events = rt.world.bus.drain(PRIMARY)
    with rt.mind.ltm.transaction():
        rt.mind.memory.set_buffers(buffers)
        rt.mind.memory.set_skills(skills)
        # Named by the brain's own count, kept in the tick state: a restart or a rewind names them as before.
        rt.mind.memory.set_events([e.to_dict() for e in events], rt.mind.memory.events_named + 1)
    snap = rt.mind.memory.snapshot(rt.mind.consciousness)
    c = rt.mind.consciousness
    depths = (c.chat_context_depth, c.monologue_context_depth, c.global_scratchpad_depth, c.thread_scratchpad_depth)
    if rt.slot.config.has_credentials:  # the tools listing as the call will send it, for the fit below
        await rt.world.tools_ready(rt.face.preparing)
    model = rt.mind.memory.notice("model", model_note(rt.slot, c.api_settings, rt.slot.catalog.caps))
    context = assemble(snap, rt.mind.conversation, c.active_thread, depths, model, rt.mind.memory.notice)
    chars = len(system_prompt(rt.mind.skills, rt.world)) + request_chars({"messages": context.messages}) if rt.slot.catalog.asking else 0
    if rt.slot.catalog.waits_for_answer(c.api_settings, chars):  # what the model takes shapes the context
        model = rt.mind.memory.notice("model", model_note(rt.slot, c.api_settings, await rt.slot.catalog.current()))
        context = assemble(snap, rt.mind.conversation, c.active_thread, depths, model, rt.mind.memory.notice)
    return context  # fitted to the model's window by the call (inference/model_call.py)


def system_prompt(skills: SkillLibrary, world: AgentWorld) -> str:
    """The core skill (the person's own if they have one), read fresh when it changes, and the
    MCP tools the primary may call."""
    core = skills.get("core")
    tools = world.tool_listing(PRIMARY)
    return f"{core.body}\n\n{tools}" if tools else core.body


def model_note(slot: ModelSlot, settings: ApiSettings, caps: Capabilities) -> dict[str, Any]:
    """What the agent is told of the model in use (the content of its ``notice.model`` item):
    its name, its window, and the api-settings SETTINGS it set that this model does not get."""
    probe = build_request(slot.model, "", [], settings, caps)
    return {"model": slot.model, "window_tokens": slot.catalog.window, "constrained": constrained(probe),
            "ignored_settings": ignored_settings(caps, settings, probe)}


async def infer_and_parse(rt: TurnHost, tick: int, context: Context) -> tuple[AgentResponse | None, bool]:
    """Infer and parse: the one model call (:mod:`amacs_server.inference.model_call`) with this
    tick's CONTEXT, its reply streamed to the shell unless a compulsion watches; an answer never
    valid is kept as the fallback record (an unparsed thought).  A failed call ends the turn in
    one plain line, the input kept.  Returns the response and whether its reply was already
    streamed to the shell."""
    stop = rt.world.budget_stop("the primary agent")  # the one ledger every agent is held to
    if stop is not None:
        rt.face.annotate(stop, "error")
        finish_unanswered(rt, tick, "budget limit reached")
        raise TurnAborted
    watched = bool(rt.world.compulsions_of(PRIMARY))  # a compulsion may hold the reply back: no streaming
    ask = Ask[AgentResponse](rt.slot.backend, rt.slot.catalog, rt.slot.model, system_prompt(rt.mind.skills, rt.world),
                             rt.mind.consciousness.api_settings, stream=True, show=not watched, openai_room=rt.slot.backend_name == "openai")
    try:
        reply = await TickCall(rt, tick, context).made(ask)
    except InferenceError as err:  # its model_error is in the transcript
        rt.face.annotate(f"Model call failed: {err}. Your input is saved; send again to retry.", "error")
        finish_unanswered(rt, tick, str(err))
        raise TurnAborted from err
    response = reply.value
    if response is None:
        rt.face.annotate(f"The model's response was still not valid JSON after {MAX_PARSE_RETRIES} "
                         f"retries; kept as an unparsed thought: {reply.text[:300]!r}", "error")
        response = fallback_response(reply.text)
    rt.transcript.write(Parsed(attempt=reply.attempt, response=response.to_dict()), tick=tick)
    return response, bool(reply.shown)


class TickCall:
    """A tick of the primary making the one model call: it drives the call and acts on each of
    its steps here (its messages: the conversation's, then this tick's answers that did not read
    and the prompts that asked again; its transcript; the shell; the one budget)."""

    def __init__(self, rt: TurnHost, tick: int, context: Context) -> None:
        self.rt, self.tick, self.context = rt, tick, context
        self.retries: list[dict[str, Any]] = []  # this tick's only: the conversation keeps the answer

    async def made(self, ask: Ask[AgentResponse]) -> Reply[AgentResponse]:
        """ASK's call made for this tick, each of its steps acted on as it comes."""
        rt, face = self.rt, self.rt.face
        async with aclosing(model_call(ask)) as steps:
            async for step in steps:
                match step:
                    case Reply():
                        return step
                    case Ready():
                        await self.ready()
                    case Show():
                        step.messages = [*self.context.messages, *self.retries]
                    case Compact():
                        step.squeeze = self.compact(step.window)
                    case Answered():
                        self.answered(step)
                    case Read():
                        read_as_agent(step)
                    case Charge():
                        step.dollars = rt.ledger.charge(step.usage)
                        rt.world.counted(rt.world.primary, step.usage, step.dollars or 0.0)
                    case ModelRequest():
                        memory = rt.mind.memory
                        rt.transcript.write(replace(step, read=memory.shown_ids, wrote=memory.take_written()),
                                            tick=self.tick)
                        faults.point("infer.request")
                    case Record():
                        rt.transcript.write(step, tick=self.tick)
                    case Status():
                        face.annotate(step.line, "status")
                    case Retrying():
                        face.retrying(step)
                    case Streamed():
                        face.reply_delta(step.gained, last=step.last)
                    case Thinking():
                        face.thinking_delta(step.delta)
                    case Abandon():
                        face.reply_abandon(step.why)
                    case Rejected():
                        self.rejected(step)
        raise AssertionError("the model call ended without its reply")

    def answered(self, step: Answered) -> None:
        result = step.result
        if step.retry is None:
            self.context.answered(result.text, result.assistant_content() if result.thinking_blocks else None)
            return
        text = cut_stand_in(result.text) if step.cut else result.text
        self.retries += [{"role": "assistant", "content": text or "(empty)"},
                         {"role": "user", "content": notice_text(self.rt.mind.memory, "retry", step.retry)}]

    def compact(self, window: int | None) -> int | None:
        conversation = self.context.conversation
        if self.context.made is None or conversation is None or not conversation.compact(window):
            return None
        self.context = reassemble(self.context, self.rt.mind.memory.notice) or self.context
        self.retries = []
        return conversation.squeeze

    async def ready(self) -> None:
        rt = self.rt
        if not rt.slot.config.has_credentials:
            rt.face.annotate(rt.slot.config.no_key_answer(), "error")
            finish_unanswered(rt, self.tick, "no API key")
            raise TurnAborted
        await rt.world.tools_ready(rt.face.preparing)

    def rejected(self, step: Rejected) -> None:
        if not step.again:
            return
        attempt = step.attempt
        if step.cut:
            self.rt.face.annotate(f"The model's answer was cut off at its length limit before its JSON ended; "
                                  f"asking again for a shorter one ({attempt + 1}/{MAX_PARSE_RETRIES}).", "warning")
        else:
            self.rt.face.annotate(f"The model's response was not valid JSON ({step.error}); "
                                  f"retrying ({attempt + 1}/{MAX_PARSE_RETRIES}).", "warning")


def record(rt: TurnHost, tick: int, response: AgentResponse, result: EvalResult) -> None:
    """Record: the monologue line and the scratchpad entry (files and items), the transcript event.

    The files are synced by the commit worker before the tick's commit (not here)."""
    with deferred_sync():
        line = rt.mind.monologue.append(tick, rt.mind.consciousness.current_time, response.monologue)
    rt.mind.memory.add_monologue(tick, line)
    pad = response.scratchpad
    if pad is not None:
        try:
            with deferred_sync():
                rt.mind.scratchpad.append(ScratchpadEntry(tick, pad.heading, pad.thread, pad.content))
        except PersistenceError as err:
            rt.face.annotate(f"Could not save the scratchpad note: {err.strerror}", "error")
        else:
            rt.mind.memory.add_scratchpad(tick, " ".join(pad.heading.split()), pad.thread, pad.content.rstrip())
    rt.transcript.write(TickEnd(response=response.to_dict(), eval_result=result.to_dict(), wrote=rt.mind.memory.take_written()), tick=tick)


def write_reply(mind: Mind, face: Face, tick: int, reply: str, *, human_written: bool) -> None:
    """The agent's part of the chat (agent-chat.org and its memory item), written when it is
    said: a reply the person saw outlives a tick that dies afterwards.

    Not fsynced here (a killed process loses nothing the kernel has): the commit
    worker syncs the tick's files before its commit."""
    try:
        with deferred_sync():
            mind.chat_log.write_agent(tick, mind.consciousness.current_time, reply, with_heading=not human_written)
    except PersistenceError as err:
        face.annotate(f"Could not save the reply of tick {tick}: {err.strerror}", "error")
    with mind.ltm.transaction():
        mind.memory.finish_chat(tick, reply)


def persist(mind: Mind, face: Face, tick: int, response: AgentResponse, *, human_written: bool,
            reply_written: bool = False, evaluated: EvalResult | None = None) -> None:
    """Persist: the agent's part of the chat (unless REPLY_WRITTEN: :func:`write_reply` wrote
    it when it was said), the tick's eval and its result EVALUATED (``** Eval``; the chat's
    memory item keeps only what was said), consciousness.el, and the end-of-tick
    checkpoint of memory.db (one transaction).

    Atomic and crash-safe, but not fsynced here: the commit worker syncs the
    tick's files before its commit.  Only the person's input (``begin``) is a
    synced write-ahead."""
    reply = response.reply or ""
    try:
        with deferred_sync():
            if not reply_written:
                mind.chat_log.write_agent(tick, mind.consciousness.current_time, reply, with_heading=not human_written)
            if evaluated is not None and response.eval is not None:
                mind.chat_log.write_eval(tick, ChatEval.of(response.eval, evaluated.success, evaluated.result,
                                                         evaluated.error))
            mind.save_consciousness()
    except PersistenceError as err:
        face.annotate(f"Could not save tick {tick}: {err.strerror}", "error")
    with mind.ltm.transaction():
        if not reply_written:
            mind.memory.finish_chat(tick, reply)
        mind.memory.sync_state(mind.consciousness)


def finish_unanswered(rt: TurnHost, tick: int, reason: str, *, began: str | None = None, waited: bool = False) -> None:
    """A tick that ended without a response: the input stays, marked with REASON in memory
    and in agent-chat.org (BEGAN: the events that began it, when no input did).

    WAITED: the tick had responded and was committed, and what ended was the wait on its
    subagents after its eval (agent-wait-for): the state it leaves is a second commit of the
    same tick, whose subject says it is that wait's end, not a tick without a response."""
    unanswered = rt.mind.memory.pending_tick == tick
    said = rt.mind.memory.said_at(tick)
    with rt.mind.ltm.transaction():
        if unanswered:
            rt.mind.memory.finish_chat(tick, None, status=f"no reply: {reason}")
        rt.mind.memory.sync_state(rt.mind.consciousness)
    try:
        with deferred_sync():
            if unanswered:
                rt.mind.chat_log.write_no_reply(reason)
            rt.mind.save_consciousness()
    except PersistenceError as err:
        rt.face.annotate(f"Could not save state: {err.strerror}", "error")
    _commit(rt, commit_message(tick, rt.mind.consciousness.active_thread, rt.mind.consciousness.mood,
                               f"(its wait for its subagents ended: {reason})" if waited
                               else f"(no response: {reason})", said=said, began=began))


# Why a tick the server stopped in (killed, or its machine) has no response: said at the next start.
SERVER_STOPPED = "the server stopped before the agent replied"


def finish_cut_off(rt: TurnHost) -> int | None:
    """At start: the tick the last server stopped in before it answered (agent-chat.org's last
    tick holds the person's input and nothing after it) is finished as a tick with no response,
    saying why: ``** No reply`` in agent-chat.org and its commit
    ``«INPUT» — (no response: the server stopped before the agent replied)``.  Returns that tick,
    or None when the last tick was not cut off."""
    tail = rt.mind.chat_log.read_tail(1)
    c = rt.mind.consciousness
    if not tail or not tail[-1].interrupted or tail[-1].tick != c.current_tick:
        return None
    tick = tail[-1].tick
    try:
        with deferred_sync():
            rt.mind.chat_log.write_no_reply(SERVER_STOPPED)
            rt.mind.save_consciousness()
    except PersistenceError as err:
        rt.face.annotate(f"Could not save that tick {tick} got no reply: {err.strerror}", "error")
    with rt.mind.ltm.transaction():  # its exchange in memory is marked already (memory.active.INTERRUPTED)
        rt.mind.memory.sync_state(c)
    _commit(rt, commit_message(tick, c.active_thread, c.mood, f"(no response: {SERVER_STOPPED})",
                               said=tail[-1].human))
    return tick


def commit(rt: TurnHost, tick: int, response: AgentResponse, *, said: str | None = None, began: str | None = None,
           blocked: tuple[str, str] | None = None) -> None:
    """Commit: one git commit for the tick, made by the commit worker (the tick does not wait).
    SAID: the person's input that began the tick, else BEGAN: the events that did; BLOCKED: the
    action a compulsion blocked and why (its subject names each)."""
    c, done = rt.mind.consciousness, rt.mind.consciousness.last_eval_result
    _commit(rt, commit_message(tick, c.active_thread, response.mood, response.monologue, said=said,
                               began=began, blocked=blocked, reply=response.reply, eval_form=response.eval,
                               eval_result=done.result if done else None, eval_error=done.error if done else None))


def _commit(rt: TurnHost, message: str) -> None:
    """Write the tick state that makes the tick restorable (persistence.history) and queue the
    tick's commit of the files as they are now, at its end (in order; a failure is shown as a
    warning when it happens)."""
    files = rt.mind.tick_files()
    try:
        with deferred_sync():
            rt.mind.save_tick_state(rt.slot.model, rt.world.subagents_state(), files)
    except PersistenceError as err:
        rt.face.annotate(f"Could not save the tick state (this tick cannot be rewound to): {err.strerror}",
                         "error")
    rt.mind.commits.submit(rt.mind.tracked_files(), message, known=files)
    rt.ledger.tell_ticked(rt.face)
