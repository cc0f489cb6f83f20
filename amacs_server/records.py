"""The transcript's events, each kind declared once as a typed record: its name and its fields.

:class:`~.transcript.Transcript` writes them and
:func:`read` reads them back; the research readers name kinds and fields through them.

Room card: imports nothing of the package, so every layer writes its events as these records (the
one model call in ``inference/`` too) and every reader reads them through the same types.

A record's fields are the keys of its line's ``data`` (docs/ARCHITECTURE.md, Persistence and git):
a field may be written under another key (``key``: ``from`` is a Python keyword), left out when it
is None (``omitted``: the field is sometimes not there at all), or spread into ``data`` (``spread``:
a dict whose keys are the data's, as an eval's result).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

_KEY = "key"
_OMITTED = "omitted"
_SPREAD = "spread"


def omitted() -> Any:
    """A field left out of the line when it is None."""
    return field(default=None, metadata={_OMITTED: True})


def key(name: str, default: Any = MISSING) -> Any:
    """A field written under NAME."""
    return field(default=default, metadata={_KEY: name})


def spread() -> Any:
    """A dict field whose keys are written as the data's own."""
    return field(default_factory=dict, metadata={_SPREAD: True})


KINDS: dict[str, type[Record]] = {}  # each kind's name -> its record class


@dataclass(frozen=True)
class Record:
    """One transcript event: ``kind`` is its ``event`` column, its fields its ``data``."""

    kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:  # a kind is declared once
            assert KINDS.setdefault(cls.kind, cls) is cls, f"transcript event {cls.kind} declared twice"

    def data(self) -> dict[str, Any]:
        """The line's ``data``."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata.get(_SPREAD):
                out.update(value)
            elif not (value is None and f.metadata.get(_OMITTED)):
                out[f.metadata.get(_KEY, f.name)] = value
        return out

    @classmethod
    def of(cls, data: dict[str, Any]) -> Record:
        """The record whose ``data`` is DATA (what no field names goes to the spread field, if any)."""
        rest = dict(data)
        kwargs: dict[str, Any] = {}
        spreads = []
        for f in fields(cls):
            if f.metadata.get(_SPREAD):
                spreads.append(f.name)
            elif (name := f.metadata.get(_KEY, f.name)) in rest:
                kwargs[f.name] = rest.pop(name)
        if spreads:
            kwargs[spreads[0]] = rest
        return cls(**kwargs)




# -- a session's agents -------------------------------------------------------------------------

@dataclass(frozen=True)
class AgentStart(Record):
    """A subagent (or a judge) began: its allowed actions, tools, depth and name, and who started
    it when not its parent (a judge's: its run, model, input and scale)."""

    kind: ClassVar[str] = "agent_start"

    allowed: list[str] | None = omitted()
    tools: list[str] | None = omitted()
    depth: int | None = omitted()
    name: str | None = omitted()
    started_by: str | None = omitted()  # the person, when a key of theirs started it (not its parent's eval)
    run: str | None = omitted()
    model: str | None = omitted()
    input: str | None = omitted()
    scale: list[float] | None = omitted()


@dataclass(frozen=True)
class AgentEnd(Record):
    """A subagent ended in STATE; the rest is its summary (steps, tokens, cost; a judge's score)."""

    kind: ClassVar[str] = "agent_end"

    state: str
    summary: dict[str, Any] = spread()


@dataclass(frozen=True)
class Cancelled(Record):
    """An idle agent was cancelled: its end."""

    kind: ClassVar[str] = "cancelled"

    reason: str


@dataclass(frozen=True)
class Interrupted(Record):
    """The agent was stopped mid-step (the primary's tick: no reason given)."""

    kind: ClassVar[str] = "interrupted"

    reason: str | None = omitted()


@dataclass(frozen=True)
class Paused(Record):
    kind: ClassVar[str] = "paused"

    by: str


@dataclass(frozen=True)
class Resumed(Record):
    kind: ClassVar[str] = "resumed"

    by: str


@dataclass(frozen=True)
class ControlRefused(Record):
    """BY may not do this: an agent's control of a compulsion (ACTION), or a person's power
    (METHOD, the CHANGE it would have made) called from an agent's eval."""

    kind: ClassVar[str] = "control_refused"

    by: str
    action: str | None = omitted()
    method: str | None = omitted()
    change: str | None = omitted()
    person_only: bool | None = omitted()


@dataclass(frozen=True)
class ControlUnattributed(Record):
    """A person's power was done, or an agent function refused, called from no key of the person's and no
    agent's eval (a timer, a hook)."""

    kind: ClassVar[str] = "control_unattributed"

    method: str
    change: str
    via: str
    note: str


@dataclass(frozen=True)
class Refused(Record):
    """An action the agent may not take (an eval outside its allowed actions; talk to the person)."""

    kind: ClassVar[str] = "refused"

    action: str
    form: str | None = omitted()
    text: str | None = omitted()


@dataclass(frozen=True)
class Posted(Record):
    """An event posted to the agent (a reply, a result, the person's words)."""

    kind: ClassVar[str] = "event"

    type: str
    content: Any = None
    source: str | None = None  # who sent it (None: the person, by the shell)
    talk_id: int | None = None


@dataclass(frozen=True)
class EventRefused(Record):
    kind: ClassVar[str] = "event_refused"

    to: str
    reason: str


@dataclass(frozen=True)
class TalkLog(Record):
    kind: ClassVar[str] = "talk_log"

    talk_id: int
    text: str


@dataclass(frozen=True)
class Notified(Record):
    kind: ClassVar[str] = "notified"

    sender: str = key("from")
    text: str = ""
    to: str = "all"


@dataclass(frozen=True)
class Blocked(Record):
    """A compulsion BY blocked ACTION (its FORM) for REASON."""

    kind: ClassVar[str] = "blocked"

    by: str
    template: str
    action: str
    form: str
    reason: str


@dataclass(frozen=True)
class ReplyBlocked(Record):
    kind: ClassVar[str] = "reply_blocked"

    reply: str | None
    reason: str


@dataclass(frozen=True)
class StepLimit(Record):
    kind: ClassVar[str] = "step_limit"

    max_steps: int


@dataclass(frozen=True)
class BudgetStop(Record):
    kind: ClassVar[str] = "budget_stop"

    message: str


# -- a step: the model call, its answer, the eval ----------------------------------------------

@dataclass(frozen=True)
class TickStart(Record):
    kind: ClassVar[str] = "tick_start"

    human: str | None
    consciousness: dict[str, Any]
    wrote: list[str]


@dataclass(frozen=True)
class TickEnd(Record):
    kind: ClassVar[str] = "tick_end"

    response: dict[str, Any]
    eval_result: dict[str, Any]
    wrote: list[str]


@dataclass(frozen=True)
class ModelRequest(Record):
    """The request as sent; the primary's also the MemIds its context showed and wrote."""

    kind: ClassVar[str] = "model_request"

    request: dict[str, Any]
    read: list[str] | None = omitted()
    wrote: list[str] | None = omitted()


@dataclass(frozen=True)
class ModelResponse(Record):
    kind: ClassVar[str] = "model_response"

    raw: str
    stop_reason: str | None
    usage: dict[str, Any]
    cost: float | None
    latency_ms: float
    thinking: str = ""
    constrained: bool | None = omitted()


@dataclass(frozen=True)
class ModelError(Record):
    kind: ClassVar[str] = "model_error"

    error: str
    detail: str | None = omitted()


@dataclass(frozen=True)
class ModelRetry(Record):
    kind: ClassVar[str] = "model_retry"

    status: str
    seconds: float


@dataclass(frozen=True)
class ModelAdapted(Record):
    """What the model call learned or changed (a setting it refused, a window)."""

    kind: ClassVar[str] = "model_adapted"

    status: str


@dataclass(frozen=True)
class ModelSwitch(Record):
    kind: ClassVar[str] = "model_switch"

    backend: str
    model: str
    base_url: str | None
    window: int | None = omitted()


@dataclass(frozen=True)
class ContextCompacted(Record):
    kind: ClassVar[str] = "context_compacted"

    squeeze: int
    window: int | None
    why: str


@dataclass(frozen=True)
class ParseError(Record):
    kind: ClassVar[str] = "parse_error"

    attempt: int
    error: str


@dataclass(frozen=True)
class Parsed(Record):
    kind: ClassVar[str] = "parsed"

    attempt: int
    response: dict[str, Any]


@dataclass(frozen=True)
class Eval(Record):
    kind: ClassVar[str] = "eval"

    form: str | None


@dataclass(frozen=True)
class EvalResultRecord(Record):
    """The eval's result (:class:`~amacs_server.state.consciousness.EvalResult`'s fields)."""

    kind: ClassVar[str] = "eval_result"

    result: dict[str, Any] = spread()


# -- tools and the home -------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolCall(Record):
    kind: ClassVar[str] = "tool_call"

    server: str
    tool: str
    arguments: dict[str, Any]
    seconds: float
    result_chars: int
    error: str | None
    blocked: bool


@dataclass(frozen=True)
class PersonAddBuffer(Record):
    kind: ClassVar[str] = "person_add_buffer"

    thread: str | None
    buffer: str


@dataclass(frozen=True)
class MemoryCall(Record):
    """A brain tool's call on memory: the MemIds it read and wrote, or its error and the one named."""

    mem_ids: list[str]
    read: list[str] | None = omitted()
    wrote: list[str] | None = omitted()
    error: str | None = omitted()


@dataclass(frozen=True)
class MemoryCreate(MemoryCall):
    kind: ClassVar[str] = "memory_create"


@dataclass(frozen=True)
class MemoryMutate(MemoryCall):
    kind: ClassVar[str] = "memory_mutate"


@dataclass(frozen=True)
class MemoryEvict(MemoryCall):
    kind: ClassVar[str] = "memory_evict"


@dataclass(frozen=True)
class MemoryLoad(MemoryCall):
    kind: ClassVar[str] = "memory_load"


@dataclass(frozen=True)
class MemorySearch(MemoryCall):
    kind: ClassVar[str] = "memory_search"


MEMORY_CALLS: dict[str, type[MemoryCall]] = {c.kind.removeprefix("memory_"): c for c in (
    MemoryCreate, MemoryMutate, MemoryEvict, MemoryLoad, MemorySearch)}


@dataclass(frozen=True)
class Rewind(Record):
    """The home went back to TO_TICK; the future it left is on REF."""

    kind: ClassVar[str] = "rewind"

    to_tick: int
    ref: str | None
    from_tick: int | str | None = omitted()  # "?" when the home's last tick was unknown
    abandoned_versions: int | None = omitted()
    commit: str | None = omitted()


@dataclass(frozen=True)
class Fork(Record):
    kind: ClassVar[str] = "fork"

    from_home: str
    at_tick: int
    from_commit: str | None


# -- reading --------------------------------------------------------------------------------------

def json_path(record: type[Record], name: str) -> str:
    """The JSON path (``$.key``) of RECORD's field NAME in its line's ``data`` (``$`` for a spread
    field: its keys are the data's own).  A field RECORD does not declare is a KeyError: a reader
    that names it fails where its query is made, not with a column of NULLs."""
    for f in fields(record):
        if f.name == name:
            return "$" if f.metadata.get(_SPREAD) else f"$.{f.metadata.get(_KEY, f.name)}"
    raise KeyError(f"the transcript event {record.kind} ({record.__name__}) declares no field {name!r}")


@dataclass(frozen=True)
class Line:
    """One transcript line: who, when, and its record."""

    run_id: str
    agent_id: str
    parent_id: str | None
    agent_type: str
    template: str
    seq: int
    ts: float
    tick: int | None
    event: Record

    @property
    def kind(self) -> str:
        return self.event.kind


def parse(line: dict[str, Any]) -> Line:
    """LINE (a transcript line's JSON) as a :class:`Line`; a kind not declared here is an error."""
    cls = KINDS.get(line["event"])
    if cls is None:
        raise ValueError(f"a transcript event of no declared kind: {line['event']!r}")
    return Line(line["run_id"], line["agent_id"], line.get("parent_id"), line.get("agent_type", ""),
                line.get("template", ""), line["seq"], line["ts"], line.get("tick"), cls.of(line["data"]))


def read(path: Path) -> Iterator[Line]:
    """The lines of the transcript at PATH, in order."""
    with path.open(encoding="utf-8") as lines:
        for text in lines:
            if text.strip():
                yield parse(json.loads(text))


def scan(paths: Iterable[Path], *kinds: type[Record]) -> Iterator[Line]:
    """The lines of the transcripts at PATHS whose records are of KINDS, in order.  Only a line
    that names one of the kinds is parsed (most are other kinds: a request is ~10 KB); one cut off
    by a killed server, or one its record does not read, is passed over."""
    named = tuple(f'"{k.kind}"' for k in kinds)
    for path in paths:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for text in lines:
                if not any(name in text for name in named):
                    continue
                try:
                    line = parse(json.loads(text))
                except (ValueError, TypeError, KeyError, AttributeError):
                    continue
                if isinstance(line.event, kinds):
                    yield line
