"""What the primary's turn uses of the runtime that runs it, and the settings Emacs sends for it.

Declared here, below the runtime, so the turn names the parts it uses and not the Runtime:
the Runtime holds them (``runtime.py`` checks it), a test's stand-in may be another."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..agents.world import AgentWorld
from ..face import Face
from ..ledger import Ledger
from ..mind import Mind
from ..model_slot import ModelSlot
from ..persistence.transcript import Transcript
from ..turns import Turns


@dataclass
class Settings:
    """Values Emacs sends at hello (its defcustoms)."""

    max_steps: int = 8
    eval_timeout: float = 30.0


class TurnHost(Protocol):
    """The parts the primary's turn uses: the mind it changes, the model it calls, the ledger it
    charges, the turns (whether it was stopped), Emacs, the World, the transcript and the settings."""

    @property
    def settings(self) -> Settings: ...

    @property
    def mind(self) -> Mind: ...

    @property
    def slot(self) -> ModelSlot: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def turns(self) -> Turns: ...

    @property
    def face(self) -> Face: ...

    @property
    def world(self) -> AgentWorld: ...

    @property
    def transcript(self) -> Transcript: ...
