"""The model SDKs, imported off the start-up path.

``anthropic`` takes ~1.3 s to import and ``openai`` ~0.5 s: more than the whole
start-up budget.  The server prints its port first and imports the SDK of the
backend in use in a thread (:func:`preload`); the other is imported only when
``amacs-set-model`` switches to it.  A backend module names its SDK through a
:class:`LazyModule`, whose first attribute access waits for the import (in the
thread if one runs, else here); :meth:`LazyModule.ready` waits without blocking
the event loop, so the first model call awaits it before it touches the SDK.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import os
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

log = logging.getLogger("amacs")


class LazyModule:
    """A module imported on first use (or ahead of it, in a thread, by :meth:`preload`)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # Loops waiting (in ready) for the preload under way; DONE once it has ended.
        self._waiting = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._done = False

    @property
    def loaded(self) -> bool:
        """True once the module is imported."""
        return self._module is not None

    def load(self) -> ModuleType:
        """The module, imported now if no one did it yet (waits for a preload under way)."""
        module = self._module
        if module is not None:
            return module
        with self._lock:
            if self._module is None:
                started = time.perf_counter()
                self._module = importlib.import_module(self._name)
                ssl_context()  # here too: off the loop, and before a warm server forks
                # The SDK's ~150,000 objects live as long as the process: out of the collector's
                # sight, each full collection no longer walks them (~60-170 ms with the loop held,
                # mid-run, with 50 subagents' calls at once).  Acyclic objects are still freed as ever.
                gc.freeze()
                log.info("imported %s in %.0f ms", self._name, (time.perf_counter() - started) * 1000)
            return self._module

    def preload(self) -> None:
        """Import the module in a daemon thread, unless it is imported or being imported.

        While start-up holds preloads (:func:`hold`), the import waits for :func:`release`.
        """
        if self._module is not None or self._thread is not None:
            return
        if _held:
            _pending.add(self)
            return
        self._thread = threading.Thread(target=self._preload, name=f"import-{self._name}", daemon=True)
        self._thread.start()

    def _preload(self) -> None:
        log.info("importing %s in a thread", self._name)
        try:
            self.load()
        except Exception:  # noqa: BLE001 - the first use raises it again, where it is reported
            log.exception("importing %s failed", self._name)
        finally:
            with self._waiting:
                self._done = True
                waiters, self._waiters = self._waiters, []
            for loop, future in waiters:
                try:
                    loop.call_soon_threadsafe(_wake, future)
                except RuntimeError:  # that loop is closed: nobody waits there any more
                    pass

    async def ready(self) -> ModuleType:
        """The module, once imported; the loop goes on meanwhile.

        A preload under way, or held until start-up releases it, is waited for, without a
        thread: importing here instead started the import (~1 s of a core, holding the GIL in
        long stretches) while hello was answered and the methods published; and a worker thread
        blocked on the import held the process's exit (the loop's executor is joined) until it
        ended, ~1.2 s after Emacs left.  Without a preload, the import runs in a worker thread."""
        if self._module is not None:
            return self._module
        if self._thread is not None or self in _pending:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            with self._waiting:
                if not self._done:
                    self._waiters.append((asyncio.get_running_loop(), future))
                    waiting = True
                else:
                    waiting = False
            if waiting:
                await future
            return self.load()  # imported now (or its error raised here, where it is reported)
        return await asyncio.to_thread(self.load)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.load(), attr)


_ssl_contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_ssl_lock = threading.Lock()


def ssl_context() -> ssl.SSLContext:
    """The TLS context the model clients check servers with: the one each client would make
    itself (httpx2's default, which reads SSL_CERT_FILE and SSL_CERT_DIR), made once per process
    and value of those two.  Each new client made its own: 0.17-0.35 s of the loop on a loaded
    machine, on the first model call's path (the SDK's import makes it, in its thread)."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _ssl_lock:
        context = _ssl_contexts.get(key)
        if context is None:
            import httpx2

            context = _ssl_contexts[key] = httpx2.create_ssl_context()
        return context


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


anthropic = LazyModule("anthropic")
openai = LazyModule("openai")
SDKS = {"anthropic": anthropic, "openai": openai}


_held = False
_pending: set[LazyModule] = set()


def preload(backend: str) -> None:
    """Start importing BACKEND's SDK ("anthropic" or "openai") in a thread."""
    SDKS[backend].preload()


def hold() -> None:
    """Keep preloads waiting until :func:`release` (the server's start-up, until the port is out)."""
    global _held
    _held = True


def release() -> None:
    """Start the preloads asked for since :func:`hold`."""
    global _held
    _held = False
    while _pending:
        _pending.pop().preload()
