"""What the primary's turn uses of the runtime that runs it, and the settings Emacs sends for it.

Declared here, below the runtime, so the turn names these members and not the Runtime: the
Runtime is one TurnHost (``runtime.py`` checks it), a test's stand-in may be another."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..agents.world import AgentWorld
from ..config import Config
from ..context.assemble import Conversation
from ..face import Face
from ..inference.anthropic_backend import AnthropicBackend
from ..inference.catalog import ModelCatalog
from ..inference.openai_backend import OpenAIBackend
from ..inference.pricing import Tally, Usage
from ..memory.active import ActiveMemory
from ..memory.ltm import LongTermMemory
from ..persistence.chat_log import ChatLog
from ..persistence.git_repo import CommitWorker
from ..persistence.monologue import MonologueLog
from ..persistence.scratchpad import ScratchpadLog
from ..persistence.transcript import Transcript
from ..skills import SkillLibrary
from ..state.consciousness import Consciousness, EvalResult
from ..threads import Thread


@dataclass
class Settings:
    """Values Emacs sends at hello (its defcustoms)."""

    max_steps: int = 8
    eval_timeout: float = 30.0


class TurnHost(Protocol):
    """The runtime as the primary's turn sees it: the mind's state, the logs a tick writes, the
    model in use and its ledger, Emacs, and the World of agents."""

    config: Config
    settings: Settings
    face: Face
    world: AgentWorld
    consciousness: Consciousness
    conversation: Conversation
    memory: ActiveMemory
    ltm: LongTermMemory
    skills: SkillLibrary
    transcript: Transcript
    chat_log: ChatLog
    monologue: MonologueLog
    scratchpad: ScratchpadLog
    commits: CommitWorker
    catalog: ModelCatalog
    model: str
    backend_name: str
    tick_tally: Tally
    halted: str | None  # why the running turn was stopped (None: it was not)
    last_eval: tuple[int, EvalResult] | None  # the last eval that ran, for the hub

    @property
    def backend(self) -> AnthropicBackend | OpenAIBackend: ...

    def charge(self, usage: Usage, model: str | None = None) -> float | None: ...

    def active_thread(self) -> Thread | None: ...

    def system_prompt(self) -> str: ...

    def tracked_files(self) -> list[Path]: ...

    def save_consciousness(self) -> None: ...

    def save_tick_state(self) -> None: ...

    def tell_ticked(self) -> None: ...

