"""Active memory of one brain: ROM and RAM items, every one addressable by MemId.

Consciousness fields are ``state`` items, mirrored from the typed
:class:`~amacs_server.state.consciousness.Consciousness` (which validates every
change) and versioned whenever their value changes.  Chat exchanges and
monologue lines are items too; the context shows the last ``*-depth`` of them.
Notes the agent creates, and items it loads, are pinned.  Evicting leaves a
handle.  Every version of every item is written to long-term memory.

Every item shown is addressable by the MemId shown, and says what
the brain may do with it (:meth:`ActiveMemory.rules`, :meth:`ActiveMemory.present`),
which the brain tools hold to:

=================================  ======  =======  =========
item (section)                     tier    mutable  evictable
=================================  ======  =======  =========
note the agent made (memory)       ram     yes      yes
item it loaded (memory)            its     if ram   yes
                                           and own
scratchpad entry (scratchpad)      ram     yes      yes
chat exchange, monologue line      rom     no       yes
consciousness field                its     if ram   no
last eval result, system clock     rom     no       no
thread, skill, buffer, event       rom     no       no
handle of an evicted item          its     as the   no (load
                                           item     it back)
=================================  ======  =======  =========

An item appears once: where it lives (its *home*: the chat or monologue
window, the scratchpad, ...), else in ``<memory>``.  Loading an item that is
not shown pins it (in its home if its window shows it, else in ``<memory>``);
loading one its home shows already (the consciousness, the last eval result,
the threads, skills, buffers and events of the tick) only reads it.  Long
texts in ``<memory>`` are shown a page at a time (:func:`~.items.page_of`).

Every agent has a brain of its own: the primary's is the runtime's
(brain ``primary``, with the consciousness fields, chat and monologue); a
subagent's (:meth:`ActiveMemory.for_subagent`) holds only what it creates
and loads, under its own id.  Long-term memory is shared: any brain of the
same identity may search and load any item; only its owner writes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from ..errors import AmacsError
from ..state.consciousness import Consciousness
from .items import DEFAULT_PAGE_CHARS, Access, Kind, MemoryItem, Tier, page_of
from .ltm import LongTermMemory
from .memid import BRAIN, MemId, MemIdError

# Consciousness fields in the order of ``consciousness.el``, with their tier.  The
# thread fields change only through the thread tools, so the agent cannot
# write them directly.
STATE_TIERS: dict[str, Tier] = {
    "identity": Tier.ROM,
    "current_tick": Tier.ROM,
    "current_time": Tier.ROM,
    "mood": Tier.RAM,
    "confidence": Tier.RAM,
    "active_thread": Tier.ROM,
    "pending_threads": Tier.ROM,
    "budget": Tier.ROM,
    "chat_context_depth": Tier.RAM,
    "monologue_context_depth": Tier.RAM,
    "global_scratchpad_depth": Tier.RAM,
    "thread_scratchpad_depth": Tier.RAM,
    "api_settings": Tier.RAM,
}
CLOCK = "system_clock"
BUDGET = "budget"
EVAL_RESULT = "last_eval_result"
ROM_NAMES = frozenset({*(n for n, t in STATE_TIERS.items() if t is Tier.ROM), CLOCK, EVAL_RESULT})
CHAT_PREFIX = "chat."
MONOLOGUE_PREFIX = "monologue."
SCRATCHPAD_PREFIX = "scratchpad."
THREAD_PREFIX = "thread."
SKILL_PREFIX = "skill."
BUFFER_PREFIX = "buffer."
EVENT_PREFIX = "event."
NOTICE_PREFIX = "notice."
RESERVED_PREFIXES = (CHAT_PREFIX, MONOLOGUE_PREFIX, SCRATCHPAD_PREFIX, THREAD_PREFIX, SKILL_PREFIX,
                     BUFFER_PREFIX, EVENT_PREFIX, NOTICE_PREFIX)
RECORD_PREFIXES = (CHAT_PREFIX, MONOLOGUE_PREFIX)  # what was said and thought: kept as it happened
LIVE_PREFIXES = (THREAD_PREFIX, SKILL_PREFIX, BUFFER_PREFIX, EVENT_PREFIX, NOTICE_PREFIX)  # the harness's own
# What an item of a live section is, then what to do instead of mutating it and of evicting it.
LIVE_RULES = {
    THREAD_PREFIX: ("a thread", "the thread functions change it (agent-thread-add-buffer, ...)",
                    "it shows in <threads> while it is open; agent-complete-thread closes it"),
    SKILL_PREFIX: ("a skill bound to the active thread", "edit its SKILL.md file",
                   "agent-unbind-skill-from-thread takes it out of <skills>"),
    BUFFER_PREFIX: ("a buffer of the active thread as Emacs last read it", "edit the buffer itself",
                    "agent-thread-remove-buffer takes it out of <buffers>"),
    EVENT_PREFIX: ("an event", "it stays as it was delivered", "an event is shown only in the tick it arrives"),
    NOTICE_PREFIX: ("a notice of the harness", "it stays as it was said",
                    "a notice is shown only in the message it was said in"),
}
SCRATCHPAD_FIELDS = frozenset({"heading", "thread", "content"})
PREVIEW_CHARS = 80
MAX_JOURNAL = 10_000  # MemIds written kept for the transcript when no one takes them
MAX_PRESENTED = 4_096  # items as shown kept between snapshots (a subagent's RAM takes none)
PresentKey = tuple[MemId, Kind, bool, Any]  # an item as shown: address, kind, pinned, page
# RAM keeps at least this many of the newest exchanges and monologue lines (and
# twice the depths the context shows); older ones are in LTM only.
RAM_WINDOW = 64


def ram_window(c: Consciousness) -> int:
    """How many of the newest exchanges and monologue lines RAM keeps for C's depths."""
    return max(RAM_WINDOW, 2 * c.chat_context_depth + 2, 2 * c.monologue_context_depth)
INTERRUPTED = "no reply: the tick was interrupted"


class MemoryRefused(AmacsError, ValueError):
    """A brain-tool request the rules refuse; the message is shown to the agent."""


def _plain(value: Any) -> Any:
    """Consciousness values as JSON data (symbols such as budget pressure become strings)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float) or type(value) is str:
        return value
    # A symbol too (a str subclass that is not equal to its name): LTM gives back a plain
    # string, and an item read back must equal the one written (a restart writes no version).
    return str.__str__(value) if isinstance(value, str) else str(value)


def handle_for(item: MemoryItem) -> MemoryItem:
    """What stays in active memory when ITEM is evicted."""
    text = " ".join(item.text().split())
    preview = text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
    return MemoryItem(item.mem_id, item.tier, Kind.HANDLE,
                      {"evicted": True, "kind": item.kind.value, "preview": preview}, item.created_at_ms)


def scratchpad_content(current: Any, change: Any) -> dict[str, Any]:
    """A scratchpad entry's content after CHANGE: a string is its new text; data may set any
    of heading, thread (nil: global) and content.  Raises :class:`MemoryRefused`."""
    base = dict(current) if isinstance(current, dict) else {}
    if isinstance(change, str):
        change = {"content": change}
    if not isinstance(change, dict):
        raise MemoryRefused("a scratchpad entry takes a string (its new text) or a plist of "
                            f":heading, :thread and :content, got {change!r}")
    unknown = set(change) - SCRATCHPAD_FIELDS
    if unknown:
        raise MemoryRefused(f"a scratchpad entry has no field(s) {', '.join(sorted(unknown))}; "
                            "it has heading, thread and content")
    out = {**base, **change}
    heading, thread, text = out.get("heading"), out.get("thread"), out.get("content")
    if not isinstance(heading, str) or not heading.split():
        raise MemoryRefused(f"a scratchpad heading is a non-empty string, got {heading!r}")
    if thread is not None and (not isinstance(thread, str) or not thread.strip()):
        raise MemoryRefused(f"a scratchpad thread is a thread id or nil (global), got {thread!r}")
    if not isinstance(text, str):
        raise MemoryRefused(f"a scratchpad entry's content is a string, got {text!r}")
    return {"heading": " ".join(heading.split()), "thread": thread, "content": text.rstrip()}


def tick_of(item: MemoryItem) -> int:
    """The tick in the name of a per-tick item (``chat.12``, ``monologue.12``, ``scratchpad.12``)."""
    return int(item.mem_id.name.rsplit(".", 1)[1])


def slug(text: str) -> str:
    """TEXT as a MemId name part: lowercase, other characters as '-'."""
    out = re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-.") or "x"
    return out[:100]


def _same_entry(stored: Any, heading: str, thread: str | None, text: str) -> bool:
    """True when a stored scratchpad entry says what its org heading says (org reads headings
    and text back a little differently: TODO keywords, tags, surrounding blank lines)."""
    if not isinstance(stored, dict):
        return False
    return (stored.get("thread") == thread and str(stored.get("content", "")).strip() == text.strip()
            and (stored.get("heading") == heading or str(stored.get("heading", "")).endswith(heading)))


@dataclass
class PadEntry:
    """A heading of the scratchpad file, as active memory holds it: its tick and thread, and its
    item once read from long-term memory (a start reads only those the context shows)."""

    tick: int
    thread: str | None
    item: MemoryItem | None = None


PAD_FILE = "scratchpad.org"  # the file memory.db's level names (LongTermMemory.level)


@dataclass(frozen=True)
class Snapshot:
    """What the context of one tick shows, every entry an item."""

    consciousness: list[MemoryItem]
    memory: list[MemoryItem]
    scratchpad: list[MemoryItem]
    chat: list[MemoryItem]
    monologue: list[MemoryItem]
    eval_result: MemoryItem | None
    threads: list[MemoryItem] = field(default_factory=list)
    skills: list[MemoryItem] = field(default_factory=list)
    buffers: list[MemoryItem] = field(default_factory=list)
    events: list[MemoryItem] = field(default_factory=list)

    def all_items(self) -> list[MemoryItem]:
        """Every item shown, in order."""
        rest = [self.eval_result] if self.eval_result else []
        return [*self.skills, *self.threads, *self.scratchpad, *self.memory, *self.buffers,
                *self.monologue, *self.consciousness, *self.chat, *self.events, *rest]


class ActiveMemory:
    """The active memory of one brain, backed by long-term memory.

    Longer than the rule of thumb (~300 lines) for a reason: it is the one place where the
    rules of an item are kept (its tier, whether it may be mutated or evicted: :meth:`rules`),
    and every path that writes, shows, evicts, loads or restores an item goes through them;
    cut apart by kind of item or by operation, the rules would be written more than once.
    What needs none of its state is apart: the item record (``items.py``), addresses
    (``memid.py``), storage (``ltm.py``), the tools' checks (``tools/memory.py``) and the
    context's layout (``context/assemble.py``)."""

    def __init__(self, ltm: LongTermMemory, agent: str, brain: str = "primary") -> None:
        self.ltm = ltm
        self.agent = agent
        self.brain = brain
        self.state: dict[str, MemoryItem] = {}
        self.chat: list[MemoryItem] = []  # latest version of each exchange, oldest first
        self._chat_index: dict[int, int] = {}  # tick -> position in self.chat
        self.monologue: list[MemoryItem] = []
        self.pad: list[PadEntry] = []  # every heading of the scratchpad file, oldest first
        # The digest of the scratchpad file as written (ScratchpadLog.digest): the primary's only.
        self.pad_digest: Callable[[], str | None] | None = None
        self.threads: dict[str, MemoryItem] = {}  # open threads by id
        self.skills: list[MemoryItem] = []  # skills of the active thread, as last read
        self.buffers: list[MemoryItem] = []  # buffers of the active thread, as last read
        self._views: dict[str, MemoryItem] = {}  # latest skill and buffer items by name
        self.events: list[MemoryItem] = []  # events delivered since the last tick
        self.pinned: dict[str, MemoryItem] = {}  # base -> item (notes, loaded items)
        self.pages: dict[str, tuple[int, int]] = {}  # base -> (offset, limit) of a pinned item's page shown
        self.evicted: dict[str, MemoryItem] = {}  # base -> handle
        self.homes: dict[str, str] = {}  # base -> the section the last snapshot showed it in
        self.shown_ids: list[str] = []  # the MemIds the last snapshot showed (what the model read)
        self.written: list[str] = []  # MemIds written since the last take_written (for transcripts)
        self._presented: dict[PresentKey, MemoryItem] = {}  # items as shown since the last snapshot
        self._paged: dict[str, tuple[MemoryItem, int, int, MemoryItem]] = {}  # base -> item, page, its view
        self._presented_before: dict[PresentKey, MemoryItem] = {}  # ... and as the snapshot before showed them
        self.pending_tick: int | None = None
        self.events_named = 0  # the highest N of an ``event.N`` item this brain made (the tick state keeps it)
        self.keep = RAM_WINDOW  # how many exchanges and monologue lines RAM keeps

    @classmethod
    def for_subagent(cls, ltm: LongTermMemory, agent: str, agent_id: str) -> ActiveMemory:
        """A new, empty RAM for the subagent AGENT_ID, whose items are ``AGENT:AGENT_ID:NAME``.

        Ids repeat from one server run to the next (``task-1``): what an earlier agent
        of the same id had pinned or evicted is forgotten here (its items stay in LTM,
        searchable and loadable); see :meth:`create_note` for reusing its names."""
        try:
            BRAIN.check(agent_id, f"{agent}:{agent_id}")
        except MemIdError as err:
            raise MemoryRefused(f"the agent id {agent_id!r} cannot name a memory brain: {err}") from err
        memory = cls(ltm, agent, agent_id)
        earlier = ltm.active_set(agent_id)
        if earlier:  # most ids are new: no write, no transaction
            with ltm.transaction():
                for base, _status, _version in earlier:
                    ltm.set_active(agent_id, base, None)
        return memory

    # -- addresses ---------------------------------------------------------------

    def mem_id(self, name: str, version: int | None = None) -> MemId:
        """The address of NAME in this brain."""
        return MemId(self.agent, self.brain, name, version)

    @property
    def prefix(self) -> str:
        """``agent:brain``, the start of every base of this brain."""
        return f"{self.agent}:{self.brain}"

    def owns(self, mem_id: MemId) -> bool:
        """True when MEM_ID belongs to this brain."""
        return mem_id.agent == self.agent and mem_id.brain == self.brain

    # -- writing versions ----------------------------------------------------------

    def _new(self, name: str, tier: Tier, kind: Kind, content: Any, tags: tuple[str, ...] = (), *,
             soon: bool = False) -> MemoryItem:
        latest = self.ltm.latest_version(self.mem_id(name).base) or 0
        item = MemoryItem(self.mem_id(name, latest + 1), tier, kind, content, tags=tags)
        self.ltm.put(item, soon=soon)
        if len(self.written) >= MAX_JOURNAL:
            del self.written[: MAX_JOURNAL // 2]
        self.written.append(item.mem_id.format())
        return item

    def take_written(self, since: int = 0) -> list[str]:
        """The MemIds written since the last take (or since mark SINCE, ``len(self.written)``
        before an operation), oldest first; they leave the journal (for transcripts)."""
        since = min(since, len(self.written))
        out = self.written[since:]
        del self.written[since:]
        return out

    def _set_state(self, name: str, tier: Tier, kind: Kind, content: Any) -> None:
        current = self.state.get(name)
        if current is not None and current.content == content:
            return
        self.state[name] = self._new(name, tier, kind, content)

    def sync_state(self, c: Consciousness, now: datetime | None = None, *, budget: bool = False) -> None:
        """Version every consciousness field whose value changed (one transaction).

        The budget is versioned only when BUDGET is true, which the primary's tick start alone
        asks (or when there is no budget item yet): every agent's model call charges it, a
        subagent's at any moment of the primary's tick, so versioning it at every other sync
        would make its version count depend on which task ran first.  What spending is
        refused and what the person is shown read the live figure, not this item."""
        values = c.to_dict()
        with self.ltm.transaction():
            for name, tier in STATE_TIERS.items():
                if name == BUDGET and not budget and name in self.state:
                    continue
                self._set_state(name, tier, Kind.STATE, _plain(values[name]))
            moment = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._set_state(CLOCK, Tier.ROM, Kind.STATE, {"now_iso8601": moment})
            result = values[EVAL_RESULT]
            if result is not None:
                self._set_state(EVAL_RESULT, Tier.ROM, Kind.TOOL_RESULT, _plain(result))

    # -- chat and monologue ----------------------------------------------------------

    def _put_chat(self, tick: int, content: dict[str, Any], *, soon: bool = False) -> MemoryItem:
        item = self._new(f"{CHAT_PREFIX}{tick}", Tier.ROM, Kind.MESSAGE, content, soon=soon)
        if tick in self._chat_index:
            self.chat[self._chat_index[tick]] = item
        else:
            self._chat_index[tick] = len(self.chat)
            self.chat.append(item)
            self._trim()
        return item

    def _trim(self) -> None:
        """Drop the oldest exchanges and monologue lines from RAM, in blocks (they stay in LTM)."""
        if len(self.chat) > 2 * self.keep:
            del self.chat[: len(self.chat) - self.keep]
            self._chat_index = {tick_of(item): i for i, item in enumerate(self.chat)}
        if len(self.monologue) > 2 * self.keep:
            del self.monologue[: len(self.monologue) - self.keep]

    def begin_chat(self, tick: int, human: str) -> MemoryItem:
        """The person's input as an item: the pending message of TICK."""
        self.pending_tick = tick
        return self._put_chat(tick, {"human": human})

    def finish_chat(self, tick: int, agent: str | None, status: str | None = None) -> None:
        """Complete TICK's exchange with the agent's reply, or a STATUS when there is none."""
        self.pending_tick = None
        index = self._chat_index.get(tick)
        content = dict(self.chat[index].content) if index is not None else {}
        content["agent"] = agent
        if status:
            content["status"] = status
        self._put_chat(tick, content)

    def said_at(self, tick: int) -> str | None:
        """The person's input that began TICK, if RAM holds it (None: a tick without one)."""
        index = self._chat_index.get(tick)
        human = self.chat[index].content.get("human") if index is not None else None
        return human if isinstance(human, str) else None

    def receive(self, text: str, *, soon: bool = False) -> MemoryItem:
        """A message a subagent received (from its caller, another agent, the person, its own
        eval's result), as the next exchange item of its brain: a record it may evict and load.
        SOON: committed at the end of this turn of the loop (:meth:`LongTermMemory.put`)."""
        return self._put_chat(len(self._chat_index) + 1, {"said": text}, soon=soon)

    def notice(self, about: str, content: Any) -> MemoryItem:
        """What the harness tells this brain once (ABOUT: ``model``, ``context-window``, ``retry``,
        ``panel``), as a ROM item ``notice.ABOUT``: a new version each time its CONTENT changes;
        the same content said again is the same version (the model in use, said again after a
        restart of the conversation).  No text reaches a brain without an address."""
        return self._current(f"{NOTICE_PREFIX}{about}", Tier.ROM, Kind.NOTICE, content)

    def add_monologue(self, tick: int, line: str) -> None:
        """One monologue line for TICK."""
        self.monologue.append(self._new(f"{MONOLOGUE_PREFIX}{tick}", Tier.ROM, Kind.MONOLOGUE, line))
        self._trim()

    def add_scratchpad(self, tick: int, heading: str, thread: str | None, content: str) -> None:
        """A scratchpad heading written at TICK (to the file first): global when THREAD is None."""
        with self._pad_write():
            self.pad.append(PadEntry(tick, thread, self._new(
                f"{SCRATCHPAD_PREFIX}{tick}", Tier.RAM, Kind.NOTE,
                {"heading": heading, "thread": thread, "content": content})))

    @contextmanager
    def _pad_write(self) -> Iterator[None]:
        """Around a scratchpad item written after its file: memory.db records the file's digest
        after (it is level with the file), none if the write fails (the file may be ahead)."""
        try:
            yield
        except BaseException:
            if self.pad_digest is not None:
                self.pad_digest = None
                with suppress(Exception):  # if it stays, it names the file before this write
                    self.ltm.set_level(PAD_FILE, None)
            raise
        if self.pad_digest is not None:
            self.ltm.set_level(PAD_FILE, self.pad_digest())

    @property
    def scratchpad(self) -> list[MemoryItem]:
        """Every scratchpad heading's item, oldest first (each read from long-term memory once)."""
        return [self._pad_item(e) for e in self.pad]

    def _pad_item(self, entry: PadEntry) -> MemoryItem:
        if entry.item is None:
            entry.item = self.ltm.get(self.mem_id(f"{SCRATCHPAD_PREFIX}{entry.tick}"))
        return entry.item

    def last_notes(self, count: int) -> list[MemoryItem]:
        """The items of the last COUNT scratchpad headings, oldest first."""
        return [self._pad_item(e) for e in self.pad[-count:]] if count > 0 else []

    def scratchpad_window(self, c: Consciousness) -> list[MemoryItem]:
        """The last global notes and the last notes of the active thread, oldest first (only
        those are read from long-term memory)."""
        global_notes: list[PadEntry] = []
        thread_notes: list[PadEntry] = []
        thread_depth = c.thread_scratchpad_depth if c.active_thread is not None else 0  # none shown: none looked for
        for entry in reversed(self.pad):
            if len(global_notes) >= c.global_scratchpad_depth and len(thread_notes) >= thread_depth:
                break
            thread = entry.thread
            if thread is None and len(global_notes) < c.global_scratchpad_depth:
                global_notes.append(entry)
            elif thread is not None and thread == c.active_thread and len(thread_notes) < c.thread_scratchpad_depth:
                thread_notes.append(entry)
        shown = sorted(global_notes + thread_notes, key=lambda e: e.tick)
        return [self._shown(self._pad_item(e)) for e in shown]

    def put_thread(self, content: dict[str, Any]) -> MemoryItem:
        """A new version of a thread; completed threads leave active memory."""
        item = self._new(f"{THREAD_PREFIX}{content['id']}", Tier.ROM, Kind.THREAD, content)
        if content.get("status") == "completed":
            self.threads.pop(content["id"], None)
        else:
            self.threads[content["id"]] = item
        return item

    def _current(self, name: str, tier: Tier, kind: Kind, content: Any) -> MemoryItem:
        """The latest item NAME if its content is CONTENT, else a new version holding it."""
        latest = self._views.get(name) or self.ltm.find(self.mem_id(name))
        if latest is None or latest.content != content:
            latest = self._new(name, tier, kind, content)
        self._views[name] = latest
        return latest

    def set_skills(self, skills: list[dict[str, Any]]) -> None:
        """The skills bound to the active thread, versioned when their text changes."""
        self.skills = [self._current(f"{SKILL_PREFIX}{s['name']}", Tier.ROM, Kind.SKILL, s) for s in skills]

    def set_buffers(self, buffers: list[dict[str, Any]]) -> None:
        """The active thread's buffers as Emacs reported them, versioned when they change."""
        used: set[str] = set()
        items = []
        for entry in buffers:
            name = f"{BUFFER_PREFIX}{slug(str(entry.get('name', '')))}"
            while name in used:
                name += "_"
            used.add(name)
            items.append(self._current(name, Tier.ROM, Kind.BUFFER, entry))
        self.buffers = items

    def set_events(self, events: list[dict[str, Any]], first_seq: int) -> None:
        """The events this tick shows (User, Agent, Time, Hook), each an item."""
        self.events = [self._new(f"{EVENT_PREFIX}{first_seq + i}", Tier.ROM, Kind.EVENT, e)
                       for i, e in enumerate(events)]
        self.events_named = max(self.events_named, first_seq + len(events) - 1)

    def last_chat_interrupted(self) -> bool:
        """True when the server stopped in the newest exchange: a human part, no reply, no outcome.

        A turn that ended without a reply (no API key, the budget, a refused
        call, the person's interrupt) records why in ``status``; a server
        killed mid-turn records nothing, and :meth:`restore` marks that
        exchange with :data:`INTERRUPTED`, so the answer is the same after a
        restart.
        """
        if not self.chat:
            return False
        content = self.chat[-1].content
        return (content.get("human") is not None and content.get("agent") is None
                and content.get("status") in (None, INTERRUPTED))

    # -- what a brain may do with an item ----------------------------------------------

    def rules(self, mem_id: MemId) -> Access:
        """What this brain may do with MEM_ID's item where it lives (its home; see the module's doc)."""
        name = mem_id.name
        if not self.owns(mem_id):
            return Access(mutable=False, evictable=True)  # another brain's, loaded here: only its own writes it
        if name in STATE_TIERS:
            return Access(mutable=STATE_TIERS[name] is Tier.RAM, evictable=False)
        if name in (CLOCK, EVAL_RESULT):
            return Access(mutable=False, evictable=False)
        if name.startswith(RECORD_PREFIXES):
            return Access(mutable=False, evictable=True)
        if name.startswith(LIVE_PREFIXES):
            return Access(mutable=False, evictable=False)
        return Access(mutable=True, evictable=True)  # notes and scratchpad entries

    def present(self, item: MemoryItem, *, pinned: bool = False) -> MemoryItem:
        """ITEM as this brain's context shows it: with what the brain may do with it (a pinned
        item may always be evicted; a handle never: it is evicted already)."""
        key = (item.mem_id, item.kind, pinned, item.page)  # a MemId with its version names one content
        shown = self._presented.get(key) or self._presented_before.get(key)
        if shown is None:
            rule = self.rules(item.mem_id)
            evictable = item.kind is not Kind.HANDLE and (rule.evictable or pinned)
            tier = Tier.ROM if item.mem_id.name.startswith(RECORD_PREFIXES) else item.tier  # older homes: ram
            shown = replace(item, tier=tier, access=Access(rule.mutable, evictable))
        if len(self._presented) >= MAX_PRESENTED:
            self._presented_before, self._presented = self._presented, {}
        self._presented[key] = shown  # kept from one snapshot to the next: rendered once
        return shown

    def _refusal(self, mem_id: MemId, verb: str) -> MemoryRefused:
        """Why the item MEM_ID cannot be VERB ("mutated" or "evicted"), and what to do instead."""
        shown, name = mem_id.at(None), mem_id.name
        if verb == "evicted" and STATE_TIERS.get(name) is Tier.RAM:
            return MemoryRefused(f"{shown} is a consciousness field: it stays active; mutate it instead")
        if name in ROM_NAMES:
            return MemoryRefused(f"refused: {shown} is ROM (harness-owned) and cannot be {verb}")
        if name.startswith(RECORD_PREFIXES):
            return MemoryRefused(f"refused: {shown} is the record of what was said or thought (chat and monologue "
                                 "stay as they happened) and cannot be mutated; evict it to take it out of the "
                                 "context")
        for prefix, (what, mutate_instead, evict_instead) in LIVE_RULES.items():
            if name.startswith(prefix):
                instead = mutate_instead if verb == "mutated" else evict_instead
                return MemoryRefused(f"refused: {shown} is {what} and cannot be {verb}: {instead}")
        return MemoryRefused(f"refused: {shown} is ROM (harness-owned) and cannot be {verb}")

    # -- the brain tools' operations -------------------------------------------------

    def find(self, mem_id: MemId) -> MemoryItem | None:
        """The active item with MEM_ID's base (pinned, or in its home), or None."""
        return self.pinned.get(mem_id.base) or self._in_home(mem_id)

    def _in_home(self, mem_id: MemId) -> MemoryItem | None:
        """MEM_ID's item in this brain's state, chat, monologue, scratchpad, threads, skills,
        buffers or events (as RAM holds them), or None."""
        if not self.owns(mem_id):
            return None
        if mem_id.name in self.state:
            return self.state[mem_id.name]
        base = mem_id.base
        if mem_id.name.startswith(SCRATCHPAD_PREFIX):
            entry = self._pad_entry(mem_id.name)
            return None if entry is None else self._pad_item(entry)
        for items in (self.chat, self.monologue, list(self.threads.values()), self.skills,
                      self.buffers, self.events):
            for item in reversed(items):
                if item.mem_id.base == base:
                    return item
        return None

    def _live_section(self, mem_id: MemId) -> str | None:
        """The section MEM_ID's item is shown in whatever the agent does (the consciousness, the
        last eval result, the threads, skills, buffers and events of this tick), or None."""
        if not self.owns(mem_id):
            return None
        name, base = mem_id.name, mem_id.base
        if name == EVAL_RESULT:
            return "last-eval-result"
        if name in STATE_TIERS or name == CLOCK:
            return "agent-consciousness"
        for tag, items in (("threads", list(self.threads.values())), ("skills", self.skills),
                           ("buffers", self.buffers), ("events", self.events)):
            if any(i.mem_id.base == base for i in items):
                return tag
        return None

    def create_note(self, name: str, content: Any, kind: Kind, tags: tuple[str, ...]) -> MemoryItem:
        """A new RAM item, pinned in active memory.

        A name already in this brain's active memory (pinned or evicted) is refused.
        One in LTM only was an earlier agent's of the same id (ids repeat across
        server runs; the primary's notes never leave its active set): the new item
        continues its versions, so every MemId still names one content."""
        mem_id = self.mem_id(name)
        if name in STATE_TIERS or name in (CLOCK, EVAL_RESULT) or name.startswith(RESERVED_PREFIXES):
            raise MemoryRefused(f"the name {name!r} is reserved for the harness's own items")
        if mem_id.base in self.pinned or mem_id.base in self.evicted:
            raise MemoryRefused(f"{mem_id} exists already; change it with agent-memory-mutate")
        item = self._new(name, Tier.RAM, kind, content, tags)
        self.pinned[mem_id.base] = item
        self.pages.pop(mem_id.base, None)
        self.ltm.set_active(self.brain, mem_id.base, "pinned", item.version)
        return item

    def mutate(self, mem_id: MemId, content: Any,
               write_scratchpad: Callable[[int, dict[str, Any]], None] | None = None) -> MemoryItem:
        """Copy-on-write: the item's newest version + 1 with CONTENT (not for state items).

        A scratchpad entry takes a string (its new text) or data with any of heading,
        thread and content; WRITE_SCRATCHPAD (tick, content) writes it to its org file
        first, which wins over memory.db at start-up."""
        if not self.owns(mem_id):
            raise MemoryRefused(f"{mem_id} belongs to another brain")
        if mem_id.name in ROM_NAMES:
            raise self._refusal(mem_id, "mutated")
        current = self.ltm.get(mem_id.at(None))
        if current.tier is Tier.ROM or not self.rules(mem_id).mutable:
            raise self._refusal(mem_id, "mutated")
        if mem_id.name.startswith(SCRATCHPAD_PREFIX):
            content = scratchpad_content(current.content, content)
            if write_scratchpad is not None:
                with self._pad_write():
                    write_scratchpad(tick_of(current), content)
                    item = self._new(mem_id.name, current.tier, current.kind, content, current.tags)
                    self._replace_active(item)
                return item
        item = self._new(mem_id.name, current.tier, current.kind, content, current.tags)
        self._replace_active(item)
        return item

    def evict(self, mem_id: MemId) -> MemoryItem:
        """Take the item out of active memory; a handle stays. Returns the handle.

        Pinned items (notes, loaded items) may always be evicted; an item in its home
        when its rules say so (chat, monologue, scratchpad: not the consciousness, the
        last eval result, threads, skills, buffers or events)."""
        base = mem_id.base
        current = self.pinned.get(base)
        if current is None:
            if base in self.evicted:
                raise MemoryRefused(f"{mem_id.at(None)} is already evicted")
            current = self._in_home(mem_id)
            if not self.rules(mem_id).evictable and (current is not None or mem_id.name.startswith(LIVE_PREFIXES)):
                raise self._refusal(mem_id, "evicted")
            if current is None:
                raise MemoryRefused(f"{mem_id.at(None)} is not in active memory")
        self.pinned.pop(base, None)
        self.pages.pop(base, None)
        handle = handle_for(current)
        self.evicted[base] = handle
        self.ltm.set_active(self.brain, base, "evicted", current.version)
        return handle

    def load(self, mem_id: MemId, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> MemoryItem:
        """Bring the version MEM_ID names (or the latest) into active memory, pinned; return it
        (characters OFFSET..OFFSET+LIMIT of a long text, :func:`~.items.page_of`); :meth:`shown_in`
        says where it shows from the next tick.

        An item of a live section (:meth:`_live_section`) is shown there already: loading it
        only reads it.  Any brain of this agent (identity) may load any of its items: long-term
        memory is shared.  The item keeps its address; only its own brain writes it."""
        if mem_id.agent != self.agent:
            raise MemoryRefused(f"{mem_id} belongs to another brain, outside {self.agent}'s long-term memory")
        item = self.ltm.get(mem_id)
        view = page_of(item, offset, limit)
        if view.page is not None and offset >= view.page.total_chars:
            raise MemoryRefused(f"offset {offset} is past the end of {item.mem_id}: its text has "
                                f"{view.page.total_chars} characters")
        if self._live_section(mem_id) is not None:
            return self.present(view)
        base = item.mem_id.base
        self.evicted.pop(base, None)
        self.pinned[base] = item
        if (offset, limit) == (0, DEFAULT_PAGE_CHARS):
            self.pages.pop(base, None)
        else:
            self.pages[base] = (offset, limit)
        self.ltm.set_active(self.brain, base, "pinned", item.version)
        return self.present(view, pinned=True)

    def shown_in(self, mem_id: MemId) -> str | None:
        """The section MEM_ID's item shows in: its live section, else where the last snapshot
        showed it, else ``memory`` if it is pinned; None when it is not shown."""
        live = self._live_section(mem_id)
        if live is not None:
            return live
        base = mem_id.base
        if base in self.homes and (base in self.pinned or self.homes[base] != "memory"):
            return self.homes[base]
        return "memory" if base in self.pinned else None

    def _replace_active(self, item: MemoryItem) -> None:
        base = item.mem_id.base
        if base in self.pinned:
            self.pinned[base] = item
        if base in self.evicted:
            self.evicted[base] = handle_for(item)
        if base in self.pinned or base in self.evicted:
            self.ltm.set_active(self.brain, base, "pinned" if base in self.pinned else "evicted", item.version)
        if item.mem_id.name.startswith(SCRATCHPAD_PREFIX) and self.owns(item.mem_id):
            entry = self._pad_entry(item.mem_id.name)
            if entry is not None:
                entry.item = item
                entry.thread = item.content.get("thread") if isinstance(item.content, dict) else None
            return
        for items in (self.chat, self.monologue):
            for i in range(len(items) - 1, -1, -1):
                if items[i].mem_id.base == base:
                    items[i] = item
                    return

    def _pad_entry(self, name: str) -> PadEntry | None:
        """The last scratchpad heading whose item is NAME (``scratchpad.TICK``), or None."""
        tick = name[len(SCRATCHPAD_PREFIX):]
        if not tick.isdigit():
            return None
        for entry in reversed(self.pad):
            if entry.tick == int(tick):
                return entry
        return None

    # -- what the context shows ---------------------------------------------------------

    def _view(self, item: MemoryItem) -> MemoryItem:
        """A pinned ITEM as shown: the page of it last loaded (the first of a long text)."""
        base = item.mem_id.base
        offset, limit = self.pages.get(base, (0, DEFAULT_PAGE_CHARS))
        made = self._paged.get(base)
        if made is not None and made[0] is item and made[1:3] == (offset, limit):
            return made[3]  # cut once: a pinned item is shown every tick
        view = page_of(item, offset, limit)
        if len(self._paged) >= MAX_PRESENTED:
            self._paged.clear()
        self._paged[base] = (item, offset, limit, view)
        return view

    def _shown(self, item: MemoryItem) -> MemoryItem:
        """ITEM in its window: its handle when evicted, the version loaded when pinned."""
        base = item.mem_id.base
        if base in self.evicted:
            return self.present(self.evicted[base])
        if base in self.pinned:
            return self.present(self._view(self.pinned[base]), pinned=True)
        return self.present(item)

    def shown(self, item: MemoryItem) -> MemoryItem:
        """ITEM as this brain's context shows it now: its handle when evicted, the version
        loaded when pinned."""
        return self._shown(item)

    def memory_items(self, shown_elsewhere: set[str] | frozenset[str] = frozenset()) -> list[MemoryItem]:
        """The ``<memory>`` section: pinned items (a page of a long one), then the handles of
        evicted items other than the harness's own (chat, monologue, ...); none whose base is in
        SHOWN_ELSEWHERE (shown in their homes), so every item appears once."""
        pinned = [self.present(self._view(i), pinned=True) for b, i in self.pinned.items()
                  if b not in shown_elsewhere]
        handles = [self.present(h) for b, h in self.evicted.items() if b not in shown_elsewhere
                   and not b.split(":")[2].startswith(RESERVED_PREFIXES)]
        return [*pinned, *handles]

    def snapshot(self, c: Consciousness) -> Snapshot:
        """The items one tick's context shows (the consciousness's depths applied), each once."""
        self._presented_before, self._presented = self._presented, {}
        self.keep = ram_window(c)
        self._trim()
        consciousness = [self.present(self.state[n]) for n in (*STATE_TIERS, CLOCK) if n in self.state]
        window: list[MemoryItem] = []
        depth = c.chat_context_depth
        pending: MemoryItem | None = None
        for item in reversed(self.chat):  # walk back only as far as the depth needs
            if tick_of(item) == self.pending_tick:
                pending = item
                continue
            if len(window) >= depth:
                break
            window.append(self._shown(item))
        window.reverse()
        if pending is not None:
            window.append(self.present(pending))
        lines = self.monologue[-c.monologue_context_depth:] if c.monologue_context_depth > 0 else []
        result = self.state.get(EVAL_RESULT)
        if result is not None and result.content.get("skipped"):
            result = None
        shown = Snapshot(
            consciousness=consciousness,
            memory=[],
            scratchpad=self.scratchpad_window(c),
            chat=window,
            monologue=[self._shown(i) for i in lines],
            eval_result=self.present(result) if result is not None else None,
            threads=[self.present(i) for i in sorted(self.threads.values(),
                                                     key=lambda i: i.content["id"] != c.active_thread)],
            skills=[self.present(i) for i in self.skills],
            buffers=[self.present(i) for i in self.buffers],
            events=[self.present(i) for i in self.events],
        )
        homes = {i.mem_id.base: tag for tag, items in (
            ("agent-consciousness", shown.consciousness), ("chat", shown.chat), ("monologue", shown.monologue),
            ("scratchpad", shown.scratchpad), ("threads", shown.threads), ("skills", shown.skills),
            ("buffers", shown.buffers), ("events", shown.events),
            ("last-eval-result", [shown.eval_result] if shown.eval_result else [])) for i in items}
        memory = self.memory_items(set(homes))
        homes.update((i.mem_id.base, "memory") for i in memory)
        self.homes = homes
        self.shown_ids = [i.mem_id.format() for i in (*shown.all_items(), *memory)]
        return replace(shown, memory=memory)

    # -- start-up -----------------------------------------------------------------------

    def restore(self, c: Consciousness, chat: Iterable[tuple[int, str | None, str | None]],
                monologue: Iterable[tuple[int, str]],
                scratchpad: Iterable[tuple[int, str, str | None, str]] = (),
                pad_index: list[tuple[int, str | None]] | None = None) -> None:
        """Rebuild from LTM and the org files, which win where the two disagree.

        A crash can leave the org files a step ahead of ``memory.db`` (they are
        written first); this brings the database level with them.  PAD_INDEX, the tick and
        thread of each scratchpad heading, stands for SCRATCHPAD when memory.db is known level
        with the file (:meth:`LongTermMemory.level`): no heading is compared or read.
        """
        with self.ltm.transaction():
            for name in (*STATE_TIERS, CLOCK, EVAL_RESULT):
                stored = self.ltm.find(self.mem_id(name))
                if stored is not None:
                    self.state[name] = stored
            pending = self.state.get("pending_threads")
            if not c.pending_threads and pending is not None and isinstance(pending.content, list):
                # consciousness.el does not read its pending threads back (the thread book makes
                # them again): the stored ones stand until it does, and no version is written.
                c.pending_threads = [dict(t) for t in pending.content if isinstance(t, dict)]
            self.sync_state(c)
            for tick, human, agent in chat:
                stored = self.ltm.find(self.mem_id(f"{CHAT_PREFIX}{tick}"))
                content: dict[str, Any] = {"human": human} if human is not None else {}
                content["agent"] = agent
                if human is not None and agent is None:
                    content["status"] = (stored.content.get("status") if stored else None) or INTERRUPTED
                if stored is None or any(stored.content.get(k) != v for k, v in content.items()):
                    self._put_chat(tick, content)
                else:
                    self._chat_index[tick] = len(self.chat)
                    self.chat.append(stored)
            for tick, line in monologue:
                stored = self.ltm.find(self.mem_id(f"{MONOLOGUE_PREFIX}{tick}"))
                if stored is None:
                    self.add_monologue(tick, line)
                else:
                    self.monologue.append(stored)
            if pad_index is not None:
                self.pad = [PadEntry(tick, thread) for tick, thread in pad_index]
            else:
                self._restore_pad(scratchpad)
            for base in sorted(self.ltm.bases_with_prefix(self.prefix, THREAD_PREFIX)):
                item = self.ltm.get(MemId.from_base(base))
                if item.content.get("status") != "completed":
                    self.threads[item.content["id"]] = item
            for status, item in self.ltm.active_items(self.brain):
                if status == "pinned":
                    self.pinned[item.mem_id.base] = item
                else:
                    self.evicted[item.mem_id.base] = handle_for(item)

    def _restore_pad(self, scratchpad: Iterable[tuple[int, str, str | None, str]]) -> None:
        """The scratchpad's headings, each compared with its item in LTM: the org file wins."""
        digest, self.pad_digest = self.pad_digest, None  # level with the file only once all is written
        stored_notes = self.ltm.latest_with_prefix(self.prefix, SCRATCHPAD_PREFIX)  # one read, not one a note
        written: set[str] = set()  # notes written here: read again (a tick may hold two)
        for tick, heading, thread, text in scratchpad:
            mem_id = self.mem_id(f"{SCRATCHPAD_PREFIX}{tick}")
            stored = self.ltm.find(mem_id) if mem_id.base in written else stored_notes.get(mem_id.base)
            if stored is None or not _same_entry(stored.content, heading, thread, text):
                self.add_scratchpad(tick, heading, thread, text)  # the org file wins
                written.add(mem_id.base)
            else:
                self.pad.append(PadEntry(tick, thread, stored))
        self.pad_digest = digest

    # -- the tick state (persistence.history): what a restart or a rewind needs beyond LTM --

    def order_state(self) -> dict[str, Any]:
        """The pinned and evicted items in the order the ``<memory>`` section shows them, and the
        pages of long ones shown (LTM's active table keeps neither order nor pages)."""
        return {"pinned": [[b, i.version] for b, i in self.pinned.items()],
                "evicted": [[b, h.version] for b, h in self.evicted.items()],
                "pages": {b: list(p) for b, p in self.pages.items()}, "events_named": self.events_named}

    def subagent_state(self) -> dict[str, Any]:
        """A subagent's RAM beyond LTM's active table: the messages it received (its exchange
        items, by MemId) and :meth:`order_state`."""
        return {"chat": [i.mem_id.format() for i in self.chat], **self.order_state()}

    @classmethod
    def restored_subagent(cls, ltm: LongTermMemory, agent: str, agent_id: str,
                          data: dict[str, Any]) -> ActiveMemory:
        """The RAM of the subagent AGENT_ID as :meth:`subagent_state` DATA recorded it: what it
        pinned and evicted (LTM's active table, as the rewind left it), its exchange items (so
        the next one it receives is numbered as before), their order and pages."""
        memory = cls(ltm, agent, agent_id)
        for status, item in ltm.active_items(agent_id):
            if status == "pinned":
                memory.pinned[item.mem_id.base] = item
            else:
                memory.evicted[item.mem_id.base] = handle_for(item)
        memory.chat = [ltm.get(MemId.parse(text)) for text in data.get("chat", [])]
        memory._chat_index = {tick_of(item): i for i, item in enumerate(memory.chat)}
        memory.apply_order_state(data)
        return memory

    def apply_order_state(self, data: dict[str, Any]) -> None:
        """Put the pinned and evicted items in the order DATA (:meth:`order_state`) gives, with its
        pages; an item DATA does not name keeps its place after those it names."""
        pinned, evicted = dict(self.pinned), dict(self.evicted)
        self.pinned, self.evicted = {}, {}
        for base, _version in data.get("pinned", []):
            if base in pinned:
                self.pinned[base] = pinned.pop(base)
        for base, _version in data.get("evicted", []):
            if base in evicted:
                self.evicted[base] = evicted.pop(base)
        self.pinned.update(pinned)
        self.evicted.update(evicted)
        self.pages = {b: (int(p[0]), int(p[1])) for b, p in data.get("pages", {}).items() if b in self.pinned}
        self.events_named = int(data.get("events_named", self.events_named))
