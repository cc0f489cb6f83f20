"""Emacs as every agent sees it: a face to show things and hands to evaluate elisp.

:class:`Face` is a Protocol; ``transport.emacs_face`` is the one over EPC."""

from __future__ import annotations

from typing import Any, Protocol

from .inference.retry import Retrying
from .state.consciousness import EvalResult


class Face(Protocol):
    """Emacs as the loop sees it.  Every method returns at once except :meth:`evaluate`."""

    def reply(self, text: str, streamed: bool = False) -> None:
        """Show the agent's reply; STREAMED: its text was already sent as deltas."""

    def reply_delta(self, text: str, last: bool = False) -> None:
        """Show more of the reply as it streams in; LAST: the reply's text is complete with TEXT
        (which may be empty), and what of it waits is shown now."""

    def thinking_delta(self, text: str) -> None:
        """Show more of the model's thinking as it streams (a folded line above the reply)."""

    def reply_abandon(self, reason: str) -> None:
        """The streamed text will not be the reply (invalid JSON, a retry): mark it."""

    def annotate(self, text: str, kind: str = "info") -> None:
        """Show a one-line note (``info``, ``warning``, ``error``) in the shell.

        A note is for people: Emacs shows it and decides nothing from its words.
        What Emacs acts on comes as an event of its own, with fields."""

    def retrying(self, retry: Retrying) -> None:
        """The model call failed and is retried (the header counts down RETRY.seconds)."""

    def preparing(self, text: str) -> None:
        """The turn waits on TEXT before its model call (the header says so); "": it no longer does."""

    def agent_ended(self, agent_id: str, state: str, ok: bool, text: str) -> bool:
        """Subagent AGENT_ID ended in STATE (OK: it answered); TEXT says so to people.

        The primary waiting for it has one fewer to wait for.  Returns whether a person
        was there to be shown it (an Emacs connected)."""

    def turn_started(self) -> None:
        """The agent started working (on input, or woken by events)."""

    def step_started(self, step: int, limit: int) -> None:
        """The turn's STEP-th tick (from 1) began, of at most LIMIT (the step limit)."""

    def turn_done(self, tick: int) -> None:
        """The agent now waits for the person: show the prompt again."""

    def input_taken(self, saved: bool = True) -> None:
        """The agent took the oldest input the person sent (it was queued until now).

        SAVED: it is in agent-chat.org, synced (a turn's input: called only after
        the write-ahead, so the shell may say it is saved); False: it
        is not (it went to an agent that asked the person, as an event, or it
        could not be written)."""

    def agents(self, working: list[dict[str, Any]], spending: dict[str, Any]) -> None:
        """The subagents at work now (id, type, template, state, doing), for one line each, and
        the SPENDING so far (:meth:`~amacs_server.ledger.Ledger.spending`): subagents spend
        between ticks."""

    def ticked(self, tick: int, usage: dict[str, Any]) -> None:
        """A tick was committed, with its USAGE and the session's: views may refresh."""

    async def evaluate(self, form: str, agent: str = "primary") -> EvalResult:
        """Have Emacs read and evaluate FORM for AGENT; errors come back as data."""

    async def hydrate(self, buffers: list[str]) -> list[dict[str, Any]]:
        """Read BUFFERS (names or files) from Emacs: name, mode, content, or an error each."""
