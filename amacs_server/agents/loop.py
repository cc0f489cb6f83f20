"""One loop for every agent (docs/ARCHITECTURE.md, The one loop).

    observe -> (compulsions) -> infer -> parse -> (compulsions) -> act -> record

step after step, until the agent's default action or its step limit.  The
rules live here, once, for the primary, tasks, viewpoints and compulsions:

- a halted agent (C-c C-c, Emacs gone) takes no further step;
- its compulsions see the last result before each model call, and every action
  before it happens: the reply to its interlocutor as well as an eval; a blocked
  action is not done, and the agent hears why;
- an eval outside its allowed actions is an error result, never dropped;
- running out of steps is said (status ``step-limit``).

What differs between agents is a :class:`Body`: how it observes and calls the
model (the primary streams its reply to the shell and builds its context from
memory; a subagent keeps its own messages), who hears its reply, what it
records (the primary: a tick of org files, memory and git), and its default
action (the primary: request input, so the turn ends; a subagent: done).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from ..agents.kinds import Ending
from ..inference.parse import AgentResponse
from ..inference.retry import new_turn
from ..records import Eval, EvalResultRecord, Record, Refused, ReplyBlocked
from ..state.consciousness import EvalResult


class Watchers(Protocol):
    """The compulsions attached to agents, as the loop consults them (the World)."""

    def compulsions_of(self, agent_id: str) -> Sequence[object]:
        """The compulsions watching AGENT_ID."""

    async def before_model_call(self, agent_id: str, last: str) -> None:
        """Each compulsion sees LAST; its notes become events for the agent."""

    async def before_action(self, agent_id: str, form: str, kind: str = "eval") -> str | None:
        """Each compulsion sees the action; the first non-empty answer blocks it (the reason)."""


@dataclass(frozen=True)
class Outcome:
    """How an agent's run ended: its last response, and ``done``, ``quit`` or ``step-limit``."""

    response: AgentResponse | None
    status: Ending


class Body(Protocol):
    """One agent as the loop drives it."""

    id: str
    allowed: frozenset[str] | None  # None: every action (the primary)
    max_steps: int

    def halted(self) -> bool:
        """True when the agent must take no further step."""

    def begin_step(self, step: int) -> None:
        """A step starts (the primary: a tick, the person's input written ahead)."""

    def last_result(self, step: int) -> str | None:
        """What the compulsions see before the model call (None: nothing new)."""

    async def infer(self) -> AgentResponse | None:
        """Observe, call the model and parse its answer (None: the step ends without one)."""

    async def say(self, response: AgentResponse) -> None:
        """Give the reply to the agent's interlocutor."""

    async def evaluate(self, form: str) -> EvalResult:
        """Have Emacs evaluate FORM for this agent."""

    def note(self, event: Record) -> None:
        """Write EVENT to the agent's transcript."""

    def record(self, response: AgentResponse, result: EvalResult) -> None:
        """The step is done: keep RESPONSE and RESULT (a blocked reply comes without its text)."""

    async def after_eval(self) -> bool:
        """Sleep on a wait the eval registered, take events; False: the agent quit."""

    async def default_action(self, response: AgentResponse) -> bool:
        """RESPONSE had no eval: do the default action; True when the run ends with it."""

    def interrupted(self) -> None:
        """The step was cancelled: record it as interrupted."""

    def out_of_steps(self) -> None:
        """The step limit is reached."""


async def run_agent(body: Body, world: Watchers) -> Outcome:
    """Drive BODY until its default action ends the run, it quits, or its step limit.
    Its model calls share one turn's retries (:func:`~amacs_server.inference.retry.new_turn`)."""
    new_turn()
    last: AgentResponse | None = None
    for step in range(body.max_steps):
        if body.halted():  # interrupted, or Emacs gone: a cancel lost in a wait_for ends here
            if step > 0:  # the cancel was lost in the last tick's after-eval wait: that tick is the interrupted one
                body.interrupted()
            raise asyncio.CancelledError("halted")
        body.begin_step(step)
        try:
            seen = body.last_result(step) if world.compulsions_of(body.id) else None  # built only when watched
            if seen is not None:
                await world.before_model_call(body.id, seen)
            response = await body.infer()
            if response is None:
                return Outcome(None, Ending.DONE)
            last = response
            result, reply_held = await act(body, world, response)
        except asyncio.CancelledError:
            body.interrupted()
            raise
        body.record(replace(response, reply=None) if reply_held else response, result)
        if response.eval is None and not reply_held:
            if await body.default_action(response):
                return Outcome(response, Ending.DONE)
            continue
        if response.eval is not None:
            try:
                going_on = await body.after_eval()
            except asyncio.CancelledError:  # stopped while it slept on a wait: that tick is the interrupted one
                body.interrupted()
                raise
            if not going_on:
                return Outcome(response, Ending.QUIT)
    body.out_of_steps()
    return Outcome(last, Ending.STEP_LIMIT)


async def act(body: Body, world: Watchers, response: AgentResponse) -> tuple[EvalResult, bool]:
    """Act on RESPONSE: its reply, then its eval, each past the compulsions.

    Returns the result the agent hears next, and whether its reply was held back."""
    watched = bool(world.compulsions_of(body.id))
    if response.reply:
        held = await world.before_action(body.id, response.reply, kind="reply") if watched else None
        if held:
            body.note(ReplyBlocked(reply=response.reply, reason=held))
            return EvalResult(False, error=f"your reply was not delivered: {held}"), True
        await body.say(response)
    if response.eval is None:
        return EvalResult.skipped_result(), False
    body.note(Eval(form=response.eval))
    if body.allowed is not None and "eval" not in body.allowed:
        body.note(Refused(action="eval", form=response.eval))
        result = EvalResult(False, error=(f"eval is not among your allowed actions "
                                          f"({', '.join(sorted(body.allowed))}); it was not run"))
    else:
        blocked = await world.before_action(body.id, response.eval) if watched else None
        result = EvalResult(False, error=blocked) if blocked else await body.evaluate(response.eval)
    body.note(EvalResultRecord(result.to_dict()))
    return result, False
