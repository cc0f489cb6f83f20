"""Brain tools for memory (memid-active-memory.md, Phase 3), as the agent's elisp calls them.

Each validates its arguments strictly, fails with a message the agent sees as
its eval error, and echoes the resolved MemId and version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..state.consciousness import ConsciousnessError
from ..toolkit import ToolError, options, refusals
from .active import STATE_TIERS, MemoryRefused
from .items import Kind, Tier
from .ltm import LtmError
from .memid import NAME, MemId, MemIdError

if TYPE_CHECKING:
    from ..runtime import Runtime

CREATABLE_KINDS = {"note": Kind.NOTE, "summary": Kind.NOTE}
MAX_CONTENT_CHARS = 100_000
_refusals = refusals(MemoryRefused, LtmError, ConsciousnessError)


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


@_refusals
def memory_create(rt: Runtime, name: Any, content: Any, opts_in: Any = None) -> dict[str, Any]:
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
    item = rt.memory.create_note(name, _content(content), CREATABLE_KINDS[kind_name], _tags(opts.get("tags")))
    return _echo(item)


@_refusals
def memory_mutate(rt: Runtime, mem_id: Any, content: Any) -> dict[str, Any]:
    """Write CONTENT as the next version of MEM_ID (RAM only)."""
    target = _mem_id(mem_id)
    value = _content(content)
    if rt.memory.owns(target) and STATE_TIERS.get(target.name) is Tier.RAM:
        before = rt.memory.state[target.name].version
        rt.agent_set(target.name, value)  # validates, then versions the state item
        item = rt.memory.state[target.name]
        return _echo(item, previous_version=before)
    before = rt.memory.ltm.latest_version(target.base)
    item = rt.memory.mutate(target, value)
    return _echo(item, previous_version=before)


@_refusals
def memory_evict(rt: Runtime, mem_id: Any) -> dict[str, Any]:
    """Move MEM_ID out of active memory; a handle stays (RAM only)."""
    handle = rt.memory.evict(_mem_id(mem_id))
    return {"mem_id": handle.mem_id.format(), "version": handle.version, "evicted": True,
            "handle": handle.content}


@_refusals
def memory_load(rt: Runtime, mem_id: Any, opts_in: Any = None) -> dict[str, Any]:
    """Bring MEM_ID (latest, or its version, or :version) into active memory; return it."""
    target = _mem_id(mem_id)
    opts = options(opts_in, {"version"})
    version = opts.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ToolError(f":version must be a positive integer, got {version!r}")
        if target.version is not None and target.version != version:
            raise ToolError(f"{target} names version {target.version} but :version is {version}")
        target = target.at(version)
    item = rt.memory.load(target)
    return _echo(item, content=item.content)


@_refusals
def memory_search(rt: Runtime, query: Any, opts_in: Any = None) -> list[dict[str, Any]]:
    """Ranked keyword search over every version in long-term memory (options :limit :tags :mode)."""
    if not isinstance(query, str) or not query.strip():
        raise ToolError("query must be a non-empty string")
    opts = options(opts_in, {"limit", "tags", "mode"})
    limit = opts.get("limit", 10)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ToolError(f":limit must be an integer, got {limit!r}")
    mode = opts.get("mode") or "keyword"
    hits = rt.memory.ltm.search(query, limit=limit, tags=_tags(opts.get("tags")), mode=mode,
                                agent_brain=rt.memory.prefix)
    return [h.to_dict() for h in hits]
