"""What every brain tool shares: one error type the agent sees, and the wrapper that makes it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import AmacsError

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

