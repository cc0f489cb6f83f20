"""What every brain tool shares: the error the agent sees, its wrapper, the parts it is handed.

:class:`ToolError`, :func:`refusals`, :class:`ToolHost` and :func:`parts` (what a tool takes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar

from ..agents.world import AgentWorld
from ..errors import AmacsError
from ..mind import Mind
from ..persistence.transcript import Transcript
from ..turns import Turns

F = TypeVar("F", bound=Callable[..., Any])
Part = Literal["mind", "world", "transcript", "host"]
Takes = tuple[Part, ...]
"""What a tool is handed before what Emacs sends: parts of the :class:`ToolHost`, in order, by name
(``"host"``: the host whole, for a tool that uses more than two of its parts)."""


class ToolError(AmacsError, ValueError):
    """A brain-tool call that failed; the message is for the agent."""


def refusals(*kinds: type[Exception], prefix: str = "") -> Callable[[F], F]:
    """Turn the rule errors KINDS raised inside a tool into :class:`ToolError` (message after PREFIX)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def tool(*args: Any) -> Any:
            try:
                return fn(*args)
            except kinds as err:
                raise ToolError(f"{prefix}{err}") from err

        return tool  # type: ignore[return-value]

    return wrap


class ToolHost(Protocol):
    """The parts the brain tools are handed (the Runtime holds them: runtime.py checks it).

    Each family of tools says which it takes (its module's ``TAKES``, :data:`Takes`): a tool that
    uses one part or two takes those, and only one that uses more takes the host whole."""

    @property
    def mind(self) -> Mind: ...

    @property
    def world(self) -> AgentWorld: ...

    @property
    def transcript(self) -> Transcript: ...

    @property
    def turns(self) -> Turns: ...  # the loop thread an EPC thread hands work to

    @property
    def run_id(self) -> str: ...


def parts(host: ToolHost, takes: Takes) -> tuple[Any, ...]:
    """What a tool that TAKES these is handed first: those parts of HOST, in order."""
    return tuple(host if part == "host" else getattr(host, part) for part in takes)
