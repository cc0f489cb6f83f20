"""What every brain tool shares: the error the agent sees, its wrapper, the runtime as they use it.

:class:`ToolError`, :func:`refusals` and :class:`ToolHost`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..agents.world import AgentWorld
from ..config import Config
from ..errors import AmacsError
from ..memory.active import ActiveMemory
from ..memory.ltm import LongTermMemory
from ..persistence.git_repo import CommitWorker
from ..persistence.scratchpad import ScratchpadLog
from ..persistence.transcript import Transcript
from ..skills import SkillLibrary
from ..state.consciousness import Consciousness
from ..threads import ThreadBook

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
    """The runtime as the brain tools use it (the Runtime is one: runtime.py checks it)."""

    config: Config
    consciousness: Consciousness
    world: AgentWorld
    memory: ActiveMemory
    ltm: LongTermMemory
    scratchpad: ScratchpadLog
    skills: SkillLibrary
    threads: ThreadBook
    transcript: Transcript
    commits: CommitWorker
    run_id: str
    loop: asyncio.AbstractEventLoop

    def agent_set(self, name: str, value: object) -> object: ...

    def sync_threads(self, *, save: bool = True) -> None: ...

    def call_in_loop(self, fn: Callable[[], None]) -> None: ...
