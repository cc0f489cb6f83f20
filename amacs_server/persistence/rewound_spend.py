"""The money spent on futures a rewind abandoned: counted against the budget for ever.

A rewind returns the mind to tick N, its budget item with it: the agent's requests from there
are the ones it made then.  The dollars spent after tick N were still paid, so the home keeps
their sum in ``rewound-spend`` (one number; git ignores it, so no rewind restores it), and the
budget's check and the person's views count it on top of the mind's figure."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from ..files import atomic_write
from ..state.consciousness import Consciousness, ConsciousnessError

log = logging.getLogger("amacs.budget")

REWOUND_SPEND = "rewound-spend"


def read(home: Path) -> float:
    """The dollars HOME's rewinds abandoned (0 when none did, or the file is unreadable: logged)."""
    try:
        text = (home / REWOUND_SPEND).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return 0.0
    except OSError as err:
        log.warning("could not read %s: %s; counting no abandoned spend", home / REWOUND_SPEND, err)
        return 0.0
    try:
        value = float(text)
    except ValueError:
        log.warning("%s holds %r, not a number; counting no abandoned spend", home / REWOUND_SPEND, text[:40])
        return 0.0
    return value if value > 0 and math.isfinite(value) else 0.0


def write(home: Path, dollars: float) -> None:
    """Record DOLLARS as HOME's abandoned spend (atomically)."""
    atomic_write(home / REWOUND_SPEND, f"{dollars:.6f}\n")


def mind_spent(home: Path) -> float:
    """The dollars HOME's consciousness.el says its mind spent (0 when it is missing or unreadable)."""
    try:
        return Consciousness.from_elisp((home / "consciousness.el").read_text(encoding="utf-8")).budget.cost_so_far
    except (OSError, ConsciousnessError, ValueError):
        return 0.0


def total(home: Path) -> float:
    """The dollars HOME's budget counts, from its files: the mind's figure and the abandoned spend."""
    return mind_spent(home) + read(home)


def keep(home: Path, before: float, mind: float) -> float:
    """After a rewind of HOME: the abandoned spend raised so that the budget counts at least
    BEFORE (what it counted before the rewind) again, MIND being the mind's figure now; returns
    the abandoned spend."""
    abandoned = read(home)
    missing = before - (mind + abandoned)
    if missing > 0:
        abandoned += missing
        write(home, abandoned)
    return abandoned
