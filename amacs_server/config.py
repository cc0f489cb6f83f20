"""Server configuration, read once from the environment at start-up."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import AmacsError

DEFAULT_MODEL = "claude-sonnet-5-5"
LOCAL_ALIAS = "smollm2"  # the name a local model (AMACS_LOCAL_MODEL) is served under
DEMO_MODEL = "demo"  # the name of the scripted demo model (AMACS_DEMO)


def builtin_skills_dir() -> Path:
    """The folder of the built-in skills: the core skill (the system prompt) and the templates.

    Package data, ``amacs_server/builtin_skills``: in a checkout a link to
    ``skills/``, in an installed wheel a copy of it.  The package is always a
    folder (never imported from a zip), so it is found next to this file:
    ``importlib.resources`` costs ~7 ms of start-up.
    """
    return Path(__file__).parent / "builtin_skills"


class ConfigError(AmacsError, ValueError):
    """Raised when an environment variable has a value the server cannot use."""


@dataclass(frozen=True)
class Config:
    """What the server needs to know about its surroundings.

    ``api_key`` is kept out of ``repr`` so it never reaches a log line.
    """

    home: Path
    model: str = DEFAULT_MODEL
    backend: str = "anthropic"  # or "openai": any OpenAI-compatible chat endpoint
    openai_base_url: str | None = None
    openai_api_key: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    token: str | None = field(default=None, repr=False)
    budget_limit: float | None = None  # None: keep the one in consciousness.el (default 5)
    request_timeout: float = 600.0
    identity: str = "amacs-instance-1"
    agent_pool: int = 8
    max_tasks: int = 50
    max_depth: int = 3
    max_agents: int = 100
    event_queue: int = 100
    inbox_limit: int = 50  # the person's inputs waiting for the primary at most
    wait_timeout: float = 60.0
    context_window: int | None = None  # the model's input window when its backend cannot say
    mcp_eager: bool = False  # AMACS_MCP_START=eager: the MCP servers start with the server, not at the first model call
    builtin_skills: Path = field(default_factory=builtin_skills_dir)
    # A GGUF file and the Python (of a venv with llama-cpp-python[server]) that serves it:
    # the server runs the model itself (local_model.py) and uses it as its OpenAI-compatible endpoint.
    local_model: Path | None = None
    local_python: Path | None = None
    # AMACS_PRICES: the person's prices given at start (an experiment's spec gives its runs'), as
    # model -> (input, output, cache_write, cache_read) dollars per million tokens; the entries of
    # Emacs's `amacs-price-table' win over them at hello.
    prices: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)
    # AMACS_DEMO=1: the server serves the scripted demo model itself (demo_model.py) and talks to it.
    demo: bool = False
    # The demo again, unasked: the home's last tick talked to it and nothing else is chosen now
    # (demo_as_left); the greeting says so in one line instead of the demo's note.
    demo_again: bool = False
    # An experiment run's turns (AMACS_DRIVER_TURNS, a JSON list): no person is there, and the
    # person's powers are the driver's alone, to type these (methods.person_power).
    driver_turns: tuple[str, ...] | None = None

    def secrets(self) -> dict[str, str | None]:
        """Every secret the server holds, by name (the scrubber's)."""
        return {"ANTHROPIC_API_KEY": self.api_key, "OPENAI_API_KEY": self.openai_api_key, "AMACS_TOKEN": self.token}

    @property
    def skills_dir(self) -> Path:
        """The built-in skills shipped with the server."""
        return self.builtin_skills

    @property
    def has_credentials(self) -> bool:
        """True when the model endpoint can be called (a local OpenAI-compatible one needs no key)."""
        if self.backend == "openai":
            return bool(self.openai_base_url or self.openai_api_key or self.local_model)
        return bool(self.api_key or self.demo)

    def missing_key_message(self) -> str:
        """One line that says how to give the server a key or another endpoint.

        With ANTHROPIC_BASE_URL set the endpoint is chosen: only its key is missing.  Otherwise
        the demo model comes first (it answers in a second, with nothing to install or pay), then the
        key, in one row of a 120-column terminal: the other ways (a local model, a server of your
        own; amacs-api-key, auth-source) are docs/local-models.md's and docs/configuration.md's."""
        if self.backend == "anthropic" and self.base_url:
            return (f"No API key for {self.base_url} (ANTHROPIC_BASE_URL): set ANTHROPIC_API_KEY (or "
                    "customize `amacs-api-key'), or switch to a server that needs none with M-x amacs-set-model "
                    "(backend openai); then M-x amacs-restart. Or try AMACS with a small model on this machine, "
                    "no key at all: M-x amacs-use-local-model (or ./amacs --local).")
        return ("No API key: try M-x amacs-demo, or set ANTHROPIC_API_KEY and M-x amacs-restart; "
                "other models: docs/local-models.md.")

    def no_key_answer(self) -> str:
        """What an input sent with no key gets: what to do with it, not the note again.

        The shell's welcome says to ask "what can you do?"; with no key that input re-printed the
        no-key note under the same note.  The demo model does not answer it by itself: the person
        sends it again (M-p RET) once the demo runs, so the line says both steps."""
        if self.backend == "anthropic" and self.base_url:
            return self.missing_key_message()
        return ("No API key, no answer: M-x amacs-demo starts a demo model, then M-p RET sends this again; "
                "or set ANTHROPIC_API_KEY.")


def _float_env(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as err:
        raise ConfigError(f"{name}={raw!r} is not a number") from err


def _turns_env(env: dict[str, str]) -> tuple[str, ...] | None:
    raw = env.get("AMACS_DRIVER_TURNS")
    if raw is None:
        return None
    try:
        turns = json.loads(raw)
    except ValueError:
        turns = None
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise ConfigError("AMACS_DRIVER_TURNS must be a JSON list of strings (an experiment run's turns)")
    return tuple(turns)


def _prices_env(env: dict[str, str]) -> dict[str, tuple[float, float, float, float]]:
    """AMACS_PRICES: a JSON object, model -> [input, output, cache_write, cache_read] dollars per million."""
    raw = env.get("AMACS_PRICES")
    if not raw:
        return {}
    try:
        table = json.loads(raw)
        out = {}
        for model, numbers in table.items():
            a, b, c, d = (float(n) for n in numbers)
            if min(a, b, c, d) < 0:
                raise ValueError("a price is negative")
            out[str(model)] = (a, b, c, d)
        return out
    except (ValueError, TypeError, AttributeError) as err:
        raise ConfigError(f"AMACS_PRICES={raw!r}: must be a JSON object of model -> [input, output, cache_write, "
                          f"cache_read] dollars per million tokens ({err})") from err


def demo_as_left(config: Config, env: dict[str, str], last_model: object) -> Config:
    """CONFIG on the demo model again when the home's last tick was on it (LAST_MODEL, its tick
    state's) and ENV chooses nothing else: no key, no base URL, no backend but Anthropic's (the
    demo's), no local model, no model but the demo (a fork of such a home is given those).  A key in the environment is the person's new choice: Claude, as asked."""
    chose_other = (env.get("ANTHROPIC_BASE_URL") or env.get("OPENAI_BASE_URL")
                   or (env.get("AMACS_BACKEND") or "anthropic").lower() != "anthropic"
                   or env.get("AMACS_MODEL") not in (None, "", DEMO_MODEL))
    if config.demo or config.local_model is not None or config.has_credentials or chose_other \
            or last_model != DEMO_MODEL:
        return config
    return replace(config, demo=True, demo_again=True, backend="anthropic", model=DEMO_MODEL)


def load_config(env: dict[str, str] | None = None) -> Config:
    """Build a :class:`Config` from ENV (default: the process environment)."""
    env = dict(os.environ if env is None else env)
    home = Path(env.get("AMACS_HOME") or Path.home() / ".agent").expanduser()
    backend = (env.get("AMACS_BACKEND") or "anthropic").lower()
    if backend not in ("anthropic", "openai"):
        raise ConfigError(f"AMACS_BACKEND={backend!r}: use anthropic or openai")
    local_model = Path(env["AMACS_LOCAL_MODEL"]).expanduser() if env.get("AMACS_LOCAL_MODEL") else None
    local_python = Path(env["AMACS_LOCAL_PYTHON"]).expanduser() if env.get("AMACS_LOCAL_PYTHON") else None
    if local_model is not None and local_python is None:
        raise ConfigError("AMACS_LOCAL_MODEL is set but AMACS_LOCAL_PYTHON is not: name the Python of the venv "
                          "scripts/local-model.sh made (.venv-local/bin/python)")
    if local_model is not None:
        backend = "openai"  # the model server this server runs speaks the OpenAI API
    demo = (env.get("AMACS_DEMO") or "") not in ("", "0")
    if demo and local_model is not None:
        raise ConfigError("AMACS_DEMO and AMACS_LOCAL_MODEL are both set: choose the demo model or the local one")
    if demo:
        backend = "anthropic"  # the demo model speaks the Messages API
    return Config(
        backend=backend,
        openai_base_url=env.get("OPENAI_BASE_URL") or None,
        openai_api_key=env.get("OPENAI_API_KEY") or None,
        home=home,
        model=DEMO_MODEL if demo else env.get("AMACS_MODEL") or (LOCAL_ALIAS if local_model else DEFAULT_MODEL),
        api_key=env.get("ANTHROPIC_API_KEY") or None,
        base_url=env.get("ANTHROPIC_BASE_URL") or None,
        token=env.get("AMACS_TOKEN") or None,
        budget_limit=_float_env(env, "AMACS_BUDGET_LIMIT", -1.0) if env.get("AMACS_BUDGET_LIMIT") else None,
        request_timeout=_float_env(env, "AMACS_REQUEST_TIMEOUT", 600.0),
        identity=env.get("AMACS_IDENTITY") or "amacs-instance-1",
        agent_pool=int(_float_env(env, "AMACS_AGENT_POOL", 8)),
        max_tasks=int(_float_env(env, "AMACS_MAX_TASKS", 50)),
        max_depth=int(_float_env(env, "AMACS_MAX_DEPTH", 3)),
        max_agents=int(_float_env(env, "AMACS_MAX_AGENTS", 100)),
        event_queue=int(_float_env(env, "AMACS_EVENT_QUEUE", 100)),
        inbox_limit=int(_float_env(env, "AMACS_INBOX_LIMIT", 50)),
        wait_timeout=_float_env(env, "AMACS_WAIT_TIMEOUT", 60.0),
        context_window=int(_float_env(env, "AMACS_CONTEXT_WINDOW", 0)) or None,
        local_model=local_model,
        local_python=local_python,
        demo=demo,
        mcp_eager=(env.get("AMACS_MCP_START") or "").lower() == "eager",
        prices=_prices_env(env),
        driver_turns=_turns_env(env),
    )
