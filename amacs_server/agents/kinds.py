"""What an agent is, what state it is in, and how its last response ended.

String enums (as :class:`~amacs_server.memory.items.Kind` and ``Tier``): each member
is its value, so transcripts and what Emacs is sent carry the same strings as
before, and a string compares equal to its member.
"""

from __future__ import annotations

from contextvars import ContextVar
from enum import StrEnum

PRIMARY = "primary"  # the primary's agent id: the agent the person talks to in the shell


class AgentType(StrEnum):
    """The primary, or the template kind a subagent was made from."""

    PRIMARY = "primary"
    TASK = "task"
    VIEWPOINT = "viewpoint"
    COMPULSION = "compulsion"


class AgentState(StrEnum):
    """Where an agent is in its life; every state but IDLE and RUNNING is an end."""

    IDLE = "idle"  # waiting to be asked
    RUNNING = "running"  # answering
    PAUSED = "paused"  # shown only: an idle or running agent whose model calls wait until it is resumed
    DONE = "done"  # a task that answered
    FAILED = "failed"  # a task that raised
    STOPPED = "stopped"  # a task the budget stopped
    DISCARDED = "discarded"  # a viewpoint its caller discarded
    QUIT = "quit"  # a compulsion that quit
    INTERRUPTED = "interrupted"  # a task at work when C-c C-c (or Emacs gone) interrupted the session
    CANCELLED = "cancelled"  # cancelled by the person or an agent above it

    @property
    def live(self) -> bool:
        """Whether the agent may still be asked (idle or running)."""
        return self in (AgentState.IDLE, AgentState.RUNNING)


class Ending(StrEnum):
    """How an agent's last response ended (its ``status``)."""

    DONE = "done"  # its default action: for a subagent, its last reply is its answer
    QUIT = "quit"  # a compulsion quit during it
    STEP_LIMIT = "step-limit"  # it ran out of steps


def blocked_reason(compulsion: str, template: str, words: str) -> str:
    """What an agent is told of an action the compulsion (its id and TEMPLATE) blocked with WORDS."""
    return f"blocked by compulsion {compulsion} ({template}): {words}"


def is_blocked(error: str | None) -> bool:
    """Whether an action's ERROR is a compulsion's block (:func:`blocked_reason`)."""
    return error is not None and error.startswith("blocked by compulsion ")


# The command of the person's key (``eval-expression`` for M-:) that made the agent-function call
# now handled, outside any agent's eval; None in an agent's eval or in no call.  Such a call acts
# with the primary's rights, but the record names the person (:func:`acting`).  Set by the
# server's method gate (methods.by_no_eval) for the one call; a task the call starts runs without it.
PERSON_KEY: ContextVar[str | None] = ContextVar("amacs_person_key", default=None)


def acting(caller: str) -> str:
    """Who the record names for CALLER's act: the person and their key's command when a key of
    theirs made the call the primary's rights act on (M-: of agent-cancel), else CALLER."""
    command = PERSON_KEY.get()
    return f"the person ({command})" if caller == PRIMARY and command else caller
