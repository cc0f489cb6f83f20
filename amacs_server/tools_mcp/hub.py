"""The World's connections to MCP servers, with the official ``mcp`` SDK.

One connection per configured server, shared by every agent.  The connections
live on an event loop of their own, in their own thread, started when a server
is first needed: a slow or stuck server never holds up the agents' loop, and a
server nobody configured costs nothing.  Callers on other threads wait on
:class:`concurrent.futures.Future` results, with a limit.

Rules the hub keeps:

- ``mcp.json`` is read again whenever it changed (a stat per use): a server
  whose entry changed is stopped and starts again as written; one removed is
  stopped; a malformed entry is one line (file and key) said once, and the
  other servers keep working.
- A server is started when first needed: at the first model call, whose
  context lists its tools, unless ``mcp-tools.json`` (beside mcp.json) holds
  its listing from an earlier session with the same entry; then at its first
  tool call.  ``eager``: with the AMACS server.  Each listing is saved there.
- A server that dies is started again once; while it is down its tools fail
  with an error that says so and why.  Any write of mcp.json (a save, even
  unchanged, or ``touch``) tries every down server again, as does editing its entry.
- A server's stderr goes to ``logs/mcp-NAME.log`` in the AMACS home, never to
  the person's shell.  One that does not start (missing, failing, slow) is one
  line in the shell (``on_problem``), once until mcp.json is written again.
- A tool no client can take (``vetting.py``) is left out of its server's listing, said once in
  the log and shown in the hub; the server's other tools are kept.
- :meth:`McpHub.stop` stops every server (each process and its children).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..errors import AmacsError
from ..scrub import Scrubber
from .config import McpConfig, ServerSpec, parse
from .logs import SERVER, StderrLog, install
from .vetting import Vetted, problem

GUARD = Path(__file__).with_name("guard.py")

log = logging.getLogger("amacs.mcp")

T = TypeVar("T")
START_TIMEOUT = 30.0  # seconds a server has to start and list its tools
LISTING_WAIT = 15.0  # seconds the first model call waits for the servers' listings, at most
STOP_TIMEOUT = 5.0  # seconds for every server to stop, then they are killed
RETRY = "fix it, then save mcp.json (any write, even `touch mcp.json`) to start it again"


class McpError(AmacsError, RuntimeError):
    """A tool call that could not be made or failed; the message is for the agent."""


@dataclass
class Connection:
    """One server: its spec, its state, its tools, its last error."""

    spec: ServerSpec
    state: str = "idle"  # idle (not started), starting, ready, down, stopped
    tools: list[Any] = field(default_factory=list)  # mcp_types.Tool
    left_out: dict[str, str] = field(default_factory=dict)  # a tool of its listing no client can take -> why
    last_error: str | None = None
    restarts: int = 0  # automatic restarts after a death (at most one)
    told: bool = False  # the person was told in the shell that it did not start (once per entry or write)
    told_slow: bool = False  # ... that the first listing went on without it
    calls: int = 0
    client: Any = None  # mcp.Client while ready
    ready: asyncio.Event | None = None  # set once a start ended (ready or not)
    stop: asyncio.Event | None = None
    runner: asyncio.Task[None] | None = None

    def summary(self) -> dict[str, Any]:
        """Name, transport, state, tool names, calls, restarts and last error, for the hub."""
        return {"name": self.spec.name, "transport": self.spec.transport, "state": self.state,
                "tools": [t.name for t in self.tools], "calls": self.calls, "restarts": self.restarts,
                "last_error": self.last_error,
                "left_out": [f"{name} ({why})" for name, why in self.left_out.items()]}


class McpHub:
    """Every MCP server of ``AMACS_HOME/mcp.json``: connections, tools, calls.

    Longer than the rule of thumb (~300 lines) for a reason: the MCP SDK's client sessions
    are async contexts entered and left on one task of one loop, so the hub runs a loop of
    its own and every connection's life (start, list, call, stop) is on it, sharing its
    state.  Reading the file (``config.py``) and who may call what (``calls.py``) are apart."""

    def __init__(self, path: Path, log_dir: Path, environ: Mapping[str, str] | None = None, *,
                 eager: bool = False, on_problem: Callable[[str], None] | None = None,
                 scrubber: Scrubber | None = None, results_dir: Path | None = None) -> None:
        self.path = path
        self.results_dir = results_dir or log_dir.parent / "transcripts" / "results"  # results too long to send
        # The server's one scrubber (the transport's, the log's, the transcripts'): it learns
        # every secret of mcp.json as the file is read.
        self.scrubber = scrubber or Scrubber({})
        install()  # a server's stray stdout: a line per burst in the log, not a traceback per line
        self.log_dir = log_dir
        self.environ = environ
        self.eager = eager
        self.on_problem = on_problem or (lambda line: log.warning("%s", line))
        self.config = McpConfig({})
        self.problems: tuple[str, ...] = ()
        self.connections: dict[str, Connection] = {}
        self._stamp: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._said: set[str] = set()  # lines about tools left out, said once each
        self._listed = False  # every server was tried once (the first model call waited for it)

    # -- the file ------------------------------------------------------------------------

    def reload(self) -> bool:
        """Read ``mcp.json`` again if it changed since; True if the servers changed."""
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        with self._lock:
            if stamp == self._stamp:
                return False
            self._stamp = stamp
            try:
                text = self.path.read_text(encoding="utf-8") if stamp is not None else ""
                config = parse(text, self.path, os.environ if self.environ is None else self.environ)
            except (OSError, UnicodeDecodeError, ValueError) as err:
                line = _unreadable(self.path, err)
                if line not in self.problems:
                    self.on_problem(line)
                self.problems = (line,)
                return False
            self._learn(config)
            said = config.problems + config.warnings
            new_problems = [p for p in said if p not in self.problems]
            self.problems = said
            for line in new_problems:
                self.on_problem(line)
            old, self.config = self.config, config
            changed = [n for n in old.servers if config.servers.get(n) != old.servers[n]]
            # A write of the file is the person's word to try again: a down server starts afresh
            # (its one automatic restart given back), whatever the write changed.
            revived = [n for n, c in self.connections.items()
                       if c.state == "down" and n not in changed and n in config.servers]
            for name in revived:
                log.warning("MCP server %s was down (%s); mcp.json was saved, so it is tried again at its next use",
                            name, self.scrub(self.connections[name].last_error or "it stopped"))
            changed += revived
            gone = [self.connections.pop(n) for n in changed if n in self.connections]
            cached = self._cached_listings()
            for name, spec in config.servers.items():
                if name not in self.connections:
                    conn = self.connections[name] = Connection(spec)
                    conn.tools = cached.get(name, {}).get(_key(spec), []) if not self.eager else []
            if changed or set(config.servers) - set(old.servers):
                self._listed = False
        for conn in gone:
            self._submit(self._stop_one(conn))
        return bool(gone) or self._listed is False

    def check(self) -> list[str]:
        """mcp.json's problems, read now (at start-up: said with the other start-up notes, and not
        again when the servers are first needed).  Starts nothing."""
        try:
            config = parse(self.path.read_text(encoding="utf-8"), self.path,
                           os.environ if self.environ is None else self.environ)
            problems = list(config.problems + config.warnings)
            self._learn(config)
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError, ValueError) as err:
            problems = [_unreadable(self.path, err)]
        with self._lock:
            self.problems = tuple(problems)
        return problems

    def _learn(self, config: McpConfig) -> None:
        self.scrubber.learn("mcp.json", ((f"mcp.json {name}", value) for name, value in config.secrets))

    # -- the listings of earlier sessions (mcp-tools.json) -----------------------------------

    @property
    def cache_path(self) -> Path:
        """``mcp-tools.json`` beside mcp.json: each server's tools as it last listed them."""
        return self.path.with_name("mcp-tools.json")

    def _cached_listings(self) -> dict[str, dict[str, list[Any]]]:
        """Server -> {entry's key: its tools}; nothing when the file is missing or unreadable."""
        try:
            raw = json.loads(self.cache_path.read_text(encoding="utf-8"))
            from mcp_types import (
                Tool,  # only when there is a listing: the SDK's types cost start-up time
            )

            return {name: {entry["key"]: [self._clean(Tool.model_validate(t)) for t in entry["tools"]
                                          if problem(t, None) is None]}
                    for name, entry in raw.items()}
        except Exception:  # noqa: BLE001 - a listing is only a head start: without it the servers start
            return {}

    def _clean(self, tool: Any) -> Any:
        """TOOL with every secret the server knows redacted from its description and schema (a
        server that quotes its environment to the agent sends nothing secret on)."""
        data = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        clean = self.scrub(data)
        return tool if clean == data else type(tool).model_validate(clean)

    def _left_out(self, conn: Connection, tool: str, why: str) -> None:
        """TOOL of CONN's listing is left out for WHY: shown in the hub, said once in the log."""
        tool, why = self.scrub(tool), self.scrub(why)
        conn.left_out[tool] = why
        line = f"MCP server {conn.spec.name}: tool {tool} is left out ({why}); the server's other tools are kept"
        if line not in self._said:
            self._said.add(line)
            log.warning("%s", line)

    def _save_listing(self) -> None:
        from ..files import atomic_write

        data = {name: {"key": _key(c.spec), "tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                                                      for t in c.tools]}
                for name, c in list(self.connections.items()) if c.tools}
        try:
            atomic_write(self.cache_path, json.dumps(data, indent=1))
        except OSError as err:
            log.warning("cannot save the MCP tool listings to %s: %s", self.cache_path, err)

    # -- the hub's own loop --------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._stopped:
                raise McpError("the AMACS server is stopping: no more tool calls")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="amacs-mcp", daemon=True)
                self._thread.start()
                ready.wait(5)
                self._loop = loop
            return self._loop

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        try:
            loop = self._ensure_loop()
        except McpError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def _wait(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        future = self._submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    # -- connections (on the hub's loop) -------------------------------------------------

    def _transport(self, spec: ServerSpec, errlog: StderrLog) -> Any:
        if spec.command is not None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            if shutil.which(spec.command, path=spec.env.get("PATH")) is None:  # said here: the guard would only exit 127
                raise FileNotFoundError(2, "command not found", spec.command)
            # The guard ends the server with the AMACS server, even a SIGKILLed one.
            return stdio_client(StdioServerParameters(command=sys.executable,
                                                      args=["-I", "-S", str(GUARD), "--spill",
                                                            str(self.results_dir), spec.command, *spec.args],
                                                      env=dict(spec.env) or None), errlog=errlog.pipe)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert spec.url is not None
        client = httpx2.AsyncClient(headers=dict(spec.headers), timeout=httpx2.Timeout(spec.timeout + 5))
        return streamable_http_client(spec.url, http_client=client)

    async def _run(self, conn: Connection) -> None:
        """Hold CONN's connection open until it is stopped or dies."""
        from mcp import Client
        from mcp_types import Implementation

        assert conn.ready is not None and conn.stop is not None
        spec = conn.spec
        SERVER.set(spec.name)
        errlog = StderrLog(self.log_dir / f"mcp-{spec.name}.log", self.scrubber)
        errlog.say(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {spec.name}")
        conn.left_out = {}
        try:
            vetted = Vetted(self._transport(spec, errlog), lambda tool, why: self._left_out(conn, tool, why))
            client = Client(vetted, read_timeout_seconds=START_TIMEOUT,
                            client_info=Implementation(name="amacs", version="0.1"))
            async with client:
                vetted.version = client.protocol_version
                tools: list[Any] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(self._clean(t) for t in page.tools)
                    cursor = page.next_cursor
                    if not cursor or len(tools) > 1000:
                        break
                listed_before = [t.name for t in conn.tools], [t.input_schema for t in conn.tools]
                conn.tools, conn.client, conn.state = tools, client, "ready"
                if listed_before != ([t.name for t in tools], [t.input_schema for t in tools]):
                    self._save_listing()
                conn.ready.set()
                conn.told = False  # a later failure to start is news again
                log.info("MCP server %s ready: %d tools", spec.name, len(tools))
                await conn.stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # noqa: BLE001 - the server's failure is said, the hub goes on
            conn.last_error = _describe(err)
            log.warning("MCP server %s: %s", spec.name, self.scrub(conn.last_error))
            if conn.client is None and not conn.told and conn.state != "stopped":  # it never was up
                conn.told = True
                self.on_problem(self.scrub(f"MCP server {spec.name} did not start ({conn.last_error}); the agent "
                                           f"has none of its tools: {RETRY} (logs/mcp-{spec.name}.log has "
                                           "its output)"))
        finally:
            conn.client = None
            if conn.state not in ("stopped", "down"):
                conn.state = "down"
            conn.ready.set()
            errlog.close()

    def _start(self, conn: Connection) -> None:
        conn.state = "starting"
        conn.ready, conn.stop = asyncio.Event(), asyncio.Event()
        conn.runner = asyncio.get_running_loop().create_task(self._run(conn))

    async def _up(self, conn: Connection, timeout: float) -> Connection:
        """CONN, started if it was not and restarted once if it died; or an McpError saying why not."""
        if conn.state == "idle" or (conn.state == "down" and conn.client is None and conn.restarts == 0
                                    and conn.runner is not None and conn.runner.done()):
            if conn.state == "down":
                conn.restarts += 1
                log.warning("MCP server %s died (%s): starting it again, once", conn.spec.name,
                            self.scrub(conn.last_error))
            self._start(conn)
        if conn.state == "starting":
            assert conn.ready is not None
            try:
                await asyncio.wait_for(conn.ready.wait(), timeout)
            except TimeoutError:
                raise McpError(f"MCP server {conn.spec.name} did not start within {timeout:.0f} s; "
                               f"logs/mcp-{conn.spec.name}.log in the AMACS home has its output") from None
        if conn.state != "ready":
            again = "it was started again once and is down again; " if conn.restarts else ""
            raise McpError(f"MCP server {conn.spec.name} is down ({conn.last_error or 'it stopped'}); {again}{RETRY}")
        return conn

    async def _stop_one(self, conn: Connection, state: str = "stopped") -> None:
        conn.state = state
        if conn.stop is not None:
            conn.stop.set()
        if conn.runner is not None and not conn.runner.done():
            try:
                await asyncio.wait_for(asyncio.shield(conn.runner), STOP_TIMEOUT)
            except TimeoutError:
                conn.runner.cancel()
                with contextlib.suppress(BaseException):
                    await conn.runner

    async def _list_all(self, timeout: float) -> None:
        conns = [c for c in self.connections.values()
                 if c.state == "starting" or (c.state == "idle" and not c.tools)]  # a cached listing waits
        results = await asyncio.gather(*(self._up(c, timeout) for c in conns), return_exceptions=True)
        for conn, result in zip(conns, results, strict=True):
            if isinstance(result, BaseException):
                conn.last_error = conn.last_error or str(result)
            if conn.state == "starting" and not conn.told_slow:
                conn.told_slow = True
                self.on_problem(f"MCP server {conn.spec.name} has not started within {timeout:.0f} s; the agent "
                                f"goes on without its tools until it has (logs/mcp-{conn.spec.name}.log has "
                                "its output)")

    async def _call(self, conn: Connection, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
        await self._up(conn, START_TIMEOUT)
        conn.calls += 1
        client = conn.client
        try:
            return await asyncio.wait_for(client.call_tool(tool, arguments, read_timeout_seconds=timeout),
                                          timeout + 1)
        except TimeoutError:
            raise McpError(f"{conn.spec.name}/{tool} did not answer within {timeout:g} s (the server's call "
                           "timeout); the call was given up, the server goes on") from None
        except Exception as err:
            from mcp.shared.exceptions import MCPError
            from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

            code = err.code if isinstance(err, MCPError) else None
            if code == REQUEST_TIMEOUT:
                raise McpError(f"{conn.spec.name}/{tool} did not answer within {timeout:g} s (the server's "
                               "call timeout); the call was given up, the server goes on") from None
            if code == CONNECTION_CLOSED or (conn.runner is not None and conn.runner.done()):
                # The server died under the call: its connection is closed for good; the next call
                # starts it again, once.
                why = _describe(err)
                conn.last_error = ("its connection closed" if why.lower().rstrip(".") == "connection closed"
                                   else f"its connection closed: {why}")
                await self._stop_one(conn, state="down")
                # Whether it died before the call or during it, the call cannot tell: it says neither.
                if conn.restarts:
                    raise McpError(f"MCP server {conn.spec.name} stopped again ({conn.last_error} at the call to "
                                   f"{tool}); it was started again once already, so it stays down; {RETRY}") from None
                raise McpError(f"MCP server {conn.spec.name} has stopped ({conn.last_error} at the call to {tool}); "
                               "it is started again at the next call, once") from None
            raise McpError(f"{conn.spec.name}/{tool} failed: {_describe(err)}") from None

    # -- what the World asks (any thread but the hub's) ---------------------------------

    def configured(self) -> bool:
        """Whether mcp.json names any server (read again if it changed)."""
        self.reload()
        return bool(self.connections)

    def list_all(self, timeout: float = LISTING_WAIT) -> None:
        """Start every server not yet started (when EAGER, or at the first listing) and wait,
        at most TIMEOUT seconds, for their tools."""
        self.reload()
        if self._listed or not self.connections:
            return
        with contextlib.suppress(concurrent.futures.TimeoutError):
            self._wait(self._list_all(timeout), timeout + 1)
        self._listed = True

    def ready_future(self) -> concurrent.futures.Future[None] | None:
        """A future done once every server was tried (None: nothing to wait for)."""
        self.reload()
        if self._listed or not self.connections:
            return None
        future = self._submit(self._list_all(LISTING_WAIT))

        def listed(_done: concurrent.futures.Future[None]) -> None:
            self._listed = True

        future.add_done_callback(listed)
        return future

    def waits_for(self) -> list[str]:
        """The servers a pending listing (:meth:`ready_future`) waits for: those starting."""
        return [name for name, c in list(self.connections.items())
                if c.state == "starting" or (c.state == "idle" and not c.tools)]

    def tools(self) -> list[tuple[str, Any]]:
        """(server, tool) of every server that listed its tools, in the file's order."""
        return [(name, tool) for name, conn in list(self.connections.items()) for tool in conn.tools]

    def tool(self, server: str, name: str) -> Any:
        """The tool NAME of SERVER (started if need be), or an McpError naming what exists."""
        self.reload()
        conn = self.connections.get(server)
        if conn is None:
            known = ", ".join(sorted(self.connections)) or "none (AMACS_HOME/mcp.json names no server)"
            raise McpError(f"no MCP server {server!r}; configured servers: {known}")
        if conn.state != "ready":
            try:
                self._wait(self._up(conn, START_TIMEOUT), START_TIMEOUT + 2)
            except concurrent.futures.TimeoutError:
                raise McpError(f"MCP server {server} did not start within {START_TIMEOUT:.0f} s") from None
        for tool in conn.tools:
            if tool.name == name:
                return tool
        names = ", ".join(t.name for t in conn.tools) or "none"
        raise McpError(f"MCP server {server} has no tool {name!r}; its tools: {names}")

    def call(self, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        """Call TOOL of SERVER with ARGUMENTS; the ``CallToolResult``, or an McpError."""
        conn = self.connections.get(server)
        if conn is None:
            raise McpError(f"no MCP server {server!r}")
        timeout = conn.spec.timeout
        try:
            value = self._wait(self._call(conn, tool, arguments, timeout), timeout + START_TIMEOUT + 5)
        except concurrent.futures.TimeoutError:
            raise McpError(f"{server}/{tool} did not answer within {timeout:g} s") from None
        self._scrub_kept(value)
        return value

    def _scrub_kept(self, value: Any) -> None:
        """The file the guard kept an answer too long to send in, with every secret redacted."""
        text = getattr(value.content[0], "text", "") if getattr(value, "content", None) else ""
        found = re.match(r"\[cut: the server's answer is \d+ bytes; .*? the whole answer is in (\S+)\]", text or "")
        if found and Path(found.group(1)).parent == self.results_dir:
            try:
                self.scrubber.file(Path(found.group(1)))
            except OSError as err:
                log.warning("cannot redact %s: %s", found.group(1), err)

    def status(self) -> list[dict[str, Any]]:
        """Each server's summary, for the hub (the values ${VAR} brought in redacted)."""
        self.reload()
        return [self.scrub(c.summary()) for c in list(self.connections.values())]

    def scrub(self, value: Any) -> Any:
        """VALUE with every secret the server knows redacted (mcp.json's among them)."""
        return self.scrubber.value(value)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop every server (their processes end) and the hub's loop; no call is taken after."""
        with self._lock:
            self._stopped = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def stop_all() -> None:
            await asyncio.gather(*(self._stop_one(c) for c in self.connections.values()), return_exceptions=True)

        future = asyncio.run_coroutine_threadsafe(stop_all(), loop)
        try:
            future.result(timeout + STOP_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - stopping goes on
            log.warning("stopping the MCP servers: %r", err)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not loop.is_running():
            loop.close()


def _describe(err: BaseException) -> str:
    """ERR in one line: a group's first real error, else its type and message."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, FileNotFoundError):
        return f"command not found: {err.filename or text}"
    return text[:300]


def _key(spec: ServerSpec) -> str:
    """What identifies SPEC's entry in mcp-tools.json: a hash (its env and headers may hold keys)."""
    text = json.dumps([spec.command, list(spec.args), sorted(spec.env.items()), spec.url,
                       sorted(spec.headers.items())])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _unreadable(path: Path, err: Exception) -> str:
    """The one line for an mcp.json that cannot be read or is not JSON (the servers stay as they were)."""
    if isinstance(err, ValueError) and not isinstance(err, UnicodeDecodeError):
        return str(err)  # parse's own line, naming the file and the place
    return f"{path}: cannot be read ({err}); the servers stay as they were until it is fixed"
