"""The model in use: its backend, its name, what it accepts, and the model servers this server runs.

The configuration lives here because choosing a model rewrites it (the backend,
the base URLs): every reader of the backend's settings reads ``slot.config``.
"""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlsplit

from .config import DEMO_MODEL, Config
from .demo_model import DEMO_AGAIN_NOTE, DemoModel, demo_note
from .errors import Refused
from .inference import sdk
from .inference.anthropic_backend import AnthropicBackend
from .inference.capabilities import CapabilityStore
from .inference.catalog import ModelCatalog
from .inference.openai_backend import OpenAIBackend
from .inference.pricing import is_local, providers_own
from .local_model import TRY_ONLY, LocalBackend, LocalModel, LocalModelError
from .persistence.recovery import StartupError


class ModelSlot:
    """The backend and model every agent's calls go to, switched by the person between calls."""

    def __init__(self, config: Config, notes: list[str]) -> None:
        """Start the local or demo model CONFIG asks for (their notes go to NOTES) and make the backend."""
        self.config = config
        self.local = self._start_local(notes)  # None unless AMACS_LOCAL_MODEL names a model to serve
        self.demo = self._start_demo(notes)  # None unless AMACS_DEMO asks for the demo model
        self.backend_name = config.backend
        self.model = config.model
        # OPENAI_BASE_URL is the OpenAI-compatible backend's: the Anthropic one has ANTHROPIC_BASE_URL.
        self.backend = self._make_backend(config.backend,
                                          self.config.openai_base_url if config.backend == "openai" else None,
                                          config.model)
        # What the model accepts: asked once the loop runs (learn), and on every switch.
        self.catalog = ModelCatalog(CapabilityStore.open(config.home / "model-capabilities.json"))
        self.catalog.setting_window = config.context_window or (self.local.context if self.local else None)

    def _start_local(self, notes: list[str]) -> LocalModel | None:
        """Start the model server this server runs (AMACS_LOCAL_MODEL), and point the
        OpenAI-compatible backend at it."""
        cfg = self.config
        if cfg.local_model is None or cfg.local_python is None:
            return None
        local = LocalModel(cfg.local_python, cfg.local_model, cfg.home / "logs" / "local-model.log")
        try:
            local.start()
        except (LocalModelError, OSError) as err:
            raise StartupError(f"cannot start the local model: {err}") from err
        self.config = replace(cfg, openai_base_url=local.base_url)
        notes.append(TRY_ONLY)
        return local

    def _start_demo(self, notes: list[str]) -> DemoModel | None:
        """Serve the scripted demo model (AMACS_DEMO) from a thread of this server, until it stops."""
        if not self.config.demo:
            return None
        try:
            demo = DemoModel().start()
        except OSError as err:
            raise StartupError(f"cannot start the demo model: {err}") from err
        keyed = bool(self.config.api_key or self.config.openai_api_key)
        notes.append(DEMO_AGAIN_NOTE if self.config.demo_again else demo_note(keyed))
        return demo

    def _make_backend(self, name: str, base_url: str | None, model: str) -> AnthropicBackend | OpenAIBackend:
        cfg = self.config
        sdk.preload(name)  # its SDK only, in a thread (after the port line at start-up: serve)
        if name == "openai":
            backend = (LocalBackend(self.local, cfg.request_timeout)
                       if self.local is not None and base_url in (None, self.local.base_url)
                       else OpenAIBackend(cfg.openai_api_key, base_url, cfg.request_timeout))
            backend.schema_form_of = lambda: self.catalog.caps.schema_form  # what the server was found to take
            return backend
        if self.demo is not None and model == DEMO_MODEL and base_url in (None, self.demo.base_url):
            # The demo model wants no key; the SDK wants one, so it gets a word that is none.
            return AnthropicBackend("no-key-for-the-demo", self.demo.base_url, cfg.request_timeout)
        return AnthropicBackend(cfg.api_key, base_url or cfg.base_url, cfg.request_timeout)

    def url(self) -> str | None:
        """The base URL the backend in use is configured with (None: its provider's own)."""
        return self.config.openai_base_url if self.backend_name == "openai" else self.config.base_url

    def endpoint(self) -> str | None:
        """The model's endpoint when it is not its backend's default, in a word or two for the
        header: "demo", "local", or the base URL's host (and port); None for the provider's own."""
        if self.backend_name == "anthropic" and self.demo is not None and self.model == DEMO_MODEL:
            return "demo"
        if self.backend_name == "openai" and self.local is not None and self.config.openai_base_url == self.local.base_url:
            return "local"
        url = self.url()
        host = urlsplit(url).netloc if url else ""
        return None if not host or providers_own(host) else host

    def on_this_machine(self) -> bool:
        """Whether the model endpoint is a server on this machine (the local model's, or a base URL on
        127.0.0.1 or ::1): a model there with no price costs nothing."""
        return self.config.local_model is not None or is_local(self.url())

    def own(self) -> bool:
        """Whether this server runs the model in use itself (the local model, or the demo model)."""
        return self.config.local_model is not None or (self.demo is not None and self.model == DEMO_MODEL)

    def learn(self) -> None:
        """Take what the home knows of the model in use, and ask its backend (in a task of the
        loop: nothing waits for it but the first model call) when that is older than a day."""
        # The demo model is scripted here: there is nothing to ask it (its first reply waited for the
        # question's 404, 0.1-0.5 s after the SDK's import).
        ask = self.backend if self.config.has_credentials and self.endpoint() != "demo" else None
        self.catalog.use(self.backend_name, self.url(), self.model, ask)
        if isinstance(self.backend, LocalBackend) and self.catalog.caps.schema_form is None:
            self.catalog.caps = replace(self.catalog.caps, schema_form=LocalBackend.schema_form)

    def switch(self, backend: str, model: str, base_url: str | None, window: int | None = None) -> dict[str, object]:
        """Switch backend and model from the next call on (loop thread); WINDOW, the person's
        window for it (None: AMACS_CONTEXT_WINDOW's, else what its server says)."""
        if backend not in ("anthropic", "openai"):
            raise Refused(f"backend {backend!r}: use anthropic or openai")
        if not model.strip():
            raise Refused("name a model")
        if window is not None and window <= 0:
            raise Refused(f"window {window}: a number of tokens above 0")
        self.backend = self._make_backend(backend, base_url or None, model.strip())
        self.backend_name, self.model = backend, model.strip()
        url = base_url or None
        self.config = replace(self.config, backend=backend,
                              openai_base_url=(url if backend == "openai" else None) or self.config.openai_base_url,
                              base_url=(url if backend == "anthropic" else None) or self.config.base_url,
                              demo=self.demo is not None and backend == "anthropic" and self.model == DEMO_MODEL)
        self.learn()
        self.catalog.setting_window = window or self.config.context_window or (
            self.local.context if self.local is not None and isinstance(self.backend, LocalBackend) else None)
        key_ok = self.config.has_credentials
        return {"backend": backend, "model": self.model, "key_ok": key_ok, "endpoint": self.endpoint(),
                **({} if key_ok else {"missing": self.config.missing_key_message()})}

    async def aclose(self) -> None:
        """Close the model client's connections (on the loop they were made on)."""
        close = getattr(self.backend, "aclose", None)
        if close is not None:
            await close()

    def stop(self) -> None:
        """Stop the model servers this server runs."""
        if self.local is not None:
            self.local.stop()
        if self.demo is not None:
            self.demo.stop()
