"""The mind in its home: consciousness, the org logs, memory, threads, skills, its git history.

Read at start (with the recoveries: a rewind a kill cut short, a damaged
consciousness.el or memory.db, bytes that are not UTF-8) and again after a
rewind; written by the primary's turn, the tools and the person.  It knows
nothing of the model, the budget's prices, the loop thread or the agents: the
tick state's subagents come from whoever holds the World.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import Config
from .context.assemble import Conversation, conversation_from_state, conversation_state
from .files import atomic_write
from .memory.active import PAD_FILE, ActiveMemory, ram_window
from .memory.ltm import DatabaseCheck, LongTermMemory, damaged
from .persistence.chat_log import ChatEntry, ChatLog
from .persistence.git_repo import CommitWorker, HomeRepo, Snapshot
from .persistence.history import (
    STATE_FILE,
    HistoryError,
    active_rows,
    file_sizes,
    finish_unfinished,
    keep_memory_snapshot,
    keep_ready_copy,
    late_commit,
    log_marks,
    ltm_watermark,
    read_state,
    tracked,
    write_state,
)
from .persistence.monologue import MonologueLog
from .persistence.recovery import (
    StartupError,
    invalid_utf8_note,
    load_consciousness,
    move_aside,
    stamp,
)
from .persistence.scratchpad import (
    ScratchpadEntry,
    ScratchpadLog,
    index_of,
    indexed,
    read_org,
    read_plain,
)
from .skills import SkillLibrary
from .state.consciousness import Consciousness, EvalResult
from .threads import Thread, ThreadBook

log = logging.getLogger("amacs")


class Mind:
    """Everything the agent is that lives in its home, and the transitions of it a tick,
    a tool or the person makes (a field set, a thread synced, the state saved)."""

    def __init__(self, config: Config, notes: list[str], report: Callable[[str, str], None],
                 model: str, db_check: DatabaseCheck | None = None) -> None:
        """Read the mind from CONFIG's home; what start-up recovered from goes to NOTES (said at
        hello); REPORT shows the commit worker's notes; MODEL is the model the last tick's
        conversation must be of to be taken up again."""
        self.home = config.home
        self.identity = config.identity
        self.budget_limit = config.budget_limit  # AMACS_BUDGET_LIMIT: the mind's limit at every read
        self.notes = notes
        # memory.db's integrity check reads every page: it runs in a thread, started by serve
        # before the server's imports, else here, while the org files are read.
        db_check = db_check or DatabaseCheck(self.home / "memory.db")
        self._finish_rewind()  # before the mind is read: a rewind a kill cut short is done first
        self.repo = HomeRepo(self.home)
        self.commits = CommitWorker(self.repo, report, record=True,  # one commit per tick, off the loop
                                    chores=[lambda: keep_memory_snapshot(self.home),
                                            lambda: keep_ready_copy(self.home)])
        self._commit_saved_tick()  # before anything writes the home's files
        self.last_eval: tuple[int, EvalResult] | None = None  # the last eval that ran, for the hub
        chat, keep = self._read_logs()
        self.ltm, rebuild = self._open_ltm(db_check)
        self.memory = ActiveMemory(self.ltm, agent=self.identity)
        if rebuild:
            self._rebuild_memory(rebuild)
        self.conversation = Conversation()  # the primary's append-only context (a new one per server run)
        self._restore_memory(chat, keep)
        for org in (self.chat_log, self.monologue, self.scratchpad):
            if org.bad_utf8 is not None:
                log.warning("%s: bytes that are not UTF-8 from offset %s, read as U+FFFD", org.path, org.bad_utf8)
                notes.append(invalid_utf8_note(org.path, org.bad_utf8))
        self._restore_tick_state(model)
        self.last_eval = self._last_eval_of_log()
        self.skills = SkillLibrary(config.skills_dir, self.home / "skills")
        self._load_threads()

    def reload(self, model: str) -> None:
        """Read the mind again from the home, as a start-up does: after a rewind wrote it
        (loop thread; no turn running, no subagent at work)."""
        chat, keep = self._read_logs()
        self.memory = ActiveMemory(self.ltm, agent=self.identity)
        self.conversation = Conversation()
        self._restore_memory(chat, keep)
        self._restore_tick_state(model)
        self._load_threads()
        self.last_eval = self._last_eval_of_log()
        self.repo.forget_head()  # the rewind moved HEAD: the next commit's parent is read again

    # -- reading it ----------------------------------------------------------------

    def _say(self, note: str) -> None:
        log.warning("%s", note)
        self.notes.append(note)

    def _finish_rewind(self) -> None:
        """Finish the rewind of the home a kill cut short (persistence.history), and say so at hello."""
        try:
            note = finish_unfinished(self.home)
        except (HistoryError, OSError, sqlite3.Error) as err:
            raise StartupError(f"the home {self.home} has a rewind cut short that could not be finished: "
                               f"{' '.join(str(err).split())}") from err
        if note is not None:
            self._say(note)

    def _commit_saved_tick(self) -> None:
        """Commit the tick whose commit the last server asked for and never made (it stopped, or
        was killed, first: :func:`~.persistence.history.late_commit`); what could not be is said at hello."""
        late = late_commit(self.home)
        if isinstance(late, str):
            self._say(late)
        elif late is not None:
            log.info("committing the tick the last server did not commit before it stopped")
            self.commits.submit_snapshot(*late)

    def _load_consciousness(self) -> Consciousness:
        """consciousness.el; a damaged one is moved aside and restored from git, never reset
        (persistence.recovery), and the person is told at hello."""
        c, note = load_consciousness(self.home, self.repo)
        c.identity = self.identity
        if self.budget_limit is not None:
            c.budget.budget_limit = self.budget_limit
        if note is not None:
            self._say(note)
            atomic_write(self.home / "consciousness.el", c.to_elisp())
        return c

    def _open_ltm(self, check: DatabaseCheck) -> tuple[LongTermMemory, str | None]:
        """memory.db, and None; or, when it is damaged (it does not open, or its integrity check
        fails), a new one holding what could be read from the old one, which is moved aside
        (``memory.db.corrupt-<time>``), and the note for :meth:`_rebuild_memory`."""
        path = self.home / "memory.db"
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
            raise StartupError(f"memory.db in {self.home} is damaged ({problem}) and could not be "
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
        everything = ActiveMemory(self.ltm, agent=self.identity)
        everything.restore(
            self.consciousness,
            chat=[(e.tick, e.human, e.agent) for e in self.chat_log.read()],
            monologue=self.monologue.read(),
            scratchpad=[(e.tick, e.heading, e.thread, e.content) for e in self.scratchpad.read()],
        )
        self._say(note)

    def _load_threads(self) -> None:
        """The thread book from the threads active memory restored."""
        self.threads = ThreadBook()
        for tid, item in self.memory.threads.items():
            self.threads.open[tid] = Thread.from_content(item.content)
        if self.consciousness.active_thread in self.threads.open:
            self.threads.active = self.consciousness.active_thread
        self.sync_threads(save=False)

    def _read_logs(self) -> tuple[list[ChatEntry], int]:
        """Open the home's org logs and read consciousness; the chat's last ticks the context
        shows (older items are in LTM) and how many that is."""
        self.chat_log = ChatLog(self.home / "agent-chat.org")
        self.monologue = MonologueLog(self.home / "monologue.org")
        self.scratchpad = ScratchpadLog(self.home / "scratchpad.org")
        self.consciousness = self._load_consciousness()
        keep = ram_window(self.consciousness)
        chat = self.chat_log.read_tail(keep)
        if chat:
            self.consciousness.current_tick = max(self.consciousness.current_tick, chat[-1].tick)
        return chat, keep

    def _restore_memory(self, chat: list[ChatEntry], keep: int) -> None:
        """Fill active memory from consciousness, CHAT and the last KEEP ticks of the logs.

        The scratchpad file is read whole only when memory.db is not known level with its bytes
        (their digest is not the one it recorded): its headings are compared with their items
        and the org file wins.  Otherwise only each heading's tick and thread are read, and
        active memory reads from LTM the items the context shows."""
        text = self.scratchpad.load()
        digest = self.scratchpad.digest()
        level = digest is not None and self.ltm.level(PAD_FILE) == digest
        entries: list[ScratchpadEntry] = []
        if not level:
            plain = read_plain(text)
            if plain is None or not indexed(text, plain):
                self.scratchpad.distrust()  # a start must read it whole: memory.db records no digest
            entries = plain if plain is not None else read_org(text)
        self.memory.pad_digest = self.scratchpad.digest
        self.memory.restore(
            self.consciousness,
            chat=[(e.tick, e.human, e.agent) for e in chat],
            monologue=self.monologue.read_tail(keep),
            scratchpad=[(e.tick, e.heading, e.thread, e.content) for e in entries],
            pad_index=index_of(text) if level else None,
        )
        if not level:
            self.ltm.set_level(PAD_FILE, self.scratchpad.digest())

    def _last_eval_of_log(self) -> tuple[int, EvalResult] | None:
        """The newest eval agent-chat.org holds, with its tick: the hub's last eval after a
        start or a rewind (it said none, right after a rewind to a tick that had one)."""
        evals = self.chat_log.recent_evals
        if not evals:
            return None
        tick = max(evals)
        done = evals[tick]
        return tick, EvalResult(done.success, result=done.result, error=done.error)

    def _restore_tick_state(self, model: str) -> None:
        """What the last tick's state (persistence.history) has beyond LTM and the org files: the
        primary's conversation, so the next request repeats the last one's prefix as if the
        server had not stopped (a restart, a rewind, a fork), and its pinned items' order."""
        state = read_state(self.home)
        if state is None or state.get("tick") != self.consciousness.current_tick:
            return  # none, or older than the org files (a tick whose commit never came)
        self.memory.apply_order_state(state.get("memory", {}))
        conversation = state.get("conversation")
        if conversation is not None and state.get("model") == model:  # thinking blocks are one model's
            try:
                self.conversation = conversation_from_state(conversation)
            except (KeyError, TypeError, ValueError) as err:
                log.warning("the tick state's conversation cannot be read (%r): starting a new one", err)

    # -- changing it ---------------------------------------------------------------

    def tick_state(self, model: str, agents: dict[str, Any], files: Snapshot | None = None) -> dict[str, object]:
        """What the request after this tick is built from, beyond the org files and LTM's rows
        (persistence.history), the primary's on MODEL and the live subagents' AGENTS: written at
        each tick's end and committed with it.  The logs' sizes are those FILES (the tick's
        :meth:`tick_files`) holds, else those on disk."""
        self.ltm.commit()  # the rows it counts are in the database, not only in this connection's view
        # ended_at and logs: a rewind to this tick moves the transcripts' lines of no tick written
        # after it, and what every file of logs/ holds beyond its mark (persistence.history).
        return {"version": 1, "tick": self.consciousness.current_tick, "ended_at": time.time(), "model": model,
                "files": file_sizes(self.home, files), "logs": log_marks(self.home), "ltm_max_id": ltm_watermark(self.ltm.db),
                "active": active_rows(self.ltm.db), "memory": self.memory.order_state(),
                "conversation": conversation_state(self.conversation), "agents": agents}

    def save_tick_state(self, model: str, agents: dict[str, Any], files: Snapshot | None = None) -> None:
        """Write :meth:`tick_state` (synced by the commit worker with the tick's other files)."""
        write_state(self.home, self.tick_state(model, agents, files))

    def tick_files(self) -> Snapshot:
        """The files a tick commits but the tick state, as they are now: the tick state records
        the logs' sizes this snapshot holds, and the tick's commit holds these bytes (so the two
        agree, and each file is looked at once a tick)."""
        return self.repo.snapshots.take([p for p in self.tracked_files() if p != self.home / STATE_FILE])

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

    def save_consciousness(self) -> None:
        """Write ``consciousness.el`` atomically."""
        atomic_write(self.home / "consciousness.el", self.consciousness.to_elisp())

    def tracked_files(self) -> list[Path]:
        """The files each tick commits: the chat log and monologue with their earlier months
        (unchanged, so not hashed again: a tick's commit costs the current month only), the
        scratchpad, the home's skills and the tick state (persistence.history)."""
        return tracked(self.home)

    def close(self) -> None:
        """Close the database (the server stops)."""
        self.ltm.close()
