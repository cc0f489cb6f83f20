"""What every brain tool shares: the error the agent sees, its wrapper, the runtime as they use it.

:class:`ToolError`, :func:`refusals` and :class:`ToolHost`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..agents.world import AgentWorld
from ..errors import AmacsError
from ..mind import Mind
from ..persistence.transcript import Transcript
from ..turns import Turns

F = TypeVar("F", bound=Callable[..., Any])


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
    """The parts the brain tools use (the Runtime holds them: runtime.py checks it)."""

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
