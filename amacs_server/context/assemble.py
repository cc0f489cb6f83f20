"""Assemble the context of a tick from active-memory items.

The design: docs/ARCHITECTURE.md, The context and the cache.

Every line inside a section is one item as JSON, with its ``mem_id``, tier,
version, kind, mutability and content, so the agent can address anything it
sees.  The last eval result is camelCase ``lastEvalResult``, as the core skill names it.

The context is an append-only conversation, so
the prefix up to the last cache breakpoint is byte-identical from tick to tick:

- the *base* (first block of the first user message): skills, threads,
  scratchpad, memory, then the monologue and chat windows as they were when
  the conversation was (re)started;
- then one user message per tick holding only what is new since the messages
  before it (new or changed items, each with its mem_id; the person's pending
  input; buffers that changed; events; the consciousness fields that changed,
  always the tick and the time; the last eval result; the harness's notices:
  the model in use when it changed, what a compaction left out), each followed
  by the model's raw response of that tick as an assistant message.

Windows drop old items in blocks: the conversation restarts from a new base
every :data:`BLOCK_TICKS` ticks (or :data:`MAX_CHARS` characters), when the
active thread changes, when a thread, skill, buffer or memory item leaves the
context, when an item is evicted, when a loaded item moves from its window to
``<memory>`` (every item shows once), and after a tick that got no response.

Cache breakpoints (Anthropic allows 4): the system prompt (the core skill,
:func:`~amacs_server.inference.anthropic_backend.build_request`), the base,
the previous tick's message and the newest message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..memory.active import ActiveMemory, Snapshot
from ..memory.items import Kind, MemoryItem
from ..text.lisp import camel_keys

Notice = Callable[[str, Any], MemoryItem]  # (about, content) -> the brain's notice item (ActiveMemory.notice)

BLOCK_TICKS = 16  # ticks after which the conversation restarts from a new base
MAX_CHARS = 240_000  # or once its user and assistant texts are this long
CACHE = {"type": "ephemeral"}
# Between the user messages in Context.text (for tests and transcripts).
MESSAGE_BREAK = "\n\n<!-- next message -->\n\n"
TEXT_SECTIONS = {"skills": "body", "buffers": "content"}
STABLE_SECTIONS = ("skills", "threads", "scratchpad", "memory")
WINDOW_SECTIONS = ("scratchpad", "memory", "monologue", "chat")  # what squeezing keeps the newest of
MAX_SQUEEZE = 6  # a window squeezed this often keeps 1/64 of its items


def section(tag: str, items: Sequence[MemoryItem]) -> str:
    """``<tag>`` with one item per line."""
    body = "\n".join(item.render() for item in items)
    return f"<{tag}>\n{body}\n</{tag}>" if body else f"<{tag}>\n</{tag}>"


def eval_result_section(item: MemoryItem) -> str:
    """``<last-eval-result>``: the ROM item, its content as camelCase ``lastEvalResult``."""
    data = item.to_contract()
    data["content"] = camel_keys({"last-eval-result": item.content})
    return "<last-eval-result>\n" + json.dumps(data, ensure_ascii=False, separators=(", ", ": ")) + \
        "\n</last-eval-result>"


def text_block(item: MemoryItem, body_key: str) -> str:
    """One long text (skill, buffer): a header line with its address, then the text itself,
    unescaped, as a buffer is shown (``=== name (mode) ===``)."""
    meta = {k: v for k, v in item.content.items() if k != body_key}
    header = json.dumps({**{k: v for k, v in item.to_contract().items() if k != "content"}, **meta},
                        ensure_ascii=False, separators=(", ", ": "))
    label = f"=== {meta.get('name', '')} ({meta.get('mode') or meta.get('kind', '')}) ==="
    return f"{label} {header}\n{item.content.get(body_key) or ''}".rstrip()


def text_section(tag: str, items: Sequence[MemoryItem], body_key: str) -> str:
    """A section of long texts (skills, buffers)."""
    return f"<{tag}>\n" + "\n\n".join(text_block(i, body_key) for i in items) + f"\n</{tag}>"


def render_section(tag: str, items: Sequence[MemoryItem]) -> str:
    """TAG's section in its format."""
    if tag in TEXT_SECTIONS:
        return text_section(tag, items, TEXT_SECTIONS[tag])
    return section(tag, items)


def _pending(item: MemoryItem) -> bool:
    """The person's input still without its reply (the chat item of this tick)."""
    return item.kind is Kind.MESSAGE and isinstance(item.content, dict) and "agent" not in item.content


@dataclass(frozen=True)
class Made:
    """What a tick's context was assembled from (:func:`assemble`'s arguments but its
    conversation and notice), to assemble it again after its conversation is compacted."""

    snap: Snapshot
    active_thread: str | None
    depths: tuple[int, ...]
    model: MemoryItem | None


@dataclass
class Context:
    """The messages of one tick's request (without the system prompt)."""

    messages: list[dict[str, Any]]
    conversation: Conversation | None = None
    made: Made | None = None  # what it was assembled from: the same tick's context again after a compaction

    @property
    def text(self) -> str:
        """Every user message's text, oldest first, joined by :data:`MESSAGE_BREAK`."""
        out = []
        for m in self.messages:
            if m["role"] == "user":
                c = m["content"]
                out.append(c if isinstance(c, str) else "\n\n".join(b["text"] for b in c))
        return MESSAGE_BREAK.join(out)

    @property
    def newest(self) -> str:
        """The newest user message: what is new at this tick."""
        return self.text.rsplit(MESSAGE_BREAK, 1)[-1]

    def answered(self, raw: str, content: Any = None) -> None:
        """The model answered this tick with RAW: it stays in the conversation (as CONTENT, the
        assistant message's blocks, when its thinking must be sent back with it)."""
        if self.conversation is not None:
            self.conversation.answered(raw, content)


@dataclass
class Conversation:
    """The append-only conversation of one brain (see the module's doc)."""

    base: str | None = None
    turns: list[Any] = field(default_factory=list)  # user, assistant, user, assistant, ... (text or blocks)
    shown: set[str] = field(default_factory=set)  # the digest of every item rendering in the conversation
    bases: dict[str, set[str]] = field(default_factory=dict)  # section -> bases shown
    thread: str | None = None
    depths: tuple[int, ...] = ()  # the window depths at the restart
    chars: int = 0
    pending: str | None = None  # the newest user message, until answered
    restarts: int = 0
    # How often the context was compacted to fit the model's window: each time the next base
    # keeps the newest half of what the window sections kept before, and drops the earlier turns.
    squeeze: int = 0
    note: str | None = None  # said once in the next tick message: what compaction dropped
    window: int | None = None  # the model's window, for the note
    model_told: str | None = None  # the digest of the model notice this conversation last showed

    def compact(self, window: int | None) -> bool:
        """Drop the oldest blocks: restart from a smaller base at the next build.  False when
        nothing more can be dropped."""
        if self.squeeze >= MAX_SQUEEZE:
            return False
        self.squeeze += 1
        self.window = window
        self.base = None  # forces the restart
        return True

    def build(self, snap: Snapshot, active_thread: str | None, depths: tuple[int, ...] = (),
              model: MemoryItem | None = None, notice: Notice | None = None) -> Context:
        """This tick's request messages; restarts from a new base when a rule says so
        (a change of the window DEPTHS is one: the windows shrink or grow at once).
        MODEL (a notice item: what the model in use takes and ignores) is said when it changed
        since the conversation last said it; NOTICE makes the brain's notice items (what a
        compaction left out), so every line the agent receives is an item."""
        if self._must_restart(snap, active_thread) or depths != self.depths:
            self._restart(snap, active_thread)
            self.depths = depths
        notices = []
        if model is not None and model.digest != self.model_told:
            self.model_told = model.digest
            notices.append(model)
        if self.note is not None and notice is not None:
            notices.append(notice("context-window", self.note))
            self.note = None
        self.pending = self._tick_message(snap, notices)
        return Context(self._messages(self.pending), self)

    def answered(self, raw: str, content: Any = None) -> None:
        """Keep the pending tick message and the model's RAW response (CONTENT: as blocks) as
        prior messages."""
        if self.pending is None:
            return
        self.turns += [self.pending, content or raw or "(empty)"]
        self.chars += len(self.pending) + len(raw)
        self.pending = None

    # -- the rules -----------------------------------------------------------------------

    @staticmethod
    def _sections(snap: Snapshot) -> dict[str, list[MemoryItem]]:
        return {"skills": snap.skills, "threads": snap.threads, "scratchpad": snap.scratchpad,
                "memory": snap.memory, "buffers": snap.buffers}

    def _must_restart(self, snap: Snapshot, active_thread: str | None) -> bool:
        if self.base is None or self.pending is not None or active_thread != self.thread:
            return True
        if len(self.turns) // 2 >= BLOCK_TICKS or self.chars >= MAX_CHARS:
            return True
        for tag, items in self._sections(snap).items():
            if self.bases.get(tag, set()) - {i.mem_id.base for i in items}:
                return True  # something left the context: say so with a new base
        shown_items = [*snap.memory, *snap.chat, *snap.monologue, *snap.scratchpad]
        if any(i.kind is Kind.HANDLE and i.digest not in self.shown for i in shown_items):
            return True
        windows = set().union(*(self.bases.get(tag, set()) for tag in ("chat", "monologue", "scratchpad")))
        return any(i.mem_id.base in windows for i in snap.memory)  # a loaded item left its window: once

    def _mark(self, tag: str, items: Sequence[MemoryItem]) -> None:
        self.shown.update(i.digest for i in items)
        self.bases.setdefault(tag, set()).update(i.mem_id.base for i in items)

    def _restart(self, snap: Snapshot, active_thread: str | None) -> None:
        dropped_turns = len(self.turns) // 2
        self.turns, self.shown, self.bases, self.chars, self.pending = [], set(), {}, 0, None
        self.model_told = None
        self.thread = active_thread
        self.restarts += 1
        parts = []
        dropped = 0
        for tag in STABLE_SECTIONS:
            items = self._sections(snap)[tag]
            items, left_out = self._squeezed(tag, items)
            dropped += left_out
            if items:
                parts.append(render_section(tag, items))
                self._mark(tag, items)
        chat = [i for i in snap.chat if not _pending(i)]
        for tag, items in (("monologue", snap.monologue), ("chat", chat)):
            items, left_out = self._squeezed(tag, items)
            dropped += left_out
            parts.append(section(tag, items))
            self._mark(tag, items)
        self.base = "\n\n".join(parts)
        if self.squeeze and (dropped or dropped_turns):
            window = f" of {self.window} tokens" if self.window else ""
            self.note = (f"Your context was compacted to fit this model's window{window}: the earlier "
                         f"messages of this conversation ({dropped_turns} ticks) and the {dropped} oldest items "
                         "of your windows are left out. Nothing is lost: every item is in long-term memory; "
                         "find it with agent-memory-search, bring it back with agent-memory-load.")

    def _squeezed(self, tag: str, items: list[MemoryItem]) -> tuple[list[MemoryItem], int]:
        """The newest of ITEMS a squeezed window keeps, and how many it leaves out (they count
        as shown: they do not come back as new in the tick messages)."""
        if not self.squeeze or tag not in WINDOW_SECTIONS or not items:
            return items, 0
        keep = len(items) >> self.squeeze
        left = items[: len(items) - keep]
        self.shown.update(i.digest for i in left)
        return items[len(items) - keep:], len(left)

    def _tick_message(self, snap: Snapshot, notices: Sequence[MemoryItem] = ()) -> str:
        parts = []
        for tag, items in (*self._sections(snap).items(), ("monologue", snap.monologue), ("chat", snap.chat)):
            new = [i for i in items if i.digest not in self.shown]
            if new:
                parts.append(render_section(tag, new))
                self._mark(tag, new)
        if snap.events:
            parts.append(section("events", snap.events))
        state = [i for i in snap.consciousness if i.digest not in self.shown]
        parts.append(section("agent-consciousness", state))
        self._mark("agent-consciousness", state)
        if snap.eval_result is not None:
            parts.append(eval_result_section(snap.eval_result))
        if notices:
            parts.append(section("notices", notices))
        return "\n\n".join(parts)

    def _messages(self, newest: str) -> list[dict[str, Any]]:
        users = [*self.turns[0::2], newest]
        replies = self.turns[1::2]
        messages: list[dict[str, Any]] = []
        for i, text in enumerate(users):
            blocks: list[dict[str, Any]] = []
            if i == 0 and self.base:
                blocks.append({"type": "text", "text": self.base, "cache_control": CACHE})
            block: dict[str, Any] = {"type": "text", "text": text}
            if i >= len(users) - 2:  # the newest message and the one before: the conversation's breakpoints
                block["cache_control"] = CACHE
            blocks.append(block)
            messages.append({"role": "user", "content": blocks})
            if i < len(replies):
                messages.append({"role": "assistant", "content": replies[i]})
        return messages


def assemble(snap: Snapshot, conversation: Conversation | None = None, active_thread: str | None = None,
             depths: tuple[int, ...] = (), model: MemoryItem | None = None, notice: Notice | None = None) -> Context:
    """The messages of one tick: CONVERSATION's next, or (None) a fresh conversation's first."""
    context = (conversation or Conversation()).build(snap, active_thread, depths, model, notice)
    context.made = Made(snap, active_thread, depths, model)
    return context


def reassemble(context: Context, notice: Notice | None = None) -> Context | None:
    """CONTEXT assembled again from what it was made of, after its conversation changed, its
    notices NOTICE's (None: it was not made by :func:`assemble`)."""
    made = context.made
    if made is None or context.conversation is None:
        return None
    return assemble(made.snap, context.conversation, made.active_thread, made.depths, made.model, notice)


def notice_text(memory: ActiveMemory | None, about: str, content: Any) -> str:
    """What the harness tells a brain once (a format correction, a compaction, who joined),
    as the text of a message: a ``<notices>`` section holding MEMORY's notice item ABOUT
    (:meth:`ActiveMemory.notice`).  A brain without RAM (a subagent whose id names none)
    gets the plain ``ABOUT: CONTENT`` line it always got."""
    if memory is None:
        return f"{about}: {content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)}"
    return section("notices", [memory.notice(about, content)])


def conversation_state(conv: Conversation) -> dict[str, Any]:
    """CONV as plain JSON data: what the next tick's request is built from (the tick state)."""
    return {"base": conv.base, "turns": conv.turns, "shown": sorted(conv.shown),
            "bases": {tag: sorted(bases) for tag, bases in conv.bases.items()}, "thread": conv.thread,
            "depths": list(conv.depths), "chars": conv.chars, "pending": conv.pending, "restarts": conv.restarts,
            "squeeze": conv.squeeze, "note": conv.note, "window": conv.window, "model_told": conv.model_told}


def conversation_from_state(data: dict[str, Any]) -> Conversation:
    """The conversation :func:`conversation_state` gave DATA of."""
    return Conversation(base=data["base"], turns=list(data["turns"]), shown=set(data["shown"]),
                        bases={tag: set(bases) for tag, bases in data["bases"].items()}, thread=data["thread"],
                        depths=tuple(data["depths"]), chars=int(data["chars"]), pending=data["pending"],
                        restarts=int(data["restarts"]), squeeze=int(data["squeeze"]), note=data["note"],
                        window=data["window"], model_told=data["model_told"])
