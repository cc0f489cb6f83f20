"""``agent-history-search``: the agent asks its own history when it last touched something.

It reads persistence.history_search, without shelling out to git."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt

from ..arguments import Options, Text, checked
from ..mind import Mind
from ..persistence.history_search import SOURCES, HistorySearchError, search
from .kit import Takes, refusals

TAKES: Takes = ("mind",)  # the history is the mind's
Source = Literal["subject", "monologue", "diff"]


class HistoryOptions(Options):
    """``agent-history-search``'s options."""

    tick: PositiveInt | None = None
    limit: int = Field(default=20, ge=1, le=200)
    only: list[Source] | None = None


@checked(1, "agent-history-search")
@refusals(HistorySearchError)
def history_search(mind: Mind, query: Text, opts: HistoryOptions | None = None) -> list[dict[str, Any]]:
    """The lines of the history holding QUERY (commit subjects, monologue lines, diffs), newest
    tick first: (:tick N :in SOURCE :line TEXT [:file F]).  Options :tick (that tick only),
    :limit (20), :only (a list of sources).  Runs on the caller's thread: it reads git."""
    o = opts or HistoryOptions()
    mind.commits.flush(2)  # the ticks just made are in the history searched
    sources = tuple(o.only) if o.only else SOURCES
    return [hit.to_dict() for hit in search(mind.home, query, tick=o.tick, limit=o.limit, sources=sources)]
