"""Brain tools for memory (docs/ARCHITECTURE.md, Memory and MemIds), as the agent's elisp calls them.

Each validates its arguments strictly, fails with a message the agent sees as
its eval error, and echoes the resolved MemId and version.

Each acts in the RAM of the agent whose eval calls it: Emacs sends
the eval's id and the server's record of that eval names the agent, as for the
agent tools (:func:`~amacs_server.tools.agents.acting_as_its_eval`; the forms
in :data:`TOOLS`).  The primary's RAM is the mind's; a subagent's is its own
(:func:`memory_of`).  Search and load reach every brain's items in the shared
long-term memory.  ``memory_create`` and the others act as the person (the
primary), as a call outside any eval does.

Each call is an event in the caller's transcript (``memory_create``, ...,
``memory_search``) listing the MemIds it read and wrote (``read``, ``wrote``,
and both in ``mem_ids``), or the error and the MemId it named.

``memory_load`` pages long texts: ``:offset`` and ``:limit`` (characters, by
default 0 and :data:`~.items.DEFAULT_PAGE_CHARS`, at most
:data:`~.items.MAX_PAGE_CHARS`) choose the part returned (and shown in
``<memory>``); the answer has ``total_chars`` always and, for a part,
``offset``, ``limit`` and ``next_offset`` (nil after the last part).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PlainValidator

from ..agents.kinds import PRIMARY
from ..agents.world import AgentWorld
from ..arguments import Options, Strings, Text, checked
from ..memory.active import STATE_TIERS, ActiveMemory, MemoryRefused
from ..memory.items import DEFAULT_PAGE_CHARS, MAX_PAGE_CHARS, Kind, MemoryItem, Tier, long_text
from ..memory.ltm import LtmError
from ..memory.memid import NAME, MemId, MemIdError
from ..mind import Mind
from ..persistence.scratchpad import ScratchpadEntry
from ..records import MEMORY_CALLS
from ..state.consciousness import ConsciousnessError
from .kit import Takes, ToolError, ToolHost, refusals

CREATABLE_KINDS = {"note": Kind.NOTE, "summary": Kind.SUMMARY}
MAX_CONTENT_CHARS = 100_000
TAKES: Takes = ("host",)  # the mind, the World (who calls, and its RAM) and the transcript
_refusals = refusals(MemoryRefused, LtmError, ConsciousnessError)
Operation = Callable[..., Any]  # (MIND MEMORY ARGS...): one brain tool acting in MEMORY


def memory_of(mind: Mind, world: AgentWorld, agent_id: str) -> ActiveMemory:
    """The RAM of AGENT_ID: the mind's for the primary, the subagent's own otherwise (one of
    WORLD's, made empty at its first memory call)."""
    if agent_id == PRIMARY:
        return mind.memory
    agent = world.agents.get(agent_id)
    if agent is None:
        raise MemoryRefused(f"{agent_id} is not an agent of this session")
    if agent.memory is None:
        agent.memory = ActiveMemory.for_subagent(mind.ltm, mind.memory.agent, agent.id)
    return agent.memory


def _mem_id(value: object) -> MemId:
    if not isinstance(value, str):
        raise ValueError(f"must be a MemId string (AGENT:BRAIN:NAME, in <EOT>s or not), got {value!r}")
    return MemId.given(value)  # a MemIdError is a ValueError: its message is the refusal


def _content(value: object) -> object:
    if value is None:
        raise ValueError("is required (a string or data)")
    size = len(value) if isinstance(value, str) else len(repr(value))
    if size > MAX_CONTENT_CHARS:
        raise ValueError(f"is {size} characters; the limit is {MAX_CONTENT_CHARS}")
    return value


def _tags(tags: list[str] | None) -> tuple[str, ...]:
    return tuple(sorted(set(tags or ())))


MemIdArg = Annotated[MemId, PlainValidator(_mem_id)]
Content = Annotated[object, AfterValidator(_content)]
"""What an item holds: a string, or elisp data (at most :data:`MAX_CONTENT_CHARS` printed)."""


class CreateOptions(Options):
    """``agent-memory-create``'s options."""

    kind: Literal["note", "summary"] = "note"
    tags: Strings | None = None


class LoadOptions(Options):
    """``agent-memory-load``'s options: a version, and the part of a long text (in characters)."""

    version: Annotated[int, Field(ge=1)] | None = None
    offset: Annotated[int, Field(ge=0)] = 0
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE_CHARS)] = DEFAULT_PAGE_CHARS


class SearchOptions(Options):
    """``agent-memory-search``'s options."""

    limit: int = 10
    tags: Strings | None = None
    mode: str = "keyword"


def _echo(item: MemoryItem, **extra: object) -> dict[str, Any]:
    return {"mem_id": item.mem_id.format(), "version": item.version, "tier": item.tier.value,
            "kind": item.kind.value, **extra}


@checked(2, "memory-create")
def create(_mind: Mind, memory: ActiveMemory, name: str, content: Content,
           opts: CreateOptions | None = None) -> dict[str, Any]:
    """Create a RAM item NAME holding CONTENT (options :kind, :tags); it is pinned."""
    try:
        NAME.check(name, name)
    except MemIdError as err:
        raise ToolError(str(err)) from err
    o = opts or CreateOptions()
    before = memory.ltm.latest_version(memory.mem_id(name).base)
    item = memory.create_note(name, content, CREATABLE_KINDS[o.kind], _tags(o.tags))
    return _echo(item) if before is None else _echo(item, previous_version=before)


@checked(2, "memory-mutate")
def mutate(mind: Mind, memory: ActiveMemory, mem_id: MemIdArg, content: Content) -> dict[str, Any]:
    """Write CONTENT as the next version of MEM_ID (items shown ``mutable``).  A scratchpad
    entry takes a string (its text) or a plist of :heading, :thread and :content, and is
    rewritten in scratchpad.org too."""
    target, value = mem_id, content
    if memory is mind.memory and memory.owns(target) and STATE_TIERS.get(target.name) is Tier.RAM:
        before = memory.state[target.name].version
        mind.agent_set(target.name, value)  # validates, then versions the state item
        item = memory.state[target.name]
        return _echo(item, previous_version=before)
    previous = memory.ltm.latest_version(target.base)

    def write_scratchpad(tick: int, entry: dict[str, Any]) -> None:
        mind.scratchpad.replace(ScratchpadEntry(tick, entry["heading"], entry["thread"], entry["content"]))

    item = memory.mutate(target, value, write_scratchpad if memory is mind.memory else None)
    return _echo(item, previous_version=previous)


@checked(2, "memory-evict")
def evict(_mind: Mind, memory: ActiveMemory, mem_id: MemIdArg) -> dict[str, Any]:
    """Move MEM_ID out of active memory; a handle stays (RAM only)."""
    handle = memory.evict(mem_id)
    return {"mem_id": handle.mem_id.format(), "version": handle.version, "evicted": True,
            "handle": handle.content}


def _loaded(item: MemoryItem, section: str) -> dict[str, Any]:
    """What load answers: the item's address and flags, where it shows, its length, the part."""
    out = _echo(item, mutable=item.mutable, evictable=item.evictable, created_at_ms=item.created_at_ms,
                section=section)
    if item.page is not None:  # the part, as the contract shows it (total_chars first, as for a whole text)
        out["total_chars"] = item.page.total_chars
        out.update(item.page.to_dict())
    else:
        out["total_chars"] = len(long_text(item)[1])
    out["content"] = item.content
    return out


@checked(2, "memory-load")
def load(_mind: Mind, memory: ActiveMemory, mem_id: MemIdArg, opts: LoadOptions | None = None) -> dict[str, Any]:
    """Bring MEM_ID (latest, or its version, or :version) into active memory; return it
    (options :version, and :offset and :limit, in characters, to page a long text).
    Any brain's item may be loaded: long-term memory is shared."""
    o = opts or LoadOptions()
    target = mem_id
    if o.version is not None:
        if target.version is not None and target.version != o.version:
            raise ToolError(f"{target} names version {target.version} but :version is {o.version}")
        target = target.at(o.version)
    item = memory.load(target, o.offset, o.limit)
    return _loaded(item, memory.shown_in(target) or "memory")


@checked(2, "memory-search")
def search(_mind: Mind, memory: ActiveMemory, query: Text,
           opts: SearchOptions | None = None) -> list[dict[str, Any]] | dict[str, Any]:
    """Ranked keyword search over every version in long-term memory, of every brain of this
    agent (options :limit :tags :mode): one hit per item, its newest matching version (with
    :latest N when a newer one does not match).  :mode "vector" has no index here: it falls back to
    keyword search and says so (a plist with :fallback and :hits)."""
    o = opts or SearchOptions()
    mode = "keyword" if o.mode == "vector" else o.mode
    hits = [h.to_dict() for h in memory.ltm.search(query, limit=o.limit, tags=_tags(o.tags), mode=mode,
                                                   agent_brain=memory.agent)]
    if o.mode == "vector":
        return {"fallback": "vector search has no index here: these are keyword search's hits", "mode": "keyword",
                "hits": hits}
    return hits


def _read(op: str, result: Any) -> list[str]:
    """The MemIds (with versions) operation OP read, from its RESULT."""
    if op == "search":
        return [h["mem_id"] for h in (result["hits"] if isinstance(result, dict) else result)]
    if op == "mutate":
        previous = result.get("previous_version")
        return [MemId.parse(result["mem_id"]).at(previous).format()] if previous else []
    if op == "create":
        return []
    return [result["mem_id"]]  # load, evict: the version brought in or taken out


def _record(host: ToolHost, caller: str, op: Operation, args: tuple[Any, ...]) -> Any:
    """Run OP with ARGS in CALLER's RAM, and write it to CALLER's transcript with the MemIds it
    read and wrote (or its error and the MemId it named)."""
    name = op.__name__
    agent = host.world.identity(caller)
    tick = host.mind.consciousness.current_tick if caller == PRIMARY else None
    memory: ActiveMemory | None = None
    try:
        memory = _refusals(memory_of)(host.mind, host.world, caller)
        mark = len(memory.written)
        result = _refusals(op)(host.mind, memory, *args)
    except ToolError as err:
        named = [a for a in args[:1] if isinstance(a, str) and name != "search"]
        host.transcript.write(MEMORY_CALLS[name](mem_ids=named, error=str(err)), tick=tick, agent=agent)
        raise
    read, wrote = _read(name, result), memory.take_written(mark)
    host.transcript.write(MEMORY_CALLS[name](mem_ids=[*read, *wrote], read=read, wrote=wrote), tick=tick, agent=agent)
    return result


def acting_as_the_primary(op: Operation) -> Callable[..., Any]:
    """OP as (HOST ARGS...), in the primary's RAM: the person's call, outside any eval."""

    def tool(host: ToolHost, *args: Any) -> Any:
        return _record(host, PRIMARY, op, args)

    tool.__name__, tool.__doc__ = f"memory_{op.__name__}", op.__doc__
    return tool


def acting_in_callers_brain(op: Operation) -> Callable[..., Any]:
    """OP as :func:`~amacs_server.tools.agents.acting_as_its_eval` calls it,
    (HOST CALLER EVAL-ID ARGS...): in CALLER's RAM."""

    def tool(host: ToolHost, caller: str, _eval: int | None, *args: Any) -> Any:
        return _record(host, caller, op, args)

    tool.__name__, tool.__doc__ = f"memory_{op.__name__}", op.__doc__
    return tool


OPERATIONS: dict[str, Operation] = {"memory_create": create, "memory_mutate": mutate, "memory_evict": evict,
                                    "memory_load": load, "memory_search": search}
TOOLS: dict[str, Callable[..., Any]] = {name: acting_in_callers_brain(op) for name, op in OPERATIONS.items()}
memory_create = acting_as_the_primary(create)
memory_mutate = acting_as_the_primary(mutate)
memory_evict = acting_as_the_primary(evict)
memory_load = acting_as_the_primary(load)
memory_search = acting_as_the_primary(search)
