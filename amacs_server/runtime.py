"""The one runtime object: owns the agent's state and the event loop that runs it."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import faults
from .agents.kinds import PRIMARY
from .agents.saved import numbered_since
from .agents.talk import Event, EventType
from .agents.world import AgentWorld, Limits
from .config import DEMO_MODEL, LOCAL_ALIAS, Config
from .context.assemble import Conversation, conversation_from_state, conversation_state
from .demo_model import DEMO_NOTE, DemoModel
from .errors import AmacsError, Refused, Stopping
from .face import Face
from .files import PersistenceError, atomic_write, deferred_sync
from .inference import sdk
from .inference.anthropic_backend import AnthropicBackend
from .inference.capabilities import CapabilityStore
from .inference.catalog import ModelCatalog
from .inference.openai_backend import OpenAIBackend
from .inference.pricing import FREE, Price, Tally, Usage, cost, is_local, price_for
from .local_model import TRY_ONLY, LocalBackend, LocalModel, LocalModelError
from .loop.host import Settings, TurnHost
from .memory.active import ActiveMemory, ram_window
from .memory.ltm import DatabaseCheck, LongTermMemory, damaged
from .persistence import person_limit, rewound_spend
from .persistence.chat_log import ChatEntry, ChatLog
from .persistence.events import ModelSwitch, Posted, Rewind
from .persistence.git_repo import CommitWorker, HomeRepo
from .persistence.history import (
    HistoryError,
    active_rows,
    file_sizes,
    finish_unfinished,
    last_tick,
    log_marks,
    ltm_watermark,
    read_state,
    tracked,
    write_state,
)
from .persistence.history import fork as fork_home
from .persistence.history import rewind as rewind_home
from .persistence.monologue import MonologueLog
from .persistence.recovery import (
    StartupError,
    explain_os_error,
    invalid_utf8_note,
    load_consciousness,
    move_aside,
    stamp,
)
from .persistence.scratchpad import ScratchpadLog
from .persistence.transcript import Transcript
from .scrub import Scrubber
from .skills import SkillLibrary
from .state.consciousness import Consciousness, ConsciousnessError, EvalResult
from .threads import Thread, ThreadBook
from .tools.kit import ToolHost
from .tools_mcp.calls import patterns as mcp_patterns
from .tools_mcp.calls import unrecorded as unrecorded_results
from .tools_mcp.hub import McpHub
from .views import ViewHost

log = logging.getLogger("amacs")


TurnRunner = Callable[["Runtime", str | None], Coroutine[Any, Any, None]]


class Runtime:
    """Everything the agent is, plus the asyncio loop (in its own thread) that runs it.

    The primary's turns are run by TURN (``loop.primary.run_turn``, given by
    whoever assembles the server): the runtime owns the state and the inbox,
    the loop owns how a turn goes, and neither imports the other's module the
    other way round (docs/ARCHITECTURE.md, Layers).

    Longer than the rule of thumb (~300 lines) for a reason: it is the one object that owns
    mutable state (the configuration, the consciousness, memory, the World, the inbox, the
    backend, the commit worker, the loop thread), and its methods are the small transitions
    of that state the person asks for (a model, a budget, an interrupt, a stop).  How a turn
    goes (``loop/primary.py``), what Emacs is shown (``views.py``), what Emacs may call
    (``methods.py``) and the agents (``agents/``) are kept out of it."""

    def __init__(self, config: Config, face: Face, turn: TurnRunner | None = None,
                 db_check: DatabaseCheck | None = None, scrub: Scrubber | None = None) -> None:
        self.turn = turn
        self.scrub = scrub or Scrubber(config.secrets())  # the one scrubber: __main__'s
        self.config = config
        self.face = face
        self.settings = Settings()
        self.last_eval: tuple[int, EvalResult] | None = None  # the last eval that ran, for the hub
        # Applies the settings Emacs sends (hello.greet gives it): at hello, and before an input
        # when the person changed one (the method ``settings``).
        self.emacs_settings: Callable[[object], None] | None = None
        # the person's price table (AMACS_PRICES; `amacs-price-table' replaces it at hello)
        self.prices: dict[str, Price] = {m: Price(*p) for m, p in config.prices.items()}
        self.tick_tally = Tally()
        self.session_tally = Tally()
        self.model = config.model
        # What start-up recovered from (a damaged file, bytes that are not UTF-8): said at hello.
        self.startup_notes: list[str] = []
        # Once stop() runs: the subagents it ends are not shown as ended (the server stops).
        self._closing = False
        home = config.home
        for sub in (home, home / "transcripts", home / "logs"):
            sub.mkdir(parents=True, exist_ok=True)
        # memory.db's integrity check reads every page: it runs in a thread, started by __main__
        # before the server's imports, else here, while the org files are read.
        db_check = db_check or DatabaseCheck(home / "memory.db")
        self._finish_rewind()  # before the mind is read: a rewind a kill cut short is done first
        self.repo = HomeRepo(home)
        self.rewound_spend = rewound_spend.read(home)  # paid for futures a rewind abandoned
        # The limit the person set (AMACS_BUDGET_LIMIT, M-x amacs-set-budget): None, consciousness.el's.
        self._driver_next = 0  # the experiment driver's next turn (take_driver_turn)
        self._driver_lock = threading.Lock()
        self.person_limit = self.config.budget_limit if self.config.budget_limit is not None else person_limit.read(home)
        self.commits = CommitWorker(self.repo, self._report_commit)  # one commit per tick, off the loop
        chat, keep = self._read_mind()
        self.ltm, rebuild = self._open_ltm(db_check)
        self.memory = ActiveMemory(self.ltm, agent=config.identity)
        if rebuild:
            self._rebuild_memory(rebuild)
        self.conversation = Conversation()  # the primary's append-only context (a new one per server run)
        self._restore_memory(chat, keep)
        for org in (self.chat_log, self.monologue, self.scratchpad):
            if org.bad_utf8 is not None:
                log.warning("%s: bytes that are not UTF-8 from offset %s, read as U+FFFD", org.path, org.bad_utf8)
                self.startup_notes.append(invalid_utf8_note(org.path, org.bad_utf8))
        self._restore_tick_state()
        self.last_eval = self._last_eval_of_log()
        self.skills = SkillLibrary(config.skills_dir, home / "skills")
        self._load_threads()
        self.run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        self.transcript = Transcript(home / "transcripts", self.run_id, scrub=self.scrub)
        self.local = self._start_local()  # None unless AMACS_LOCAL_MODEL names a model to serve
        self.demo = self._start_demo()  # None unless AMACS_DEMO asks for the demo model
        self.backend_name = config.backend
        # OPENAI_BASE_URL is the OpenAI-compatible backend's: the Anthropic one has ANTHROPIC_BASE_URL.
        self.backend = self._make_backend(config.backend,
                                          self.config.openai_base_url if config.backend == "openai" else None,
                                          config.model)
        # What the model accepts: asked once the loop runs (start), and on every set_model.
        self.catalog = ModelCatalog(CapabilityStore.open(home / "model-capabilities.json"))
        self.catalog.setting_window = config.context_window or (self.local.context if self.local else None)
        self.loop = asyncio.new_event_loop()
        self._inbox: asyncio.Queue[str | None] | None = None  # None: wake for events
        tools = McpHub(home / "mcp.json", home / "logs", eager=config.mcp_eager, on_problem=self._tools_problem,
                       scrubber=self.scrub)
        self.world = AgentWorld(self, Limits(pool=config.agent_pool, max_tasks=config.max_tasks,
                                             max_depth=config.max_depth, max_agents=config.max_agents,
                                             event_queue=config.event_queue,
                                             wait_timeout=config.wait_timeout),
                                tools=tools)
        core_tools = mcp_patterns(self.skills.get("core").tools)
        if core_tools is not None:  # the person's core skill may narrow the primary's tools
            self.world.primary.tools = core_tools
        self.subagents_note = self._restore_subagents()  # said at hello, or with the rewind's line
        if self.subagents_note:
            self.startup_notes.append(self.subagents_note)
        for line in [*tools.check(), *unrecorded_results(home / "transcripts" / "results")]:
            # a bad mcp.json, before any server is needed; a tool's result a kill left unrecorded
            log.warning("%s", line)
            self.startup_notes.append(line)
        self._turn_running = False
        self._turn_task: asyncio.Task[None] | None = None
        self.halted: str | None = None  # why the running turn was stopped (None: it was not)
        self._wake_queued = False
        # Stopped by the person (C-c C-c) or by Emacs going: events wake no turn until the person's
        # next input (the subagents' "interrupted" events would start a model call nobody asked for).
        self._hushed = False
        self._user_reply: tuple[str, int] | None = None  # who asked the person, with which TalkId
        self._thread = threading.Thread(target=self._run_loop, name="amacs-loop", daemon=True)
        self._ready = threading.Event()

    # -- state -------------------------------------------------------------------

    def _finish_rewind(self) -> None:
        """Finish the rewind of the home a kill cut short (persistence.history), and say so at hello."""
        try:
            note = finish_unfinished(self.config.home)
        except (HistoryError, OSError, sqlite3.Error) as err:
            raise StartupError(f"the home {self.config.home} has a rewind cut short that could not be finished: "
                               f"{' '.join(str(err).split())}") from err
        if note is not None:
            log.warning("%s", note)
            self.startup_notes.append(note)

    def _load_consciousness(self) -> Consciousness:
        """consciousness.el; a damaged one is moved aside and restored from git, never reset
        (persistence.recovery), and the person is told at hello."""
        c, note = load_consciousness(self.config.home, self.repo)
        c.identity = self.config.identity
        if self.config.budget_limit is not None:
            c.budget.budget_limit = self.config.budget_limit
        if note is not None:
            log.warning("%s", note)
            self.startup_notes.append(note)
            atomic_write(self.config.home / "consciousness.el", c.to_elisp())
        return c

    def _open_ltm(self, check: DatabaseCheck) -> tuple[LongTermMemory, str | None]:
        """memory.db, and None; or, when it is damaged (it does not open, or its integrity check
        fails), a new one holding what could be read from the old one, which is moved aside
        (``memory.db.corrupt-<time>``), and the note for :meth:`_rebuild_memory`."""
        path = self.config.home / "memory.db"
        try:
            problem = check.result()
            if problem is None:
                return LongTermMemory(path), None
        except sqlite3.DatabaseError as err:
            if not damaged(err):
                raise StartupError(f"cannot open {path}: {err}. If another program has it open, close that "
                                   "program; otherwise move the file aside (the agent rebuilds it from its "
                                   "org files), then send again (or M-x amacs-restart)") from err
            problem = str(err)
        log.warning("memory.db is damaged (%s): moving it aside and rebuilding it", problem)
        try:
            aside = move_aside(path, stamp())
            wal = path.with_name(path.name + "-wal")
            if wal.exists():
                os.replace(wal, aside.with_name(aside.name + "-wal"))  # the old file's last commits
            path.with_name(path.name + "-shm").unlink(missing_ok=True)
        except OSError as err:
            raise StartupError(f"memory.db in {self.config.home} is damaged ({problem}) and could not be "
                               f"moved aside: {err}. Move it away yourself, then send again") from err
        ltm = LongTermMemory(path)
        kept = ltm.salvage_from(aside)
        head = (f"memory.db was damaged ({' '.join(problem.split())[:160]}); it was moved to {aside.name} "
                "and rebuilt from the org files (chat, monologue, scratchpad)")
        if kept:
            return ltm, (f"{head} and the {kept} item versions still readable in it; notes or threads that were "
                         "only in its damaged parts are lost.")
        return ltm, f"{head}; nothing in it could be read, so notes or threads that were only in it are lost."

    def _rebuild_memory(self, note: str) -> None:
        """Bring a rebuilt memory.db level with the whole of the org files (the active memory
        restores only the windows the context shows)."""
        everything = ActiveMemory(self.ltm, agent=self.config.identity)
        everything.restore(
            self.consciousness,
            chat=[(e.tick, e.human, e.agent) for e in self.chat_log.read()],
            monologue=self.monologue.read(),
            scratchpad=[(e.tick, e.heading, e.thread, e.content) for e in self.scratchpad.read()],
        )
        log.warning("%s", note)
        self.startup_notes.append(note)

    def _load_threads(self) -> None:
        """The thread book from the threads active memory restored."""
        self.threads = ThreadBook()
        for tid, item in self.memory.threads.items():
            self.threads.open[tid] = Thread.from_content(item.content)
        if self.consciousness.active_thread in self.threads.open:
            self.threads.active = self.consciousness.active_thread
        self.sync_threads(save=False)

    def _read_mind(self) -> tuple[list[ChatEntry], int]:
        """Open the home's org logs and read consciousness; the chat's last ticks the context
        shows (older items are in LTM) and how many that is."""
        home = self.config.home
        self.chat_log = ChatLog(home / "agent-chat.org")
        self.monologue = MonologueLog(home / "monologue.org")
        self.scratchpad = ScratchpadLog(home / "scratchpad.org")
        self.consciousness = self._load_consciousness()
        keep = ram_window(self.consciousness)
        chat = self.chat_log.read_tail(keep)
        if chat:
            self.consciousness.current_tick = max(self.consciousness.current_tick, chat[-1].tick)
        return chat, keep

    def _restore_memory(self, chat: list[ChatEntry], keep: int) -> None:
        """Fill active memory from consciousness, CHAT and the last KEEP ticks of the logs."""
        self.memory.restore(
            self.consciousness,
            chat=[(e.tick, e.human, e.agent) for e in chat],
            monologue=self.monologue.read_tail(keep),
            scratchpad=[(e.tick, e.heading, e.thread, e.content) for e in self.scratchpad.read()],
        )

    @property
    def turn_running(self) -> bool:
        """Whether a turn of the primary is running now."""
        return self._turn_running

    def spent(self) -> float:
        """The dollars the budget counts: the mind's figure and what futures a rewind abandoned cost."""
        return self.consciousness.budget.cost_so_far + self.rewound_spend

    def limit(self) -> float:
        """The dollars the budget allows: the limit the person set, else the mind's."""
        return self.person_limit if self.person_limit is not None else self.consciousness.budget.budget_limit

    def take_driver_turn(self, text: object) -> bool:
        """Whether TEXT is the experiment driver's next turn (then counted); any thread."""
        turns = self.config.driver_turns or ()
        with self._driver_lock:
            if (self._driver_next < len(turns) and isinstance(text, str)
                    and turns[self._driver_next].strip() == text.strip()):
                self._driver_next += 1
                return True
            return False

    def set_limit(self, dollars: float) -> None:
        """The person sets the limit (loop thread): enforced at once, kept in the home
        (persistence.person_limit), and the mind's budget item shows it from the next tick."""
        self.person_limit = dollars
        person_limit.write(self.config.home, dollars)
        self.consciousness.budget.budget_limit = dollars
        self.memory.sync_state(self.consciousness)
        self.save_consciousness()

    def spending(self) -> dict[str, Any]:
        """The session's usage and cost, what the budget counts as spent, and its limit."""
        return {"session": self.session_tally.to_dict(), "spent": self.spent(), "budget_limit": self.limit()}

    def tell_ticked(self) -> None:
        """Tell the face the current tick is committed, with the tick's usage and the spending."""
        self.face.ticked(self.consciousness.current_tick, {"this_tick": self.tick_tally.to_dict(),
                                                            **self.spending()})

    def _last_eval_of_log(self) -> tuple[int, EvalResult] | None:
        """The newest eval agent-chat.org holds, with its tick: the hub's last eval after a
        start or a rewind (it said none, right after a rewind to a tick that had one)."""
        evals = self.chat_log.recent_evals
        if not evals:
            return None
        tick = max(evals)
        done = evals[tick]
        return tick, EvalResult(done.success, result=done.result, error=done.error)

    def reload_mind(self) -> None:
        """Read the mind again from the home, as a start-up does: after a rewind wrote it
        (loop thread; no turn running, no subagent at work)."""
        chat, keep = self._read_mind()
        self.memory = ActiveMemory(self.ltm, agent=self.config.identity)
        self.conversation = Conversation()
        self._restore_memory(chat, keep)
        self._restore_tick_state()
        self._load_threads()
        self.subagents_note = self._restore_subagents()
        self.last_eval = self._last_eval_of_log()
        self._user_reply = None
        self.repo.forget_head()  # the rewind moved HEAD: the next commit's parent is read again

    async def rewind(self, tick: int) -> dict[str, object]:
        """Return the mind to the end of TICK, in place (loop thread): the running turn and
        every subagent interrupted first, the pending commits made, then the home rewound
        (persistence.history: the abandoned future kept on a git ref) and read again."""
        self.interrupt("rewound by the person")
        task = self._turn_task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=10)
        await self.world.settle(10)  # the subagents interrupted end in the future the rewind leaves
        if not self.commits.flush(30):
            raise Refused("the last ticks' commits are still being made; try the rewind again")
        spent = self.spent()  # with what subagents spent since the last tick was saved
        limit = self.limit()  # the person's stays (persistence.person_limit)
        done = rewind_home(self.config.home, tick, locked=True, limit=limit)  # this server holds the home's lock
        self.halted = None  # the interrupted turn is over: the next one runs
        self.reload_mind()
        # The mind's budget is tick TICK's again; the money paid since stays counted.
        self.rewound_spend = rewound_spend.keep(self.config.home, spent, self.consciousness.budget.cost_so_far)
        self.person_limit = limit
        self.transcript.write(Rewind(to_tick=tick, ref=done.abandoned, commit=done.commit))
        # The views (the shell's mode line, the hub) show tick TICK's state and budget now, as after a tick.
        self.tick_tally = Tally()
        self.tell_ticked()
        line = "; ".join([*done.notes, done.line(), *([self.subagents_note] if self.subagents_note else [])])
        return {"line": line, "ref": done.abandoned, "tick": tick, "seconds": round(done.seconds, 3)}

    def fork(self, tick: int | None, dest: Path) -> dict[str, object]:
        """A new home DEST holding this mind at the end of TICK, None: of the last tick committed
        (any thread: it reads git and a backup of memory.db, after the pending commits).  Says
        the backend, model and base URL it runs on, for the fork's server to run on the same
        (no URL when this server runs the model itself, local or demo: the fork's runs its own)."""
        self.commits.flush(30)
        if tick is None:
            tick = last_tick(self.config.home)
        done = fork_home(self.config.home, tick, dest, locked=True, limit=self.limit())  # this server holds the lock
        cfg = self.config
        own = cfg.local_model is not None or (self.demo is not None and self.model == DEMO_MODEL)
        url = None if own else cfg.openai_base_url if self.backend_name == "openai" else cfg.base_url
        return {"line": "; ".join([*done.notes, done.line()]), "home": str(done.home), "tick": tick, "seconds": round(done.seconds, 3),
                "backend": self.backend_name, "model": self.model, "base_url": url}

    def _restore_tick_state(self) -> None:
        """What the last tick's state (persistence.history) has beyond LTM and the org files: the
        primary's conversation, so the next request repeats the last one's prefix as if the
        server had not stopped (a restart, a rewind, a fork), and its pinned items' order."""
        state = read_state(self.config.home)
        if state is None or state.get("tick") != self.consciousness.current_tick:
            return  # none, or older than the org files (a tick whose commit never came)
        self.memory.apply_order_state(state.get("memory", {}))
        conversation = state.get("conversation")
        if conversation is not None and state.get("model") == self.model:  # thinking blocks are one model's
            try:
                self.conversation = conversation_from_state(conversation)
            except (KeyError, TypeError, ValueError) as err:
                log.warning("the tick state's conversation cannot be read (%r): starting a new one", err)

    def _restore_subagents(self) -> str | None:
        """The live subagents of the last tick's state, made again (agents/saved.py): none when
        the state is older than the org files.  Returns what the person is told when some were
        at work at the tick: they come back idle (a task: interrupted), not mid-run."""
        state = read_state(self.config.home)
        older: dict[str, Any] | None = None
        if state is not None and state.get("tick") != self.consciousness.current_tick:
            older, state = state, None  # a crash between the org files and the tick state
        state = state or {}
        agents = state.get("agents")
        try:
            stopped = self.world.restore_subagents(agents if isinstance(agents, dict) else _numbering(older))
            since = (older or state).get("ended_at", 0.0)  # ids given after it are not given again
            self.world.numbered = max(self.world.numbered, numbered_since(self.config.home / "transcripts", since))
            if older is not None:
                return _dropped(older, self.consciousness.current_tick)
        except (AmacsError, KeyError, TypeError, ValueError) as err:
            log.warning("the tick state's subagents cannot be read (%r): none restored", err)
            self.world.restore_subagents({})
            return f"the subagents of tick {state.get('tick')} could not be restored ({err}); none is live"
        if not stopped:
            return None
        return (f"at work at tick {state['tick']}, not resumed: {', '.join(stopped)} (back idle with what "
                "they were told; a task: interrupted)")

    def tick_state(self) -> dict[str, object]:
        """What the request after this tick is built from, beyond the org files and LTM's rows
        (persistence.history): written at each tick's end and committed with it."""
        home = self.config.home
        self.ltm.commit()  # the rows it counts are in the database, not only in this connection's view
        # ended_at and logs: a rewind to this tick moves the transcripts' lines of no tick written
        # after it, and what every file of logs/ holds beyond its mark (persistence.history).
        return {"version": 1, "tick": self.consciousness.current_tick, "ended_at": time.time(), "model": self.model,
                "files": file_sizes(home), "logs": log_marks(home), "ltm_max_id": ltm_watermark(self.ltm.db),
                "active": active_rows(self.ltm.db), "memory": self.memory.order_state(),
                "conversation": conversation_state(self.conversation),
                "agents": self.world.subagents_state()}

    def save_tick_state(self) -> None:
        """Write :meth:`tick_state` (synced by the commit worker with the tick's other files)."""
        write_state(self.config.home, self.tick_state())

    def _start_local(self) -> LocalModel | None:
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
        self.startup_notes.append(TRY_ONLY)
        return local

    def _start_demo(self) -> DemoModel | None:
        """Serve the scripted demo model (AMACS_DEMO) from a thread of this server, until it stops."""
        if not self.config.demo:
            return None
        try:
            demo = DemoModel().start()
        except OSError as err:
            raise StartupError(f"cannot start the demo model: {err}") from err
        self.startup_notes.append(DEMO_NOTE)
        return demo

    def endpoint(self) -> str | None:
        """The model's endpoint when it is not its backend's default, in a word or two for the
        header: "demo", "local", or the base URL's host (and port); None for the provider's own."""
        if self.backend_name == "anthropic" and self.demo is not None and self.model == DEMO_MODEL:
            return "demo"
        if self.backend_name == "openai" and self.local is not None and self.config.openai_base_url == self.local.base_url:
            return "local"
        url = self.config.openai_base_url if self.backend_name == "openai" else self.config.base_url
        host = urlsplit(url).netloc if url else ""
        return None if not host or host in ("api.anthropic.com", "api.openai.com") else host

    def _make_backend(self, name: str, base_url: str | None, model: str) -> AnthropicBackend | OpenAIBackend:
        cfg = self.config
        sdk.preload(name)  # its SDK only, in a thread (after the port line at start-up: __main__)
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

    def learn_model(self) -> None:
        """Take what the home knows of the model in use, and ask its backend (in a task of the
        loop: nothing waits for it but the first model call) when that is older than a day."""
        cfg = self.config
        base = cfg.openai_base_url if self.backend_name == "openai" else cfg.base_url
        # The demo model is scripted here: there is nothing to ask it (its first reply waited for the
        # question's 404, 0.1-0.5 s after the SDK's import).
        ask = self.backend if cfg.has_credentials and self.endpoint() != "demo" else None
        self.catalog.use(self.backend_name, base, self.model, ask)
        if isinstance(self.backend, LocalBackend) and self.catalog.caps.schema_form is None:
            self.catalog.caps = replace(self.catalog.caps, schema_form=LocalBackend.schema_form)

    def set_model(self, backend: str, model: str, base_url: str | None,
                  window: int | None = None) -> dict[str, object]:
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
        self.transcript.write(ModelSwitch(backend=backend, model=self.model, base_url=base_url, window=window or None))
        self.learn_model()
        self.catalog.setting_window = window or self.config.context_window or (
            self.local.context if self.local is not None and isinstance(self.backend, LocalBackend) else None)
        # Another model: the context starts again whole (its window may differ) and without the
        # thinking blocks of the last one (their signatures are that model's).
        self.conversation.squeeze = 0
        self.conversation.base = None
        key_ok = self.config.has_credentials
        return {"backend": backend, "model": self.model, "key_ok": key_ok, "endpoint": self.endpoint(),
                **({} if key_ok else {"missing": self.config.missing_key_message()})}

    def on_this_machine(self) -> bool:
        """Whether the model endpoint is a server on this machine (the local model's, or a base URL on
        127.0.0.1 or ::1): a model there with no price costs nothing."""
        url = self.config.openai_base_url if self.backend_name == "openai" else self.config.base_url
        return self.config.local_model is not None or is_local(url)

    def price_table(self) -> dict[str, Price]:
        """The prices the server counts by: the person's, and the model it runs itself (the local or
        the demo model) free unless the person's table prices it."""
        return ({LOCAL_ALIAS: FREE, **self.prices} if self.config.local_model is not None
                else {DEMO_MODEL: FREE, **self.prices} if self.demo is not None else self.prices)

    def budget_unkeepable(self) -> str | None:
        """Why a budget cannot be kept on the session's model, in one line: nobody gave its price
        (none listed, none in the person's table) and it is not served on this machine, so its calls
        cost unknown dollars a limit cannot count; None when its price is known or it is free."""
        if price_for(self.model, self.price_table(), local=self.on_this_machine()) is not None:
            return None
        url = self.config.openai_base_url if self.backend_name == "openai" else self.config.base_url
        return (f"a budget needs a price, and model {self.model}" + (f" at {url}" if url else "")
                + " has none: give it one in amacs-price-table (or AMACS_PRICES: dollars per million tokens), "
                "or use a priced model; until then its calls count tokens, not dollars")

    def charge(self, usage: Usage, model: str | None = None) -> float | None:
        """Count one model call's USAGE (of MODEL, default the session's) in this tick, the session
        and the budget; return dollars, or None when the model's price is unknown (its tokens are
        counted, its dollars not: never a guess)."""
        dollars = cost(model or self.model, usage, self.price_table(), local=self.on_this_machine())
        self.tick_tally.add(usage, dollars)
        self.session_tally.add(usage, dollars)
        self.consciousness.budget.cost_so_far += dollars or 0.0
        return dollars

    def _turn_failure(self, err: Exception) -> str:
        """What the person is told when ERR ended a turn: a full disk or an unwritable home in
        words and with what to do, not a raw OperationalError per tick."""
        home = self.config.home
        kept = "Your input is in the shell history (M-p)."
        if isinstance(err, sqlite3.OperationalError) and "full" in str(err):
            return (f"The disk holding the AMACS home {home} is full: memory.db could not be written. "
                    f"Free some space there, then send again. {kept}")
        if isinstance(err, OSError) and err.errno is not None:
            return f"This turn stopped: {explain_os_error(err, home)}. {kept}"
        return f"Internal error in this turn: {err!r}. The server goes on; server.log has the details."

    def task_ended(self, agent_id: str, state: str, ok: bool, text: str) -> None:
        """A subagent task ended: the shell shows TEXT (✓ when OK, else ✗) and agent-chat.org keeps
        the same line where it fell among the ticks, so a resumed shell shows it again.  One no
        person saw (Emacs gone), or that the server's stop ended, is not kept: a replay shows what
        was shown, and the next start says which subagents at work were not resumed."""
        if not self.face.agent_ended(agent_id, state, ok, text) or self._closing:
            return
        try:
            with deferred_sync():
                self.chat_log.write_task_ended(text, ok)
        except PersistenceError as err:
            self.face.annotate(f"Could not save the end of {agent_id} in agent-chat.org: {err.strerror}", "error")

    def save_consciousness(self) -> None:
        """Write ``consciousness.el`` atomically."""
        atomic_write(self.config.home / "consciousness.el", self.consciousness.to_elisp())

    def tracked_files(self) -> list[Path]:
        """The files each tick commits: the chat log and monologue with their earlier months
        (unchanged, so not hashed again: a tick's commit costs the current month only), the
        scratchpad, the home's skills and the tick state (persistence.history)."""
        return tracked(self.config.home)

    def system_prompt(self) -> str:
        """The core skill (the person's own if they have one), read fresh when it changes."""
        core = self.skills.get("core")
        tools = self.world.tool_listing(PRIMARY)
        return f"{core.body}\n\n{tools}" if tools else core.body

    def sync_threads(self, *, save: bool = True) -> None:
        """Mirror the thread book into consciousness (active-thread, pending-threads)."""
        c = self.consciousness
        c.active_thread = self.threads.active
        c.pending_threads = [{"id": t.id, "concern": t.concern} for t in self.threads.pending()]
        self.memory.sync_state(c)
        if save:
            self.save_consciousness()

    def active_thread(self) -> Thread | None:
        """The thread in focus, or None."""
        return self.threads.open.get(self.threads.active) if self.threads.active else None

    def agent_set(self, name: str, value: object) -> object:
        """Change a consciousness field for the agent (RAM only); versioned and persisted at once."""
        new = self.consciousness.agent_set(name, value)
        self.memory.sync_state(self.consciousness)
        self.save_consciousness()
        return new

    # -- the loop thread -----------------------------------------------------------

    def start(self) -> None:
        """Start the event loop thread and wait until it takes input; with AMACS_MCP_START=eager,
        start the MCP servers too (in the background: they list their tools meanwhile)."""
        self._thread.start()
        self._ready.wait(10)
        if self.config.mcp_eager and self.world.tools is not None:
            try:
                self.world.tools.ready_future()
            except Exception as err:  # noqa: BLE001 - said in the hub; the agent goes on without them
                log.warning("starting the MCP servers: %r", err)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._inbox = asyncio.Queue()
        self.loop.create_task(self._worker())
        self.loop.call_soon(self.learn_model)  # after start-up, off its path
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
            self._turn_task = self.loop.create_task(self.turn(self, text))
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
                self.face.turn_done(self.consciousness.current_tick)
            finally:
                self._turn_running = False
                self._turn_task = None
            if self.world.bus.pending(PRIMARY):
                self.wake()

    def interrupt(self, reason: str = "interrupted by the person") -> bool:
        """Cancel the running turn (its model call and its chain of evals) and every subagent
        at work, each recorded as interrupted in its transcript (loop thread)."""
        stopped = self.world.cancel_all(reason)
        running = self._turn_task is not None and not self._turn_task.done()
        if stopped or running:
            self._hushed = True  # what the stopped agents post waits for the person's next input
        if self._turn_task is None or not running:
            return bool(stopped)
        self.halted = reason  # checked between ticks too: a cancel can be lost in a wait_for (3.11)
        self._turn_task.cancel()
        return True

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
        self._user_reply = (agent_id, talk_id)
        if agent_id != PRIMARY:
            self.face.annotate(f"{agent_id} is asking you; your next input goes to it.", "info")

    def _route_input(self, text: str) -> None:
        assert self._inbox is not None
        self._hushed = False  # the person speaks: events may wake the primary again
        if self._user_reply is None:
            self._inbox.put_nowait(text)
            return
        agent_id, talk_id = self._user_reply
        self._user_reply = None
        asker = self.world.agents.get(agent_id)
        if agent_id != PRIMARY and (asker is None or asker.state not in ("idle", "running")):
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

    def _report_commit(self, text: str, kind: str) -> None:
        """A note from the commit worker's thread, shown from the loop thread."""
        if self.loop.is_running():
            try:
                self.loop.call_soon_threadsafe(self.face.annotate, text, kind)
                return
            except RuntimeError:  # the loop closed meanwhile
                pass
        log.warning("%s: %s", kind, text)
        self.face.annotate(text, kind)

    def _tools_problem(self, line: str) -> None:
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

    def stop(self, grace: float = 5.0) -> None:
        """Let a running turn finish (up to GRACE seconds), then stop the loop and close the database."""

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
            close = getattr(self.backend, "aclose", None)  # the model client's connections, on this loop
            if close is not None:
                try:
                    await close()
                except Exception as err:  # noqa: BLE001 - the process is ending anyway
                    log.info("closing the model client: %r", err)
            self.loop.stop()  # then _run_loop closes the loop (_close_loop)

        self._closing = True
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(finish()))
            self._thread.join(grace + 2)
        if self.world.tools is not None:
            self.world.tools.stop()  # every MCP server's process ends with the server
        if not self.commits.stop(timeout=grace):  # the last ticks' commits before exit
            log.warning("git commits still pending after %.0f s; the files are on disk", grace)
        if self.local is not None:
            self.local.stop()
        if self.demo is not None:
            self.demo.stop()
        self.transcript.close()
        self.ltm.close()


__all__ = ["Runtime", "Settings", "ConsciousnessError"]


def _rooms(rt: Runtime) -> tuple[TurnHost, ToolHost, ViewHost]:
    """The Runtime is the host each room below it declares (mypy checks it here)."""
    return rt, rt, rt


def _numbering(older: dict[str, Any] | None) -> dict[str, Any]:
    """What of an OLDER tick state's subagents goes on when none is restored from it: how far
    their ids and the primary's TalkIds were numbered (ids go on across restarts, never again)."""
    agents = older.get("agents") if older is not None else None
    if not isinstance(agents, dict):
        return {}
    return {k: agents[k] for k in ("numbered", "primary_talk_id") if isinstance(agents.get(k), int)}


def _dropped(older: dict[str, Any], tick: int) -> str | None:
    """The line that names the subagents an OLDER tick state held live, not restored because the
    server stopped before it saved tick TICK's state; None when it held none."""
    agents = older.get("agents")
    live = agents.get("agents") if isinstance(agents, dict) else None
    ids = [str(a.get("id")) for a in live if isinstance(a, dict)] if isinstance(live, list) else []
    if not ids:
        return None
    return (f"live at tick {older.get('tick')}, not restored: {', '.join(ids)} (the server stopped before it "
            f"saved tick {tick}'s state); they have ended")
