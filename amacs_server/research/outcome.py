"""Whether a run's turns got the agent's reply, read from its transcripts; and why not, in words.

A run is ``done`` only when every turn of its script got the primary agent's
reply: a turn is the primary's ticks from a ``tick_start`` with the person's
input to the next one, and it is answered when one of its ``parsed`` responses
has a reply that was said (not a parse fallback, not held back by a
compulsion: ``reply_blocked``).  A turn that ended without one says why in its
own events: a ``model_error`` (the endpoint unreachable, the key refused), the
parse fallback (the reply never parsed), the budget (``budget_stop``, or a
``tick_start`` whose budget was already spent, after which the primary makes no
model call); the run itself may have been killed at its timeout or Emacs may
have exited with an error.  :func:`reason` words each of these the same way, so
runs that fail alike are counted alike (the experiment's early stop, its
summary, the report).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..records import (
    BudgetStop,
    Line,
    ModelError,
    ModelResponse,
    Parsed,
    ParseError,
    ReplyBlocked,
    TickStart,
    scan,
)

UNREACHABLE = "model endpoint unreachable"
KEY_REFUSED = "401: invalid API key"
NEVER_PARSED = "reply never parsed"
BUDGET = "budget spent"
_TRIED = re.compile(r"\(tried (\S+?)\)")
_EVENTS = (TickStart, Parsed, ReplyBlocked, ModelError, ParseError, BudgetStop, ModelResponse)


@dataclass
class Turn:
    """One turn of the primary as its transcript shows it."""

    human: str
    replied_in: set[int] = field(default_factory=set)  # ticks whose reply was said
    model_error: str | None = None
    fallback: bool = False
    budget: bool = False
    ticks: int = 0

    @property
    def replied(self) -> bool:
        """Whether some tick of the turn said a reply."""
        return bool(self.replied_in)


@dataclass(frozen=True)
class Verdict:
    """How many turns of the script got their reply, and for the first that did not, its number and why."""

    replied: int
    failed_turn: int | None
    reason: str | None


def model_error_words(error: str, base_url: str | None = None) -> str:
    """A model call's ERROR (the server's sentence) as the reason a run failed."""
    if "(401)" in error:
        return KEY_REFUSED
    if "cannot reach" in error:
        tried = _TRIED.search(error)
        where = tried.group(1) if tried else base_url
        return f"{UNREACHABLE}: {where}" if where else UNREACHABLE
    return f"model call failed: {error}"


def _events(home: Path) -> list[Line]:
    """The primary's lines of HOME's transcripts that tell a turn's outcome, in order."""
    return [line for line in scan(sorted((home / "transcripts").glob("*.jsonl")), *_EVENTS)
            if line.agent_type == "primary"]


def read_turns(home: Path) -> list[Turn]:
    """The primary's turns in HOME's transcripts, each with what happened in it."""
    turns: list[Turn] = []
    for line in _events(home):
        event, tick = line.event, line.tick
        if isinstance(event, TickStart) and event.human is not None:
            turns.append(Turn(human=str(event.human)))
        if not turns:
            continue
        turn = turns[-1]
        if isinstance(event, TickStart):
            turn.ticks += 1
            budget = (event.consciousness or {}).get("budget") or {}
            spent, limit = budget.get("cost_so_far"), budget.get("budget_limit")
            turn.budget = isinstance(spent, int | float) and isinstance(limit, int | float) and spent >= limit
        elif isinstance(event, ModelResponse):
            turn.budget = False  # the call was made: the budget did not stop this tick
        elif isinstance(event, Parsed):
            response = event.response or {}
            if response.get("fallback"):
                turn.fallback = True
            elif response.get("reply"):
                turn.replied_in.add(tick if isinstance(tick, int) else -1)
        elif isinstance(event, ReplyBlocked):
            turn.replied_in.discard(tick if isinstance(tick, int) else -1)
        elif isinstance(event, ModelError):
            turn.model_error = str(event.error or "")
        elif isinstance(event, BudgetStop):
            turn.budget = True
    return turns


def shell_error(shell: Path | None) -> str | None:
    """The last error the shell's text (the run's ``shell.txt``) said, as one line, if it said one."""
    try:
        text = shell.read_text(encoding="utf-8", errors="replace") if shell else ""
    except OSError:
        return None
    said = [line[3:].strip() for line in text.splitlines()
            if line.startswith(";; ") and any(w in line.lower() for w in ("error", "failed", "cannot", "refused"))]
    return " ".join(said[-1].split())[:200] if said else None


def reason(turn: Turn | None, base_url: str | None, killed: str | None, shell: Path | None = None) -> str:
    """Why TURN (None: the run never reached it) got no reply; KILLED: why the run was stopped, if it was;
    SHELL: the run's shell text, whose last error names a cause the transcript does not (an internal error)."""
    if turn is not None:
        if turn.model_error is not None:
            return model_error_words(turn.model_error, base_url)
        if turn.budget:
            return BUDGET
        if turn.fallback:
            return NEVER_PARSED
    if killed:
        return killed
    said = shell_error(shell)
    if turn is None:
        return "the turn was never sent" + (f": {said}" if said else "")
    return "the turn ended without a reply" + (f": {said}" if said else "")


def verdict(home: Path, n_turns: int, base_url: str | None, killed: str | None = None,
            shell: Path | None = None) -> Verdict:
    """Whether the N_TURNS turns of the script run in HOME each got the reply; KILLED, SHELL as in :func:`reason`."""
    turns = read_turns(home)
    replied = 0
    for n in range(n_turns):
        turn = turns[n] if n < len(turns) else None
        if turn is None or not turn.replied:
            return Verdict(replied, n + 1, reason(turn, base_url, killed, shell))
        replied += 1
    return Verdict(replied, None, killed)
