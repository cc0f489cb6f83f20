"""What the primary's turn and the views use of the runtime's parts, and the settings Emacs sends.

Declared here, below the runtime, so the turn and the views name the parts they use and not the
Runtime: the Runtime holds them (``runtime.py`` checks it), a test's stand-in may be another.
Both read the mind, the model slot, the ledger, the turns and the World (:class:`RuntimeParts`);
each host adds what only its room reads."""

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


class RuntimeParts(Protocol):
    """The parts the primary's turn and the views both read: the mind, the model in use, the
    ledger, the turns and the World."""

    @property
    def mind(self) -> Mind: ...

    @property
    def slot(self) -> ModelSlot: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def turns(self) -> Turns: ...

    @property
    def world(self) -> AgentWorld: ...


class TurnHost(RuntimeParts, Protocol):
    """The parts the primary's turn uses: those it shares with the views (the mind it changes, the
    model it calls, the ledger it charges, the turns: whether it was stopped; the World), and
    Emacs, the transcript and the settings."""

    @property
    def settings(self) -> Settings: ...

    @property
    def face(self) -> Face: ...

    @property
    def transcript(self) -> Transcript: ...
