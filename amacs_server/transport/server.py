"""The EPC server: 127.0.0.1 only, one authenticated Emacs, every EPC defect handled.

Defects (DESIGN.md): 1 ``ThreadingEPCServer``; 3 remote errors become plain
errors with a message, so Emacs always gets a reply; 4 sends are serialized by
a lock; 6 nothing here waits on Emacs without a timeout; 7 values are converted
in :mod:`.lisp` only.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable
from typing import Any

from epc.handler import ThreadingEPCHandler, unpack_message
from epc.server import ThreadingEPCServer
from sexpdata import Symbol

from .lisp import from_lisp, list_from_lisp, to_lisp

log = logging.getLogger("amacs.transport")


class RemoteError(Exception):
    """An error sent to Emacs; ``repr`` is the bare message, which python-epc sends."""

    def __repr__(self) -> str:
        return str(self)


class Unauthorized(Exception):
    """A connection that did not present the token."""


def remote_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap FN for EPC: Lisp values in, Lisp values out, any error as :class:`RemoteError`."""

    def wrapper(*args: Any) -> Any:
        try:
            return to_lisp(fn(*[from_lisp(a) for a in args]))
        except RemoteError:
            raise
        except Exception as err:  # defect 3: never let python-epc swallow an error
            message = str(err) or type(err).__name__
            raise RemoteError(message) from err

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class AmacsHandler(ThreadingEPCHandler):
    """One connection.  Its first message must be ``hello`` with the token."""

    def setup(self) -> None:
        """Set up the send lock before anything can send."""
        self._send_lock = threading.Lock()
        super().setup()

    def _send(self, *args: Any) -> None:
        with self._send_lock:  # defect 4
            super()._send(*args)

    def handle(self) -> None:
        """Authenticate the first message, then serve; close on anything else."""
        server: AmacsEPCServer = self.server  # type: ignore[assignment]
        messages = self._recv()
        try:
            first = next(messages, None)
            if first is None:
                return
            uid, reply = server.authenticate(self, first)
            self._send("return", uid, reply)
            for sexp in messages:
                self._handle(sexp)
        except Unauthorized as err:
            log.warning("refused a connection from %s: %s", self.client_address, err)
            try:
                self._send("epc-error", 0, "unauthorized")
            except Exception:  # noqa: BLE001 - the peer may be gone already
                pass
        except (RuntimeError, ValueError, OSError) as err:  # a closed or garbled stream
            log.info("connection ended: %r", err)
        except Exception as err:  # noqa: BLE001 - the peer is told; the server goes on
            log.exception("connection failed")
            try:
                self._send("epc-error", 0, f"server error: {err!r}")
            except Exception:  # noqa: BLE001
                pass
        finally:
            server.connection_closed(self)


class AmacsEPCServer(ThreadingEPCServer):
    """Listens on 127.0.0.1 only; serves the Emacs holding ``token``."""

    daemon_threads = True

    def __init__(self, token: str, *, headless: bool) -> None:
        super().__init__(("127.0.0.1", 0))
        self.RequestHandlerClass = AmacsHandler
        self.token = token
        self.headless = headless
        self.emacs: AmacsHandler | None = None
        self.emacs_pid: int | None = None
        self.on_hello: Callable[[dict[str, Any]], dict[str, Any]] = lambda _s: {}
        self.on_emacs_gone: Callable[[], None] = lambda: None

    def register(self, name: str, fn: Callable[..., Any]) -> None:
        """Publish FN to Emacs as NAME (with :func:`remote_method` applied)."""
        self.register_function(remote_method(fn), name)

    def authenticate(self, handler: AmacsHandler, sexp: bytes) -> tuple[int, Any]:
        """Check that SEXP is ``(call UID hello (TOKEN PID SETTINGS))``; adopt the peer."""
        try:
            name, uid, rest = unpack_message(sexp)
        except Exception as err:
            raise Unauthorized(f"unreadable first message: {err!r}") from err
        if name != "call" or len(rest) != 2 or rest[0] != Symbol("hello"):
            raise Unauthorized("the first message was not hello")
        args = list_from_lisp(rest[1])
        token = args[0] if args else None
        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            raise Unauthorized("wrong token")
        pid = args[1] if len(args) > 1 and isinstance(args[1], int) else None
        settings = args[2] if len(args) > 2 and isinstance(args[2], dict) else {}
        self.emacs, self.emacs_pid = handler, pid
        return uid, to_lisp(self.on_hello(settings))

    def connection_closed(self, handler: AmacsHandler) -> None:
        """Forget HANDLER; without Emacs a non-headless server shuts down."""
        if handler is not self.emacs:
            return
        self.emacs = None
        self.on_emacs_gone()
        if not self.headless:
            threading.Thread(target=self.shutdown, daemon=True).start()

    def notify(self, event: dict[str, Any]) -> bool:
        """Send EVENT to Emacs's ``amacs-event`` method without waiting; False if no Emacs."""
        handler = self.emacs
        if handler is None:
            return False
        try:
            handler.call(
                "amacs-event",
                [to_lisp(event)],
                callback=lambda _r: None,
                errback=lambda err: log.error("Emacs failed on event %s: %s", event.get("type"), err),
            )
        except Exception as err:  # noqa: BLE001 - a closed socket: Emacs is gone
            log.info("could not notify Emacs: %r", err)
            return False
        return True
