"""The one runtime object: makes the parts of the agent, starts them and stops them.

The parts, each in its own module: the mind in its home (``mind.py``), the model
in use (``model_slot.py``), cost and budget (``ledger.py``), the loop host and
the inbox (``turns.py``), the World of agents (``agents/world.py``), Emacs as
the agents see it (``face.py``) and the session's transcript.  What needs
several parts at once (a rewind, a fork, a switch of model) is here, as the
order in which it asks them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .agents.saved import restore as restore_subagents
from .agents.world import AgentWorld, Limits, WorldHost
from .config import Config
from .errors import Refused
from .face import Face
from .ledger import Ledger
from .loop.host import Settings, TurnHost
from .memory.ltm import DatabaseCheck
from .mind import Mind
from .model_slot import ModelSlot
from .persistence.history import fork as fork_home
from .persistence.history import last_tick, untold_rewind
from .persistence.history import rewind as rewind_home
from .persistence.transcript import Transcript
from .records import ModelSwitch, Rewind
from .scrub import Scrubber
from .state.consciousness import ConsciousnessError
from .tools.kit import ToolHost
from .tools_mcp.calls import patterns as mcp_patterns
from .tools_mcp.calls import unrecorded as unrecorded_results
from .tools_mcp.hub import McpHub
from .turns import Turns
from .views import ViewHost

log = logging.getLogger("amacs")


TurnRunner = Callable[[TurnHost, str | None], Coroutine[Any, Any, None]]


class Runtime:
    """The parts of one agent's server, made in the order each needs the others, and the
    asyncio loop (in its own thread, :class:`~.turns.Turns`) that runs them.

    The primary's turns are run by TURN (``loop.primary.run_turn``, given by whoever
    assembles the server) with the parts it uses (:class:`~.loop.host.TurnHost`); the
    tools and the views read theirs the same way (docs/ARCHITECTURE.md, Layers)."""

    def __init__(self, config: Config, face: Face, turn: TurnRunner | None = None,
                 db_check: DatabaseCheck | None = None, scrub: Scrubber | None = None) -> None:
        self.scrub = scrub or Scrubber(config.secrets())  # the one scrubber: serve's
        self.face = face
        self.settings = Settings()
        # Applies the settings Emacs sends (hello.greet gives it): at hello, and before an input
        # when the person changed one (the method ``settings``).
        self.emacs_settings: Callable[[object], None] | None = None
        # What start-up recovered from (a damaged file, bytes that are not UTF-8): said at hello.
        self.startup_notes: list[str] = []
        home = config.home
        for sub in (home, home / "transcripts", home / "logs"):
            sub.mkdir(parents=True, exist_ok=True)
        self.mind = Mind(config, self.startup_notes, lambda text, kind: self.turns.report(text, kind),
                         config.model, db_check)
        self.run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        self.transcript = Transcript(home / "transcripts", self.run_id, scrub=self.scrub)
        self.slot = ModelSlot(config, self.startup_notes)
        self.ledger = Ledger(config, self.mind, self.slot)
        self.turns = Turns(config, self.mind, face, self.transcript,
                           None if turn is None else lambda text: turn(self, text))
        self.loop = self.turns.loop
        tools = McpHub(home / "mcp.json", home / "logs", eager=config.mcp_eager, on_problem=self.turns.tools_problem,
                       scrubber=self.scrub)
        self.world = AgentWorld(self.mind, self.slot, self.ledger, face, self.transcript, self.turns,
                                Limits(pool=config.agent_pool, max_tasks=config.max_tasks,
                                       max_depth=config.max_depth, max_agents=config.max_agents,
                                       event_queue=config.event_queue, wait_timeout=config.wait_timeout),
                                tools=tools)
        self.turns.attach(self.world)
        core_tools = mcp_patterns(self.mind.skills.get("core").tools)
        if core_tools is not None:  # the person's core skill may narrow the primary's tools
            self.world.primary.tools = core_tools
        rewound = untold_rewind(home)  # a rewind made while no server ran, said at hello
        if rewound is not None:
            self.startup_notes.append(rewound)
        # The subagents of the last tick state, made again: said at hello, or with the rewind's line.
        self.subagents_note = restore_subagents(self.world, self.mind.home, self.mind.consciousness.current_tick)
        if self.subagents_note:
            self.startup_notes.append(self.subagents_note)
        for line in [*tools.check(), *unrecorded_results(home / "transcripts" / "results")]:
            # a bad mcp.json, before any server is needed; a tool's result a kill left unrecorded
            log.warning("%s", line)
            self.startup_notes.append(line)

    @property
    def config(self) -> Config:
        """The configuration as the model in use has it now (a switch of model rewrites it)."""
        return self.slot.config

    def set_model(self, backend: str, model: str, base_url: str | None,
                  window: int | None = None) -> dict[str, object]:
        """Switch backend and model from the next call on (loop thread): the slot's switch,
        said in the transcript; the context starts again whole (the window may differ) and
        without the thinking blocks of the last model (their signatures are that model's)."""
        answer = self.slot.switch(backend, model, base_url, window)
        self.transcript.write(ModelSwitch(backend=backend, model=self.slot.model, base_url=base_url,
                                          window=window or None))
        self.mind.conversation.squeeze = 0
        self.mind.conversation.base = None
        return answer

    async def rewind(self, tick: int) -> dict[str, object]:
        """Return the mind to the end of TICK, in place (loop thread): the running turn and
        every subagent interrupted first, the pending commits made, then the home rewound
        (persistence.history: the abandoned future kept on a git ref) and read again."""
        await self.turns.settle("rewound by the person", 10)  # they end in the future the rewind leaves
        if not self.mind.commits.flush(30):
            raise Refused("the last ticks' commits are still being made; try the rewind again")
        spent = self.ledger.spent()  # with what subagents spent since the last tick was saved
        limit = self.ledger.limit()  # the person's stays (persistence.person_limit)
        done = rewind_home(self.mind.home, tick, locked=True, limit=limit)  # this server holds the home's lock
        self.turns.halted = None  # the interrupted turn is over: the next one runs
        self.mind.reload(self.slot.model)
        self.subagents_note = restore_subagents(self.world, self.mind.home, self.mind.consciousness.current_tick)
        self.turns.user_reply = None
        # The mind's budget is tick TICK's again; the money paid since stays counted.
        self.ledger.rewound(spent, limit)
        self.transcript.write(Rewind(to_tick=tick, ref=done.abandoned, commit=done.commit))
        # The views (the shell's mode line, the hub) show tick TICK's state and budget now, as after a tick.
        self.ledger.tell_ticked(self.face)
        line = "; ".join([*done.notes, done.line(), *([self.subagents_note] if self.subagents_note else [])])
        return {"line": line, "ref": done.abandoned, "tick": tick, "seconds": round(done.seconds, 3)}

    def fork(self, tick: int | None, dest: Path) -> dict[str, object]:
        """A new home DEST holding this mind at the end of TICK, None: of the last tick committed
        (any thread: it reads git and a backup of memory.db, after the pending commits).  Says
        the backend, model and base URL it runs on, for the fork's server to run on the same
        (no URL when this server runs the model itself, local or demo: the fork's runs its own)."""
        self.mind.commits.flush(30)
        if tick is None:
            tick = last_tick(self.mind.home)
        done = fork_home(self.mind.home, tick, dest, locked=True, limit=self.ledger.limit())  # this server holds the lock
        slot = self.slot
        return {"line": "; ".join([*done.notes, done.line()]), "home": str(done.home), "tick": tick,
                "seconds": round(done.seconds, 3), "backend": slot.backend_name, "model": slot.model,
                "base_url": None if slot.own() else slot.url()}

    # -- start and stop ----------------------------------------------------------------

    def start(self) -> None:
        """Start the event loop thread and wait until it takes input; with AMACS_MCP_START=eager,
        start the MCP servers too (in the background: they list their tools meanwhile)."""
        self.turns.start(self.slot.learn)
        if self.config.mcp_eager and self.world.tools is not None:
            try:
                self.world.tools.ready_future()
            except Exception as err:  # noqa: BLE001 - said in the hub; the agent goes on without them
                log.warning("starting the MCP servers: %r", err)

    def stop(self, grace: float = 5.0) -> None:
        """Let a running turn finish (up to GRACE seconds), then stop the loop and close the database."""
        self.turns.stop(grace, self.slot.aclose)
        if self.world.tools is not None:
            self.world.tools.stop()  # every MCP server's process ends with the server
        if not self.mind.commits.stop(timeout=grace):  # the last ticks' commits before exit
            log.warning("git commits still pending after %.0f s; the files are on disk", grace)
        self.slot.stop()
        self.transcript.close()
        self.mind.close()


__all__ = ["Runtime", "Settings", "ConsciousnessError"]


def _rooms(rt: Runtime) -> tuple[TurnHost, ToolHost, ViewHost, WorldHost]:
    """The Runtime holds the parts each room below it declares, and the turns are the World's
    host (mypy checks both here)."""
    return rt, rt, rt, rt.turns

