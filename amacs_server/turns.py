"""The loop host: the asyncio loop and its thread, the person's inbox, the running turn, interrupts.

The primary's turns run here, one at a time, for the person's input or for
events that wait for the primary; how a turn goes is ``loop/primary.py``'s,
handed in by the runtime as a function of the input.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from . import faults
from .agents.kinds import PRIMARY
from .agents.talk import Event, EventType
from .agents.world import AgentWorld
from .config import Config
from .errors import Refused, Stopping
from .face import Face
from .files import PersistenceError, deferred_sync
from .mind import Mind
from .persistence.recovery import explain_os_error
from .persistence.transcript import Transcript
from .records import Posted

log = logging.getLogger("amacs")

Turn = Callable[[str | None], Coroutine[Any, Any, None]]


class Turns:
    """Which turn of the primary runs, what waits for it, and who the person's next input answers.

    The World is attached once it is made (:meth:`attach`): it needs these to wake the
    primary, and these need it to know what waits."""

    world: AgentWorld

    def __init__(self, config: Config, mind: Mind, face: Face, transcript: Transcript,
                 turn: Turn | None) -> None:
        self.config, self.mind, self.face, self.transcript = config, mind, face, transcript
        self.turn = turn  # None: a runtime that runs no turns (tests that drive turns themselves)
        self.loop = asyncio.new_event_loop()
        self._inbox: asyncio.Queue[str | None] | None = None  # None: wake for events
        self._thread = threading.Thread(target=self._run_loop, name="amacs-loop", daemon=True)
        self._ready = threading.Event()
        self._on_start: Callable[[], None] = lambda: None
        self._turn_running = False
        self._turn_task: asyncio.Task[None] | None = None
        self.halted: str | None = None  # why the running turn was stopped (None: it was not)
        # The person's inputs in the inbox, not yet begun; a C-c C-c among them stops the next one
        # as soon as it begins (why, kept here), as it stops a turn at work.
        self._inputs_queued = 0
        self._interrupt_next: str | None = None
        self._wake_queued = False
        # Stopped by the person (C-c C-c) or by Emacs going: events wake no turn until the person's
        # next input (the subagents' "interrupted" events would start a model call nobody asked for).
        self._hushed = False
        self.user_reply: tuple[str, int] | None = None  # who asked the person, with which TalkId
        self._driver_next = 0  # the experiment driver's next turn (take_driver_turn)
        self._driver_lock = threading.Lock()
        # Once stop() runs: the subagents it ends are not shown as ended (the server stops).
        self._closing = False

    def attach(self, world: AgentWorld) -> None:
        """The World whose events wake the primary and whose agents the person may answer."""
        self.world = world

    @property
    def turn_running(self) -> bool:
        """Whether a turn of the primary is running now."""
        return self._turn_running

    # -- the loop thread -------------------------------------------------------------

    def start(self, on_start: Callable[[], None]) -> None:
        """Start the event loop thread, run ON_START on it first, and wait until it takes input."""
        self._on_start = on_start
        self._thread.start()
        self._ready.wait(10)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._inbox = asyncio.Queue()
        self.loop.create_task(self._worker())
        self.loop.call_soon(self._on_start)  # after start-up, off its path
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            self._close_loop()

    def _close_loop(self) -> None:
        """Close the stopped loop here, on its own thread, last.

        :meth:`stop` has ended the turn, the tasks and the model client; what is
        left (a task started by a cancelled one, async generators, the default
        executor's threads) ends now, then the loop is closed.  Left to the
        interpreter's exit, the loop was closed by the garbage collector before
        the objects that still used it, which then failed with "Event loop is
        closed" in server.log."""
        loop = self.loop
        if loop.is_running() or loop.is_closed():
            return
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        except Exception:  # noqa: BLE001 - closing goes on; the log says what did not end
            log.exception("while stopping the event loop")
        finally:
            loop.close()

    async def _worker(self) -> None:
        assert self._inbox is not None
        while True:
            text = await self._inbox.get()
            if text is not None:
                self._inputs_queued -= 1
            if text is None:
                self._wake_queued = False
                if self._hushed or not self.world.bus.pending(PRIMARY):
                    continue
            self._turn_running = True
            self.halted = None
            if self.turn is None:  # a runtime made without a turn runner (tests that drive turns themselves)
                log.error("input arrived but this runtime runs no turns: %r", text)
                self.face.annotate("This server runs no turns (no turn runner): your input was not taken.",
                                   "error")
                continue
            self._turn_task = self.loop.create_task(self.turn(text))
            if text is not None and self._interrupt_next is not None:  # after the turn's first step: stopped as at work
                self.loop.call_soon(self.interrupt, self._interrupt_next)
                self._interrupt_next = None
            try:
                # Only the turn's own cancel is caught below: a cancel of this worker (the
                # runtime's stop) ends it; swallowed, it left stop waiting out its whole grace.
                await asyncio.wait({self._turn_task})
                self._turn_task.result()
            except asyncio.CancelledError:
                worker = asyncio.current_task()
                if worker is not None and worker.cancelling():
                    raise
                log.info("turn interrupted")
            except Exception as err:  # the loop must outlive any one turn
                log.exception("turn failed")
                self.face.annotate(self._turn_failure(err), "error")
                self.face.turn_done(self.mind.consciousness.current_tick)
            finally:
                self._turn_running = False
                self._turn_task = None
            if self.world.bus.pending(PRIMARY):
                self.wake()

    def _turn_failure(self, err: Exception) -> str:
        """What the person is told when ERR ended a turn: a full disk or an unwritable home in
        words and with what to do, not a raw OperationalError per tick."""
        home = self.mind.home
        kept = "Your input is in the shell history (M-p)."
        if isinstance(err, sqlite3.OperationalError) and "full" in str(err):
            return (f"The disk holding the AMACS home {home} is full: memory.db could not be written. "
                    f"Free some space there, then send again. {kept}")
        if isinstance(err, OSError) and err.errno is not None:
            return f"This turn stopped: {explain_os_error(err, home)}. {kept}"
        return f"Internal error in this turn: {err!r}. The server goes on; server.log has the details."

    # -- what stops, wakes and feeds a turn ------------------------------------------

    def interrupt(self, reason: str = "interrupted by the person", *, queued: bool = False) -> bool:
        """Cancel the running turn (its model call and its chain of evals) and every subagent
        at work, each recorded as interrupted in its transcript (loop thread).  QUEUED (the
        person's C-c C-c): with no turn at work, the input sent and not yet begun is stopped as
        it begins (typed while the server started, it reaches the inbox just before the C-c C-c)."""
        stopped = self.world.cancel_all(reason)
        running = self._turn_task is not None and not self._turn_task.done()
        if queued and not running and self._inputs_queued > 0:
            self._interrupt_next = reason
            return True
        if stopped or running:
            self._hushed = True  # what the stopped agents post waits for the person's next input
        if self._turn_task is None or not running:
            return bool(stopped)
        self.halted = reason  # checked between ticks too: a cancel can be lost in a wait_for (3.11)
        self._turn_task.cancel()
        return True

    async def settle(self, reason: str, timeout: float) -> None:
        """Interrupt the turn and the subagents (REASON) and wait, up to TIMEOUT seconds each,
        until they have ended (loop thread)."""
        self.interrupt(reason)
        task = self._turn_task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=timeout)
        await self.world.settle(timeout)

    def emacs_gone(self) -> None:
        """The Emacs connection closed: stop at once, no further model calls (loop thread)."""
        if self.interrupt("Emacs disconnected (a restart, or Emacs quit)"):
            log.info("Emacs disconnected: the running turn and subagents were stopped")

    def wake(self) -> None:
        """Events wait for the primary: run a turn for them when it is idle (loop thread)."""
        if self._turn_running or self._wake_queued or self._hushed or self._inbox is None:
            return
        self._wake_queued = True
        self._inbox.put_nowait(None)

    def expect_user_reply(self, agent_id: str, talk_id: int) -> None:
        """The person's next input answers AGENT_ID's talk TALK_ID (loop thread)."""
        self.user_reply = (agent_id, talk_id)
        if agent_id != PRIMARY:
            self.face.annotate(f"{agent_id} is asking you; your next input goes to it.", "info")

    def _route_input(self, text: str) -> None:
        assert self._inbox is not None
        self._hushed = False  # the person speaks: events may wake the primary again
        if self.user_reply is None:
            self._inputs_queued += 1
            self._inbox.put_nowait(text)
            return
        agent_id, talk_id = self.user_reply
        self.user_reply = None
        asker = self.world.agents.get(agent_id)
        if agent_id != PRIMARY and (asker is None or asker.state not in ("idle", "running")):
            self._inputs_queued += 1
            self._inbox.put_nowait(text)  # whoever asked is gone: the input is a new turn, not lost
            return
        self.world.bus.post(agent_id, Event(EventType.USER, "user", text, talk_id), reserved=True)
        self.face.input_taken(saved=False)  # an event for the asker, not in agent-chat.org
        self.transcript.write(Posted(type="User", talk_id=talk_id, content=text),
                              agent=self.world.identity(agent_id))
        if agent_id == PRIMARY:
            self.wake()  # a waiting turn wakes on it; an idle primary gets a turn for it

    def submit(self, text: str) -> None:
        """The person's input: to whoever asked them, else a new turn; returns at once.

        Refused (:class:`Refused`, said in the shell) when the inbox is at its bound."""
        assert self._inbox is not None
        faults.point("submit.received")
        waiting = self._inbox.qsize()  # read from another thread: a bound, not an exact count
        if waiting >= self.config.inbox_limit:
            raise Refused(f"{waiting} inputs already wait for the agent (the limit, AMACS_INBOX_LIMIT); "
                          "send again once it has taken some")
        self.loop.call_soon_threadsafe(self._route_input, text)

    def take_driver_turn(self, text: object) -> bool:
        """Whether TEXT is the experiment driver's next turn (then counted); any thread."""
        turns = self.config.driver_turns or ()
        with self._driver_lock:
            if (self._driver_next < len(turns) and isinstance(text, str)
                    and turns[self._driver_next].strip() == text.strip()):
                self._driver_next += 1
                return True
            return False

    def task_ended(self, agent_id: str, state: str, ok: bool, text: str) -> None:
        """A subagent task ended: the shell shows TEXT (✓ when OK, else ✗) and agent-chat.org keeps
        the same line where it fell among the ticks, so a resumed shell shows it again.  One no
        person saw (Emacs gone), or that the server's stop ended, is not kept: a replay shows what
        was shown, and the next start says which subagents at work were not resumed."""
        if not self.face.agent_ended(agent_id, state, ok, text) or self._closing:
            return
        try:
            with deferred_sync():
                self.mind.chat_log.write_task_ended(text, ok)
        except PersistenceError as err:
            self.face.annotate(f"Could not save the end of {agent_id} in agent-chat.org: {err.strerror}", "error")

    def talk_shown(self, line: str) -> None:
        """A line of the agents' talk the shell showed (LINE names who said it): agent-chat.org
        keeps it under the tick last begun, as a reply the person saw is kept."""
        if self._closing:
            return
        try:
            with deferred_sync():
                self.mind.chat_log.write_talk(line)
        except PersistenceError as err:
            self.face.annotate(f"Could not save a line of the agents' talk in agent-chat.org: {err.strerror}", "error")

    # -- other threads -----------------------------------------------------------------

    def report(self, text: str, kind: str) -> None:
        """A note from another thread (the commit worker's), shown from the loop thread."""
        if self.loop.is_running():
            try:
                self.loop.call_soon_threadsafe(self.face.annotate, text, kind)
                return
            except RuntimeError:  # the loop closed meanwhile
                pass
        log.warning("%s: %s", kind, text)
        self.face.annotate(text, kind)

    def tools_problem(self, line: str) -> None:
        """A problem in mcp.json: one line in the server log and in the shell (any thread)."""
        log.warning("%s", line)
        try:
            self.call_in_loop(lambda: self.face.annotate(line, "error"))
        except Stopping:
            pass

    def call_in_loop(self, fn: Callable[[], None]) -> None:
        """Run FN on the loop thread (called from other threads).

        Raises Stopping (a RuntimeError) once the loop is closed."""
        if self.loop.is_closed():
            raise Stopping("the AMACS server is stopping")
        self.loop.call_soon_threadsafe(fn)

    def stop(self, grace: float, last: Callable[[], Awaitable[None]]) -> None:
        """Let a running turn finish (up to GRACE seconds), end every other task, await LAST
        (the model client's close, on this loop), then stop the loop and its thread."""

        async def finish() -> None:
            task = self._turn_task
            if task is not None and not task.done():
                await asyncio.wait({task}, timeout=grace)
            # The input worker and anything else still pending end here, not as
            # destroyed-but-pending tasks when the interpreter exits.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for other in others:
                other.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            try:
                await last()
            except Exception as err:  # noqa: BLE001 - the process is ending anyway
                log.info("closing the model client: %r", err)
            self.loop.stop()  # then _run_loop closes the loop (_close_loop)

        self._closing = True
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(finish()))
            self._thread.join(grace + 2)
