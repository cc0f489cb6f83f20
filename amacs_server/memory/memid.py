"""MemId: the canonical address of a memory item (docs/ARCHITECTURE.md, Memory and MemIds).

Format: ``<EOT>AGENT:BRAIN:NAME[:VERSION]<EOT>``, e.g.
``<EOT>amacs-instance-1:primary:mood:3<EOT>``.  VERSION is a positive integer or
``latest``; leaving it out also means the latest version.

AGENT is the instance's identity; BRAIN is the id of the agent in the World
whose RAM the item is in: ``primary`` for the primary, the subagent's own id
otherwise (``<EOT>amacs-instance-1:task-3:notes:1<EOT>``).  So the
brain name ``<identity>:<agent-id>`` is exactly ``AGENT:BRAIN``, and no field
holds a colon.  BRAIN is as long as AGENT may be (64), for viewpoint ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import AmacsError

DELIM = "<EOT>"
LATEST = "latest"
_WRAPPED = re.compile(f"{DELIM}([^<\n]*?){DELIM}")


def for_person(text: str) -> str:
    """TEXT with each address written in it shown without its delimiters: the agent is given
    them (and passes them back in its evals); the person reads ``AGENT:BRAIN:NAME:VERSION``."""
    return _WRAPPED.sub(r"\1", text) if DELIM in text else text


@dataclass(frozen=True)
class _Part:
    """The characters one field may have: FIRST for its first, REST for the others."""

    what: str
    first: str
    rest: str
    max_len: int
    _whole: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The whole part at once: a MemId is made for every version written (several a
        # tick); a regex call per character was ~0.3 ms of each tick.
        object.__setattr__(self, "_whole", re.compile(f"{self.first}{self.rest}{{0,{self.max_len - 1}}}"))

    def check(self, part: str, text: str) -> None:
        if self._whole.fullmatch(part):
            return
        if not part:
            raise MemIdError(f"MemId {text!r}: the {self.what} is empty")
        if len(part) > self.max_len:
            raise MemIdError(f"MemId {text!r}: the {self.what} is longer than {self.max_len} characters")
        if not re.fullmatch(self.first, part[0]):
            raise MemIdError(
                f"MemId {text!r}: the {self.what} {part!r} must start with {self.first}, not {part[0]!r}"
            )
        for i, ch in enumerate(part[1:], start=1):
            if not re.fullmatch(self.rest, ch):
                raise MemIdError(
                    f"MemId {text!r}: the {self.what} {part!r} has {ch!r} at {i}; allowed: {self.rest}"
                )


AGENT = _Part("agent", "[A-Za-z]", "[A-Za-z0-9_-]", 64)
BRAIN = _Part("brain", "[a-z]", "[a-z0-9_-]", 64)
NAME = _Part("name", "[a-z0-9_]", "[a-z0-9_.-]", 128)


class MemIdError(AmacsError, ValueError):
    """A string that is not a valid MemId; the message says exactly why."""


@dataclass(frozen=True, order=True)
class MemId:
    """An address: agent, brain, item name, and a version (None = latest)."""

    agent: str
    brain: str
    name: str
    version: int | None = None

    def __post_init__(self) -> None:
        text = f"{self.agent}:{self.brain}:{self.name}"
        AGENT.check(self.agent, text)
        BRAIN.check(self.brain, text)
        NAME.check(self.name, text)
        if self.version is not None and (isinstance(self.version, bool) or not isinstance(self.version, int)
                                         or self.version < 1):
            raise MemIdError(f"MemId {text!r}: version must be a positive integer, got {self.version!r}")

    @classmethod
    def parse(cls, text: str) -> MemId:
        """Parse TEXT; raise :class:`MemIdError` with the precise reason."""
        if not isinstance(text, str):
            raise MemIdError(f"a MemId is a string, got {type(text).__name__}")
        if not (text.startswith(DELIM) and text.endswith(DELIM) and len(text) > 2 * len(DELIM)):
            raise MemIdError(f"MemId {text!r} must start and end with {DELIM}")
        body = text[len(DELIM) : -len(DELIM)]
        parts = body.split(":")
        if len(parts) not in (3, 4):
            raise MemIdError(
                f"MemId {text!r} needs AGENT:BRAIN:NAME or AGENT:BRAIN:NAME:VERSION, got {len(parts)} field(s)"
            )
        version: int | None = None
        if len(parts) == 4:
            raw = parts[3]
            if raw == LATEST:
                version = None
            elif raw.isdigit() and raw[0] != "0":
                version = int(raw)
            else:
                raise MemIdError(f"MemId {text!r}: version must be a positive integer or 'latest', got {raw!r}")
        return cls(parts[0], parts[1], parts[2], version)

    @classmethod
    def given(cls, text: str) -> MemId:
        """Parse TEXT as a caller gives it: with its delimiters (as the agent is shown it) or
        without (as the person is: ``amacs-instance-1:primary:notes:2``)."""
        if not isinstance(text, str) or DELIM in text:
            return cls.parse(text)
        try:
            return cls.parse(f"{DELIM}{text}{DELIM}")
        except MemIdError as err:  # said of the text given, not of its wrapped form
            raise MemIdError(str(err).replace(repr(f"{DELIM}{text}{DELIM}"), repr(text))) from None

    def format(self) -> str:
        """The canonical string; with no version, the latest alias (no version field)."""
        tail = f":{self.version}" if self.version is not None else ""
        return f"{DELIM}{self.agent}:{self.brain}:{self.name}{tail}{DELIM}"

    __str__ = format

    @property
    def base(self) -> str:
        """The identity without a version: the key of every version of the item."""
        return f"{self.agent}:{self.brain}:{self.name}"

    def at(self, version: int | None) -> MemId:
        """The same item at VERSION (None = latest)."""
        return MemId(self.agent, self.brain, self.name, version)

    @classmethod
    def stored(cls, base: str, version: int) -> MemId:
        """Rebuild from a base and version read back from memory.db, not checked again: each was
        checked when its version was written (a MemId is checked when made; LongTermMemory.put
        takes only MemIds).  ~1 us, against ~6 for :meth:`from_base` (a start reads 800 items
        of a home of 20,000 ticks)."""
        agent, brain, name = base.split(":")
        mem_id = object.__new__(cls)
        object.__setattr__(mem_id, "agent", agent)
        object.__setattr__(mem_id, "brain", brain)
        object.__setattr__(mem_id, "name", name)
        object.__setattr__(mem_id, "version", version)
        return mem_id

    @classmethod
    def from_base(cls, base: str, version: int | None = None) -> MemId:
        """Rebuild from :attr:`base` and a version."""
        agent, brain, name = base.split(":")
        return cls(agent, brain, name, version)


def is_valid(text: str) -> bool:
    """True when TEXT parses as a MemId."""
    try:
        MemId.parse(text)
    except MemIdError:
        return False
    return True
