"""The server's start, life and exit: its home's server.json, its log, the runtime's build.

``python -m amacs_server [--headless] [--home DIR]`` (``__main__``, above the commands, hands the
server's arguments here).

Emacs starts it with ``AMACS_TOKEN`` in the environment and reads the port
from the first line of stdout.  Nothing else is ever printed before the port
(EPC defect 5): stderr goes to ``logs/server.log`` in the AMACS home.

``server.json`` in the AMACS home (mode 0600) names the server that serves the
home: port, pid, whether it is headless and, for a headless server that made
its own token, the token; ``M-x amacs-shell`` connects to a live headless
server named there instead of starting another.  A headless server always
writes it (and refuses to start if a live headless server already serves the
home); a server Emacs started writes it only when no live server is named
there.  Each server removes the file on exit (also on SIGTERM or SIGHUP) only
if it still names that server.

The AMACS home is private: the process umask makes every file the
server writes 0600 and every folder 0700, and an existing home is made so at
start (:func:`~amacs_server.files.secure_home`).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from .config import ConfigError, demo_as_left, load_config
from .files import UMASK, secure_home

if TYPE_CHECKING:
    from .config import Config
    from .runtime import Runtime
    from .scrub import Scrubber
    from .transport.emacs_face import EmacsFace
    from .transport.server import AmacsEPCServer

SERVER_INFO = "server.json"
# The methods are published and then the model SDK imported once Emacs's hello is answered
# (in a thread), or this many seconds after the runtime is built if no hello came: a ~1 s
# import holding the GIL made hello 30 ms slower.
SDK_IMPORT_LATEST = 1.0
# How often a server Emacs started looks whether that Emacs is still its parent.
ORPHAN_CHECK = 0.5
# The exit status of a server that found its home served by another: Emacs does not
# start it again (`amacs--exit-home-in-use').
EXIT_HOME_IN_USE = 3


def publish_once(server: AmacsEPCServer, rt: Runtime, face: EmacsFace) -> Callable[..., None]:
    """A function that, the first time it is called (from any thread), starts a thread that
    imports the methods' module, publishes the methods on SERVER (calls wait for that), then
    starts the held SDK imports; called with WAIT true, it does that itself before it returns."""
    from .inference import sdk

    lock, done = threading.Lock(), threading.Event()

    def run() -> None:
        try:
            from .methods import publish

            publish(server, rt, face)
        except Exception as err:  # noqa: BLE001 - said to every call, and logged
            logging.exception("could not publish the methods")
            server.publish_done(f"the server could not publish its methods: {err!r} (see logs/server.log)")
        else:
            server.publish_done()
        sdk.release()

    def start(wait: bool = False) -> None:
        with lock:
            if done.is_set():
                return
            done.set()
        if wait:
            run()
        else:
            threading.Thread(target=run, name="amacs-publish", daemon=True).start()

    return start


MAX_SERVER_LOG = 10 << 20  # bytes of logs/server.log kept from earlier sessions; then it is rotated


def _redirect_stderr(log_file: Path) -> None:
    try:  # rotated at the start: this session's lines always go to a file under the bound's size
        if log_file.stat().st_size > MAX_SERVER_LOG:
            os.replace(log_file, log_file.with_name(log_file.name + ".1"))
    except OSError:
        pass
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115


def _fail(message: str) -> int:
    """Emacs shows a non-numeric first line as the reason the server did not start.

    One line: which file, what is wrong, what to do; also logged when the log is open."""
    line = " ".join(message.split())
    if logging.getLogger().handlers:  # the log is open (not before: that would print to Emacs)
        logging.error("start-up failed: %s", line)
    try:
        print(f"AMACS server error: {line}", flush=True)
    except OSError:  # nobody reads stdout any more
        pass
    return 1


def _start_failure(err: BaseException, home: Path) -> str:
    """ERR, raised while the server started on HOME, as the one line Emacs shows."""
    from .persistence.recovery import StartupError, explain_os_error

    if isinstance(err, StartupError):
        return str(err)
    if isinstance(err, OSError):
        return explain_os_error(err, home)
    return (f"start-up failed on the AMACS home {home}: {err!r}. "
            f"The traceback is in {home / 'logs' / 'server.log'}")


def _made(path: str) -> bool:
    """Make the empty file PATH; False when it was there already (or cannot be made)."""
    try:
        with open(path, "x"):
            return True
    except OSError:
        return False


def read_server_info(home: Path) -> dict[str, Any] | None:
    """The contents of ``server.json`` in HOME, or None when it is missing or unreadable."""
    try:
        info = json.loads((home / SERVER_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def server_alive(info: dict[str, Any], timeout: float = 0.5) -> bool:
    """True when INFO's pid is a live process and its port on 127.0.0.1 accepts a connection."""
    pid, port = info.get("pid"), info.get("port")
    if not isinstance(pid, int) or not isinstance(port, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: alive; the port decides
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def write_server_info(home: Path, info: dict[str, Any]) -> None:
    """Write INFO to ``server.json`` in HOME, mode 0600, atomically (temp file + rename)."""
    tmp = home / f".{SERVER_INFO}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an old temp file keeps its mode otherwise
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(info, fh)
    os.replace(tmp, home / SERVER_INFO)


def remove_server_info(home: Path, pid: int) -> None:
    """Remove ``server.json`` in HOME if it still names PID (another server may own it now)."""
    info = read_server_info(home)
    if info is not None and info.get("pid") == pid:
        (home / SERVER_INFO).unlink(missing_ok=True)


class _SignalStop:
    """SIGTERM and SIGHUP end ``serve_forever`` as Ctrl-C does, so the clean-up runs.

    One that comes once the clean-up has begun is logged in one line and changes nothing: a
    stop is under way (C-x C-c asks the server to stop, then Emacs going sends SIGHUP)."""

    def __init__(self) -> None:
        self.cleaning = False
        self.caught: str | None = None  # the signal that began the stop
        self.later: list[str] = []  # those that came during the clean-up
        self.previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}

    # The handler writes nothing: it may run inside a write to the log's stream, where a second
    # write raises instead of the stop.  What it caught is logged by :meth:`log_caught`.
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.cleaning:
            self.later.append(name)
            return
        self.cleaning = True
        self.caught = name
        raise KeyboardInterrupt

    def log_caught(self) -> None:
        """Log the signals caught so far (once each)."""
        if self.caught is not None:
            logging.info("stopping on signal %s", self.caught)
            self.caught = None
        while self.later:
            logging.info("signal %s while stopping: the clean-up goes on", self.later.pop(0))

    def cleaning_up(self) -> None:
        """The clean-up has begun: a signal from now on is only logged."""
        self.cleaning = True

    def restore(self) -> None:
        """The handlers there were before."""
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def stop_when_orphaned(stop: Callable[[], None], parent: int, interval: float = ORPHAN_CHECK) -> threading.Thread:
    """Call STOP once this process's PARENT (the Emacs that started it, its pid at start) is gone.

    An Emacs killed before it connected never closes a connection: its server
    would serve nobody for ever and hold the home's lock (CI found one alive
    an hour after its Emacs was killed).  Gone: the parent's pid changed, the
    process was given to init or a subreaper."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        logging.info("the Emacs that started this server (pid %s) is gone: stopping", parent)
        stop()

    thread = threading.Thread(target=watch, name="amacs-orphan-watch", daemon=True)
    thread.start()
    return thread


# How long a stopping server waits for a runtime still being built, to stop it cleanly.
BUILD_WAIT_AT_EXIT = 30.0


class RuntimeBuilder:
    """Builds the runtime on a thread of its own while the server already listens.

    The port line is out before the modules the runtime needs are imported and the home
    is read: Emacs connects and says hello meanwhile, and the server answers that hello
    (with the runtime's status) once the runtime is built; the other methods are published
    right after (:func:`publish_once`), and a call that comes sooner waits for them.
    A start-up that fails here says why on the next line of stdout, as one that failed
    before the port line does on the first, and the server stops."""

    def __init__(self, config: Config, server: AmacsEPCServer, scrub: Scrubber, *, headless: bool) -> None:
        self.config, self.server, self.scrub, self.headless = config, server, scrub, headless
        self.rt: Runtime | None = None
        self.failed = False
        self._thread = threading.Thread(target=self._run, name="amacs-start", daemon=True)

    def start(self) -> None:
        """Build the runtime from now on, in the background."""
        self._thread.start()

    def finish(self, timeout: float) -> Runtime | None:
        """The runtime, once its building has ended (None if it failed or takes longer than TIMEOUT)."""
        self._thread.join(timeout)
        return self.rt

    def _run(self) -> None:
        try:
            self.rt = self._build()
            # What start-up made lives as long as the process: out of the collector's sight,
            # as the SDK's is (inference/sdk.py).
            gc.freeze()
        except Exception as err:  # noqa: BLE001 - reported to Emacs in one line
            logging.exception("start-up failed")
            self.failed = True
            reason = _start_failure(err, self.config.home)
            _fail(reason)
            self.server.start_failed(reason)
            self.server.shutdown()
            return
        finally:
            gc.enable()  # disabled by main while the runtime was built
        self.server.start_done()

    def _build(self) -> Runtime:
        config, server = self.config, self.server
        from .memory.ltm import DatabaseCheck

        db_check = DatabaseCheck(config.home / "memory.db")  # reads every page while the imports below run
        from .inference import sdk

        sdk.hold()  # the SDK import (1-2 s) waits for hello: it would hold the GIL while hello is answered
        from .hello import greet
        from .loop.primary import finish_cut_off, run_turn
        from .runtime import Runtime
        from .transport.emacs_face import EmacsFace

        face = EmacsFace(server)
        rt = Runtime(config, face, turn=run_turn, db_check=db_check, scrub=self.scrub)
        finish_cut_off(rt)  # the tick the last server stopped in says so, and is committed
        face.eval_timeout = rt.settings.eval_timeout
        # That a warm server stays (warm.py's fork, or the launch that started one: warm_launch.py),
        # said once for the checkout: the first server to make the mark says it.
        warm_note = os.environ.pop("AMACS_WARM_NOTE", None)
        told = os.environ.pop("AMACS_WARM_TOLD", None)
        if warm_note and (told is None or _made(told)):
            rt.startup_notes.append(warm_note)
        greet(server, rt, face)
        # The other methods (their module imports pydantic, ~100 ms) are published once hello is
        # answered; a call that comes sooner waits for them.  In a fork of the warm server their
        # module is imported: they are published now (1-9 ms), before hello is answered, as the
        # thread that published them started 0.4-7 ms after it and the submit sent at once waited
        # for it (profiled in tmux at load 5).
        server.after_hello = publish = publish_once(server, rt, face)
        if "amacs_server.methods" in sys.modules:
            publish(wait=True)
        rt.start()
        prepare = getattr(rt.slot.backend, "prepare", None)
        if prepare is not None:  # the model's client made while nothing waits (AnthropicBackend.prepare)
            import asyncio

            asyncio.run_coroutine_threadsafe(prepare(), rt.loop)
        fallback = threading.Timer(0.0 if self.headless else SDK_IMPORT_LATEST, server.after_hello)
        fallback.daemon = True
        fallback.start()
        return rt


@functools.cache
def parser() -> argparse.ArgumentParser:
    """The server's command line, made once: the warm server makes it before it forks (its
    regexes and translations looked up: ~3 ms of a fork's CPU before its port line, profiled)."""
    made = argparse.ArgumentParser(
        prog="amacs-server", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The AMACS server. Emacs starts it (M-x amacs-shell); --headless runs one that\n"
                    "any Emacs holding the token in the home's server.json may connect to.",
        epilog="commands for research (each has its own --help):\n"
               "  amacs-server experiment SPEC   run an experiment's grid of headless sessions\n"
               "  amacs-server dataset RUNS_DIR  load its runs into DuckDB and Parquet\n"
               "  amacs-server judge RUNS_DIR J  score its runs with the judge skill J\n"
               "  amacs-server report RUNS_DIR   draw them as one HTML page\n"
               "  amacs-server export RUNS_DIR --inspect DIR  write them as inspect_ai eval logs\n"
               "  amacs-server transcripts [DIR] summarize the transcripts in or below DIR\n"
               "history:\n"
               "  amacs-server rewind HOME --tick N       return HOME to the end of tick N\n"
               "  amacs-server fork HOME --tick N DEST    a new home DEST: HOME at the end of tick N\n"
               "  amacs-server ticks HOME                 which tick was which input, newest first")
    made.add_argument("--headless", action="store_true", help="serve any Emacs holding the token; stay up")
    made.add_argument("--home", help="the AMACS home (default: $AMACS_HOME or ~/.agent)")
    return made


def main(argv: list[str] | None = None) -> int:
    """Run the server until Emacs goes away (or forever, headless)."""
    argv = sys.argv[1:] if argv is None else argv
    parent = os.getppid()  # now: the Emacs may be gone by the time the port line is read
    # pydantic looks for plugins in every installed package's entry points (~15 ms)
    # when it builds its first model; AMACS has none.  Nothing
    # has built a model yet (they are deferred); a setting in the environment wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    args = parser().parse_args(argv)
    # The home holds the person's conversations, memory and server.json: what this
    # process creates there (and SQLite's -wal/-shm, git's objects, server.log) is
    # 0600, folders 0700, whoever creates it.  The umask covers new files only: a
    # home made before (0755, files 0644) is made private just below, once the
    # log is open (secure_home).  Emacs writes shell-history itself, 0600 too.
    os.umask(UMASK)
    env = dict(os.environ)
    if args.home:
        env["AMACS_HOME"] = args.home
    try:
        config = load_config(env)
    except ConfigError as err:
        return _fail(str(err))
    from .persistence.recovery import StartupError, check_home, explain_os_error

    try:
        check_home(config.home)  # a read-only or full home is said here, not found by a tick
        (config.home / "logs").mkdir(parents=True, exist_ok=True)
        _redirect_stderr(config.home / "logs" / "server.log")
    except (StartupError, OSError) as err:
        return _fail(_start_failure(err, config.home))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from .persistence.history import read_state

    # A home last on the demo model, started again with nothing else chosen, is on it again.
    config = demo_as_left(config, env, (read_state(config.home) or {}).get("model"))
    changed = secure_home(config.home)
    if changed:
        logging.info("made the AMACS home %s private: %d files or folders were open to other users",
                     config.home, changed)
    token = config.token
    if token is None:
        if not args.headless:
            return _fail("AMACS_TOKEN is not set: start the server from Emacs (M-x amacs-shell)")
        import secrets  # only a headless server makes its own token

        token = secrets.token_hex(32)
    home, pid = config.home, os.getpid()
    current = read_server_info(home)
    live = current is not None and current.get("pid") != pid and server_alive(current)
    if live and args.headless and current is not None and current.get("headless"):
        return _fail(f"a headless AMACS server (pid {current.get('pid')}, port {current.get('port')}) "
                     f"already serves {home}; connect to it with M-x amacs-connect")
    # A headless server always names itself (people and Emacs look for it there); a
    # server Emacs started leaves a live server's file alone.
    write_info = args.headless or not live
    from .persistence.home_lock import HomeInUse, HomeLock

    lock = HomeLock(home, headless=args.headless)
    try:
        lock.acquire()  # one server per home: two would write over each other's conversation
    except HomeInUse as err:
        _fail(str(err))
        return EXIT_HOME_IN_USE  # trying again cannot help: Emacs does not
    except (StartupError, OSError) as err:
        return _fail(_start_failure(err, home))

    from .scrub import LogScrubber, Scrubber
    from .transport.server import AmacsEPCServer

    server = AmacsEPCServer(token, headless=args.headless, starting=True)
    server.scrub = scrub = Scrubber({**config.secrets(), "AMACS_TOKEN": token})
    for handler in logging.getLogger().handlers:
        handler.addFilter(LogScrubber(scrub))
    server.on_stopping = lock.mark_stopping
    port = server.server_address[1]
    if write_info:
        info: dict[str, Any] = {"port": port, "pid": pid, "headless": args.headless}
        if args.headless and config.token is None:
            info["token"] = token
        try:
            write_server_info(home, info)
        except OSError as err:
            return _fail(explain_os_error(err, home))
    signals = _SignalStop()
    # The port line goes out before the runtime is built: Emacs connects and says hello
    # while the rest is imported and the home is read; hello is answered once it is built.
    print(port, flush=True)
    builder = RuntimeBuilder(config, server, scrub, headless=args.headless)
    # No cyclic garbage collection until the runtime is built (the builder enables it again):
    # start-up makes ~50,000 objects that live as long as the process, and ~80 collections
    # walked them while hello waited.
    gc.disable()
    builder.start()
    try:
        if args.headless:
            print(f"AMACS headless server on 127.0.0.1:{port}, home {home.resolve()}; "
                  "connect with M-x amacs-connect (M-x amacs-shell finds it too). Ctrl-C stops it.", flush=True)
        if not args.headless:
            stop_when_orphaned(server.shutdown, parent)
        logging.info("serving on 127.0.0.1:%s (headless=%s, home=%s, server.json %s)",
                     port, args.headless, home, "written" if write_info else "left to the live server")
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signals.cleaning_up()
        signals.log_caught()
        lock.mark_stopping()
        if write_info:
            remove_server_info(home, pid)
        rt = builder.finish(BUILD_WAIT_AT_EXIT)
        if rt is not None:
            rt.stop()
        server.server_close()
        signals.log_caught()
        signals.restore()
    return 1 if builder.failed else 0

