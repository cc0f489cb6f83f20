"""The fault-injection suite (issue 12): the server killed with SIGKILL at each point of a tick.

Each case is one batch Emacs running the real shell against the real server and
the fake model.  ``AMACS_FAULT_POINT`` (:mod:`amacs_server.faults`) kills the
server at one named point of a turn of two ticks (a streamed reply with a slow
eval, then a streamed reply) and its commits; the person's next input restarts
it (Emacs does, as for a crash) and gets its answer.  Then:

- no typed input is lost: it is in agent-chat.org, or the shell said M-p brings
  it back and it is in the shell's history file;
- the shell's claims match the disk: "saved" only for an input that is in
  agent-chat.org, "got no reply" only for one without a reply there, and every
  reply it showed complete is there;
- ``git fsck`` and memory.db's ``PRAGMA integrity_check`` pass;
- no lock is left in ``.git`` and the next tick was committed (not blocked by a
  stale ``index.lock``); a stale lock removed is said in the shell.

The cases run three at a time (each mostly waits: on the model's stream, the
eval, a server's start), so the suite takes about a minute.

Chains kill more points at less cost: one Emacs (and fake, and tool server
listing) takes several kills in a row, each input sent with the next point armed
for the server Emacs starts for it, then one last input with none.  Each kill is
checked as a case is (its input kept or given back, the shell's claims on disk),
and the home once at the end.  Their turns run a task (a subagent's answers
delivered), a tool whose result is over its bound, or evals that write memory.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from amacs_server.faults import POINTS
from tests.e2e.agent_fakes import transcript, transcript_events, who
from tests.e2e.harness import EmacsRun, run_emacs
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
from tests.mcp_servers import hostile_server, write_config

pytestmark = pytest.mark.e2e

FIRST = "precious input one"
SECOND = "second input"
REPLY_ONE = "Reply one, shown before the slow eval."
REPLY_TWO = "Reply two: the eval gave 42."
AFTER = "After the restart."
# Every point once, and a few again on the turn's second tick or commit, or memory.db's next write (@N).
# memory.db's first two commits are the server's start (a kill there is a start that fails, and
# Emacs tries again with the point still armed): its writes of the turn are @3 on.
LTM_TURN = ("ltm.commit@3", "ltm.commit@4", "ltm.commit@5", "ltm.commit@6")
# The turn's second tick (after the eval and its tool call) at each of its steps.
SECOND_TICK = tuple(f"{p}@2" for p in ("observe.done", "infer.request", "infer.response", "record.done",
                                       "persist.done", "commit.queued", "commit.done"))
CASES = (*(p for p in POINTS if p != "ltm.commit"), "infer.mid-stream@2", "say.written@2", "commit.index-lock@2",
         *LTM_TURN, *SECOND_TICK)
# The slow eval calls an MCP tool (a server written with the SDK), as the agent's evals do.
EVAL = '(progn (sleep-for 0.6) (agent-tool "t/big" :megabytes 0.00001) 42)'
TOOL_SERVER = {"t": hostile_server("big")}
# Points reached before the input is written ahead: it may not be in agent-chat.org.
BEFORE_WRITE_AHEAD = {"submit.received", "turn.start"}
LOCK_POINTS = {"commit.index-lock", "commit.ref-lock"}
WORKERS = 3

PROGRAM = f"""
(setq amacs-e2e-timeout 60 amacs-max-steps 5)
(defvar fx-shown nil)
(advice-add 'amacs-shell--on-reply :before (lambda (event) (push (plist-get event :text) fx-shown)))
(amacs-e2e-open)
(amacs-e2e-send-no-wait "{FIRST}")
(amacs-e2e-wait-disconnect)
(accept-process-output nil 0.1)
(princ (format "SHOWN-AT-CRASH %s\\n" (json-encode (vconcat fx-shown))))
(setenv "AMACS_FAULT_POINT" nil)
(amacs-e2e-send "{SECOND}")
{{wait}}
(princ (format "SHOWN %s\\n" (json-encode (vconcat fx-shown))))
(amacs-e2e-finish)
"""


def respond(body: dict) -> Reply:
    """The person's first input: a streamed reply and a slow eval; its result: a streamed reply;
    the input after the restart: a short answer."""
    newest = transcript(body)[-1]  # the newest message
    if SECOND in newest:
        return Reply(agent_json(AFTER))
    if "<last-eval-result>" in newest and '"result": "42"' in newest:
        return Reply(agent_json(REPLY_TWO, monologue="the eval answered"), chunks=10, chunk_delay=0.04)
    return Reply(agent_json(REPLY_ONE, eval=EVAL, monologue="ran a slow eval"),
                 chunks=10, chunk_delay=0.04)


@dataclass
class Case:
    point: str
    home: Path
    run: EmacsRun
    requests: int


def run_case(point: str, root: Path) -> Case:
    fake = FakeAnthropic(respond).start()
    try:
        home = root / re.sub(r"[^a-z0-9]+", "-", point) / "agent"
        home.parent.mkdir(parents=True)
        write_config(home, TOOL_SERVER)
        # A stale lock is removed by the restarted server's first commit, after its turn: wait for the note.
        wait = '(amacs-e2e-wait-text "that no running git held")' if point.partition("@")[0] in LOCK_POINTS else ""
        run = run_emacs(home, fake.url, PROGRAM.replace("{wait}", wait), timeout=90, AMACS_FAULT_POINT=point)
        return Case(point, home, run, len(fake.requests))
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def cases(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    """Run the selected cases (all, or those -k picked), WORKERS at a time."""
    wanted = [item.callspec.params["point"] for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec") and "point" in item.callspec.params]
    root = tmp_path_factory.mktemp("faults")
    with ThreadPoolExecutor(WORKERS) as pool:
        done = list(pool.map(lambda p: run_case(p, root), wanted or CASES))
    return {case.point: case for case in done}


# -- chains: several kills in one Emacs -----------------------------------------------------------

FINAL = "the input after the last kill"
TASK_ANSWER = "The task's answer."
# A chain's evals: what its turns do beside replying (each input's turn has the same two ticks and
# more: a task's answers wake the primary again).
CHAIN_EVALS = {
    "tick": EVAL,
    "tool": '(progn (agent-tool "t/big" :megabytes 1.5) (length (agent-tool "t/big" :megabytes 1.5)) 42)',
    "task": '(progn (agent-task "researcher" "Say A.") (agent-task "researcher" "Say B.") 42)',
    "memory": ('(progn (agent-memory-create "one" "first note" :tags (list "a")) '
               '(agent-memory-create "two" "second note") (agent-memory-create "three" "third note") 42)'),
}
# Each chain's points, in the order they are killed.  A point @N is the Nth time since the server
# (re)started: a turn's second tick (@2), the tick a task's answer wakes (@3), memory.db's writes of
# the turn (ltm.commit@3 on: @1 and @2 are the server's start).
# Chains of about the same length, longest first: WORKERS run them, each taking the next when done.
CHAINS = {
    "tool": ("tool.kept@1", "tool.call@2", "tool.answered@2", "tool.kept@2", "eval.result@1", "record.done@2"),
    "tick": ("infer.first-text@2", "say.shown@2", "eval.result@2", "commit.synced@2", "commit.indexed@2"),
    "task": ("talk.delivered@1", "talk.delivered@2", "observe.done@3", "infer.response@3", "record.done@3"),
    "memory": ("ltm.commit@7", "ltm.commit@8", "ltm.commit@9", "ltm.commit@10", "ltm.commit@11"),
    "tick-commit": ("commit.tree@2", "commit.object@2", "turn.done@1"),
    "task-tick": ("persist.done@3", "commit.queued@3", "commit.done@3"),
    "memory-tick": ("persist.done@1", "commit.done@1", "persist.done@2"),
}
CHAIN_CASES = tuple((chain, i) for chain, points in CHAINS.items() for i in range(len(points)))


def kind(chain: str) -> str:
    """The chain's kind of turn (a key of CHAIN_EVALS)."""
    return chain.partition("-")[0]


def chain_input(chain: str, i: int) -> str:
    return f"{kind(chain)} input {i}"


def chain_program(chain: str) -> str:
    """Kill after kill: each input sent with its point armed, the shell printed after each kill."""
    kills = []
    for i, point in enumerate(CHAINS[chain]):
        arm = f'(setenv "AMACS_FAULT_POINT" "{point}")' if i else ""  # the first: armed at Emacs's start
        kills.append(f"""{arm}
(setq fx-from (with-current-buffer amacs-shell-buffer-name (point-max)))
(amacs-e2e-send-no-wait "{chain_input(chain, i)}")
(amacs-e2e-wait-disconnect)
(fx-wait-stop-said)
(princ (format "KILLED {i} %s\n" (json-encode (with-current-buffer amacs-shell-buffer-name
                                                   (buffer-substring-no-properties fx-from (point-max))))))""")
    return f"""
(setq amacs-e2e-timeout 60 amacs-max-steps 6)
(defvar fx-shown nil)
(defvar fx-from nil)
(defun fx-wait-stop-said ()
  "Wait until the shell said the server stopped, and is idle: the next input starts a server."
  (amacs-e2e-wait (lambda () (with-current-buffer amacs-shell-buffer-name
                               (save-excursion (goto-char fx-from) (search-forward ";; AMACS server stopped" nil t))))
                  "the shell to say the server stopped")
  (amacs-e2e-wait (lambda () (not amacs-shell-busy)) "the shell to be idle")
  (accept-process-output nil 0.1))
(advice-add 'amacs-shell--on-reply :before (lambda (event) (push (plist-get event :text) fx-shown)))
(amacs-e2e-open)
{"".join(kills)}
(setenv "AMACS_FAULT_POINT" nil)
(setq fx-from (with-current-buffer amacs-shell-buffer-name (point-max)))
(amacs-e2e-send "{FINAL}")
(amacs-e2e-wait (lambda () (null amacs-shell-busy)) "the last turn")
(princ (format "AFTER %s\n" (json-encode (with-current-buffer amacs-shell-buffer-name
                                             (buffer-substring-no-properties fx-from (point-max))))))
(princ (format "SHOWN %s\n" (json-encode (vconcat fx-shown))))
(amacs-e2e-finish)
"""


def chain_respond(chain: str):
    """Each input: a streamed reply and the chain's eval; its result: a reply; a task's answer (late,
    so that the ticks before it are saved with the task at work): a line; the last input: AFTER."""
    def respond(body: dict) -> Reply:
        if who(body)[1] != "primary":
            return Reply(agent_json(TASK_ANSWER), delay=1.0)
        newest = transcript(body)[-1]
        if FINAL in newest:
            return Reply(agent_json(AFTER))
        if re.search(rf"\b{kind(chain)} input \d+\b", newest):  # an input (after a restart, beside the last eval's result)
            return Reply(agent_json(REPLY_ONE, eval=CHAIN_EVALS[kind(chain)], monologue="ran the chain's eval"),
                         chunks=10, chunk_delay=0.04)
        if TASK_ANSWER in newest:
            return Reply(agent_json("Noted the task's answer."))
        if "<last-eval-result>" in newest and '"result": "42"' in newest:
            return Reply(agent_json(REPLY_TWO, monologue="the eval answered"), chunks=10, chunk_delay=0.04)
        return Reply(agent_json(REPLY_ONE, eval=CHAIN_EVALS[kind(chain)], monologue="ran the chain's eval"),
                     chunks=10, chunk_delay=0.04)

    return respond


@dataclass
class Chain:
    name: str
    home: Path
    run: EmacsRun


def run_chain(chain: str, root: Path) -> Chain:
    fake = FakeAnthropic(chain_respond(chain)).start()
    try:
        home = root / f"chain-{chain}" / "agent"
        home.parent.mkdir(parents=True)
        write_config(home, TOOL_SERVER)
        run = run_emacs(home, fake.url, chain_program(chain), timeout=60 + 40 * len(CHAINS[chain]),
                        AMACS_FAULT_POINT=CHAINS[chain][0])
        return Chain(chain, home, run)
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def chains(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Chain]:
    """Run the chains of the selected cases, WORKERS at a time."""
    wanted = {item.callspec.params["case"][0] for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec") and "case" in item.callspec.params}
    root = tmp_path_factory.mktemp("chains")
    with ThreadPoolExecutor(WORKERS) as pool:
        done = list(pool.map(lambda c: run_chain(c, root), [c for c in CHAINS if c in wanted] or CHAINS))
    return {chain.name: chain for chain in done}


def git(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=home, capture_output=True, text=True, check=False)


def chat_ticks(home: Path) -> dict[int, str]:
    """agent-chat.org (and earlier months, if any) as {tick: its org text}."""
    files = sorted((home / "chat").glob("*.org")) if (home / "chat").is_dir() else []
    text = "".join(f.read_text() for f in [*files, home / "agent-chat.org"])
    parts = re.split(r"^\* Tick (\d+)\n", text, flags=re.M)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


def tick_of(ticks: dict[int, str], human: str) -> int | None:
    return next((t for t, body in ticks.items() if f"** Human\n{human}\n" in body), None)


def shown(stdout: str, tag: str) -> list[str]:
    line = next(line for line in stdout.splitlines() if line.startswith(tag + " "))
    return json.loads(line[len(tag) + 1:])


@pytest.mark.parametrize("point", CASES)
def test_kill_at(point: str, cases: dict[str, Case]) -> None:
    case = cases[point]
    run, home = case.run, case.home
    run.check()
    log = (home / "logs" / "server.log").read_text(errors="replace")
    name = point.partition("@")[0]
    assert f"AMACS_FAULT_POINT {name}" in log, f"the server did not die at {point}:\n{run.shell}"
    assert "AMACS server stopped" in run.shell
    assert "Traceback" not in log, log

    ticks = chat_ticks(home)
    first, second = tick_of(ticks, FIRST), tick_of(ticks, SECOND)
    history = (home / "shell-history").read_text()
    shell = run.shell
    # -- no typed input is lost ------------------------------------------------------------------
    assert second is not None and f"** Agent\n{AFTER}" in ticks[second], "the turn after the restart"
    back_with_m_p = "M-p brings it back" in shell or "shell history (M-p)" in shell
    assert first is not None or (back_with_m_p and FIRST in history), shell
    if point not in BEFORE_WRITE_AHEAD:
        assert first is not None, "written ahead before the kill, but not in agent-chat.org"
    # -- the shell says only what is on disk -----------------------------------------------------
    said_saved = [line for line in shell.splitlines() if "saved in agent-chat.org" in line or
                  "kept in agent-chat.org" in line]
    if said_saved:
        assert first is not None, said_saved
    if first is None:
        assert back_with_m_p and FIRST in history
    if "got no reply" in shell:
        assert first is not None and "** Agent" not in ticks[first], shell
    for reply in shown(run.stdout, "SHOWN"):
        assert any(f"** Agent\n{reply}" in body for body in ticks.values()), f"shown, not on disk: {reply!r}"
    at_crash = shown(run.stdout, "SHOWN-AT-CRASH")
    if at_crash:  # a reply was shown in the turn the kill cut: the shell does not say it got none
        assert "got no reply" not in shell and "before the agent replied" not in shell, shell
    # -- the home is sound, and nothing blocks the next tick ------------------------------------------
    sound(home)
    if name in LOCK_POINTS:
        assert "removed a stale .git/" in shell and "that no running git held" in shell, shell
        assert "git is busy" not in shell


def sound(home: Path) -> None:
    """``git fsck`` and memory.db's integrity check pass; no lock is left; the newest tick is
    committed and the files are as committed."""
    fsck = git(home, "fsck", "--full", "--no-progress")
    assert fsck.returncode == 0 and not re.search(r"^(error|missing|broken|bad)", fsck.stdout + fsck.stderr, re.M), \
        fsck.stdout + fsck.stderr
    db = sqlite3.connect(home / "memory.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()
    assert not list((home / ".git").rglob("*.lock")), list((home / ".git").rglob("*.lock"))
    newest = max(chat_ticks(home))
    subject = git(home, "log", "-1", "--format=%s").stdout
    assert subject.startswith(f"[TICK {newest}]"), subject
    assert git(home, "status", "--porcelain", "--untracked-files=no").stdout == ""


def killed(stdout: str, i: int) -> str:
    """The shell's text from the Ith input of a chain to its kill."""
    line = next(line for line in stdout.splitlines() if line.startswith(f"KILLED {i} "))
    return json.loads(line[len(f"KILLED {i} "):])


@pytest.mark.parametrize("case", CHAIN_CASES, ids=[f"{c}-{CHAINS[c][i]}" for c, i in CHAIN_CASES])
def test_kill_in_a_chain(case: tuple[str, int], chains: dict[str, Chain]) -> None:
    chain, i = case
    point = CHAINS[chain][i]
    run, home = chains[chain].run, chains[chain].home
    run.check()
    log = (home / "logs" / "server.log").read_text(errors="replace")
    assert "Traceback" not in log, log
    assert log.count("AMACS_FAULT_POINT ") == len(CHAINS[chain]), "a kill missed, or one too many"
    kills = re.findall(r"AMACS_FAULT_POINT (\S+): SIGKILL", log)
    assert kills[i] == point.partition("@")[0], f"the server did not die at {point}: {kills}"
    ticks = chat_ticks(home)
    typed = chain_input(chain, i)
    # -- the input is kept, or the shell gives it back -------------------------------------------------
    here, after = killed(run.stdout, i), (killed(run.stdout, i + 1) if i + 1 < len(CHAINS[chain]) else
                                          json.loads(run.stdout.split("AFTER ", 1)[1].split("\n", 1)[0]))
    mine = tick_of(ticks, typed)
    if mine is None:
        assert "M-p brings it back" in here + after or "shell history (M-p)" in here + after, here + after
        assert typed in (home / "shell-history").read_text()
    else:
        assert ("saved in agent-chat.org" in here or "kept in agent-chat.org" in here
                or "saved in agent-chat.org" in after or "kept in agent-chat.org" in after
                or "got no reply" not in here + after), here + after
    if "got no reply" in here + after and mine is not None:
        assert "** Agent" not in ticks[mine], here + after
    # -- what was undone is said at the restart: a task at work at the last tick saved -----------------
    if kind(chain) == "task" and point.startswith("talk.delivered"):
        assert re.search(r"not resumed: task-\d+", after), after
    if point.startswith("tool.kept"):  # the result kept for the call the kill left unrecorded
        # (said above the prompt the input was sent from, so its first words are before AFTER's start)
        assert re.search(r"result \(\d+ bytes\) is kept in \S+: the server stopped before it\s+"
                         r"recorded the call, and the agent was never given it", after), after
    if kind(chain) == "tool" and i == len(CHAINS[chain]) - 1:
        assert not list((home / "transcripts" / "results").glob("*.unrecorded"))
    if kind(chain) == "task" and point.startswith("persist.done"):  # the tick state one tick behind the chat
        assert re.search(r"at tick \d+, not restored: task-\d+.*?they\s+have\s+ended", after, re.S), after
    if kind(chain) == "task" and i == len(CHAINS[chain]) - 1:  # a subagent's id is never taken again
        started = [e["agent_id"] for e in transcript_events(home) if e["event"] == "agent_start"
                   and e["agent_id"] != "primary"]
        assert len(started) == len(set(started)), sorted(started)
    # -- the shell showed only what is on disk; the last input was answered; the home is sound ---------
    for reply in shown(run.stdout, "SHOWN"):
        assert any(f"** Agent\n{reply}" in body for body in ticks.values()), f"shown, not on disk: {reply!r}"
    final = tick_of(ticks, FINAL)
    assert final is not None and f"** Agent\n{AFTER}" in ticks[final], after
    sound(home)


def test_a_tick_the_server_was_killed_in_says_so_at_the_next_start(tmp_path: Path) -> None:
    """kill -9 of the server while the model thought: the shell said the input is saved in
    agent-chat.org, and it was, but the tick stayed an input with nothing after it and no commit
    (the next tick's commit carried it), though a tick with no response says why.  The next start
    finishes it as one: ``** No reply`` and its own commit saying the server stopped."""
    fake = FakeAnthropic(lambda body: Reply(agent_json(AFTER))).start()
    try:
        home = tmp_path / "agent"
        run = run_emacs(home, fake.url, f"""
(setq amacs-e2e-timeout 60)
(amacs-e2e-open)
(amacs-e2e-send-no-wait "{FIRST}")
(amacs-e2e-wait-disconnect)
(setenv "AMACS_FAULT_POINT" nil)
(amacs-e2e-send "{SECOND}")
(amacs-e2e-finish)""", timeout=90, AMACS_FAULT_POINT="write-ahead.confirmed")
    finally:
        fake.stop()
    run.check()
    assert "before the agent replied; your input is saved in agent-chat.org" in run.shell, run.shell
    ticks = chat_ticks(home)
    assert ticks[1].endswith(f"** Human\n{FIRST}\n\n** No reply\nthe server stopped before the agent replied\n\n")
    assert f"** Human\n{SECOND}\n\n** Agent\n{AFTER}" in ticks[2]
    subjects = git(home, "log", "--reverse", "--format=%s").stdout.splitlines()
    assert [s.partition("] «")[2] for s in subjects] == [
        f"{FIRST}» — (no response: the server stopped before the agent replied)", f"{SECOND}» — thinking"], subjects
    sound(home)
