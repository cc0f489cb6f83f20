"""The EPC server: 127.0.0.1 only, one authenticated Emacs, every EPC defect handled.

EPC's defects (docs/ARCHITECTURE.md, The transport): calls from Emacs run on worker
threads, so a method may call Emacs while the reader goes on (no deadlock on a
re-entrant call); remote errors become plain errors with a message, so Emacs always
gets a reply; sends are serialized by :class:`Wire`, and no sender waits on a slow
Emacs; nothing here waits on Emacs without a timeout; values are converted in
:mod:`amacs_server.text.lisp` only.  Calls from Emacs (:data:`MAX_CALLS`) and events to
it (:data:`MAX_EVENTS`) are bounded: one more is refused at once, nothing taken is lost.

Fast path: every accepted socket has ``TCP_NODELAY`` (no Nagle or
delayed-ACK stalls); events to Emacs are one-way ``(amacs-events 0 (EVENT...))``
messages that Emacs never answers, sent in order by :class:`Outbox`, which
coalesces streamed ``reply-delta`` events to at most one message per
:data:`DELTA_WINDOW` without holding back the first; no thread is started and
nothing is formatted or logged per message (python-epc's ``autolog`` and
thread-per-message are bypassed): calls from Emacs run on a fixed pool, and
the few methods that only hand a value over run on the reader thread itself.

Local security: one authenticated Emacs per server.  A second
``hello``, even with the token, is refused with a message and the first session
goes on; only when the first Emacs has hung up (its socket is at end of file)
may another take its place.  A connection must say ``hello`` within
:data:`HELLO_TIMEOUT` seconds (all of it, however slowly it trickles in) or it
is closed: idle connections do not keep a thread each for ever.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import importlib
import logging
import selectors
import socket
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def _import_at_first_use(name: str) -> None:
    """Stand in for module NAME in ``sys.modules`` until one of its names is used; then import it.

    (``importlib.util.LazyLoader`` does not do: the ``import`` statement reads the module's
    ``__spec__``, and that first use loads it.)"""
    if name in sys.modules:
        return
    stand_in = types.ModuleType(name, f"{name}, imported at the first use of one of its names")

    def load(attr: str) -> Any:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        return getattr(importlib.import_module(name), attr)

    stand_in.__getattr__ = load  # type: ignore[method-assign]  # PEP 562: names it does not have
    sys.modules[name] = stand_in


# python-epc imports xmlrpc.server (with http.client, email and pydoc: ~35 ms at start) for
# one function it calls when a method is not found (``EPCDispatcher.get_method``).
_import_at_first_use("xmlrpc.server")

from epc.handler import (  # noqa: E402 - after the lazy module above
    BaseRemoteError,
    EPCCallManager,
    EPCClosed,
    EPCHandler,
    itermessage,
)
from epc.server import ThreadingEPCServer  # noqa: E402
from sexpdata import Symbol, loads  # noqa: E402

from ..errors import AmacsError  # noqa: E402
from ..scrub import Scrubber  # noqa: E402
from ..text.clean import storable  # noqa: E402
from ..text.lisp import encode_message, from_lisp, list_from_lisp, to_lisp  # noqa: E402

log = logging.getLogger("amacs.transport")

# Streamed deltas reach Emacs at most once per window (about one redisplay);
# the first delta after a quiet window goes at once.
DELTA_WINDOW = 0.016
# Methods that only hand a value to the loop: run on the reader thread, no hop.
INLINE_METHODS = frozenset({"emacs_reply", "eval_hold", "eval_started", "ping"})
CALL_WORKERS = 8
# Calls from Emacs waiting for a worker or running, at most: one more is refused at once, with a
# message, and nothing already accepted is dropped (memid spec, bounded queues).
MAX_CALLS = 256
# Events to Emacs accepted and not yet written to its socket, at most (held, in the loop step's
# message, or waiting for a slow Emacs to read): one more is refused at once, with a message;
# every event accepted is sent, in order (memid spec, bounded queues).
MAX_EVENTS = 4096
# A connection that has not said hello (all of it) this many seconds after it opened is closed.
HELLO_TIMEOUT = 5.0
# The hello is a few hundred bytes (a price table makes it a few KB): a longer first message is refused.
MAX_HELLO_BYTES = 1 << 20
MAX_MESSAGE_BYTES = (1 << 24) - 1  # an EPC message's length is six hex digits
# A second hello while the first Emacs's socket is at end of file: how long to wait for its
# reader to notice and let the session go (M-x amacs-restart against a headless server).
HANDOVER_WAIT = 2.0
# A call that comes before the methods are published (just after hello) waits this long for them.
PUBLISH_WAIT = 30.0


# What the server knew when a call from Emacs was read: taken on the reader thread, in the order
# Emacs sent its messages (:attr:`AmacsEPCServer.call_context`), and set for the method while it runs.
CALL_CONTEXT: contextvars.ContextVar[object] = contextvars.ContextVar("amacs_call_context", default=None)


class RemoteError(AmacsError):
    """An error sent to Emacs; ``repr`` is the bare message, which python-epc sends."""

    def __repr__(self) -> str:
        return str(self)


def unpack(message: bytes) -> tuple[str, Any, list[Any]]:
    """MESSAGE from Emacs as (name, uid, args), as python-epc's ``unpack_message``, but any
    bytes are data: Emacs writes a surrogate it holds (``(string #xd800)``) as
    ED A0 80, which strict UTF-8 refuses; the message, an eval's result among them, was
    dropped and its caller waited out its time limit.  Such text arrives with U+FFFD."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        try:
            text = message.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            text = message.decode("utf-8", "replace")
        text = storable(text)
    data = loads(text)
    return data[0].value(), data[1], data[2:]


class Unauthorized(AmacsError):
    """A connection that is refused: no token, the wrong one, another Emacs is connected, or its settings are wrong.

    ``uid`` is the hello's call id when it was readable, so the refusal answers that
    call and Emacs shows the message."""

    def __init__(self, message: str, uid: int = 0) -> None:
        super().__init__(message)
        self.uid = uid


class StartFailed(AmacsError):
    """The server could not build its runtime; it said why on stdout, and stops."""


def hung_up(handler: AmacsHandler) -> bool:
    """Whether HANDLER's peer has closed its end (end of file waits on the socket), without reading."""
    try:
        return bool(handler.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"")
    except BlockingIOError:
        return False  # open, nothing to read
    except OSError:
        return True  # reset, or already closed here


def remote_method(fn: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """Wrap FN (published as NAME) for EPC: Lisp values in, Lisp values out, any error as :class:`RemoteError`.

    An expected failure (:class:`~amacs_server.errors.AmacsError`) is answered with its
    message alone, as always.  Anything else is a bug: it is logged with its
    traceback (``logs/server.log``) and answered with one line that says where to look."""
    method = name or fn.__name__

    def wrapper(*args: Any) -> Any:
        try:
            return to_lisp(fn(*[from_lisp(a) for a in args]))
        except RemoteError:
            raise
        except AmacsError as err:  # defect 3: never let python-epc swallow an error
            raise RemoteError(str(err) or type(err).__name__) from err
        except Exception as err:
            log.exception("internal error in %s", method)
            raise RemoteError(internal_error(method, err)) from err

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def internal_error(method: str, err: BaseException) -> str:
    """The one line Emacs gets for an unexpected ERR in METHOD (its traceback is in the log)."""
    text = repr(err)
    if len(text) > 200:
        text = text[:199] + "…"
    return f"internal error in {method}: {text} (see logs/server.log)"


class OutboxFull(AmacsError, RuntimeError):
    """Emacs has its :class:`Outbox`'s limit of events waiting already: this one was not taken."""


class Wire:
    """The bytes to one Emacs, in the order they were given, never interleaved.

    A message goes straight to the socket when nothing waits before it and the socket takes
    it without blocking; what the socket does not take at once waits, in order, for a writer
    thread of its own.  So no thread that writes (the event loop's above all) waits on an
    Emacs that reads slowly or not at all.  Every message given is written; the messages
    waiting count their events (:attr:`events`), which the :class:`Outbox` bounds: it
    refuses an event at once rather than let more wait.  Answers to Emacs's calls carry no
    event: there are at most :data:`MAX_CALLS` of them."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._waiting: deque[tuple[bytes, int]] = deque()
        self.events = 0  # the events of the messages waiting (or being written by the writer)
        self._busy = False  # the writer thread is writing, outside the lock
        self._closed = False
        self._thread: threading.Thread | None = None

    def write(self, data: bytes, events: int = 0) -> None:
        """Send DATA (a message carrying EVENTS events), now or, in order, as soon as Emacs reads."""
        with self._lock:
            if self._closed:
                raise EPCClosed
            if not self._waiting and not self._busy:
                try:
                    sent = self._sock.send(data, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    sent = 0
                if sent == len(data):
                    return
                data = data[sent:]
            self._waiting.append((data, events))
            self.events += events
            if self._thread is None:
                self._thread = threading.Thread(target=self._writer, name="amacs-wire", daemon=True)
                self._thread.start()
            self._ready.notify()

    def close(self) -> None:
        """Drop what waits (Emacs is gone) and stop the writer."""
        with self._lock:
            self._closed = True
            self._waiting.clear()
            self.events = 0
            self._ready.notify()

    def _writer(self) -> None:
        with self._lock:
            while True:
                while not self._waiting and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                data, events = self._waiting[0]
                self._busy = True
                self._lock.release()
                try:
                    self._sock.sendall(data)
                    failed: OSError | None = None
                except OSError as err:
                    failed = err
                finally:
                    self._lock.acquire()
                    self._busy = False
                if self._closed:
                    return
                self._waiting.popleft()
                self.events -= events
                if failed is not None:  # Emacs is gone; its reader notices and closes the session
                    log.info("could not write to Emacs: %r", failed)
                    self._closed = True
                    self._waiting.clear()
                    self.events = 0
                    return


class Outbox:
    """Events to one Emacs, in order, as one-way ``amacs-events`` messages.

    A ``reply-delta`` goes at once when none went in the last
    :data:`DELTA_WINDOW`; otherwise it waits (merged with the deltas after it)
    until the window ends.  Any other event first sends the waiting deltas, in
    the same message, so the order of events never changes; a streamed
    ``reply`` drops them instead (it replaces the streamed text at once).

    "At once" on an asyncio loop's thread means when the loop's current step
    is done: the events one step puts (the input taken and the turn's start;
    the tick's usage and the end of the turn; the deltas of one chunk of the
    model's stream) reach Emacs as one message, which Emacs handles in one go
    and redisplays once.  A ``reply`` goes at once with what the
    step put before it: the person waits for it, not for the tick's records.
    From any other thread a message goes before ``put`` returns.
    """

    def __init__(self, send: Callable[[list[dict[str, Any]]], None], waiting: Callable[[], int] = lambda: 0,
                 limit: int = MAX_EVENTS) -> None:
        self._send = send
        self._waiting = waiting  # the events sent that Emacs has not read yet (Wire.events)
        self.limit = limit
        self._cond = threading.Condition()
        self._held: list[dict[str, Any]] = []
        self._batch: list[dict[str, Any]] = []
        self._flush_scheduled = False
        self._last_delta = float("-inf")
        self._closed = False
        self._thread: threading.Thread | None = None

    def put(self, event: dict[str, Any], now: bool = False) -> None:
        """Send EVENT now (at the end of the loop's step), or hold it for the end of the delta window.
        NOW (a ``reply-delta``): the reply's text is complete with it: it and the deltas held go now,
        not at the window's end (nothing more of the reply is coming to merge with them), nor at
        the loop step's end, where the streamed ``reply`` that the same step may put drops them."""
        with self._cond:
            if self._closed:
                raise EPCClosed
            taken = len(self._held) + len(self._batch) + self._waiting()
            if taken >= self.limit:
                raise OutboxFull(f"overloaded: {taken} events to Emacs are waiting to be sent (the limit is "
                                 f"{self.limit}: Emacs reads slowly or not at all); this "
                                 f"{event.get('type')} event was not taken")
            if event.get("type") == "reply-delta":
                held = self._held
                if held:
                    last = held[-1]
                    if _mergeable(last, event):
                        last["text"] += event["text"]
                    else:
                        held.append(dict(event))
                    if now:
                        self._held = []
                        self._last_delta = time.monotonic()
                        self._out(held)
                        self._flush_locked()
                    return
                if now and not event.get("text"):
                    return  # nothing held and nothing new
                clock = time.monotonic()
                if now or clock - self._last_delta >= DELTA_WINDOW or self._batch:
                    self._last_delta = clock
                    self._out([dict(event)])
                    if now:
                        self._flush_locked()
                    return
                held.append(dict(event))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._flusher, name="amacs-outbox", daemon=True)
                    self._thread.start()
                self._cond.notify()
                return
            held, self._held = self._held, []
            if event.get("type") == "reply" and event.get("streamed"):
                held = []  # the reply replaces the streamed text: deltas not yet sent are moot
                self._batch = [e for e in self._batch if e.get("type") != "reply-delta"]
            if held:
                self._last_delta = time.monotonic()
            self._out([*held, event])
            if event.get("type") == "reply":  # the person waits for it: not for the rest of the step
                self._flush_locked()

    def _out(self, events: list[dict[str, Any]]) -> None:
        """Send EVENTS, or add them to the loop step's message (the lock is held)."""
        batch = self._batch
        if batch and events[0].get("type") == "reply-delta" and _mergeable(batch[-1], events[0]):
            batch[-1]["text"] += events[0]["text"]
            events = events[1:]
        batch.extend(events)
        if self._flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            self._flush_locked()
        else:
            self._flush_scheduled = True
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        with self._cond:
            if self._closed:
                return
            try:
                self._flush_locked()
            except Exception as err:  # noqa: BLE001 - Emacs is gone; the reader notices
                log.info("could not send events: %r", err)

    def _flush_locked(self) -> None:
        batch, self._batch, self._flush_scheduled = self._batch, [], False
        if batch:
            self._send(batch)

    def close(self) -> None:
        """Drop what is held and stop the flusher."""
        with self._cond:
            self._closed = True
            self._held = []
            self._batch = []
            self._cond.notify()

    def _flusher(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._held:
                    self._cond.wait()
                    continue
                wait = self._last_delta + DELTA_WINDOW - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                held, self._held = self._held, []
                self._last_delta = time.monotonic()
                try:
                    self._batch.extend(held)
                    self._flush_locked()
                except Exception as err:  # noqa: BLE001 - Emacs is gone; the reader notices
                    log.info("could not send held deltas: %r", err)


def _mergeable(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two deltas of one stream: every field but the text is the same."""
    return (a.keys() == b.keys() and isinstance(a.get("text"), str) and isinstance(b.get("text"), str)
            and all(a[k] == b[k] for k in a if k != "text"))


class AmacsHandler(EPCHandler):
    """One connection.  Its first message must be ``hello`` with the token."""

    disable_nagle_algorithm = True  # StreamRequestHandler.setup sets TCP_NODELAY
    server: AmacsEPCServer  # the only server that makes these

    def setup(self) -> None:
        """Set up the send lock and NODELAY before anything can send; no autolog."""
        self.outbox: Outbox | None = None
        super(EPCHandler, self).setup()  # TCP_NODELAY, by disable_nagle_algorithm
        self.wire = Wire(self.connection)
        self.callmanager = EPCCallManager()
        self.server.add_client(self)

    def _recv(self) -> Iterator[bytes]:
        return itermessage(self._rfile_read_safely)

    def _read_hello(self) -> bytes | None:
        """The first message, read within :data:`HELLO_TIMEOUT` of now; None if the peer closed first.

        Each read waits at most for what is left of the time, so a peer that
        sends a byte at a time cannot hold the connection open longer either.
        Raises TimeoutError when the time is up."""
        deadline = time.monotonic() + HELLO_TIMEOUT

        def read(size: int) -> bytes:
            out = bytearray()
            while len(out) < size:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.connection.settimeout(left)
                chunk = self.rfile.read1(size - len(out))
                if not chunk:
                    break
                out += chunk
            return bytes(out)

        head = read(6)
        if not head:
            return None
        try:
            length = int(head, 16)
        except ValueError:
            raise Unauthorized("unreadable first message") from None
        if length > MAX_HELLO_BYTES:
            raise Unauthorized(f"first message too long ({length} bytes)")
        data = read(length)
        if len(data) < length:
            return None  # closed part way
        self.connection.settimeout(None)  # an authenticated Emacs may stay quiet as long as it likes
        return data

    def _send(self, *args: Any, events: int = 0) -> None:
        data = encode_message(*args)
        if len(data) - 6 > MAX_MESSAGE_BYTES:
            # Its length would not fit EPC's six hex digits: Emacs would read garbage from then on.
            # An answer becomes its method's error; anything else is dropped, said in the log.
            said = (f"the answer is {len(data) / 1048576:.0f} MiB, more than the 16 MiB "
                    "a message to Emacs can carry; ask for less (a part of it)")
            if args and args[0] == "return" and len(args) > 1:
                data = encode_message("return-error", args[1], said)
            else:
                log.warning("a %s message of %d bytes not sent to Emacs: %s", args[0] if args else "?",
                            len(data), said)
                return
        try:
            self.wire.write(data, events)  # defect 4: one message at a time, in order
        except (AttributeError, ValueError) as err:
            raise EPCClosed from err

    def send_events(self, events: list[dict[str, Any]]) -> None:
        """One one-way message carrying EVENTS; Emacs does not answer it."""
        self._send("amacs-events", 0, [to_lisp(e) for e in events], events=len(events))

    def _handle(self, sexp: bytes) -> None:
        """Dispatch one message: replies on this thread, calls on the pool (or here if inline)."""
        try:
            name, uid, args = unpack(self.server.scrub.data(sexp))
        except Exception as err:  # noqa: BLE001 - a garbled message; the peer is told
            self._send("epc-error", [], repr(err))
            return
        context = (self.server.call_context(args[0].value())
                   if name == "call" and args and isinstance(args[0], Symbol) else None)
        if name == "call" and not (len(args) == 2 and isinstance(args[0], Symbol)
                                   and args[0].value() in INLINE_METHODS and self.server.published()):
            if not self.server.take_call():
                self._send("return-error", uid, f"overloaded: {MAX_CALLS} calls from Emacs are waiting or "
                                                "running (the limit); this one was not taken: try it again soon")
                return
            self.server.pool.submit(self._handle_taken, name, uid, args, context)
        else:
            self._handle_message(name, uid, args, context)

    def _handle_taken(self, name: str, uid: Any, args: list[Any], context: object) -> None:
        """A call the server took (:meth:`AmacsEPCServer.take_call`), on a worker."""
        try:
            self._handle_message(name, uid, args, context)
        finally:
            self.server.call_done()

    def _handle_message(self, name: str, uid: Any, args: list[Any], context: object = None) -> None:
        """python-epc's ``_handle`` after unpacking, without its logging; CONTEXT is
        :data:`CALL_CONTEXT` while it runs."""
        token = CALL_CONTEXT.set(context)
        try:
            pyname = name.replace("-", "_")
            getattr(self, f"_validate_{pyname}")(uid, args)
            reply = getattr(self, f"_handle_{pyname}")(uid, *args)
            if reply is not None:
                self._send(*reply)
        except Exception as err:  # noqa: BLE001 - as python-epc: remote errors stay here
            if self.handle_error(err):
                return
            try:
                self._send("return-error", uid, repr(err))
            except Exception:  # noqa: BLE001 - the peer is gone
                pass
        finally:
            CALL_CONTEXT.reset(token)

    def _handle_call(self, uid: Any, meth: Symbol, args: list[Any]) -> list[Any]:
        name = meth.value()
        try:
            func = self.server.get_method(name)
        except AttributeError:
            return ["epc-error", uid, f"EPC-ERROR: No such method : {name}"]
        return ["return", uid, func(*args)]

    def handle_error(self, err: Exception) -> bool:
        """Errors from Emacs's side (and a closed socket) are not sent back; others are."""
        if isinstance(err, (BaseRemoteError, EPCClosed)):
            log.info("EPC: %r", err)
            return True
        if not isinstance(err, RemoteError):
            log.error("EPC method failed: %r", err, exc_info=sys.exc_info())
        return False

    def handle(self) -> None:
        """Authenticate the first message, then serve; close on anything else."""
        server = self.server
        try:
            first = self._read_hello()
            if first is None:
                return
            uid, reply = server.authenticate(self, first)
            self._send("return", uid, reply)
            log.info("answered hello (Emacs pid %s)", server.emacs_pid)
            server.after_hello()
            for sexp in self._recv():
                self._handle(sexp)
        except Unauthorized as err:
            log.warning("refused a connection from %s: %s", self.client_address, err)
            try:
                self._send("epc-error", err.uid, str(err))
            except Exception:  # noqa: BLE001 - the peer may be gone already
                pass
        except StartFailed as err:
            log.info("closed a connection: the server did not start (%s)", err)
        except TimeoutError:
            log.warning("closed a connection from %s: no hello within %g s", self.client_address, HELLO_TIMEOUT)
        except (RuntimeError, ValueError, OSError) as err:  # a closed or garbled stream
            log.info("connection ended: %r", err)
        except Exception as err:  # noqa: BLE001 - the peer is told; the server goes on
            log.exception("connection failed")
            try:
                self._send("epc-error", 0, f"server error: {err!r}")
            except Exception:  # noqa: BLE001
                pass
        finally:
            if self.outbox is not None:
                self.outbox.close()
            self.wire.close()
            server.connection_closed(self)


class AmacsEPCServer(ThreadingEPCServer):
    """Listens on 127.0.0.1 only; serves the Emacs holding ``token``."""

    daemon_threads = True
    # socketserver's default backlog of 5 made a burst of connections wait a second each (SYN
    # retransmits) behind the fifth; Emacs's own connection should not wait behind others.
    request_queue_size = 64

    def __init__(self, token: str, *, headless: bool, starting: bool = False) -> None:
        super().__init__(("127.0.0.1", 0))
        self.RequestHandlerClass = AmacsHandler
        self.token = token
        self.headless = headless
        # Every message after hello passes it: a secret an eval read never gets in.
        self.scrub = Scrubber({"AMACS_TOKEN": token})
        self.emacs: AmacsHandler | None = None
        self.emacs_pid: int | None = None
        self.on_hello: Callable[..., dict[str, Any]] = lambda _s: {}  # takes the settings as they came
        # Called once hello is answered (the server's start-up waits for it, see __main__).
        self.after_hello: Callable[[], None] = lambda: None
        self.on_emacs_gone: Callable[[], None] = lambda: None
        # Called on the reader thread with the method's name as each call from Emacs is read:
        # what the method finds in CALL_CONTEXT (which evals Emacs was running when it sent the call).
        self.call_context: Callable[[str], object] = lambda _name: None
        # Called when the Emacs of a server it started has gone, before the server stops.
        self.on_stopping: Callable[[], None] = lambda: None
        self.pool = ThreadPoolExecutor(CALL_WORKERS, thread_name_prefix="amacs-epc")
        self._calls_lock = threading.Lock()
        self._calls = 0  # taken and not done: waiting for a worker or running (MAX_CALLS at most)
        self._clients = threading.Condition()  # guards emacs and stopping
        self.stopping = False  # the Emacs of a server it started has gone: it shuts down
        # STARTING: it listens before its runtime is built; hello is answered once it is
        # (`start_done'), or the connection closed if it could not be (`start_failed').
        self._started = threading.Event()
        self._start_failure: str | None = None
        # The methods but hello are published once hello is answered (`publish_done'): a call
        # that comes sooner waits for them, on its worker (`get_method').
        self._published = threading.Event()
        self._publish_failure: str | None = None
        if not starting:
            self._started.set()
            self._published.set()
        # shutdown() wakes serve_forever through this pair at once, not at its next poll.
        self._wake_read, self._wake_write = socket.socketpair()
        self._stop_asked = False
        self._served = threading.Event()

    def take_call(self) -> bool:
        """Count one more call from Emacs, unless :data:`MAX_CALLS` are taken already."""
        with self._calls_lock:
            if self._calls >= MAX_CALLS:
                return False
            self._calls += 1
            return True

    def call_done(self) -> None:
        """A taken call has been answered."""
        with self._calls_lock:
            self._calls -= 1

    def start_done(self) -> None:
        """The runtime is built and the methods published: answer hello from now on."""
        self._started.set()

    def start_failed(self, reason: str) -> None:
        """The runtime could not be built (REASON, said on stdout): close every connection that waits."""
        self._start_failure = reason
        self._started.set()
        self.publish_done(reason)

    def publish_done(self, failure: str | None = None) -> None:
        """The methods are published, or could not be (FAILURE, said to every call): stop waiting."""
        self._publish_failure = failure
        self._published.set()

    def published(self) -> bool:
        """Whether the methods are published (or could not be)."""
        return self._published.is_set()

    def get_method(self, name: str) -> Callable[..., Any]:
        """The method published as NAME, once the methods are (waits up to :data:`PUBLISH_WAIT`).

        AttributeError when there is none."""
        if not self._published.wait(PUBLISH_WAIT):
            raise RemoteError(f"{name}: the server is still starting ({PUBLISH_WAIT:g} s); try again")
        if self._publish_failure is not None:
            raise RemoteError(self._publish_failure)
        method: Callable[..., Any] = super().get_method(name)
        return method

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept connections until :meth:`shutdown`, which ends the loop at once (socketserver's
        own loop noticed it only at its next poll: a stopping server's exit waited up to
        POLL_INTERVAL for nothing)."""
        self._served.clear()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._wake_read, selectors.EVENT_READ)
                while not self._stop_asked:
                    ready = [key.fileobj for key, _ in selector.select(poll_interval)]
                    if self._wake_read in ready:
                        self._wake_read.recv(64)
                    if self._stop_asked:
                        break
                    if self in ready:
                        self._handle_request_noblock()  # type: ignore[attr-defined]  # socketserver's own step
                    self.service_actions()
        finally:
            self._stop_asked = False
            self._served.set()

    def shutdown(self) -> None:
        """End :meth:`serve_forever` and wait until it has returned (call it from another thread)."""
        self._stop_asked = True
        try:
            self._wake_write.send(b"\0")
        except OSError:  # closed: the loop is over already
            pass
        self._served.wait()

    def server_close(self) -> None:
        """Close the listening socket and let the call pool's idle threads go."""
        super().server_close()
        self._wake_read.close()
        self._wake_write.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def register(self, name: str, fn: Callable[..., Any]) -> None:
        """Publish FN to Emacs as NAME (with :func:`remote_method` applied)."""
        self.register_function(remote_method(fn, name), name)

    def authenticate(self, handler: AmacsHandler, sexp: bytes) -> tuple[int, Any]:
        """Check that SEXP is ``(call UID hello (TOKEN PID SETTINGS))``; adopt the peer.

        Refused (:class:`Unauthorized`) without the token, and while another Emacs
        is connected: one Emacs per server.  One that has hung up but whose reader
        has not noticed yet is waited for (up to :data:`HANDOVER_WAIT`), so its
        session ends (its turn is stopped) before the new one begins."""
        try:
            name, uid, rest = unpack(sexp)
        except Exception as err:
            raise Unauthorized(f"unreadable first message: {err!r}") from err
        if name != "call" or len(rest) != 2 or rest[0] != Symbol("hello"):
            raise Unauthorized("unauthorized", uid if isinstance(uid, int) else 0)
        args = list_from_lisp(rest[1])
        token = args[0] if args else None
        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            raise Unauthorized("unauthorized", uid)
        self._started.wait()  # the builder always ends with start_done or start_failed
        if self._start_failure is not None:
            raise StartFailed(self._start_failure)
        pid = args[1] if len(args) > 1 and isinstance(args[1], int) else None
        settings = args[2] if len(args) > 2 else None
        with self._clients:
            current = self.emacs
            if current is not None and current is not handler and hung_up(current):
                self._clients.wait_for(lambda: self.emacs is not current, HANDOVER_WAIT)
            if self.stopping:
                raise Unauthorized("this AMACS server is stopping (its Emacs left); start another", uid)
            if self.emacs is not None and self.emacs is not handler:
                raise Unauthorized(
                    f"another Emacs (pid {self.emacs_pid}) is connected to this AMACS server, and only one "
                    "may be: use that Emacs, or exit it and connect again", uid)
            handler.outbox = Outbox(handler.send_events, lambda: handler.wire.events)
            self.emacs, self.emacs_pid = handler, pid
        try:
            return uid, to_lisp(self.on_hello(settings))
        except AmacsError as err:  # its settings are wrong (checked before any is applied): not adopted
            with self._clients:
                self.emacs, self.emacs_pid = None, None
            raise Unauthorized(f"{err}; fix it, then M-x amacs-restart", uid) from err

    def connection_closed(self, handler: AmacsHandler) -> None:
        """Forget HANDLER; without Emacs a non-headless server shuts down."""
        with self._clients:
            if handler is not self.emacs:
                return
            self.emacs = None
            self.stopping = not self.headless
            if self.stopping:
                self.on_stopping()  # a server started for the next Emacs may wait for this one
            try:
                self.on_emacs_gone()  # before a waiting hello takes over: the old turn stops first
            except RuntimeError as err:  # the runtime has stopped already (the server is exiting)
                log.info("Emacs left after the runtime stopped: %s", err)
            self._clients.notify_all()
        if not self.headless:
            threading.Thread(target=self.shutdown, daemon=True).start()

    def notify(self, event: dict[str, Any], now: bool = False) -> bool:
        """Send EVENT to Emacs as a one-way message, in order; False if no Emacs.
        NOW: see :meth:`Outbox.put`."""
        handler = self.emacs
        outbox = handler.outbox if handler is not None else None
        if outbox is None:
            return False
        try:
            outbox.put(event, now=now)
        except OutboxFull as err:  # Emacs reads too slowly: this event is refused, none taken is lost
            log.warning("%s", err)
            return False
        except Exception as err:  # noqa: BLE001 - a closed socket: Emacs is gone
            log.info("could not notify Emacs: %r", err)
            return False
        return True
