"""The budget limit the person set: theirs, not the mind's past.

``consciousness.el`` holds the limit the mind's budget item shows, and a rewind returns it to
tick N's with the rest of the mind: the requests from there are the ones the mind made then
(as for the money spent: :mod:`.rewound_spend`).  The limit the budget enforces and the
person's views show is the one the person set last (``M-x amacs-set-budget``): kept in
``budget-limit`` (git ignores it, so no rewind restores an older one), carried over by a
rewind and given to a fork."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from ..files import atomic_write
from ..state.consciousness import Consciousness, ConsciousnessError

log = logging.getLogger("amacs.budget")

BUDGET_LIMIT = "budget-limit"


def read(home: Path) -> float | None:
    """The limit the person set for HOME (None when none was, or the file is unreadable: logged)."""
    try:
        text = (home / BUDGET_LIMIT).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except OSError as err:
        log.warning("could not read %s: %s; the limit is consciousness.el's", home / BUDGET_LIMIT, err)
        return None
    try:
        value = float(text)
    except ValueError:
        log.warning("%s holds %r, not a number; the limit is consciousness.el's", home / BUDGET_LIMIT, text[:40])
        return None
    return value if value >= 0 and math.isfinite(value) else None


def write(home: Path, dollars: float) -> None:
    """Record DOLLARS as the limit the person set for HOME (atomically)."""
    atomic_write(home / BUDGET_LIMIT, f"{dollars:.6f}\n")


def current(home: Path) -> float | None:
    """HOME's limit now: the person's, else consciousness.el's (None when neither can be read)."""
    mine = read(home)
    if mine is not None:
        return mine
    try:
        return Consciousness.from_elisp((home / "consciousness.el").read_text(encoding="utf-8")).budget.budget_limit
    except (OSError, ConsciousnessError, ValueError):
        return None
