"""Brain tools for memory (memid-active-memory.md, Phase 3), as the agent's elisp calls them.

Each validates its arguments strictly, fails with a message the agent sees as
its eval error, and echoes the resolved MemId and version.

Each acts in the RAM of the agent whose eval calls it (issue 11): Emacs sends
the eval's id and the server's record of that eval names the agent, as for the
agent tools (:func:`~amacs_server.agents.tools.acting_as_its_eval`; the forms
in :data:`TOOLS`).  The primary's RAM is the runtime's; a subagent's is its own
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
from typing import TYPE_CHECKING, Any

from ..agents.world import PRIMARY
from ..persistence.scratchpad import ScratchpadEntry
from ..state.consciousness import ConsciousnessError
from ..toolkit import ToolError, options, refusals
from .active import STATE_TIERS, ActiveMemory, MemoryRefused
from .items import DEFAULT_PAGE_CHARS, MAX_PAGE_CHARS, Kind, MemoryItem, Tier, long_text
from .ltm import LtmError
from .memid import NAME, MemId, MemIdError

if TYPE_CHECKING:
    from ..runtime import Runtime

CREATABLE_KINDS = {"note": Kind.NOTE, "summary": Kind.NOTE}
MAX_CONTENT_CHARS = 100_000
_refusals = refusals(MemoryRefused, LtmError, ConsciousnessError)
Operation = Callable[..., Any]  # (RT MEMORY ARGS...): one brain tool acting in MEMORY


def memory_of(rt: Runtime, agent_id: str) -> ActiveMemory:
    """The RAM of AGENT_ID: the runtime's for the primary, the subagent's own otherwise
    (made empty at its first memory call)."""
    if agent_id == PRIMARY:
        return rt.memory
    agent = rt.world.agents.get(agent_id)
    if agent is None:
        raise MemoryRefused(f"{agent_id} is not an agent of this session")
    if agent.memory is None:
        agent.memory = ActiveMemory.for_subagent(rt.ltm, rt.memory.agent, agent.id)
    return agent.memory


def _mem_id(value: Any) -> MemId:
    if not isinstance(value, str):
        raise ToolError(f"a MemId string is required, got {value!r}")
    try:
        return MemId.parse(value)
    except MemIdError as err:
        raise ToolError(str(err)) from err


def _content(value: Any) -> Any:
    if value is None:
        raise ToolError("content is required (a string or data)")
    size = len(value) if isinstance(value, str) else len(repr(value))
    if size > MAX_CONTENT_CHARS:
        raise ToolError(f"content is {size} characters; the limit is {MAX_CONTENT_CHARS}")
    return value


def _tags(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    tags = [value] if isinstance(value, str) else value
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise ToolError(f":tags must be a string or a list of strings, got {value!r}")
    return tuple(sorted(set(tags)))


def _echo(item: Any, **extra: Any) -> dict[str, Any]:
    return {"mem_id": item.mem_id.format(), "version": item.version, "tier": item.tier.value,
            "kind": item.kind.value, **extra}


def create(rt: Runtime, memory: ActiveMemory, name: Any, content: Any, opts_in: Any = None) -> dict[str, Any]:
    """Create a RAM item NAME holding CONTENT (options :kind, :tags); it is pinned."""
    if not isinstance(name, str):
        raise ToolError(f"name must be a string, got {name!r}")
    try:
        NAME.check(name, name)
    except MemIdError as err:
        raise ToolError(str(err)) from err
    opts = options(opts_in, {"kind", "tags"})
    kind_name = opts.get("kind") or "note"
    if kind_name not in CREATABLE_KINDS:
        raise ToolError(f":kind must be one of {', '.join(sorted(CREATABLE_KINDS))}, got {kind_name!r}")
    before = memory.ltm.latest_version(memory.mem_id(name).base)
    item = memory.create_note(name, _content(content), CREATABLE_KINDS[kind_name], _tags(opts.get("tags")))
    return _echo(item) if before is None else _echo(item, previous_version=before)


def mutate(rt: Runtime, memory: ActiveMemory, mem_id: Any, content: Any) -> dict[str, Any]:
    """Write CONTENT as the next version of MEM_ID (items shown ``mutable``).  A scratchpad
    entry takes a string (its text) or a plist of :heading, :thread and :content, and is
    rewritten in scratchpad.org too."""
    target = _mem_id(mem_id)
    value = _content(content)
    if memory is rt.memory and memory.owns(target) and STATE_TIERS.get(target.name) is Tier.RAM:
        before = memory.state[target.name].version
        rt.agent_set(target.name, value)  # validates, then versions the state item
        item = memory.state[target.name]
        return _echo(item, previous_version=before)
    previous = memory.ltm.latest_version(target.base)

    def write_scratchpad(tick: int, entry: dict[str, Any]) -> None:
        rt.scratchpad.replace(ScratchpadEntry(tick, entry["heading"], entry["thread"], entry["content"]))

    item = memory.mutate(target, value, write_scratchpad if memory is rt.memory else None)
    return _echo(item, previous_version=previous)


def evict(rt: Runtime, memory: ActiveMemory, mem_id: Any) -> dict[str, Any]:
    """Move MEM_ID out of active memory; a handle stays (RAM only)."""
    handle = memory.evict(_mem_id(mem_id))
    return {"mem_id": handle.mem_id.format(), "version": handle.version, "evicted": True,
            "handle": handle.content}


def _count(opts: dict[str, Any], key: str, default: int, low: int, high: int | None = None) -> int:
    value = opts.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"within {low}..{high}" if high is not None else f">= {low}"
        raise ToolError(f":{key} must be an integer {bound}, got {value!r}")
    return value


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


def load(rt: Runtime, memory: ActiveMemory, mem_id: Any, opts_in: Any = None) -> dict[str, Any]:
    """Bring MEM_ID (latest, or its version, or :version) into active memory; return it
    (options :version, and :offset and :limit, in characters, to page a long text).
    Any brain's item may be loaded: long-term memory is shared."""
    target = _mem_id(mem_id)
    opts = options(opts_in, {"version", "offset", "limit"})
    version = opts.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ToolError(f":version must be a positive integer, got {version!r}")
        if target.version is not None and target.version != version:
            raise ToolError(f"{target} names version {target.version} but :version is {version}")
        target = target.at(version)
    offset = _count(opts, "offset", 0, 0)
    limit = _count(opts, "limit", DEFAULT_PAGE_CHARS, 1, MAX_PAGE_CHARS)
    item = memory.load(target, offset, limit)
    return _loaded(item, memory.shown_in(target) or "memory")


def search(rt: Runtime, memory: ActiveMemory, query: Any, opts_in: Any = None) -> list[dict[str, Any]]:
    """Ranked keyword search over every version in long-term memory, of every brain of this
    agent (options :limit :tags :mode)."""
    if not isinstance(query, str) or not query.strip():
        raise ToolError("query must be a non-empty string")
    opts = options(opts_in, {"limit", "tags", "mode"})
    limit = opts.get("limit", 10)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ToolError(f":limit must be an integer, got {limit!r}")
    mode = opts.get("mode") or "keyword"
    hits = memory.ltm.search(query, limit=limit, tags=_tags(opts.get("tags")), mode=mode,
                             agent_brain=memory.agent)
    return [h.to_dict() for h in hits]


def _read(op: str, result: Any) -> list[str]:
    """The MemIds (with versions) operation OP read, from its RESULT."""
    if op == "search":
        return [h["mem_id"] for h in result]
    if op == "mutate":
        previous = result.get("previous_version")
        return [MemId.parse(result["mem_id"]).at(previous).format()] if previous else []
    if op == "create":
        return []
    return [result["mem_id"]]  # load, evict: the version brought in or taken out


def _record(rt: Runtime, caller: str, op: Operation, args: tuple[Any, ...]) -> Any:
    """Run OP with ARGS in CALLER's RAM, and write it to CALLER's transcript with the MemIds it
    read and wrote (or its error and the MemId it named)."""
    name = op.__name__
    agent = rt.world.identity(caller)
    tick = rt.consciousness.current_tick if caller == PRIMARY else None
    memory: ActiveMemory | None = None
    try:
        memory = _refusals(memory_of)(rt, caller)
        mark = len(memory.written)
        result = _refusals(op)(rt, memory, *args)
    except ToolError as err:
        named = [a for a in args[:1] if isinstance(a, str) and name != "search"]
        rt.transcript.write(f"memory_{name}", {"error": str(err), "mem_ids": named}, tick=tick, agent=agent)
        raise
    read, wrote = _read(name, result), memory.take_written(mark)
    rt.transcript.write(f"memory_{name}", {"read": read, "wrote": wrote, "mem_ids": [*read, *wrote]},
                        tick=tick, agent=agent)
    return result


def acting_as_the_primary(op: Operation) -> Callable[..., Any]:
    """OP as (RT ARGS...), in the primary's RAM: the person's call, outside any eval."""

    def tool(rt: Runtime, *args: Any) -> Any:
        return _record(rt, PRIMARY, op, args)

    tool.__name__, tool.__doc__ = f"memory_{op.__name__}", op.__doc__
    return tool


def acting_in_callers_brain(op: Operation) -> Callable[..., Any]:
    """OP as :func:`~amacs_server.agents.tools.acting_as_its_eval` calls it,
    (RT CALLER EVAL-ID ARGS...): in CALLER's RAM."""

    def tool(rt: Runtime, caller: str, _eval: int | None, *args: Any) -> Any:
        return _record(rt, caller, op, args)

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
