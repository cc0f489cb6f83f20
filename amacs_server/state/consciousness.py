"""Consciousness: the agent's working state (``consciousness.el``), with ROM fields enforced.

The design: docs/ARCHITECTURE.md, Memory and MemIds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from sexpdata import Symbol

from ..errors import AmacsError
from ..text.lisp import alist_dumps, alist_loads

# Fields the harness owns; the agent may read them but never change them.
HARNESS_FIELDS = frozenset(
    {"identity", "current_tick", "current_time", "budget", "last_eval_result"}
)
EFFORTS = ("low", "medium", "high", "xhigh", "max")  # the efforts api-settings may ask for, least first
DEPTH_FIELDS = (
    "chat_context_depth",
    "monologue_context_depth",
    "global_scratchpad_depth",
    "thread_scratchpad_depth",
)


class ConsciousnessError(AmacsError, ValueError):
    """A change to consciousness the rules refuse; its message is shown to the agent."""


@dataclass(frozen=True)
class PersonDecision:
    """The person's answer when `amacs-eval-confirm' asked about an eval (ACTION ``eval``) or
    about what it would do (``write``, ``delete``, ``rename to``, ``copy to``, ``run``: TARGET
    the file or program)."""

    action: str
    target: str | None
    allowed: bool

    def to_dict(self) -> dict[str, Any]:
        """As the transcript and the agent read it."""
        return {"action": self.action, "target": self.target, "allowed": self.allowed}


@dataclass
class EvalResult:
    """The outcome of one eval: errors are data (docs/ARCHITECTURE.md, The tick: act).

    ``files_read`` and ``files_written`` are the absolute names of the files the
    eval read and wrote, as Emacs noted them (``agents/files_seen.py`` keeps them per agent).
    ``decisions`` are the person's, when Emacs asked them about it (`amacs-eval-confirm')."""

    success: bool
    result: str | None = None
    error: str | None = None
    skipped: bool = False
    files_read: tuple[str, ...] = ()
    files_written: tuple[str, ...] = ()
    decisions: tuple[PersonDecision, ...] = ()
    # The person's powers this eval's code tried and was refused (docs/ARCHITECTURE.md, Trust).
    refused: tuple[str, ...] = ()

    @classmethod
    def skipped_result(cls) -> EvalResult:
        """The result recorded when a response had no eval."""
        return cls(success=True, skipped=True)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict with kebab-able keys, in the RFC's field order.

        The files come last, and only when there are some: an eval that touched no
        file reads as it always did."""
        out: dict[str, Any] = {
            "success": self.success,
            "result": self.result,
            "error": self.error,
            "skipped": self.skipped,
        }
        if self.files_read:
            out["files_read"] = list(self.files_read)
        if self.files_written:
            out["files_written"] = list(self.files_written)
        if self.decisions:
            out["person_decisions"] = [d.to_dict() for d in self.decisions]
        if self.refused:
            out["refused"] = list(self.refused)
        return out


@dataclass
class Budget:
    """Harness-managed cost accounting (``budget``)."""

    cost_so_far: float = 0.0
    budget_limit: float = 5.0

    @property
    def pressure(self) -> str:
        """``low`` below half the limit, ``medium`` below 80 %, else ``high``."""
        if self.budget_limit <= 0:
            return "high"
        used = self.cost_so_far / self.budget_limit
        return "low" if used < 0.5 else "medium" if used < 0.8 else "high"

    def to_dict(self) -> dict[str, Any]:
        """Budget as the RFC shows it, pressure included."""
        return {
            "cost_so_far": round(self.cost_so_far, 6),
            "budget_limit": self.budget_limit,
            "pressure": Symbol(self.pressure),
        }


@dataclass
class ApiSettings:
    """Agent-controlled inference settings (``api-settings``)."""

    temperature: float = 1.0
    top_p: float = 1.0
    thinking: bool = False
    max_tokens: int = 8192
    effort: str | None = None  # low, medium, high, xhigh, max; None: the model's default

    def validate(self) -> None:
        """Refuse values the API would reject, with a message for the agent."""
        if not 0.0 <= self.temperature <= 1.0:
            raise ConsciousnessError(f"temperature must be within 0..1, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConsciousnessError(f"top-p must be within (0, 1], got {self.top_p}")
        if not 1 <= self.max_tokens <= 128_000:
            raise ConsciousnessError(f"max-tokens must be within 1..128000, got {self.max_tokens}")
        if self.effort not in (None, *EFFORTS):
            raise ConsciousnessError(f"effort must be one of {', '.join(EFFORTS)} or nil, got {self.effort!r}")


@dataclass
class Consciousness:
    """Every field of ``consciousness.el``."""

    identity: str = "amacs-instance-1"
    current_tick: int = 0
    current_time: str = ""
    mood: str = "curious"
    confidence: float = 0.5
    active_thread: str | None = None
    pending_threads: list[Any] = field(default_factory=list)
    last_eval_result: EvalResult | None = None
    budget: Budget = field(default_factory=Budget)
    chat_context_depth: int = 5
    monologue_context_depth: int = 20
    global_scratchpad_depth: int = 5
    thread_scratchpad_depth: int = 10
    api_settings: ApiSettings = field(default_factory=ApiSettings)

    def begin_tick(self, tick: int, now: datetime | None = None) -> None:
        """Harness step: stamp the tick number and the time."""
        self.current_tick = tick
        moment = now or datetime.now(UTC)
        self.current_time = moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def to_dict(self) -> dict[str, Any]:
        """The alist shape of ``consciousness.el``, in its order."""
        return {
            "identity": self.identity,
            "current_tick": self.current_tick,
            "current_time": self.current_time,
            "mood": self.mood,
            "confidence": self.confidence,
            "active_thread": self.active_thread,
            "pending_threads": self.pending_threads or None,
            "last_eval_result": self.last_eval_result.to_dict() if self.last_eval_result else None,
            "budget": self.budget.to_dict(),
            "chat_context_depth": self.chat_context_depth,
            "monologue_context_depth": self.monologue_context_depth,
            "global_scratchpad_depth": self.global_scratchpad_depth,
            "thread_scratchpad_depth": self.thread_scratchpad_depth,
            "api_settings": asdict(self.api_settings),
        }

    def to_elisp(self) -> str:
        """Text for ``consciousness.el``: one alist Emacs can ``read``."""
        return alist_dumps(self.to_dict()) + "\n"

    @classmethod
    def from_elisp(cls, text: str) -> Consciousness:
        """Read ``consciousness.el`` back; unknown fields are ignored."""
        data = alist_loads(text)
        c = cls()
        for name in ("identity", "mood", "active_thread", "current_time"):  # the time: a restart's next
            if isinstance(data.get(name), str):  # request shows the same clock item as without it
                setattr(c, name, data[name])
        for name in ("current_tick", *DEPTH_FIELDS):
            if isinstance(data.get(name), int):
                setattr(c, name, data[name])
        if isinstance(data.get("confidence"), int | float):
            c.confidence = float(data["confidence"])
        budget = data.get("budget") or {}
        if isinstance(budget, dict) and isinstance(budget.get("cost_so_far"), int | float):
            c.budget.cost_so_far = float(budget["cost_so_far"])
        if isinstance(budget, dict) and isinstance(budget.get("budget_limit"), int | float):
            c.budget.budget_limit = float(budget["budget_limit"])
        api = data.get("api_settings") or {}
        if isinstance(api, dict):
            for key in ("temperature", "top_p", "max_tokens"):
                if isinstance(api.get(key), int | float):
                    setattr(c.api_settings, key, type(getattr(c.api_settings, key))(api[key]))
            c.api_settings.thinking = bool(api.get("thinking"))
            if api.get("effort") in EFFORTS:
                c.api_settings.effort = str(api["effort"])
        ler = data.get("last_eval_result")
        if isinstance(ler, dict):
            c.last_eval_result = EvalResult(
                success=bool(ler.get("success")),
                result=ler.get("result"),
                error=ler.get("error"),
                skipped=bool(ler.get("skipped")),
            )
        return c

    def agent_set(self, name: str, value: Any) -> Any:
        """Change field NAME on the agent's behalf, enforcing the rules of §3.2.

        Returns the new value.  Raises :class:`ConsciousnessError` with a message
        for the agent when the field is harness-owned, unknown, or VALUE is bad.
        """
        key = name.strip().lstrip(":").replace("-", "_")
        if key in HARNESS_FIELDS:
            raise ConsciousnessError(
                f"`{key.replace('_', '-')}' is owned by the harness (ROM) and cannot be changed"
            )
        if key == "mood":
            if not isinstance(value, str) or not value:
                raise ConsciousnessError("mood must be a non-empty string")
            self.mood = value
        elif key == "confidence":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ConsciousnessError(f"confidence must be a number within 0..1, got {value!r}")
            self.confidence = float(value)
        elif key in DEPTH_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1000:
                raise ConsciousnessError(f"{name} must be an integer within 0..1000, got {value!r}")
            setattr(self, key, value)
        elif key == "active_thread":
            raise ConsciousnessError("threads change through agent-switch-thread, not directly")
        elif key == "api_settings" and isinstance(value, dict):
            self._set_api_settings({k.replace("-", "_"): v for k, v in value.items()})
            return asdict(self.api_settings)
        elif key.startswith("api_settings_"):
            sub = key.removeprefix("api_settings_")
            self._set_api_settings({sub: value})
            return getattr(self.api_settings, sub)
        else:
            raise ConsciousnessError(f"unknown consciousness field `{name}'")
        return getattr(self, key)

    def _set_api_settings(self, changes: dict[str, Any]) -> None:
        """Apply CHANGES to api-settings all together, or none of them."""
        candidate = ApiSettings(**asdict(self.api_settings))
        for key, value in changes.items():
            if key not in asdict(candidate):
                raise ConsciousnessError(
                    f"api-settings has no {key.replace('_', '-')}; its fields are "
                    "temperature, top-p, thinking, effort, max-tokens"
                )
            if key == "thinking":
                candidate.thinking = bool(value)
            elif key == "effort":
                candidate.effort = None if value in (None, False, "", "nil") else str(value).lstrip(":")
            elif isinstance(value, bool) or not isinstance(value, int | float):
                raise ConsciousnessError(f"api-settings {key.replace('_', '-')} must be a number, got {value!r}")
            else:
                setattr(candidate, key, int(value) if key == "max_tokens" else float(value))
        candidate.validate()
        self.api_settings = candidate
