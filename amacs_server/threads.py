"""Threads organize work: at most 3 open, one active, completed ones kept.

The design: docs/ARCHITECTURE.md, Memory and MemIds.

Each thread is a ROM memory item ``thread.<id>`` that only these functions
change, so every change is a version in long-term memory and a completed
thread's evidence and lessons stay searchable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .errors import AmacsError

MAX_OPEN = 3
THREAD_ID = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


class ThreadError(AmacsError, ValueError):
    """A thread request the rules refuse; the message is for the agent."""


@dataclass(frozen=True)
class Thread:
    """One thread of work."""

    id: str
    concern: str = ""
    buffers: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    status: str = "open"  # open | completed
    evidence: Any = None
    learned: str | None = None
    created_tick: int = 0

    def to_content(self) -> dict[str, Any]:
        """The thread as item content."""
        data = asdict(self)
        data["buffers"] = list(self.buffers)
        data["skills"] = list(self.skills)
        return data

    @classmethod
    def from_content(cls, data: dict[str, Any]) -> Thread:
        """Rebuild from item content."""
        return cls(id=data["id"], concern=data.get("concern") or "", buffers=tuple(data.get("buffers") or ()),
                   skills=tuple(data.get("skills") or ()), status=data.get("status", "open"),
                   evidence=data.get("evidence"), learned=data.get("learned"),
                   created_tick=int(data.get("created_tick") or 0))


@dataclass
class ThreadBook:
    """The open threads and which one is active."""

    open: dict[str, Thread] = field(default_factory=dict)
    active: str | None = None

    def _check_id(self, thread_id: str) -> str:
        if not THREAD_ID.fullmatch(thread_id):
            raise ThreadError(f"{thread_id!r} is not a thread id (lowercase letters, digits, . - _; at most 64)")
        return thread_id

    def get(self, thread_id: str) -> Thread:
        """The open thread THREAD_ID."""
        tid = self._check_id(thread_id)
        if tid not in self.open:
            raise ThreadError(f"no open thread {tid!r}; open threads: {', '.join(self.open) or 'none'}")
        return self.open[tid]

    def create(self, thread_id: str, concern: str | None, buffers: Sequence[str] | None, tick: int) -> Thread:
        """Open a thread; it becomes active only if none is."""
        tid = self._check_id(thread_id)
        if tid in self.open:
            raise ThreadError(f"thread {tid!r} is already open")
        if len(self.open) >= MAX_OPEN:
            raise ThreadError(
                f"at most {MAX_OPEN} threads may be open ({', '.join(self.open)}); "
                "complete one with agent-complete-thread first"
            )
        thread = Thread(tid, concern or "", _names(buffers or ()), created_tick=tick)
        self.open[tid] = thread
        if self.active is None:
            self.active = tid
        return thread

    def switch(self, thread_id: str) -> Thread:
        """Make THREAD_ID the active thread; the previous one becomes pending."""
        thread = self.get(thread_id)
        self.active = thread.id
        return thread

    def complete(self, thread_id: str, evidence: object, learned: str | None) -> Thread:
        """Close THREAD_ID with its EVIDENCE (any data) and what was LEARNED."""
        thread = self.get(thread_id)
        done = replace(thread, status="completed", evidence=evidence, learned=learned)
        del self.open[thread.id]
        if self.active == thread.id:
            self.active = None
        return done

    def update(self, thread: Thread) -> Thread:
        """Store a changed open THREAD."""
        self.open[thread.id] = thread
        return thread

    def add_buffer(self, thread_id: str, buffer: str) -> Thread:
        """Add BUFFER (a buffer name or file path) to the thread."""
        thread = self.get(thread_id)
        (name,) = _names([buffer])
        if name in thread.buffers:
            raise ThreadError(f"{name!r} is already a buffer of {thread.id!r}")
        return self.update(replace(thread, buffers=(*thread.buffers, name)))

    def remove_buffer(self, thread_id: str, buffer: str) -> Thread:
        """Remove BUFFER from the thread."""
        thread = self.get(thread_id)
        if buffer not in thread.buffers:
            raise ThreadError(f"{buffer!r} is not a buffer of {thread.id!r}: {list(thread.buffers)}")
        return self.update(replace(thread, buffers=tuple(b for b in thread.buffers if b != buffer)))

    def bind(self, thread_id: str, skill: str) -> Thread:
        """Bind SKILL (already checked to exist) to the thread."""
        thread = self.get(thread_id)
        if skill in thread.skills:
            raise ThreadError(f"skill {skill!r} is already bound to {thread.id!r}")
        return self.update(replace(thread, skills=(*thread.skills, skill)))

    def unbind(self, thread_id: str, skill: str) -> Thread:
        """Unbind SKILL from the thread."""
        thread = self.get(thread_id)
        if skill not in thread.skills:
            raise ThreadError(f"skill {skill!r} is not bound to {thread.id!r}: {list(thread.skills)}")
        return self.update(replace(thread, skills=tuple(s for s in thread.skills if s != skill)))

    def pending(self) -> list[Thread]:
        """Open threads other than the active one."""
        return [t for t in self.open.values() if t.id != self.active]


def _names(names: Sequence[str]) -> tuple[str, ...]:
    """Buffer names or file paths, trimmed, each once (the boundary checked they are not blank)."""
    return tuple(dict.fromkeys(b.strip() for b in names))
