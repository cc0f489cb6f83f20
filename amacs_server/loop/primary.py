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
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

from .. import faults
from ..agents.kinds import PRIMARY, AgentState
from ..agents.loop import Answer, parse_with_retries, run_agent
from ..context.assemble import Context, assemble, notice_text
from ..errors import AmacsError
from ..files import PersistenceError, deferred_sync
from ..inference.backend import ModelResult
from ..inference.capabilities import Capabilities, TooLong, too_long
from ..inference.catalog import call_adapting, request_chars
from ..inference.parse import (
    CUT_REASONS,
    MAX_PARSE_RETRIES,
    AgentResponse,
    AnswerCut,
    ResponseFormatError,
    cut_stand_in,
)
from ..inference.pricing import Tally
from ..inference.request import build_request, constrained, ignored_settings
from ..inference.retry import InferenceError, Retrying
from ..inference.stream import ReplyStreamer
from ..persistence.chat_log import ChatEval
from ..persistence.events import (
    ContextCompacted,
    Eval,
    Interrupted,
    ModelAdapted,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelRetry,
    Parsed,
    ParseError,
    Record,
    ReplyBlocked,
    TickEnd,
    TickStart,
)
from ..persistence.git_repo import commit_message
from ..persistence.scratchpad import ScratchpadEntry
from ..skills import SkillError
from ..state.consciousness import EvalResult
from .host import TurnHost


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
        rt.face.turn_done(rt.consciousness.current_tick)


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

    def halted(self) -> bool:
        return bool(self.rt.halted)

    def begin_step(self, step: int) -> None:
        self.step = step
        self.reply_written = self.evaluated = self.waiting = False
        self.tick = begin(self.rt, self.human if step == 0 else None)
        self.rt.face.step_started(step + 1, self.max_steps)
        self.human_saved = self.human_saved or (step == 0 and self.human is not None)

    def last_result(self, step: int) -> str | None:
        if step == 0 and self.human is not None:
            return f"The person said: {self.human}"
        # The events are results too (a task's answer, a consider's comments): the compulsions
        # see them, as the agent will in its context (a debate closer reads the comments).
        result = self.rt.consciousness.last_eval_result
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
        self.rt.consciousness.mood = response.mood
        self.rt.consciousness.confidence = response.confidence
        return response

    async def say(self, response: AgentResponse) -> None:
        # Written before it is shown: a reply the person saw is in agent-chat.org even if the
        # tick dies afterwards, in its eval say; persist does not write it again.
        write_reply(self.rt, self.tick, response.reply or "", human_written=self.human_written())
        self.reply_written = True
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

    def record(self, response: AgentResponse, result: EvalResult) -> None:
        rt, tick = self.rt, self.tick
        rt.consciousness.last_eval_result = result
        if response.eval is not None:
            rt.last_eval = (tick, result)  # the hub's last eval, blocked or refused ones too
        record(rt, tick, response, result)
        faults.point("record.done")
        persist(rt, tick, response, human_written=self.human_written(), reply_written=self.reply_written,
                evaluated=result if self.evaluated else None)
        faults.point("persist.done")
        commit(rt, tick, response)
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
        reason = rt.halted or "by the person"
        rt.consciousness.last_eval_result = (
            EvalResult(False, error=f"interrupted ({reason})") if self.evaluating
            else EvalResult(False, error=f"interrupted ({reason}) while it waited for its subagents' replies")
            if self.waiting else EvalResult.skipped_result())
        # Why, as the shell said it: C-c C-c is the person's; a restart stops the server.
        finish_unanswered(rt, tick, rt.halted or "interrupted by the person")

    def out_of_steps(self) -> None:
        self.rt.face.annotate(
            f"Step limit reached ({self.max_steps} ticks this turn); the agent waits for you. "
            "Type to let it continue.",
            "warning",
        )


def begin(rt: TurnHost, human: str | None) -> int:
    """Event: stamp the new tick; write the human's input to disk before anything else."""
    c = rt.consciousness
    tick = c.current_tick + 1
    c.begin_tick(tick)
    rt.tick_tally = Tally()
    if human is not None:
        try:
            rt.chat_log.write_human(tick, c.current_time, human)
        except PersistenceError as err:
            c.current_tick = tick - 1
            rt.face.input_taken(saved=False)  # it leaves the queue, not saved:
            rt.face.annotate(f"Not sent: {err.strerror}. Your input is in the shell history (M-p).", "error")
            raise TurnAborted from err
        faults.point("write-ahead.done")
        # Only now is the input taken, and the shell may say it is saved: it is on disk.
        rt.face.input_taken()
        faults.point_soon("write-ahead.confirmed")
    with rt.ltm.transaction():
        rt.memory.sync_state(c, budget=True)  # the one point the budget item is versioned
        if human is not None:
            rt.memory.begin_chat(tick, human)
    rt.transcript.write(TickStart(human=human, consciousness=c.to_dict(), wrote=rt.memory.take_written()), tick=tick)
    return tick


async def observe(rt: TurnHost, tick: int | None = None) -> Context:
    """Observe: read the active thread's buffers and skills, then assemble the context from items."""
    thread = rt.active_thread()
    buffers = await rt.face.hydrate(list(thread.buffers)) if thread and thread.buffers else []
    visited = tuple(os.path.expanduser(b["file"]) for b in buffers if isinstance(b.get("file"), str))
    if visited:  # the thread's file buffers are in the context: the agent has read them (The World)
        rt.world.files_seen.note(PRIMARY, EvalResult(True, files_read=visited))
    skills = []
    for name in thread.skills if thread else ():
        try:
            skill = rt.skills.get(name)
            skills.append({"name": skill.name, "kind": skill.kind, "description": skill.description,
                           "body": skill.body})
        except SkillError as err:
            skills.append({"name": name, "kind": "missing", "description": "", "body": f"[{err}]"})
    events = rt.world.bus.drain(PRIMARY)
    with rt.ltm.transaction():
        rt.memory.set_buffers(buffers)
        rt.memory.set_skills(skills)
        # Named by the brain's own count, kept in the tick state: a restart or a rewind names them as before.
        rt.memory.set_events([e.to_dict() for e in events], rt.memory.events_named + 1)
    snap = rt.memory.snapshot(rt.consciousness)
    c = rt.consciousness
    depths = (c.chat_context_depth, c.monologue_context_depth, c.global_scratchpad_depth, c.thread_scratchpad_depth)
    if rt.config.has_credentials:  # the tools listing as the call will send it, for the fit below
        await rt.world.tools_ready()
    model = rt.memory.notice("model", model_note(rt, rt.catalog.caps))

    def remake() -> Context:
        return assemble(snap, rt.conversation, c.active_thread, depths, model, rt.memory.notice)

    context = remake()
    chars = len(rt.system_prompt()) + request_chars({"messages": context.messages}) if rt.catalog.asking else 0
    if rt.catalog.waits_for_answer(c.api_settings, chars):  # what the model takes shapes the context
        model = rt.memory.notice("model", model_note(rt, await rt.catalog.current()))
        context = remake()
    context.remake = remake
    return fit(rt, context, tick)


def model_note(rt: TurnHost, caps: Capabilities) -> dict[str, Any]:
    """What the agent is told of the model in use (the content of its ``notice.model`` item):
    its name, its window, and the api-settings it set that this model does not get."""
    settings = rt.consciousness.api_settings
    probe = build_request(rt.model, "", [], settings, caps)
    return {"model": rt.model, "window_tokens": rt.catalog.window, "constrained": constrained(probe),
            "ignored_settings": ignored_settings(caps, settings, probe)}


def fit(rt: TurnHost, context: Context, tick: int | None = None) -> Context:
    """CONTEXT, compacted (its oldest blocks left to long-term memory) until the request it
    makes fits the model's window, by the calibrated estimate, with room for the answer.
    Each compaction is an event of TICK, the tick the context is for."""
    window = rt.catalog.window
    if window is None or context.remake is None or context.conversation is None:
        return context
    settings = rt.consciousness.api_settings
    # An OpenAI-compatible server's window holds the answer too: an eighth of it is kept for that.
    room = window - rt.catalog.answer_tokens(settings.max_tokens) if rt.backend_name == "openai" else window
    chars = len(rt.system_prompt())
    while rt.catalog.estimate(chars + request_chars({"messages": context.messages})) > room:
        if not context.conversation.compact(window):
            break
        remake = context.remake
        context = remake()
        context.remake = remake
        rt.transcript.write(ContextCompacted(squeeze=rt.conversation.squeeze, window=window, why="estimate"), tick=tick)
    return context


class ContextTooLong(AmacsError):
    """The model refused REQUEST as too long for its window (WINDOW tokens, when it said; the
    request's TOKENS, when it counted them)."""

    def __init__(self, message: str, request: dict[str, Any], window: int | None, tokens: int | None,
                 detail: str = "") -> None:
        super().__init__(message)
        self.request, self.window, self.tokens = request, window, tokens
        self.detail = detail or message  # the server's own words


async def infer_and_parse(rt: TurnHost, tick: int, user_message: Context) -> tuple[AgentResponse | None, bool]:
    """Infer and parse, retrying invalid JSON at most twice, then the fallback record.

    A request the model refuses as too long is compacted (its oldest blocks left to
    long-term memory) and sent again, at most MAX_COMPACTIONS times; refused still, or with
    nothing left to compact, the turn ends in one plain line, the input kept.
    Returns the response and whether its reply was already streamed to the shell.
    """
    stop = rt.world.budget_stop("the primary agent")  # the one ledger every agent is held to
    if stop is not None:
        rt.face.annotate(stop, "error")
        finish_unanswered(rt, tick, "budget limit reached")
        raise TurnAborted
    messages: list[dict[str, Any]] = list(user_message.messages)  # earlier ticks, then this one
    streamer = ReplyStreamer()
    compactions = 0
    last: ModelResult | None = None

    async def call() -> Answer:
        nonlocal streamer, messages, user_message, compactions, last
        streamer = ReplyStreamer()
        while True:
            try:
                last = await infer(rt, tick, messages, streamer, may_compact=compactions < MAX_COMPACTIONS)
                break
            except ContextTooLong as err:
                compactions += 1
                user_message = _compacted(rt, tick, user_message, err)
                messages = list(user_message.messages)
                streamer = ReplyStreamer()
        return Answer(last.text, last.stop_reason in CUT_REASONS)

    def rejected(attempt: int, text: str, err: ResponseFormatError, retry_prompt: str | None) -> None:
        if streamer.shown:
            rt.face.reply_abandon("cut off at the length limit" if isinstance(err, AnswerCut) else "not valid JSON")
        rt.transcript.write(ParseError(attempt=attempt, error=str(err)), tick=tick)
        if retry_prompt is None:
            return
        if isinstance(err, AnswerCut):
            rt.face.annotate(f"The model's answer was cut off at its length limit before its JSON ended; asking "
                             f"again for a shorter one ({attempt + 1}/{MAX_PARSE_RETRIES}).", "warning")
            text = cut_stand_in(text)
        else:
            rt.face.annotate(f"The model's response was not valid JSON ({err}); "
                             f"retrying ({attempt + 1}/{MAX_PARSE_RETRIES}).", "warning")
        messages.extend(({"role": "assistant", "content": text or "(empty)"},
                         {"role": "user", "content": notice_text(rt.memory, "retry", retry_prompt)}))

    parsed = await parse_with_retries(call, rejected)
    if parsed.fallback:
        rt.face.annotate(f"The model's response was still not valid JSON after {MAX_PARSE_RETRIES} "
                         f"retries; kept as an unparsed thought: {parsed.text[:300]!r}", "error")
    rt.transcript.write(Parsed(attempt=parsed.attempt, response=parsed.response.to_dict()), tick=tick)
    user_message.answered(parsed.text, last.assistant_content() if last is not None and last.thinking_blocks
                          else None)
    return parsed.response, bool(streamer.shown) and not parsed.fallback


MAX_COMPACTIONS = 3  # refusals as too long one call of a tick compacts for before the turn ends


def too_long_line(rt: TurnHost) -> str:
    """Why a turn ended on a context too long for the model, in one plain line."""
    window = rt.catalog.window
    return (f"the context is too long for {rt.model}'s window"
            f"{f' ({window:,} tokens)' if window else ''} even with its oldest part left to long-term memory: "
            "a shorter input, fewer MCP tools (mcp.json), or a model with a larger window will do")


def _compacted(rt: TurnHost, tick: int, context: Context, err: ContextTooLong) -> Context:
    """CONTEXT made again, compacted to fit the window the refusal ERR named (or the one a
    refusal that names none shows: below the request's tokens)."""
    if err.tokens:  # the server counted this request: the estimate learns from it
        rt.catalog.calibrate(request_chars(err.request), err.tokens)
    contradicted = rt.catalog.learn_refusal(TooLong(err.window, err.tokens),
                                            rt.catalog.estimate(request_chars(err.request)))
    if contradicted:
        rt.transcript.write(ModelAdapted(status=contradicted), tick=tick)
        rt.face.annotate(contradicted, "status")
    remake, conversation = context.remake, context.conversation
    if remake is None or conversation is None or not conversation.compact(rt.catalog.window):
        _failed(rt, tick, too_long_line(rt), detail=err.detail)
    assert remake is not None and conversation is not None
    window = rt.catalog.window
    rt.face.annotate(f"The context was too long for the model's window{f' ({window:,} tokens)' if window else ''}; "
                     "its oldest part is left to long-term memory and the model is asked again.", "status")
    rt.transcript.write(ContextCompacted(squeeze=conversation.squeeze, window=rt.catalog.window, why=err.detail), tick=tick)
    made = fit(rt, _again(remake), tick)
    return made


def _again(remake: Callable[[], Context]) -> Context:
    context = remake()
    context.remake = remake
    return context


def _failed(rt: TurnHost, tick: int, error: str, detail: str = "") -> NoReturn:
    rt.transcript.write(ModelError(error=error, detail=detail or None), tick=tick)
    rt.face.annotate(f"Model call failed: {error}. Your input is saved; send again to retry.", "error")
    finish_unanswered(rt, tick, error)
    raise TurnAborted


async def infer(rt: TurnHost, tick: int, messages: list[dict[str, Any]], streamer: ReplyStreamer, *,
                may_compact: bool = False) -> ModelResult:
    """Infer: one model call, its reply streamed to the shell, recorded with tokens, cost, latency.

    The request carries what the model accepts (its capabilities); a parameter it refuses
    is dropped and the call made again (:func:`call_adapting`).  A refusal as too long
    raises :class:`ContextTooLong` when MAY_COMPACT, else ends the turn."""
    if not rt.config.has_credentials:
        rt.face.annotate(rt.config.missing_key_message(), "error")
        finish_unanswered(rt, tick, "no API key")
        raise TurnAborted
    await rt.world.tools_ready()
    settings = rt.consciousness.api_settings
    system = rt.system_prompt()
    watched = bool(rt.world.compulsions_of(PRIMARY))  # a compulsion may hold the reply back: no streaming

    sent: list[dict[str, Any]] = []

    def build(caps: Capabilities) -> dict[str, Any]:
        request = build_request(rt.model, system, messages, settings, caps)
        sent.append(request)
        rt.transcript.write(ModelRequest(request=request, read=rt.memory.shown_ids, wrote=rt.memory.take_written()), tick=tick)
        return request

    def on_text(delta: str) -> None:
        gained = streamer.feed(delta)
        if gained:
            if faults.ARMED is not None and len(streamer.shown) == len(gained):  # the first text shown
                faults.point("infer.first-text")
                faults.point_later("infer.mid-stream", 0.2)
            rt.face.reply_delta(gained)

    def on_status(retry: Retrying) -> None:
        if streamer.shown:  # the stream restarts: what was shown will not be the reply
            rt.face.reply_abandon("the call is retried")
        streamer.raw = streamer.shown = ""
        rt.transcript.write(ModelRetry(status=retry.text, seconds=retry.seconds), tick=tick)
        rt.face.retrying(retry)

    def said(line: str) -> None:
        rt.transcript.write(ModelAdapted(status=line), tick=tick)
        rt.face.annotate(line, "status")

    async def complete(request: dict[str, Any]) -> ModelResult:
        faults.point("infer.request")
        return await rt.backend.complete(request, None if watched else on_text, on_status=on_status,
                                         on_thinking=rt.face.thinking_delta)

    try:
        result: ModelResult = await call_adapting(rt.catalog, build, complete, said, settings=settings,
                                                  chars=len(system) + request_chars({"messages": messages}))
    except InferenceError as err:
        refusal = too_long(err.detail, err.status)
        if refusal is not None and may_compact:
            raise ContextTooLong(str(err), sent[-1] if sent else {}, refusal.window, refusal.tokens,
                                 err.detail) from err
        if refusal is not None:
            _failed(rt, tick, too_long_line(rt), detail=err.detail)
        _failed(rt, tick, str(err))
    faults.point("infer.response")
    learned = rt.catalog.learn_from_cut(result)
    if learned:
        said(learned)
    rt.catalog.calibrate(request_chars(result.request), result.usage.input_tokens + result.usage.cache_read_tokens
                         + result.usage.cache_write_tokens)
    dollars = rt.charge(result.usage)
    rt.world.counted(rt.world.primary, result.usage, dollars or 0.0)
    rt.transcript.write(
        ModelResponse(raw=result.text, thinking=result.thinking, constrained=constrained(result.request), stop_reason=result.stop_reason, usage=result.usage.__dict__, cost=dollars, latency_ms=result.latency_ms),
        tick=tick,
    )
    return result


def record(rt: TurnHost, tick: int, response: AgentResponse, result: EvalResult) -> None:
    """Record: the monologue line and the scratchpad entry (files and items), the transcript event.

    The files are synced by the commit worker before the tick's commit (not here)."""
    with deferred_sync():
        line = rt.monologue.append(tick, rt.consciousness.current_time, response.monologue)
    rt.memory.add_monologue(tick, line)
    pad = response.scratchpad
    if pad is not None:
        try:
            with deferred_sync():
                rt.scratchpad.append(ScratchpadEntry(tick, pad.heading, pad.thread, pad.content))
        except PersistenceError as err:
            rt.face.annotate(f"Could not save the scratchpad note: {err.strerror}", "error")
        else:
            rt.memory.add_scratchpad(tick, " ".join(pad.heading.split()), pad.thread, pad.content.rstrip())
    rt.transcript.write(TickEnd(response=response.to_dict(), eval_result=result.to_dict(), wrote=rt.memory.take_written()), tick=tick)


def write_reply(rt: TurnHost, tick: int, reply: str, *, human_written: bool) -> None:
    """The agent's part of the chat (agent-chat.org and its memory item), written when it is
    said: a reply the person saw outlives a tick that dies afterwards.

    Not fsynced here (a killed process loses nothing the kernel has): the commit
    worker syncs the tick's files before its commit."""
    try:
        with deferred_sync():
            rt.chat_log.write_agent(tick, rt.consciousness.current_time, reply, with_heading=not human_written)
    except PersistenceError as err:
        rt.face.annotate(f"Could not save the reply of tick {tick}: {err.strerror}", "error")
    with rt.ltm.transaction():
        rt.memory.finish_chat(tick, reply)


def persist(rt: TurnHost, tick: int, response: AgentResponse, *, human_written: bool,
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
                rt.chat_log.write_agent(tick, rt.consciousness.current_time, reply, with_heading=not human_written)
            if evaluated is not None and response.eval is not None:
                rt.chat_log.write_eval(tick, ChatEval.of(response.eval, evaluated.success, evaluated.result,
                                                         evaluated.error))
            rt.save_consciousness()
    except PersistenceError as err:
        rt.face.annotate(f"Could not save tick {tick}: {err.strerror}", "error")
    with rt.ltm.transaction():
        if not reply_written:
            rt.memory.finish_chat(tick, reply)
        rt.memory.sync_state(rt.consciousness)


def finish_unanswered(rt: TurnHost, tick: int, reason: str) -> None:
    """A tick that ended without a response: the input stays, marked with REASON in memory
    and in agent-chat.org."""
    unanswered = rt.memory.pending_tick == tick
    with rt.ltm.transaction():
        if unanswered:
            rt.memory.finish_chat(tick, None, status=f"no reply: {reason}")
        rt.memory.sync_state(rt.consciousness)
    try:
        with deferred_sync():
            if unanswered:
                rt.chat_log.write_no_reply(reason)
            rt.save_consciousness()
    except PersistenceError as err:
        rt.face.annotate(f"Could not save state: {err.strerror}", "error")
    _commit(rt, commit_message(tick, rt.consciousness.active_thread, rt.consciousness.mood, f"(no response: {reason})"))


def commit(rt: TurnHost, tick: int, response: AgentResponse) -> None:
    """Commit: one git commit for the tick, made by the commit worker (the tick does not wait)."""
    c, done = rt.consciousness, rt.consciousness.last_eval_result
    _commit(rt, commit_message(tick, c.active_thread, response.mood, response.monologue, eval_form=response.eval,
                               eval_result=done.result if done else None, eval_error=done.error if done else None))


def _commit(rt: TurnHost, message: str) -> None:
    """Write the tick state that makes the tick restorable (persistence.history) and queue the
    tick's commit of the files as they are now, at its end (in order; a failure is shown as a
    warning when it happens)."""
    try:
        with deferred_sync():
            rt.save_tick_state()
    except PersistenceError as err:
        rt.face.annotate(f"Could not save the tick state (this tick cannot be rewound to): {err.strerror}",
                         "error")
    rt.commits.submit(rt.tracked_files(), message)
    rt.tell_ticked()
