"""Emacs as the loop's :class:`~amacs_server.face.Face`, over EPC."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import AmacsError
from ..inference.retry import Retrying
from ..state.consciousness import EvalResult, PersonDecision

if TYPE_CHECKING:
    from .server import AmacsEPCServer

log = logging.getLogger("amacs.face")

# How long past `amacs-eval-timeout' the server waits before it interrupts Emacs,
# and then how long it waits for Emacs to report the interrupted eval.
EVAL_GRACE_SECONDS = 1.0
EVAL_INTERRUPT_WAIT_SECONDS = 5.0
HYDRATE_TIMEOUT_SECONDS = 10.0
HOLD_POLL_SECONDS = 0.5
# Request ids are drawn at random from 1 .. Emacs's `most-positive-fixnum' (2^61 - 1 on a 64-bit
# build: 62-bit signed fixnums), so that an eval cannot name another eval by guessing its id, and
# Emacs still compares ids with `eq'.
MAX_REQUEST_ID = 2**61 - 1


def file_names(value: object) -> tuple[str, ...]:
    """The absolute file names in an eval reply's :files-read or :files-written, each once.

    Emacs sends a list of strings (nil, or no key, when there are none); anything
    else in it is dropped here, at the boundary."""
    if not isinstance(value, list):
        return ()
    return tuple(dict.fromkeys(v for v in value if isinstance(v, str) and os.path.isabs(v)))


def decisions(value: object) -> tuple[PersonDecision, ...]:
    """The person's decisions in an eval reply's :decisions: plists of :action, :target and
    :allowed (t, or :false); anything else in it is dropped here, at the boundary."""
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("action"), str):
            target = item.get("target")
            out.append(PersonDecision(item["action"], target if isinstance(target, str) else None,
                                      item.get("allowed") is True))
    return tuple(out)


class EmacsGone(AmacsError, RuntimeError):
    """No Emacs is connected to answer."""


# Every event the server sends Emacs, declared once with its fields (beside ``type``): the
# shell's, the hub's and amacs-eval.el's handlers read only these (tests/test_emacs_events.py).
# ``agents`` carries :meth:`~amacs_server.ledger.Ledger.spending`'s fields, ``tick`` the tick's and those too.
SPENDING = frozenset({"session", "spent", "budget_limit"})
EVENTS: dict[str, frozenset[str]] = {
    "reply": frozenset({"text", "streamed"}),
    "reply-delta": frozenset({"text"}),
    "thinking-delta": frozenset({"text"}),
    "reply-abandon": frozenset({"reason"}),
    "annotation": frozenset({"text", "kind"}),
    "retry": frozenset({"text", "seconds", "attempt", "attempts"}),
    "preparing": frozenset({"text"}),
    "agent-ended": frozenset({"id", "state", "ok", "text"}),
    "turn-start": frozenset(),
    "step": frozenset({"step", "limit"}),
    "turn-done": frozenset({"tick"}),
    "input-taken": frozenset({"saved"}),
    "agents": frozenset({"agents"}) | SPENDING,
    "tick": frozenset({"tick", "this_tick"}) | SPENDING,
    # Requests: Emacs answers each with ``emacs_reply`` and its ``id``.
    "eval": frozenset({"id", "form", "agent", "guard", "files"}),
    "hydrate": frozenset({"id", "buffers"}),
}


class EmacsFace:
    """Shows the loop's output in Emacs and has Emacs evaluate the agent's elisp."""

    def __init__(self, server: AmacsEPCServer) -> None:
        self.server = server
        self.loop: asyncio.AbstractEventLoop | None = None
        self.eval_timeout = 30.0
        # The person's `amacs-read-before-write', as Emacs said it outside any eval (hello, settings):
        # sent with each eval, so an eval that turns the variable off does not turn the guard off.
        self.read_before_write = False
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        # The agent each outstanding eval runs for: sent to Emacs and not yet answered (or given up).
        self._eval_agents: dict[int, str] = {}
        # Per request: when its time is up (loop time), or None while the person
        # decides whether the eval may run (`amacs-eval-confirm'); and its limit,
        # which starts again once they have decided.
        self._deadlines: dict[int, float | None] = {}
        self._limits: dict[int, float] = {}
        # The evals Emacs is running: it said it started each (`eval_started') and has not answered
        # it yet, oldest first, with the agent each runs for.  Kept on the EPC reader thread, in the
        # order Emacs sent its messages, so a call read between an eval's start and its answer was
        # sent while that eval ran (:meth:`running`).
        self._running_lock = threading.Lock()
        self._running: dict[int, str] = {}
        self._sent_agents: dict[int, str] = {}  # every eval sent and not answered, for `started'
        self._refused: dict[int, list[str]] = {}  # per running eval, the person's powers it was refused

    def _send(self, now: bool = False, **event: Any) -> bool:
        undeclared = set(event) - {"type"} - EVENTS.get(event["type"], frozenset())
        if undeclared or event["type"] not in EVENTS:  # a bug: Emacs's handlers read only what EVENTS declares
            log.error("an event Emacs's handlers do not know: %s %s", event["type"], sorted(undeclared))
        if not self.server.notify(event, now=now):
            log.info("no Emacs to show %s%s", event.get("type"), f": {event['text']}" if "text" in event else "")
            return False
        return True

    def reply(self, text: str, streamed: bool = False) -> None:
        """Show the agent's reply (or finish the streamed one)."""
        self._send(type="reply", text=text, streamed=streamed)

    def reply_delta(self, text: str, last: bool = False) -> None:
        """More of the reply, as it streams; LAST: the whole reply has streamed (sent at once)."""
        self._send(type="reply-delta", text=text, now=last)

    def thinking_delta(self, text: str) -> None:
        """More of the model's thinking, as it streams."""
        self._send(type="thinking-delta", text=text)

    def reply_abandon(self, reason: str) -> None:
        """Mark the streamed text as not the reply."""
        self._send(type="reply-abandon", reason=reason)

    def annotate(self, text: str, kind: str = "info") -> None:
        """Show a one-line note."""
        self._send(type="annotation", text=text, kind=kind)

    def retrying(self, retry: Retrying) -> None:
        """The model call is retried in RETRY.seconds (0: now)."""
        self._send(type="retry", text=retry.text, seconds=retry.seconds, attempt=retry.attempt,
                   attempts=retry.attempts)

    def preparing(self, text: str) -> None:
        """The header says what the turn waits on before its model call ("": the wait ended)."""
        self._send(type="preparing", text=text)

    def agent_ended(self, agent_id: str, state: str, ok: bool, text: str) -> bool:
        """A subagent ended: its id, its end state, whether it answered, and the line for people.
        Whether an Emacs was there to show it."""
        return self._send(type="agent-ended", id=agent_id, state=state, ok=ok, text=text)

    def turn_started(self) -> None:
        """The agent is working: the shell is busy."""
        self._send(type="turn-start")

    def step_started(self, step: int, limit: int) -> None:
        """The header says which tick of the step limit the turn is on."""
        self._send(type="step", step=step, limit=limit)

    def turn_done(self, tick: int) -> None:
        """Give the prompt back."""
        self._send(type="turn-done", tick=tick)

    def input_taken(self, saved: bool = True) -> None:
        """The agent took the person's oldest queued input; SAVED: it is in agent-chat.org."""
        self._send(type="input-taken", saved=saved)

    def agents(self, working: list[dict[str, Any]], spending: dict[str, Any]) -> None:
        """The subagents at work, one footer line each in the shell, and the spending so far."""
        self._send(type="agents", agents=working, **spending)

    def ticked(self, tick: int, usage: dict[str, Any]) -> None:
        """Tell Emacs a tick was committed, with the tick's and the session's usage and cost."""
        self._send(type="tick", tick=tick, **usage)

    def _new_id(self) -> int:
        """A request id no outstanding request has, unguessable (see :data:`MAX_REQUEST_ID`)."""
        while True:
            rid = secrets.randbelow(MAX_REQUEST_ID) + 1
            if rid not in self._pending:
                return rid

    async def _request(self, kind: str, payload: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send an event Emacs answers with ``emacs_reply``; None if no answer within TIMEOUT."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        rid = self._new_id()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending[rid] = future
        if kind == "eval":
            self._eval_agents[rid] = payload["agent"]
            with self._running_lock:
                self._sent_agents[rid] = payload["agent"]
        try:
            self._deadlines[rid] = loop.time() + timeout
            self._limits[rid] = timeout
            if not self.server.notify({"type": kind, "id": rid, **payload}):
                raise EmacsGone("Emacs is not connected")
            while True:
                deadline = self._deadlines.get(rid)
                wait = HOLD_POLL_SECONDS if deadline is None else deadline - loop.time()
                if wait <= 0:
                    break
                try:
                    return await asyncio.wait_for(asyncio.shield(future), wait)
                except TimeoutError:
                    continue
            if kind != "eval":
                return None
            self._interrupt_emacs()
            try:
                return {**await asyncio.wait_for(future, EVAL_INTERRUPT_WAIT_SECONDS), "timed_out": True}
            except TimeoutError:
                return None
        finally:
            self._pending.pop(rid, None)
            self._eval_agents.pop(rid, None)
            self._deadlines.pop(rid, None)
            self._limits.pop(rid, None)

    def agent_of_eval(self, eval_id: int) -> str | None:
        """The agent whose eval EVAL_ID is outstanding (sent to Emacs, not yet answered), or None.

        On the loop thread.  This record, not anything Emacs says, is who an agent
        function called from that eval acts as (docs/ARCHITECTURE.md, Agent and World)."""
        return self._eval_agents.get(eval_id)

    def evals_outstanding(self) -> bool:
        """Whether any eval is outstanding (on the loop thread)."""
        return bool(self._eval_agents)

    def started(self, rid: int) -> None:
        """From the EPC reader thread: Emacs begins to run eval RID (the person approved it, if asked)."""
        with self._running_lock:
            agent = self._sent_agents.get(rid)
            if agent is not None:
                self._running[rid] = agent

    def running(self) -> tuple[tuple[int, str], ...]:
        """The evals Emacs is running now, (id, agent), oldest first (any thread)."""
        with self._running_lock:
            return tuple(self._running.items())

    def call_read(self, method: str, person_only: bool) -> tuple[tuple[int, str], ...]:
        """From the EPC reader thread, as a call to METHOD is read: the evals running (:meth:`running`).
        A PERSON_ONLY method read while one runs is noted as refused in that eval's result, which
        is read after it: whatever road the call took, the agent sees it refused."""
        with self._running_lock:
            running = tuple(self._running.items())
            if person_only and running:
                rid, agent = running[-1]
                self._refused.setdefault(rid, []).append(
                    f"{method}: refused, it acts for the person and this call came from {agent}'s eval")
            return running

    def _answered(self, rid: int) -> list[str]:
        with self._running_lock:
            self._running.pop(rid, None)
            self._sent_agents.pop(rid, None)
            return self._refused.pop(rid, [])

    def hold(self, rid: int, holding: bool) -> None:
        """From an EPC thread: the person is deciding on eval RID (no time limit), or has decided."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._hold, rid, holding)

    def _hold(self, rid: int, holding: bool) -> None:
        if rid in self._deadlines:
            self._deadlines[rid] = None if holding else asyncio.get_running_loop().time() + self._limits[rid]

    async def evaluate(self, form: str, agent: str = "primary") -> EvalResult:
        """Send FORM to Emacs for AGENT and await its result, interrupting Emacs past the limit."""
        limit = self.eval_timeout + EVAL_GRACE_SECONDS
        try:
            reply = await self._request("eval", {"form": form, "agent": agent, "guard": self.read_before_write},
                                        limit)
        except EmacsGone:
            return EvalResult(False, error="Emacs is not connected; the eval was not run")
        if reply is None:
            return EvalResult(False, error="Emacs did not come back from the eval (it may bind inhibit-quit)")
        result = EvalResult(success=bool(reply.get("success")), result=reply.get("result"),
                            error=reply.get("error"), files_read=file_names(reply.get("files_read")),
                            files_written=file_names(reply.get("files_written")),
                            decisions=decisions(reply.get("decisions")),
                            refused=tuple(r for r in reply.get("refused") or () if isinstance(r, str)))
        if reply.get("timed_out") and not result.success:
            return replace(
                result,
                error=f"the eval ran past the time limit of {self.eval_timeout:g} s "
                f"(amacs-eval-timeout) and was stopped: {result.error}",
            )
        return result

    async def hydrate(self, buffers: list[str]) -> list[dict[str, Any]]:
        """Read BUFFERS from Emacs; a missing or failed answer is reported per buffer."""
        try:
            reply = await self._request("hydrate", {"buffers": buffers}, HYDRATE_TIMEOUT_SECONDS)
        except EmacsGone:
            return [{"name": b, "error": "Emacs is not connected"} for b in buffers]
        if reply is None:
            return [{"name": b, "error": "Emacs did not answer in time"} for b in buffers]
        entries = reply.get("buffers") or []
        return [e for e in entries if isinstance(e, dict)]

    def _interrupt_emacs(self) -> None:
        """SIGUSR1 makes the Emacs eval wrapper quit (see `amacs--eval-form')."""
        pid = self.server.emacs_pid
        if pid:
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError as err:
                log.warning("could not interrupt Emacs %s: %s", pid, err)

    def deliver(self, eid: int, result: dict[str, Any]) -> None:
        """Called from an EPC thread with Emacs's answer to request EID."""
        refused = self._answered(eid)
        loop = self.loop
        if loop is None or loop.is_closed():  # closed: the server is exiting, nobody waits
            return
        loop.call_soon_threadsafe(self._resolve, eid, {**result, "refused": refused} if refused else result)

    def _resolve(self, eid: int, result: dict[str, Any]) -> None:
        future = self._pending.get(eid)
        if future is not None and not future.done():
            future.set_result(result)

    def fail_all(self, message: str) -> None:
        """Emacs went away: every waiting eval gets MESSAGE as its error."""
        with self._running_lock:
            self._running.clear()
            self._sent_agents.clear()
            self._refused.clear()
        loop = self.loop
        if loop is None or loop.is_closed():  # closed: the server is exiting, nobody waits
            return
        for eid in list(self._pending):
            loop.call_soon_threadsafe(self._resolve, eid, {"success": False, "error": message})
