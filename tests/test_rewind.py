"""Rewind and fork (persistence.history): every tick restorable, and the acceptance: after a
rewind (or a fork) to tick N, the same inputs with the same scripted answers make the same
requests as the original run from tick N+1 on, but for the clock.

The sessions here run the real Runtime and turn loop against the fake Anthropic API (real
HTTP, the real SDK), with scratchpad notes, notes created, mutated and evicted, an evicted
chat item and an edited template (the home's core skill)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amacs_server import views
from amacs_server.__main__ import main as server_main
from amacs_server.config import load_config
from amacs_server.loop.primary import run_turn
from amacs_server.memory.items import Kind
from amacs_server.memory.memid import MemId
from amacs_server.persistence import git_repo, history, person_limit, rewound_spend
from amacs_server.persistence.git_repo import (
    PACKED_FILE,
    HomeRepo,
    pack_names,
    pack_times,
    packed_records,
    read_seen,
)
from amacs_server.persistence.home_lock import HomeLock
from amacs_server.runtime import Runtime
from amacs_server.tools import work as work_tools
from tests.fake_anthropic import FakeAnthropic, Reply
from tests.test_memory import SilentFace
from tests.test_tick_commits import hang_up_on

# The clock: the clock items (the time and the system clock, whose versions count the seconds
# that changed), every item's creation time, and the times written in the texts.
CLOCK_ITEM = re.compile(r":(current_time|system_clock):\d+<EOT>")
CLOCK = [(re.compile(r'"created_at_ms": \d+'), '"created_at_ms": 0'),
         (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?"), "T")]


def unclocked(value: Any) -> Any:
    """VALUE (a request body) with the clock left out (CLOCK_ITEM, CLOCK)."""
    if isinstance(value, dict):
        return {k: unclocked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unclocked(v) for v in value]
    if isinstance(value, str):
        text = "\n".join(line for line in value.split("\n") if not CLOCK_ITEM.search(line))
        for pattern, repl in CLOCK:
            text = pattern.sub(repl, text)
        return text
    return value


def answer(body: dict[str, Any]) -> Reply:
    """The scripted model: its answer is a function of the person's newest input only."""
    text = json.dumps(body["messages"][-1]["content"], ensure_ascii=False)
    said = re.findall(r'\\"human\\": \\"([^\\]*)\\"', text)
    human = said[-1] if said else "(none)"
    data: dict[str, Any] = {"eval": None, "reply": f"answer to {human}", "mood": "calm", "confidence": 0.7,
                            "monologue": f"thought about {human}"}
    if "note" in human:
        data["scratchpad"] = {"heading": f"on {human}", "thread": None, "content": f"noted: {human}"}
    return Reply(json.dumps(data))


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic(default=answer).start()
    yield server
    server.stop()


def runtime(home: Path, url: str) -> Runtime:
    rt = Runtime(load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": url}),
                 SilentFace(), turn=run_turn)
    rt.start()
    return rt


def on_loop(rt: Runtime, fn: Callable[[], Any]) -> Any:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except Exception as err:  # noqa: BLE001 - raised in the test's thread
            future.set_exception(err)

    rt.loop.call_soon_threadsafe(run)
    return future.result(30)


Step = tuple[str, str]  # (what, argument)


def do(rt: Runtime, step: Step) -> None:
    """One step of a session: an input (a turn), or what the agent or the person does between turns."""
    what, arg = step
    home = rt.config.home
    mem = rt.mind.memory
    if what == "say":
        asyncio.run_coroutine_threadsafe(run_turn(rt, arg), rt.loop).result(60)
    elif what == "create":
        on_loop(rt, lambda: mem.create_note(arg, {"text": f"about {arg}"}, Kind.NOTE, ("t",)))
    elif what == "mutate":
        on_loop(rt, lambda: mem.mutate(mem.mem_id(arg), {"text": f"changed {arg}"}))
    elif what == "evict":
        on_loop(rt, lambda: mem.evict(mem.mem_id(arg)))
    elif what == "evict-chat":  # the oldest exchange in RAM
        on_loop(rt, lambda: mem.evict(MemId.from_base(mem.chat[0].mem_id.base)))
    elif what == "thread":  # the agent opens a thread (agent-create-thread), active if none was
        on_loop(rt, lambda: work_tools._echo(rt.mind, rt.mind.threads.create(arg, f"the {arg} question", None,
                                                                          rt.mind.consciousness.current_tick)))
    elif what == "switch":
        on_loop(rt, lambda: work_tools._echo(rt.mind, rt.mind.threads.switch(arg)))
    elif what == "viewpoint":  # the agent makes a viewpoint (agent-viewpoint), which stays live
        on_loop(rt, lambda: rt.world.viewpoint("primary", arg, "debater"))
    elif what == "ask":  # the primary asks its viewpoint NAME (a model call of the viewpoint's)
        name, text = arg.split(": ", 1)
        agent = rt.world.agents[f"viewpoint-{name}"]
        asyncio.run_coroutine_threadsafe(rt.world.respond(agent, f"[primary] {text}"), rt.loop).result(60)
    elif what == "template":
        core = home / "skills" / "core" / "SKILL.md"
        core.parent.mkdir(parents=True, exist_ok=True)
        core.write_text(f"---\nname: core\ndescription: the person's core\n---\nYou are AMACS. {arg}\n")
    else:
        raise AssertionError(what)


def requests(fake: FakeAnthropic, start: int = 0) -> list[str]:
    """The model requests from START on, with the clock masked."""
    out = []
    for r in fake.requests[start:]:
        if r["path"].rstrip("/") != "/v1/messages":
            continue
        out.append(json.dumps(unclocked(r["body"]), ensure_ascii=False, sort_keys=True, indent=0))
    return out


def run(home: Path, fake: FakeAnthropic, steps: list[Step]) -> tuple[list[list[str]], int]:
    """Run STEPS on HOME; the requests each step made, and the tick the home ends at."""
    rt = runtime(home, fake.url)
    made = []
    try:
        for step in steps:
            first = len(fake.requests)
            do(rt, step)
            assert rt.mind.commits.flush(60)
            made.append(requests(fake, first))
        return made, rt.mind.consciousness.current_tick
    finally:
        rt.stop()


SESSION: list[Step] = [
    ("say", "hello"), ("create", "plan"), ("thread", "alpha"), ("say", "note the plan"),
    ("template", "Be brief."), ("say", "and then"), ("mutate", "plan"), ("thread", "beta"),
    ("switch", "beta"), ("say", "note a second thing"), ("evict-chat", ""), ("create", "other"),
    ("say", "what now"), ("evict", "other"), ("switch", "alpha"), ("say", "note the end"),
    ("template", "Be very brief."), ("say", "last words"),
]


def same(got: list[list[str]], want: list[list[str]]) -> str | None:
    """None when GOT and WANT are the same requests; else where they first differ, in words."""
    if len(got) != len(want):
        return f"{len(got)} steps, not {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if len(g) != len(w):
            return f"step {i}: {len(g)} requests, not {len(w)}"
        for j, (a, b) in enumerate(zip(g, w, strict=True)):
            if a != b:
                at = next(n for n in range(min(len(a), len(b)) + 1) if n == min(len(a), len(b)) or a[n] != b[n])
                return f"step {i} request {j} at {at}: ...{a[max(0, at - 100):at + 400]!r}\n  not ...{b[max(0, at - 100):at + 400]!r}"
    return None


def ticks_before(steps: list[Step], k: int) -> int:
    return sum(1 for what, _ in steps[:k] if what == "say")


def _git(home: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(home), *args], capture_output=True, text=True, check=True).stdout


def test_replay_after_a_rewind_or_a_fork_sends_the_same_requests(tmp_path, fake):
    home = tmp_path / "home"
    original, last = run(home, fake, SESSION)
    assert last == 7
    k = 6  # rewind to the end of tick 3: the steps from the 7th on are replayed
    tick = ticks_before(SESSION, k)
    assert tick == 3
    forked = history.fork(home, tick, tmp_path / "fork")
    chat_before = (home / "agent-chat.org").read_text()
    done = history.rewind(home, tick)
    assert done.abandoned is not None and done.abandoned.startswith("refs/amacs/abandoned/")
    # The abandoned future is kept: on its ref, and its item versions in memory.db.
    assert _git(home, "show", f"{done.abandoned}:agent-chat.org") .startswith(chat_before.split("* Tick 4")[0])
    assert "last words" in _git(home, "show", f"{done.abandoned}:agent-chat.org")
    db = sqlite3.connect(home / "memory.db")
    assert db.execute("SELECT count(*) FROM abandoned_items WHERE ref=?", (done.abandoned,)).fetchone()[0] > 0
    db.close()
    text = (home / "agent-chat.org").read_text()
    assert "last words" not in text and done.abandoned in text  # the chat says where the future is
    assert (home / "skills" / "core" / "SKILL.md").read_text().endswith("Be brief.\n")  # the template as at tick 3
    for where in (home, forked.home):
        replay, _ = run(where, fake, SESSION[k:])
        assert same(replay, original[k:]) is None, (where, same(replay, original[k:]))
    # A fork of a fork, at an earlier tick.
    again = history.fork(forked.home, 2, tmp_path / "fork2")
    k2 = 4  # the template edit after tick 2 is replayed too
    assert ticks_before(SESSION, k2) == 2
    replay, _ = run(again.home, fake, SESSION[k2:])
    assert same(replay, original[k2:]) is None, same(replay, original[k2:])


def test_a_restart_between_ticks_changes_no_request(tmp_path, fake):
    home = tmp_path / "home"
    original, _ = run(home, fake, SESSION)
    again = tmp_path / "again"
    made: list[list[str]] = []
    for i, step in enumerate(SESSION):  # a new server for every step
        part, _ = run(again, fake, [step])
        made += part
        assert same(made[i:], original[i:i + 1]) is None, (i, same(made[i:], original[i:i + 1]))


def test_the_commands_refuse_a_served_home_in_one_line(tmp_path, fake, capsys):
    home = tmp_path / "home"
    run(home, fake, SESSION[:3])
    lock = HomeLock(home, headless=True)
    lock.acquire()
    try:
        assert server_main(["rewind", str(home), "--tick", "1"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "refused" in err and "serves" in err
        assert "quit the Emacs it serves" in err and "M-x" not in err  # a shell's advice, not Emacs's
        assert server_main(["fork", str(home), "--tick", "1", str(tmp_path / "f")]) == 1
        assert "refused" in capsys.readouterr().err and not (tmp_path / "f").exists()
    finally:
        lock.release()
    assert server_main(["rewind", str(home), "--tick", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"rewound {home} to tick 1") and "refs/amacs/abandoned/" in out
    assert server_main(["rewind", str(home), "--tick", "9"]) == 1
    assert "no tick 9" in capsys.readouterr().err


STEPS = st.sampled_from([("say", "plain"), ("say", "note this"), ("create", "a"), ("create", "b"),
                         ("mutate", "a"), ("evict", "a"), ("evict-chat", ""), ("template", "x"),
                         ("template", "y"), ("thread", "t1"), ("thread", "t2"), ("switch", "t1"),
                         ("switch", "t2"), ("viewpoint", "v"), ("ask", "v: why"), ("ask", "v: how")])


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEPS, min_size=3, max_size=8), cut=st.integers(min_value=0, max_value=7))
def test_property_rewind_to_a_random_tick_then_replay(tmp_path_factory, fake, steps, cut):
    steps = [("say", "start"), *steps, ("say", "finish")]
    steps = [s for i, s in enumerate(steps) if _possible(steps[:i], s)]
    home = tmp_path_factory.mktemp("prop") / "home"
    original, _ = run(home, fake, steps)
    says = [i for i, (what, _) in enumerate(steps) if what == "say"]
    k = says[cut % len(says)] + 1  # just after an input's tick
    history.rewind(home, ticks_before(steps, k))
    replay, _ = run(home, fake, steps[k:])
    assert same(replay, original[k:]) is None, same(replay, original[k:])


def _possible(before: list[Step], step: Step) -> bool:
    """Whether STEP can follow BEFORE (a note is created once, mutated or evicted while pinned)."""
    what, name = step
    made = {n for w, n in before if w == "create"}
    gone = {n for w, n in before if w == "evict"}
    if what == "create":
        return name not in made
    if what in ("mutate", "evict"):
        return name in made and name not in gone
    if what == "thread":
        return not any(s == step for s in before)
    if what == "switch":
        return ("thread", name) in before
    if what == "viewpoint":
        return step not in before
    if what == "ask":
        return ("viewpoint", name.split(":")[0]) in before
    if what == "evict-chat":
        return sum(1 for w, _ in before if w == "say") >= 2 and not any(w == "evict-chat" for w, _ in before)
    return True


def test_a_commit_made_behind_a_backlog_carries_its_own_ticks_state(tmp_path, fake):
    """The commit worker held up while three ticks run: each tick's commit still carries that
    tick's state and logs (the bench found tick 31's commit holding tick 32's), and a rewind
    to the first restores its logs."""
    home = tmp_path / "home"
    run(home, fake, [("say", "first")])
    rt = runtime(home, fake.url)
    try:
        with rt.mind.repo._lock:  # the worker waits at its first commit
            for text in ("second", "third", "fourth"):
                do(rt, ("say", text))
        assert rt.mind.commits.flush(60)
    finally:
        rt.stop()
    for tick in (2, 3, 4):
        sha = history.tick_commit(home, tick)
        assert json.loads(_git(home, "show", f"{sha}:{history.STATE_FILE}"))["tick"] == tick
    assert "fourth" not in _git(home, "show", f"{history.tick_commit(home, 2)}:agent-chat.org")  # made behind
    history.rewind(home, 2)
    text = (home / "agent-chat.org").read_text()
    assert "second" in text and "third" not in text and "fourth" not in text
    assert "thought about third" not in (home / "monologue.org").read_text()


def test_a_rewind_in_place_interrupts_the_running_turn_then_replays_the_same(tmp_path, fake):
    """The server rewinds itself (what M-x amacs-rewind asks): a turn waiting on the model is
    interrupted, the home returns to tick 3 in place, and the same inputs then make the same
    requests as the original run did after tick 3."""
    home = tmp_path / "home"
    original, _ = run(home, fake, SESSION)
    k = 6
    rt = runtime(home, fake.url)
    try:
        held = threading.Event()
        fake.script(Reply(json.dumps({"reply": "never seen"}), hold=held))
        first = len(fake.requests)
        rt.turns.submit("a question the rewind cuts short")  # as the shell sends it: a turn of the server's
        assert fake.wait_for_requests(first + 1)
        done = asyncio.run_coroutine_threadsafe(rt.rewind(3), rt.loop).result(60)
        held.set()
        assert on_loop(rt, lambda: rt.turns._turn_task is None)  # the turn was interrupted, not waited for
        assert done["tick"] == 3 and str(done["ref"]).startswith("refs/amacs/abandoned/")
        assert rt.mind.consciousness.current_tick == 3
        assert "a question the rewind cuts short" in _git(home, "show", f"{done['ref']}:agent-chat.org")
        assert "a question the rewind cuts short" not in (home / "agent-chat.org").read_text()
        made = []
        for step in SESSION[k:]:
            start = len(fake.requests)
            do(rt, step)
            assert rt.mind.commits.flush(60)
            made.append(requests(fake, start))
        assert same(made, original[k:]) is None, same(made, original[k:])
        assert _git(home, "log", "-1", "--format=%s").startswith("[TICK 7]")
        assert "[TICK 3][rewind]" in _git(home, "log", "--format=%s")
    finally:
        rt.stop()


VIEWPOINT_SESSION: list[Step] = [
    ("say", "hello"), ("viewpoint", "critic"), ("ask", "critic: is this wise"), ("create", "plan"),
    ("say", "note the plan"), ("ask", "critic: and now"), ("say", "and then"), ("ask", "critic: what else"),
    ("mutate", "plan"), ("say", "note the end"), ("ask", "critic: last"), ("say", "last words"),
]


def subagent_requests(steps: list[list[str]]) -> int:
    return sum(1 for step in steps for r in step if "You are viewpoint-critic" in r)


def test_a_live_viewpoint_is_restored_and_asked_as_before(tmp_path, fake):
    """A viewpoint made before tick N and still live: after a rewind (or a fork) to N, or a
    restart, it is there again with its conversation and RAM, and the same inputs make the
    same requests, the primary's and the viewpoint's, from N+1 on."""
    home = tmp_path / "home"
    original, _ = run(home, fake, VIEWPOINT_SESSION)
    assert subagent_requests(original) == 4
    k = 5  # rewind to the end of tick 2: the viewpoint has answered once
    tick = ticks_before(VIEWPOINT_SESSION, k)
    assert tick == 2
    state = json.loads(_git(home, "show", f"{history.tick_commit(home, tick)}:{history.STATE_FILE}"))
    assert [a["id"] for a in state["agents"]["agents"]] == ["viewpoint-critic"]
    forked = history.fork(home, tick, tmp_path / "fork")
    history.rewind(home, tick)
    for where in (home, forked.home):
        replay, _ = run(where, fake, VIEWPOINT_SESSION[k:])
        assert subagent_requests(replay) == 3
        assert same(replay, original[k:]) is None, (where, same(replay, original[k:]))
    # A new server after every input (what a subagent does between inputs is the next tick's).
    again, made, start = tmp_path / "again", [], 0
    for i, (what, _) in enumerate(VIEWPOINT_SESSION):
        if what == "say":
            part, _ = run(again, fake, VIEWPOINT_SESSION[start:i + 1])
            made += part
            assert same(made, original[:i + 1]) is None, (i, same(made, original[:i + 1]))
            start = i + 1


def test_subagent_ids_go_on_after_a_restart(tmp_path, fake):
    """A restart keeps the live subagents and their ids' counter: the next one is not a
    second ``compulsion-1``."""
    home = tmp_path / "home"
    rt = runtime(home, fake.url)
    try:
        made = on_loop(rt, lambda: rt.world.compulsion("primary", "correction-watcher", "watch closely"))
        assert made["handle"] == "compulsion-1"
        on_loop(rt, lambda: rt.mind.save_tick_state(rt.slot.model, rt.world.subagents_state()))
    finally:
        rt.stop()
    rt = runtime(home, fake.url)
    try:
        watcher = rt.world.agents["compulsion-1"]
        assert watcher.state == "idle" and watcher.messages[0]["content"] == "watch closely"
        assert [a.id for a in rt.world.compulsions_of("primary")] == ["compulsion-1"]
        again = on_loop(rt, lambda: rt.world.compulsion("primary", "correction-watcher", None))
        assert again["handle"] == "compulsion-2"
    finally:
        rt.stop()


def test_an_id_given_in_a_tick_whose_state_was_never_saved_is_not_given_again(tmp_path, fake):
    """Was: a subagent made after the last saved tick state (in a tick the server was killed in,
    or between ticks) had its id given again after the restart, whose counter came from that
    state: the transcripts then held two ``compulsion-2`` of two different lives."""
    home = tmp_path / "home"
    rt = runtime(home, fake.url)
    try:
        do(rt, ("say", "hello"))
        assert on_loop(rt, lambda: rt.world.compulsion("primary", "correction-watcher", None))["handle"] == \
            "compulsion-1"
        on_loop(rt, lambda: rt.mind.save_tick_state(rt.slot.model, rt.world.subagents_state()))
        made = on_loop(rt, lambda: rt.world.compulsion("primary", "correction-watcher", "unsaved"))
        assert made["handle"] == "compulsion-2"  # its tick's state is never written: the kill
    finally:
        rt.stop()
    rt = runtime(home, fake.url)
    try:
        assert "compulsion-2" not in rt.world.agents
        again = on_loop(rt, lambda: rt.world.compulsion("primary", "correction-watcher", None))
        assert again["handle"] == "compulsion-3"
    finally:
        rt.stop()
    started = [json.loads(line)["agent_id"] for p in (home / "transcripts").glob("*.jsonl")
               for line in p.read_text().splitlines() if '"agent_start"' in line]
    assert sorted(started) == ["compulsion-1", "compulsion-2", "compulsion-3"]


def test_a_viewpoint_at_work_at_the_tick_comes_back_idle_and_says_so(tmp_path, fake):
    """A viewpoint whose model call is under way when a tick ends cannot be resumed mid-run:
    after a restart it is live and idle, holding what it was told, and the person is told."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("viewpoint", "critic"), ("say", "again")])
    rt = runtime(home, fake.url)
    held = threading.Event()
    asking = None
    try:
        fake.script(Reply(json.dumps({"reply": "never seen"}), hold=held))
        first = len(fake.requests)
        critic = rt.world.agents["viewpoint-critic"]
        asking = asyncio.run_coroutine_threadsafe(rt.world.respond(critic, "[primary] think long"), rt.loop)
        assert fake.wait_for_requests(first + 1)
        do(rt, ("say", "meanwhile"))  # tick 3 ends with the viewpoint at work
        assert rt.mind.commits.flush(60)
    finally:
        held.set()
        if asking is not None:
            asking.result(60)
        rt.stop()
    rt = runtime(home, fake.url)
    try:
        critic = rt.world.agents["viewpoint-critic"]
        assert critic.state == "idle" and "think long" in critic.messages[-1]["content"]
        assert any("at work at tick 3, not resumed: viewpoint-critic" in n for n in rt.startup_notes), rt.startup_notes
        do(rt, ("ask", "critic: and now?"))  # it answers again
        assert critic.status == "done"
    finally:
        rt.stop()


def test_a_rewind_in_place_brings_the_live_viewpoint_back_as_at_the_tick(tmp_path, fake):
    """The server rewinds itself with a viewpoint live: the viewpoint is as it was at tick 2
    (what it heard after is gone), and the same inputs give the same requests, its own too."""
    home = tmp_path / "home"
    original, _ = run(home, fake, VIEWPOINT_SESSION)
    k = 5
    rt = runtime(home, fake.url)
    try:
        assert any("what else" in m["content"] for m in rt.world.agents["viewpoint-critic"].messages)
        asyncio.run_coroutine_threadsafe(rt.rewind(2), rt.loop).result(60)
        critic = rt.world.agents["viewpoint-critic"]
        assert not any("what else" in m["content"] for m in critic.messages)
        made = []
        for step in VIEWPOINT_SESSION[k:]:
            start = len(fake.requests)
            do(rt, step)
            assert rt.mind.commits.flush(60)
            made.append(requests(fake, start))
        assert subagent_requests(made) == 3
        assert same(made, original[k:]) is None, same(made, original[k:])
    finally:
        rt.stop()


def test_the_budget_items_version_does_not_depend_on_when_a_subagent_is_charged(tmp_path):
    """A subagent's model call is charged at any moment of the primary's tick: before or after
    the tick's end sync, the next request shows the same budget item (version and content),
    and the live figure (what refuses spending) holds every charge at once."""
    from amacs_server.memory.active import ActiveMemory
    from amacs_server.memory.ltm import LongTermMemory
    from amacs_server.state.consciousness import Consciousness

    shown = {}
    for order in ("before the tick's end", "after the tick's end"):
        ltm = LongTermMemory(tmp_path / f"{len(shown)}.db")
        memory, c = ActiveMemory(ltm, agent="amacs-instance-1"), Consciousness()
        try:
            for tick in (1, 2):
                c.begin_tick(tick)
                memory.sync_state(c, budget=True)  # the tick's start (loop.primary.begin)
                c.budget.cost_so_far += 0.01  # the primary's model call
                if order == "before the tick's end":
                    c.budget.cost_so_far += 0.02  # the viewpoint's, while the primary waits
                memory.sync_state(c)  # the tick's end (persist)
                if order == "after the tick's end":
                    c.budget.cost_so_far += 0.02
                assert c.budget.cost_so_far == pytest.approx(0.03 * tick)
            c.begin_tick(3)
            memory.sync_state(c, budget=True)
            item = memory.state["budget"]
            shown[order] = (item.mem_id.format(), item.content)
        finally:
            ltm.close()
    before, after = shown.values()
    assert before == after, shown
    assert before[1]["cost_so_far"] == pytest.approx(0.06)


def test_the_past_inputs_method_lists_every_input_of_the_home_newest_first(tmp_path, fake):
    """What M-x amacs-rewind offers (the EPC method past_inputs): every input of the home, also
    those the chat's RAM (the status's recent exchanges) no longer holds, newest first with its
    tick; after a rewind, none of the abandoned future's (and the views are told the tick's budget at
    once); after a restart, the same."""
    from amacs_server import methods
    from tests.test_arguments import NoEvals, Recorder

    def published(rt: Runtime) -> dict[str, Any]:
        server = Recorder()
        methods.publish(server, rt, NoEvals())  # type: ignore[arg-type]
        return server.methods

    home = tmp_path / "home"
    said = [f"input number {n}" for n in range(1, 13)]
    run(home, fake, [("say", text) for text in said])
    rt = runtime(home, fake.url)
    try:
        call = published(rt)
        assert len(call["status"]()["recent"]) < len(said)  # what the picker offered before
        listed = call["past_inputs"]()
        assert list(zip(listed["ticks"], listed["texts"], strict=True)) == [(n, said[n - 1]) for n in range(12, 0, -1)]
        spent, ticked = rt.mind.consciousness.budget.cost_so_far, []
        rt.face.ticked = lambda tick, usage: ticked.append((tick, usage))  # type: ignore[method-assign]
        asyncio.run_coroutine_threadsafe(rt.rewind(5), rt.loop).result(60)
        assert call["past_inputs"]()["ticks"] == [5, 4, 3, 2, 1]
        # The shell's mode line and the hub are told at once: tick 5; the money spent stays counted.
        assert [tick for tick, _ in ticked] == [5]
        assert ticked[0][1]["spent"] == pytest.approx(spent)
    finally:
        rt.stop()
    rt = runtime(home, fake.url)
    try:
        assert published(rt)["past_inputs"]()["texts"] == said[4::-1]
    finally:
        rt.stop()


def test_past_inputs_come_a_page_at_a_time_read_from_the_logs_end(tmp_path, monkeypatch):
    """The picker is given the newest inputs and whether older ones are left; the older ones
    come on asking, before the oldest tick it has.  Ticks without an input are skipped; the
    earlier months are read only as far as the page needs (the whole log of a long home took
    0.4 s, on the picker's prompt)."""

    from amacs_server import views
    from amacs_server.persistence.chat_log import ChatLog

    log = ChatLog(tmp_path / "agent-chat.org", rotate_bytes=600)
    for tick in range(1, 61):
        if tick % 10 == 0:  # a tick the agent began itself
            log.write_agent(tick, f"2026-11-{tick // 3 + 1:02d}T10:00:00Z", "woke", with_heading=True)
            continue
        log.write_human(tick, f"2026-11-{tick // 3 + 1:02d}T10:00:00Z", f"input {tick}")
        log.write_agent(tick, "", "ok", with_heading=False)
    assert len(log.files()) > 5
    opened: list[str] = []
    real_open = Path.open

    def watched(self: Path, *args: Any, **kwargs: Any) -> Any:
        opened.append(self.name)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", watched)
    page = views.past_inputs(log, None, count=8)
    assert page["ticks"] == [59, 58, 57, 56, 55, 54, 53, 52] and page["more"] is True
    assert page["texts"][0] == "input 59" and page["times"][0] == "2026-11-20T10:00:00Z"
    assert len(set(opened)) < len(log.files()) / 2  # the oldest months were not read
    older = views.past_inputs(log, 52, count=8)
    assert older["ticks"] == [51, 49, 48, 47, 46, 45, 44, 43] and older["more"] is True
    last = views.past_inputs(log, 5, count=8)
    assert last["ticks"] == [4, 3, 2, 1] and last["more"] is False


def test_money_spent_on_an_abandoned_future_stays_counted_against_the_budget(tmp_path, fake):
    """A rewind gives the mind tick N's budget item (its requests are those it made then), but the
    dollars spent after tick N were paid: the budget's check, the mode line and the hub count them,
    after a restart too; a fork (a new home) starts from tick N's figure."""
    home = tmp_path / "home"
    run(home, fake, [("say", f"input number {n}") for n in range(1, 7)])
    rt = runtime(home, fake.url)
    try:
        spent = rt.ledger.spent()
        asyncio.run_coroutine_threadsafe(rt.rewind(2), rt.loop).result(60)
        mind = rt.mind.consciousness.budget.cost_so_far
        assert 0 < mind < spent  # the mind's own figure is tick 2's
        assert rt.ledger.spent() == pytest.approx(spent)
        assert views.status(rt)["spent"] == pytest.approx(spent)
        assert views.hub_state(rt)["budget"]["cost_so_far"] == pytest.approx(spent, abs=1e-6)
        rt.ledger.person_limit = (mind + spent) / 2  # the mind alone is under it
        assert rt.world.budget_stop("the primary agent") is not None
        rt.ledger.person_limit = 5.0
        assert rt.world.budget_stop("the primary agent") is None
        assert "rewound-spend" in (home / ".gitignore").read_text()
        asyncio.run_coroutine_threadsafe(rt.rewind(1), rt.loop).result(60)  # a second rewind adds its own
        assert rt.ledger.spent() == pytest.approx(spent)
    finally:
        rt.stop()
    rt = runtime(home, fake.url)
    try:
        assert rt.ledger.spent() == pytest.approx(spent)
        assert rt.mind.consciousness.budget.cost_so_far < spent
    finally:
        rt.stop()
    run(home, fake, [("say", "one more")])
    spent = rewound_spend.total(home)
    history.rewind(home, 1)  # from a script (amacs-server rewind), with no server
    assert rewound_spend.total(home) == pytest.approx(spent)
    assert rewound_spend.mind_spent(home) < spent


def test_the_persons_budget_limit_outlives_a_rewind_and_a_fork_starts_with_it(tmp_path, fake):
    """The limit is the person's setting, not the mind's past: raised to $7 after ticks made under
    a lower limit, a rewind to one of those ticks keeps $7 (the check, the views, a restart), the
    next input is not refused, and a fork starts with $7; a rewind from a script with no server
    keeps the home's limit too.  The mind's budget item is the tick's, as for the money spent:
    the input sent again after the rewind makes the same request as the first time."""
    home = tmp_path / "home"
    rt = runtime(home, fake.url)
    try:
        made = []
        for n in range(1, 4):
            first = len(fake.requests)
            do(rt, ("say", f"input number {n}"))
            made.append(requests(fake, first))
        assert rt.mind.commits.flush(60)
        on_loop(rt, lambda: rt.ledger.set_limit(rt.ledger.spent()))  # hit: the next input is refused
        assert rt.world.budget_stop("the primary agent") is not None
        on_loop(rt, lambda: rt.ledger.set_limit(7.0))
        asyncio.run_coroutine_threadsafe(rt.rewind(2), rt.loop).result(60)
        assert rt.ledger.limit() == 7.0
        assert views.status(rt)["budget_limit"] == 7.0
        assert rt.ledger.spending()["budget_limit"] == 7.0
        assert views.hub_state(rt)["budget"]["budget_limit"] == 7.0
        assert person_limit.current(home) == 7.0
        assert rt.world.budget_stop("the primary agent") is None
        first = len(fake.requests)
        do(rt, ("say", "input number 3"))
        again = requests(fake, first)
        assert again, "the input after the rewind was refused"
        assert again == made[2], "the input sent again after the rewind asks as it did"
        assert rt.mind.commits.flush(60)
        fork = rt.fork(2, tmp_path / "fork")
        assert person_limit.current(Path(str(fork["home"]))) == 7.0
    finally:
        rt.stop()
    rt = runtime(home, fake.url)
    try:
        assert rt.ledger.limit() == 7.0
        assert views.status(rt)["budget_limit"] == 7.0
        on_loop(rt, lambda: rt.ledger.set_limit(9.0))
    finally:
        rt.stop()
    history.rewind(home, 1)  # from a script (amacs-server rewind), with no server
    assert person_limit.current(home) == 9.0
    history.fork(home, 1, tmp_path / "fork2")
    assert person_limit.current(tmp_path / "fork2") == 9.0
    assert "budget-limit" in (home / ".gitignore").read_text()


# Texts first written after tick 2 of FUTURE_SESSION: a scratchpad note, a thread, a memory
# item, a skill, a chat exchange and a monologue line.
FUTURE = ("noted: note the plan", "the alpha question", "about memo", "a skill written later",
          "answer to after all", "thought about note the plan")
FUTURE_SESSION: list[Step] = [
    ("say", "hello"), ("say", "plain two"),  # tick 2: the cut
    ("say", "note the plan"), ("thread", "alpha"), ("create", "memo"), ("say", "after all"),
]


def _fork_holds(home: Path) -> bytes:
    """Every byte a fork holds: its files, and every object of its git, inflated."""
    found = b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file() and ".git" not in p.parts)
    objects = subprocess.run(["git", "-C", str(home), "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True, check=True).stdout
    return found + objects


def test_a_fork_or_rewind_holds_nothing_written_after_its_tick(tmp_path, fake):
    """Fork and rewind at tick 2, before the first scratchpad note, thread, memory item and skill
    were made, with the commit worker held behind while they were: no file or git object of the
    fork holds their text, nor any ref or reflog entry after the tick; the rewound home keeps them
    only on the abandoned ref and in abandoned_items; both replay the original's requests."""
    home = tmp_path / "home"
    original, _ = run(home, fake, FUTURE_SESSION[:2])
    rt = runtime(home, fake.url)
    try:
        with rt.mind.repo._lock:  # the worker waits at its first commit while the future is made
            for step in FUTURE_SESSION[2:]:
                first = len(fake.requests)
                if step == ("say", "after all"):
                    skill = home / "skills" / "later" / "SKILL.md"
                    skill.parent.mkdir(parents=True)
                    skill.write_text("---\nname: later\ndescription: a skill written later\n---\nLater.\n")
                do(rt, step)
                original.append(requests(fake, first))
        assert rt.mind.commits.flush(60)
    finally:
        rt.stop()
    everything = _fork_holds(home)
    assert all(text.encode() in everything for text in FUTURE)  # the original holds each of them
    fork = history.fork(home, 2, tmp_path / "fork").home
    held = _fork_holds(fork)
    assert [text for text in FUTURE if text.encode() in held] == []
    assert not (fork / "skills" / "later").exists()
    refs = _git(fork, "for-each-ref", "--format=%(refname)").split()
    assert len(refs) == 1 and refs[0].startswith("refs/heads/"), refs
    assert [line.split(" ", 1)[1] for line in _git(fork, "log", "--format=%H %s").splitlines()] == [
        f"[TICK 2][fork] forked from {home.resolve()} at tick 2", *[s for s in _subjects(home) if
                                                                    s.startswith(("[TICK 2]", "[TICK 1]"))]]
    tick2, forked = history.tick_commit(home, 2), _git(fork, "rev-parse", "HEAD").strip()
    assert set(_git(fork, "reflog", "--all", "--format=%H").split()) == {tick2, forked}
    done = history.rewind(home, 2)
    assert done.abandoned is not None
    files = b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file()
                     and not {".git", "logs"} & set(p.relative_to(home).parts) and p.name != "memory.db")
    assert [text for text in FUTURE if text.encode() in files] == []  # the transcripts' later lines too
    assert "answer to after all" in _git(home, "grep", "-h", "answer to after all", done.abandoned, "--",
                                         "transcripts")
    assert all(text in _git(home, "grep", "-h", text, done.abandoned) for text in FUTURE[:1] + FUTURE[3:5])
    db = sqlite3.connect(home / "memory.db")
    try:
        assert db.execute("SELECT count(*) FROM items_text WHERE text LIKE '%about memo%'").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM abandoned_items WHERE text LIKE '%about memo%'").fetchone()[0] == 1
        assert db.execute("SELECT count(*) FROM tags WHERE base NOT IN (SELECT base FROM items)").fetchone()[0] == 0
    finally:
        db.close()
    for where in (home, fork):
        replay, _ = run(where, fake, FUTURE_SESSION[2:])
        assert same(replay, original[2:]) is None, (where, same(replay, original[2:]))


def test_a_fork_of_a_packed_home_holds_nothing_after_its_tick_and_needs_nothing_of_the_home(tmp_path, fake,
                                                                                          monkeypatch):
    """The home's objects in one pack, the future's beside the tick's (as its packer rolls ticks
    up): the fork made from links to that pack still holds no object of the future, and is
    whole once the home is gone (a copy, not a window: the home's objects were read through git's
    alternates for one command only).  So is the fork made when packing fails (an object the
    home's packer moved is not found): the history is fetched."""
    home = tmp_path / "home"
    run(home, fake, FUTURE_SESSION)
    _git(home, "repack", "-a", "-d", "-q")
    assert list((home / ".git" / "objects" / "pack").glob("*.pack"))
    assert [text for text in FUTURE if text.encode() not in _fork_holds(home)] == ["a skill written later"]
    linked = history.fork(home, 2, tmp_path / "linked").home
    git = history._git

    def moved(where: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
        if args[0] == "pack-objects":
            raise history.HistoryError("fatal: unable to read an object")
        return git(where, *args, stdin=stdin, env=env)

    monkeypatch.setattr(history, "_git", moved)
    fetched = history.fork(home, 2, tmp_path / "fetched").home
    monkeypatch.undo()
    assert not (linked / ".git" / "objects" / "info" / "alternates").exists()
    tick2 = history.tick_commit(home, 2)
    subprocess.run(["rm", "-r", str(home)], check=True)
    for fork in (linked, fetched):
        assert [text for text in FUTURE if text.encode() in _fork_holds(fork)] == []
        _git(fork, "fsck", "--full", "--strict", "--no-dangling")
        assert _git(fork, "rev-parse", "HEAD~1").strip() == tick2
        assert len(_git(fork, "log", "--format=%s").splitlines()) == 3


def test_a_fork_of_a_home_whose_path_holds_a_colon_or_a_quote_reads_its_objects_all_the_same(tmp_path, fake,
                                                                                             monkeypatch):
    """The fork's pack-objects reads the home's objects through git's alternates, a list of folders
    separated by colons: a home whose path holds one (or starts the entry with a quote) is named
    quoted, so the fork is packed from it and not fetched."""
    home = tmp_path / 'odd:"name' / "home"
    run(tmp_path / "home", fake, [("say", "hello"), ("say", "plain two")])
    home.parent.mkdir()
    (tmp_path / "home").rename(home)
    git, ran = history._git, []

    def spy(where: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
        ran.append(args[0])
        return git(where, *args, stdin=stdin, env=env)

    monkeypatch.setattr(history, "_git", spy)
    fork = history.fork(home, 1, tmp_path / "fork").home
    assert "pack-objects" in ran and "fetch" not in ran
    assert _holds_abandoned(fork, ("answer to plain two",)) == []
    _git(fork, "fsck", "--full", "--strict", "--no-dangling")


def _pack_older(home: Path) -> list[Path]:
    """HOME's objects in one pack, dated 10 s back (as if written that long before the next tick's
    commit, without waiting for the clock to pass a second)."""
    _git(home, "repack", "-a", "-d", "-q")
    packs = sorted((home / ".git" / "objects" / "pack").glob("*.pack"))
    for pack in packs:
        os.utime(pack, (time.time() - 10, time.time() - 10))
    return packs


def _holds_abandoned(fork: Path, texts: tuple[str, ...]) -> list[str]:
    return [text for text in texts if text.encode() in _fork_holds(fork)]


def test_a_fork_keeps_whole_the_packs_written_before_its_tick_and_none_that_may_hold_a_future(tmp_path, fake):
    """A pack written before the tick's commit holds only the tick's past: the fork links it as it
    is (no copy of the history); what the tick reaches beyond it is packed anew, and nothing of a
    later tick is there.  In a home a rewind left a future in, a pack written after the tick it
    went back to may hold that future (its ref there, or deleted by hand): it is not kept whole,
    and the fork holds none of it; nor is any pack in a home rewound before that tick was noted."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two")])
    _git(home, "repack", "-a", "-d", "-q")  # written after tick 2's commit: it may hold what came after tick 1
    assert _holds_abandoned(history.fork(home, 1, tmp_path / "at-one").home, ("answer to plain two",)) == []
    [pack] = _pack_older(home)
    run(home, fake, [("say", "the third"), ("say", "later words")])
    fork = history.fork(home, 3, tmp_path / "fork").home
    kept = fork / ".git" / "objects" / "pack" / pack.name
    assert kept.stat().st_ino == pack.stat().st_ino  # the home's pack, linked: not packed again
    assert "answer to the third" in _fork_holds(fork).decode(errors="replace")
    assert _holds_abandoned(fork, ("later words",)) == []
    _git(fork, "fsck", "--full", "--strict", "--no-dangling")
    assert history.rewind(home, 1).abandoned
    back_to = int(_git(home, "log", "-1", "--format=%ct", history.tick_commit(home, 1)))
    _git(home, "repack", "-a", "-d", "-q")  # the abandoned future's objects with the rest, in one pack
    [pack] = sorted((home / ".git" / "objects" / "pack").glob("*.pack"))
    time.sleep(2)  # the next ticks' commits seconds after that pack
    run(home, fake, [("say", "fresh two"), ("say", "fresh three")])
    gone = ("answer to plain two", "answer to the third", "later words")
    os.utime(pack, (back_to + 1, back_to + 1))  # written after tick 1's commit, before tick 3's
    assert _holds_abandoned(history.fork(home, 3, tmp_path / "after-rewind").home, gone) == []
    mark = (home / history.REWOUND_MARK).read_text()
    (home / history.REWOUND_MARK).unlink()  # a home rewound before marks were kept: its ref alone says so
    os.utime(pack, (back_to - 5, back_to - 5))
    assert _holds_abandoned(history.fork(home, 3, tmp_path / "no-mark").home, gone) == []
    (home / history.REWOUND_MARK).write_text(mark)
    os.utime(pack, (back_to + 1, back_to + 1))
    for ref in _git(home, "for-each-ref", "--format=%(refname)", history.ABANDONED).split():
        _git(home, "update-ref", "-d", ref)  # the person deletes the abandoned future's ref: the mark stays
    assert _holds_abandoned(history.fork(home, 3, tmp_path / "ref-deleted").home, gone) == []


def test_a_fork_of_a_rewound_home_keeps_the_packs_written_before_the_tick_it_went_back_to(tmp_path, fake):
    """Every object of an abandoned future was made after the commit of the tick the rewind went
    back to: a pack written before it holds the past every line shares, and a fork links it."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two")])
    _git(home, "repack", "-a", "-d", "-q")
    [pack] = sorted((home / ".git" / "objects" / "pack").glob("*.pack"))
    time.sleep(1.1)  # tick 3's commit in a later second (commit times are whole seconds)
    run(home, fake, [("say", "the third"), ("say", "abandoned words")])
    history.rewind(home, 3)
    _git(home, "repack", "-d", "-q")  # the abandoned future's objects, in a pack of their own
    run(home, fake, [("say", "fresh four")])
    fork = history.fork(home, 4, tmp_path / "fork").home
    assert (fork / ".git" / "objects" / "pack" / pack.name).stat().st_ino == pack.stat().st_ino
    assert _holds_abandoned(fork, ("abandoned words",)) == []
    assert "answer to fresh four" in _fork_holds(fork).decode(errors="replace")
    _git(fork, "fsck", "--full", "--strict", "--no-dangling")


def _in_pack(home: Path, name: str) -> set[str]:
    """The objects HOME's pack NAME holds (as ``git show-index`` lists them)."""
    with (home / ".git" / "objects" / "pack" / name).with_suffix(".idx").open("rb") as idx:
        listed = subprocess.run(["git", "show-index"], stdin=idx, capture_output=True, check=True).stdout
    return {line.split()[1] for line in listed.decode().splitlines()}


def _packed_whole(home: Path, sha: str, names: set[str]) -> bool:
    """Every object SHA reaches is in HOME's packs NAMES."""
    held = set().union(*(_in_pack(home, name) for name in names))
    reached = _git(home, "rev-list", "--objects", "--no-object-names", sha).split()
    return bool(reached) and set(reached) <= held


def test_the_packer_says_which_commit_its_packs_hold_whole(tmp_path, fake, monkeypatch):
    """After each repack the packer notes the commit HEAD was at before it and the packs that
    hold all that commit reaches; when a later repack rolls those packs up, the note names the new
    pack instead, and stays true.  The loose objects go to a pack of their own, noted as made when
    it was written; a roll-up takes in only older packs, never the newest PACK_RECENT, and is noted
    as made when the newest of those was, not when it was written.  A home packed before notes
    were kept gets them for its packs."""
    monkeypatch.setattr(git_repo, "PACK_RECENT", 1)
    home = tmp_path / "home"
    folder = home / ".git" / "objects" / "pack"
    rolled = []
    for word in ("one", "two", "three", "four", "five"):
        run(home, fake, [("say", word)])
        head = _git(home, "rev-parse", "HEAD").strip()
        repo = HomeRepo(home)
        before, times = pack_names(home), pack_times(home)
        repo.pack()
        after, newest = pack_names(home), pack_times(home)
        [loose] = [name for name in after - before if head in _in_pack(home, name)]
        assert newest[loose] == (folder / loose).stat().st_mtime and set(newest) == after
        for made in after - before - {loose}:  # a roll-up, of older packs only
            assert not _in_pack(home, made) & _in_pack(home, loose)
            assert newest[made] == max(times[name] for name in before - after) < (folder / made).stat().st_mtime
            rolled.append(made)
        assert packed_records(home)[-1] == (head, after)
    records = packed_records(home)
    assert rolled and len(pack_names(home)) < 5  # the first notes name the packs that took theirs in
    assert all(names <= pack_names(home) and _packed_whole(home, sha, names) for sha, names in records)
    assert len({frozenset(names) for _sha, names in records}) == len(records)  # the newest of the same packs
    (home / ".git" / PACKED_FILE).unlink()  # packed before notes were kept
    run(home, fake, [("say", "six")])
    repo.pack()
    records = packed_records(home)
    assert len(records) >= 2 and records[-2][0] != records[-1][0]  # the older packs' commit, found
    assert all(names <= pack_names(home) and _packed_whole(home, sha, names) for sha, names in records)


def _walk_spy(walked: list[bytes]) -> Callable[..., bytes]:
    """history._git, noting in WALKED the revisions each fork's walk of the history was given (git
    rev-list's, or pack-objects' own walk)."""
    git = history._git

    def spy(where: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
        if args[0] == "rev-list" and "--objects" in args or args[0] == "pack-objects" and "--revs" in args:
            walked.append(stdin or b"")
        if args[0] == "pack-objects":
            assert "--window=4" in args  # the packer's narrow window: its deltas are found as well, cheaper
        return git(where, *args, stdin=stdin, env=env)

    return spy


@pytest.mark.parametrize("older_form", [False, True])
def test_a_fork_walks_the_history_down_to_a_commit_packed_whole_in_the_packs_it_keeps(tmp_path, fake,
                                                                                      monkeypatch, older_form):
    """The fork packs only what its tick reaches beyond the newest commit the packer noted as held
    whole by packs it keeps: git walks no commit below it.  A note naming a pack the fork may not
    keep (written after its tick) is not used.  The fork is whole (fsck) and notes its own tick.
    So with the notes of an older packer (a list, no pack's time: the pack files' times are
    used); the next repack keeps them."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two")])
    packed_at = _git(home, "rev-parse", "HEAD").strip()
    HomeRepo(home).pack()
    if older_form:
        (home / ".git" / PACKED_FILE).write_text(json.dumps([[sha, sorted(names)] for sha, names in packed_records(home)]))
        assert pack_times(home) == {} and packed_records(home)
    time.sleep(1.1)  # the next ticks' commits in a later second than the pack
    run(home, fake, [("say", "the third"), ("say", "later words")])
    walked: list[bytes] = []
    monkeypatch.setattr(history, "_git", _walk_spy(walked))
    tick3 = history.tick_commit(home, 3)
    fork = history.fork(home, 3, tmp_path / "fork").home
    assert walked == [f"{tick3}\n^{packed_at}\n".encode()]
    assert "answer to the third" in _fork_holds(fork).decode(errors="replace")
    assert _holds_abandoned(fork, ("later words",)) == []
    _git(fork, "fsck", "--full", "--strict", "--no-dangling")
    [(sha, names)] = packed_records(fork)  # tick 3's objects were linked loose: not packed whole
    assert sha == packed_at and names <= pack_names(fork) and _packed_whole(fork, sha, names)
    walked.clear()
    early = history.fork(home, 1, tmp_path / "early").home  # the pack was written after tick 1
    assert walked == [f"{history.tick_commit(home, 1)}\n".encode()]
    assert _holds_abandoned(early, ("answer to plain two", "the third")) == []
    _git(early, "fsck", "--full", "--strict", "--no-dangling")
    monkeypatch.undo()
    HomeRepo(home).pack()
    assert packed_records(home)[0] == (packed_at, pack_names(fork) & pack_names(home))


def test_a_fork_keeps_a_roll_up_only_if_every_pack_it_took_in_predates_the_tick_and_it_took_in_nothing_else(
        tmp_path, fake, monkeypatch):
    """A roll-up is noted as made when the newest pack it took in was (not when it was written), so a
    fork to a tick after that keeps it whole: it holds nothing newer.  A fork to a tick between two
    of the packs it took in does not keep it (the later pack holds a later tick).  Objects written
    while the packer rolls up (a commit beside it) are not taken in (git's --geometric takes every
    loose object): they stay loose for its next pack, so the fork that keeps the roll-up holds none."""
    monkeypatch.setattr(git_repo, "PACK_RECENT", 1)
    monkeypatch.setattr(git_repo, "roll_up", lambda counts: set(counts))  # every pack but the newest rolls up
    home = tmp_path / "home"
    run(home, fake, [("say", "hello")])
    HomeRepo(home).pack()
    time.sleep(1.1)  # tick 2's commit a second after the first pack
    run(home, fake, [("say", "plain two"), ("say", "later words")])
    HomeRepo(home).pack()
    time.sleep(1.1)
    run(home, fake, [("say", "the fourth")])
    repo, git = HomeRepo(home), HomeRepo._git
    beside = b"words of a later tick, written while the packer rolls up"

    def commit_beside(self: HomeRepo, *args: str, **options: Any) -> str:
        if "--stdin-packs" in args and "--unpacked" not in args:
            repo.write_blob(beside)
        return git(self, *args, **options)

    before = pack_names(home)
    monkeypatch.setattr(HomeRepo, "_git", commit_beside)
    repo.pack()
    monkeypatch.undo()
    [rolled] = [name for name in pack_names(home) - before if (home / ".git" / "objects" / "pack" / name).stat().st_mtime
                > pack_times(home)[name]]
    at_four = history.fork(home, 4, tmp_path / "at-four").home
    kept = at_four / ".git" / "objects" / "pack" / rolled
    assert kept.stat().st_ino == (home / ".git" / "objects" / "pack" / rolled).stat().st_ino  # linked whole
    assert beside in _fork_holds(home) and beside not in _fork_holds(at_four)
    at_two = history.fork(home, 2, tmp_path / "at-two").home
    assert _holds_abandoned(at_two, ("later words", "the fourth")) == []
    assert not (at_two / ".git" / "objects" / "pack" / rolled).exists()
    assert "answer to plain two" in _fork_holds(at_two).decode(errors="replace")
    for fork in (at_four, at_two):
        _git(fork, "fsck", "--full", "--strict", "--no-dangling")


def test_a_fork_to_a_recent_tick_walks_only_the_ticks_since_the_packers_last_repack_before_it(tmp_path, fake,
                                                                                                 monkeypatch):
    """The packer keeps its newest packs out of its roll-ups, so a fork to a tick of its last
    PACK_RECENT repacks keeps every pack made before the tick, and walks only the ticks since the
    last repack before it (and the repack's lag), not back to a roll-up made after the tick."""
    monkeypatch.setattr(git_repo, "PACK_EVERY", 5)
    home = tmp_path / "home"
    ticks = 160
    rt = runtime(home, fake.url)
    try:
        for i in range(ticks):
            do(rt, ("say", f"words {i}"))
            assert rt.mind.commits.flush(60)
            if i % 10 == 9:
                time.sleep(0.5)  # a person's ticks are seconds apart: a repack is a second before the ticks after it
        rt.mind.commits.wait_packed(60)
    finally:
        rt.stop()
    walked: list[bytes] = []
    monkeypatch.setattr(history, "_git", _walk_spy(walked))
    for back in (5, 15, 25):
        walked.clear()
        history.fork(home, ticks - back, tmp_path / f"fork-{back}")
        [revs] = walked
        count = int(_git(home, "rev-list", "--count", *revs.decode().split()).strip())
        assert count <= 3 * git_repo.PACK_EVERY, (back, count)


def _loose(home: Path) -> dict[str, int]:
    """HOME's loose objects, each with its inode."""
    objects = home / ".git" / "objects"
    return {path.parent.name + path.name: path.stat().st_ino for path in objects.glob("??/*")}


def _whole(fork: Path) -> None:
    """FORK holds every object its commits reach (each read), and its packer's notes are true."""
    _git(fork, "fsck", "--full", "--strict", "--no-dangling")
    reached = _git(fork, "rev-list", "--objects", "--no-object-names", "--all").split()
    subprocess.run(["git", "-C", str(fork), "cat-file", "--batch-check"], input="\n".join(reached).encode(),
                   capture_output=True, check=True)
    assert all(names <= pack_names(fork) and _packed_whole(fork, sha, names) for sha, names in packed_records(fork))


def test_a_fork_links_the_loose_objects_its_tick_reaches_and_a_fork_of_it_finds_them(tmp_path, fake):
    """The ticks since the packer's last repack are loose objects in the home: a fork to one of
    them hard-links those its tick reaches (not compressed again) and none of a later tick's.  It
    notes as packed whole only what its packs hold whole (the home's packed commit, not its tick):
    a fork of it walks down past its loose objects and links them in turn, and so does a fork of
    that fork; each holds every object, and nothing of the home's later tick."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two")])
    packed_at = _git(home, "rev-parse", "HEAD").strip()
    HomeRepo(home).pack()
    time.sleep(1.1)  # the next ticks' commits in a later second than the pack
    run(home, fake, [("say", "the third"), ("say", "later words")])
    tick3, loose = history.tick_commit(home, 3), _loose(home)
    assert tick3 in loose
    fork = history.fork(home, 3, tmp_path / "fork").home
    linked = {sha for sha, ino in _loose(fork).items() if loose.get(sha) == ino}
    reached = set(_git(home, "rev-list", "--objects", "--no-object-names", tick3, f"^{packed_at}").split())
    assert linked == reached & set(loose) and tick3 in linked  # every one the tick reaches, and no other
    assert packed_records(fork) == [(packed_at, packed_records(home)[-1][1])]
    forks = [fork]
    for n in (2, 3):
        forks.append(history.fork(forks[-1], 3, tmp_path / f"fork{n}").home)
        assert tick3 in _loose(forks[-1])
    subprocess.run(["rm", "-r", str(home)], check=True)
    for each in forks:
        _whole(each)
        assert _holds_abandoned(each, ("later words",)) == []
        assert "answer to the third" in _fork_holds(each).decode(errors="replace")


def test_a_fork_keeps_a_pack_written_in_its_commits_second_before_the_commit_was_made(tmp_path, fake):
    """Commit times are whole seconds; a home whose commits come faster than one a second has packs
    written in the second of a tick's commit.  While that commit is a loose object, its file's time
    says which of them were written before it was made: those hold only its past, and the fork keeps
    them whole; one dated at or after it may hold a later tick, and is not kept; nor is any when the
    file's time is not of its commit's second (the home was copied)."""
    home = tmp_path / "home"
    rt = runtime(home, fake.url)
    try:
        do(rt, ("say", "hello"))
        assert rt.mind.commits.flush(60)
        for _ in range(20):  # a pack, then the tick's commit, in one second
            while not 0.05 < time.time() % 1 < 0.4:
                time.sleep(0.01)
            before = pack_names(home)
            rt.mind.repo.pack()
            do(rt, ("say", "the tick"))
            assert rt.mind.commits.flush(60)
            tick = rt.mind.consciousness.current_tick
            commit = history.tick_commit(home, tick)
            [pack] = pack_names(home) - before
            if int(pack_times(home)[pack]) == history._commit_time(home, commit):
                break
        else:
            raise AssertionError("no pack and commit in one second")
        do(rt, ("say", "later words"))
        assert rt.mind.commits.flush(60)
    finally:
        rt.stop()
    loose = home / ".git" / "objects" / commit[:2] / commit[2:]
    written = loose.stat().st_mtime
    assert pack_times(home)[pack] < written
    noted = json.loads((home / ".git" / PACKED_FILE).read_text())
    made = noted["newest"][pack]
    for case, newest, mtime in (("kept", made, written), ("dated-then", written, written),
                                ("copied", made, written + 5)):
        noted["newest"][pack] = newest
        (home / ".git" / PACKED_FILE).write_text(json.dumps(noted))
        os.utime(loose, (mtime, mtime))
        fork = history.fork(home, tick, tmp_path / case).home
        assert (fork / ".git" / "objects" / "pack" / pack).exists() == (case == "kept"), case
        _whole(fork)
        assert _holds_abandoned(fork, ("later words",)) == []
        assert "answer to the tick" in _fork_holds(fork).decode(errors="replace")


def test_a_fork_packs_the_loose_objects_the_packer_packed_and_pruned_while_it_linked_them(tmp_path, fake,
                                                                                          monkeypatch):
    """The home's packer packs the loose objects and prunes them between the fork's walk and its
    links: each link finds its object gone, and the fork packs it from the packer's new pack (which
    holds the later tick's objects too: none of those is taken)."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two")])
    HomeRepo(home).pack()
    time.sleep(1.1)
    run(home, fake, [("say", "the third"), ("say", "later words")])
    git = history._git

    def packer_beside(where: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
        out = git(where, *args, stdin=stdin, env=env)
        if args[0] == "rev-list" and "--objects" in args:
            HomeRepo(home).pack()
            assert _loose(home) == {}
        return out

    monkeypatch.setattr(history, "_git", packer_beside)
    fork = history.fork(home, 3, tmp_path / "fork").home
    monkeypatch.undo()
    subprocess.run(["rm", "-r", str(home)], check=True)
    _whole(fork)
    assert _holds_abandoned(fork, ("later words",)) == []
    assert "answer to the third" in _fork_holds(fork).decode(errors="replace")


def test_a_forks_memory_copied_whole_keeps_no_byte_of_the_rows_it_takes_out(tmp_path):
    """Many rows after the tick, each with a word of its own, in an index of many pages: once
    they are taken out of the copy, no page of the file (used or free) holds one of those words,
    and the copy's index finds what a new one finds."""
    from amacs_server.memory.ltm import LongTermMemory

    ltm = LongTermMemory(tmp_path / "memory.db")
    rows = [(i, f"base{i}", f"word{i} " + " ".join(f"common{j}" for j in range(i % 40)) +
             (f" laterword{i}zq" if i > 1500 else "")) for i in range(1, 3001)]
    with ltm.transaction():
        ltm.db.executemany("INSERT INTO items (id, base, version, tier, kind, created_at_ms, content, text) "
                           "VALUES (?, ?, 1, 'ltm', 'note', 0, '{}', ?)", rows)
        ltm.db.executemany("INSERT INTO items_fts (rowid, text) VALUES (?, ?)", [(i, t) for i, _b, t in rows])
    ltm.close()
    assert b"laterword2999zq" in (tmp_path / "memory.db").read_bytes()
    history._memory_up_to(tmp_path / "memory.db", tmp_path / "fork.db", {"ltm_max_id": 1500, "active": []})
    held = (tmp_path / "fork.db").read_bytes()
    assert not re.findall(rb"terword\d+zq", held)
    db = sqlite3.connect(tmp_path / "fork.db")
    try:
        assert db.execute("SELECT count(*), max(id) FROM items").fetchone() == (1500, 1500)
        query = "SELECT rowid FROM items_fts WHERE items_fts MATCH ? ORDER BY rank, rowid"
        found = [db.execute(query, (w,)).fetchall() for w in ("common3", "word77", "laterword2000zq")]
        db.execute("INSERT INTO items_fts (items_fts) VALUES ('rebuild')")
        assert found == [db.execute(query, (w,)).fetchall() for w in ("common3", "word77", "laterword2000zq")]
        assert found[1] == [(77,)] and found[2] == []
    finally:
        db.close()


def test_a_rewind_or_fork_reads_only_what_changed_since_the_tick_or_was_not_sealed(tmp_path, fake, monkeypatch):
    """What a rewind or fork reads grows with what was written after the tick, not with the home:
    a memory.db sealed by a clean close is not checked page by page again (an unsealed one is);
    a transcript not written since the tick ended is not searched for its future; the files the
    check-out left as the tick's commit has them are not read to be committed again.  The
    commits still hold the files as they are."""
    home = tmp_path / "home"
    run(home, fake, FUTURE_SESSION[:3])
    old = home / "transcripts" / "older-session.jsonl"
    old.write_text('{"tick": 1, "ts": 1.0, "kind": "tick_start"}\n')
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    run(home, fake, [("say", "later one")])
    checked: list[Path] = []
    searched: list[str] = []
    read: list[str] = []
    monkeypatch.setattr(history, "_quick_check", lambda path: checked.append(path) or "ok")
    future = history._transcript_future
    monkeypatch.setattr(history, "_transcript_future", lambda path, *a: searched.append(path.name) or future(path, *a))
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self.name) or real(self))
    fork = history.fork(home, 2, tmp_path / "fork").home
    assert checked == [] and not {"consciousness.el", "scratchpad.org", history.STATE_FILE} & set(read), read
    history.rewind(home, 3)
    assert checked == [] and "older-session.jsonl" not in searched and searched
    read.clear()
    history.rewind(home, 2)  # after a check-out, git knows every file: the aside commit reads none of them
    assert not {"consciousness.el", "scratchpad.org", history.STATE_FILE} & set(read), read
    for where in (home, fork):
        assert _git(where, "status", "--porcelain", "--untracked-files=no") == ""
    rt = runtime(home, fake.url)  # the server rewinds and forks the memory.db it checked and opened
    try:
        asyncio.run_coroutine_threadsafe(rt.rewind(2), rt.loop).result(60)
        rt.fork(None, tmp_path / "served-fork")
    finally:
        rt.stop()
    assert checked == []
    (home / "memory.db.clean").unlink()
    history.rewind(home, 1)
    assert checked == [home / "memory.db"]


def _words_of(db: Path) -> bytes:
    return db.read_bytes() + b"".join(p.read_bytes() for p in db.parent.glob("memory.db-*"))


def _index_rows(db_path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(db_path)
    try:
        return db.execute("SELECT * FROM items_fts_data ORDER BY id").fetchall()
    finally:
        db.close()


def test_a_forks_memory_holds_no_stale_copy_of_a_later_rows_key_the_homes_index_pages_kept(tmp_path):
    """Why the fork copies rows, not the home's file: SQLite moving cells between index pages (a
    row's base inserted amid others) leaves stale copies of keys in the pages' unused space, which
    secure_delete does not zero.  The home's file holds such copies of later rows' bases; a copy
    of it with those rows deleted (secure_delete on, the index merged) still does; the fork does not."""
    import random
    import shutil

    from amacs_server.memory.ltm import LongTermMemory

    ltm = LongTermMemory(tmp_path / "memory.db")
    ltm.db.execute("PRAGMA secure_delete=ON")
    rng = random.Random(1)
    bases = [f"b{rng.randrange(10**9):09d}" for _ in range(3000)]
    for i in range(1, 6001):  # a transaction a row, as ticks write them
        late = i > 4000 and i % 2
        base = f"b{rng.randrange(10**9):09d}latebase{i}zq" if late else rng.choice(bases)
        with ltm.transaction():
            ltm.db.execute("INSERT INTO items (id, base, version, tier, kind, created_at_ms, content, text) "
                           "VALUES (?, ?, ?, 'ltm', 'note', 0, '{}', ?)", (i, base, i, f"row{i}"))
            ltm.db.execute("INSERT INTO items_fts (rowid, text) VALUES (?, ?)", (i, f"row{i}"))
    ltm.close()
    home = (tmp_path / "memory.db").read_bytes()
    assert len(re.findall(rb"tebase\d+zq", home)) > 2 * 1000  # each in its row, its index entry, and stale
    shutil.copyfile(tmp_path / "memory.db", tmp_path / "copy.db")
    copy = sqlite3.connect(tmp_path / "copy.db")
    try:
        copy.execute("PRAGMA secure_delete=ON")
        copy.executemany("INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', ?, ?)",
                         copy.execute("SELECT id, text FROM items WHERE id > 4000").fetchall())
        copy.execute("DELETE FROM items WHERE id > 4000")
        copy.execute("INSERT INTO items_fts (items_fts) VALUES ('optimize')")
        copy.commit()
    finally:
        copy.close()
    assert re.findall(rb"tebase\d+zq", (tmp_path / "copy.db").read_bytes())
    history._memory_up_to(tmp_path / "memory.db", tmp_path / "fork.db", {"ltm_max_id": 4000, "active": []})
    assert not re.findall(rb"tebase\d+zq", (tmp_path / "fork.db").read_bytes())


def _segments(db_path: Path) -> int:
    """How many segments the full-text index of DB_PATH is in (FTS5: a page's id holds its segment's)."""
    db = sqlite3.connect(db_path)
    try:
        return int(db.execute("SELECT count(DISTINCT id >> 37) FROM items_fts_data WHERE id >= 1 << 37").fetchone()[0])
    finally:
        db.close()


def test_a_fork_of_the_last_tick_of_a_home_never_rewound_copies_its_index_as_it_is(tmp_path, fake):
    """Nothing is taken out of the fork of the last tick of a home no rewind took rows out of: its
    full-text index is the home's, not merged into one segment again (which reads and writes it
    all), and answers as one made anew.  A fork with later rows to take out merges it, and so
    does one of a home whose rewinds took rows out (its abandoned_items says so, mark and refs gone)."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("create", "keptnote"), ("say", "plain two")])
    run(home, fake, [("create", "wombatlateqrs"), ("say", "after all")])
    for i in range(8):
        if _segments(home / "memory.db") > 1:
            break
        run(home, fake, [("say", f"more {i}")])  # a transaction each: the home's index in several segments
    assert _segments(home / "memory.db") > 1
    last = history.last_tick(home)
    now = history.fork(home, last, tmp_path / "now").home
    assert _index_rows(now / "memory.db") == _index_rows(home / "memory.db")
    db = sqlite3.connect(now / "memory.db")
    try:
        query = "SELECT rowid, round(rank, 9) FROM items_fts WHERE items_fts MATCH ? ORDER BY rank, rowid"
        words = ["keptnote", "wombatlateqrs", "answer", "hello", "about"]
        found = [db.execute(query, (w,)).fetchall() for w in words]
        db.execute("INSERT INTO items_fts (items_fts) VALUES ('rebuild')")
        assert found == [db.execute(query, (w,)).fetchall() for w in words] and found[1]
    finally:
        db.close()
    db = sqlite3.connect(home / "memory.db")
    try:  # the home's index not merged by the rewind's deletions, however many segments the turns left
        db.execute("INSERT INTO items_fts (items_fts, rank) VALUES ('automerge', 0)")
        db.execute("INSERT INTO items_fts (items_fts, rank) VALUES ('crisismerge', 64)")
        db.commit()
    finally:
        db.close()
    history.rewind(home, 2)  # the wombat note's rows leave: the home's index only marks them deleted
    assert b"batlateqrs" in b"".join(row[1] for row in _index_rows(home / "memory.db"))
    early = history.fork(home, 2, tmp_path / "early").home  # the last tick: no row after it
    assert _segments(early / "memory.db") == 1 and b"batlateqrs" not in _words_of(early / "memory.db")
    (home / history.REWOUND_MARK).unlink()  # a home rewound before marks were kept, its refs deleted by hand:
    for ref in _git(home, "for-each-ref", "--format=%(refname)", history.ABANDONED).split():
        _git(home, "update-ref", "-d", ref)  # its abandoned_items table still says rows were taken out
    again = history.fork(home, 2, tmp_path / "again").home
    assert b"batlateqrs" not in _words_of(again / "memory.db")


def test_a_forks_memory_holds_no_byte_of_a_later_row_nor_of_an_abandoned_one(tmp_path, fake):
    """The fork's memory.db is the home's tables copied whole, less the rows after the tick: no byte
    of those rows, nor of the home's abandoned futures (whose index entries the home only marked
    deleted), is left anywhere in the file; the full-text index answers as one made anew."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("create", "keptnote"), ("say", "plain two")])
    run(home, fake, [("create", "zebrafuturexyz"), ("say", "after all")])
    run(home, fake, [("create", "quokkaabandonedqrs"), ("say", "more")])
    history.rewind(home, 3)  # the quokka note's rows leave; its words stay in the home's index, marked
    run(home, fake, [("say", "again")])
    assert b"kkaabandonedqrs" in _words_of(home / "memory.db")
    early = history.fork(home, 2, tmp_path / "early").home
    late = history.fork(home, 4, tmp_path / "late").home
    assert b"rafuturexyz" not in _words_of(early / "memory.db")
    for fork in (early, late):
        assert b"kkaabandonedqrs" not in _words_of(fork / "memory.db")
        db = sqlite3.connect(fork / "memory.db")
        try:
            db.execute("INSERT INTO items_fts (items_fts, rank) VALUES ('integrity-check', 1)")
            query = "SELECT rowid, round(rank, 9) FROM items_fts WHERE items_fts MATCH ? ORDER BY rank, rowid"
            words = ["keptnote", "zebrafuturexyz", "quokkaabandonedqrs", "answer", "hello", "about"]
            found = [db.execute(query, (w,)).fetchall() for w in words]
            db.execute("INSERT INTO items_fts (items_fts) VALUES ('rebuild')")
            assert found == [db.execute(query, (w,)).fetchall() for w in words]
            assert found[0] and not found[2] and bool(found[1]) == (fork == late)
        finally:
            db.close()


def _subjects(home: Path) -> list[str]:
    return _git(home, "log", "--format=%s").splitlines()


def test_a_fork_of_now_holds_the_last_tick_and_says_what_its_parent_runs_on(tmp_path, fake, capsys):
    """``--tick now`` (the CLI) and the server's fork of "now" fork at the last tick; the server's
    answer names the backend, model and base URL it runs on, for the fork's server."""
    home = tmp_path / "home"
    run(home, fake, FUTURE_SESSION[:3])
    assert server_main(["fork", str(home), "--tick", "now", str(tmp_path / "cli")]) == 0
    assert capsys.readouterr().out.startswith(f"forked {tmp_path / 'cli'} at tick 3")
    assert history.read_state(tmp_path / "cli")["tick"] == 3
    assert "noted: note the plan" in (tmp_path / "cli" / "scratchpad.org").read_text()
    with pytest.raises(SystemExit):
        server_main(["fork", str(home), "--tick", "later", str(tmp_path / "no")])
    assert "'later' is not a tick number or now" in capsys.readouterr().err
    rt = runtime(home, fake.url)
    try:
        do(rt, ("say", "one more"))
        done = rt.fork(None, tmp_path / "live")
    finally:
        rt.stop()
    assert done["tick"] == 4 and history.read_state(tmp_path / "live")["tick"] == 4
    assert (done["backend"], done["model"], done["base_url"]) == ("anthropic", rt.slot.model, fake.url)


def _index_mtimes(home: Path) -> dict[str, int]:
    """Each entry of HOME's git index: its file's mtime as the index has it (whole seconds)."""
    out, name = {}, ""
    for line in _git(home, "ls-files", "--debug").splitlines():
        if not line.startswith(" "):
            name = line
        elif line.strip().startswith("mtime:"):
            out[name] = int(line.split()[1].partition(":")[0])
    return out


def _changed(home: Path) -> list[str]:
    """HOME's git status, but for the settings no home commits (:data:`history.SETTINGS`)."""
    return [line for line in _git(home, "status", "--porcelain").splitlines()
            if line[3:] not in history.SETTINGS]


def test_a_forks_memory_and_vouched_files_are_made_while_git_fetches_its_history_and_their_errors_are_the_forks(
        tmp_path, fake, monkeypatch):
    """A fork's memory.db (at 20,000 ticks a 43 MB copy of the home's memory snapshot, then synced)
    and the files the home's server vouches for (its past months, 9 MB) are copied in threads of
    their own beside git's walk of the history, not after it: here the walk waits until both have
    begun, which a fork making them one after the other never reaches.  The walk's pack-objects
    runs on one thread (beside those copies, git's threads for so small a pack cost more CPU).
    The fork is whole all the same; an error of the memory's making is the fork's, and leaves
    nothing beside DEST."""
    home = tmp_path / "home"
    run(home, fake, FUTURE_SESSION[:3])
    memory_began, copy_began = threading.Event(), threading.Event()
    real_walk, real_memory, real_copy = history._history_up_to, history._memory_from_snapshot, history.copy_vouched

    def walk(*args: Any, **kw: Any) -> Any:
        assert memory_began.wait(10), "the fork's memory was not begun before its walk"
        assert copy_began.wait(10), "the fork's vouched files were not begun before its walk"
        return real_walk(*args, **kw)

    def memory(*args: Any, **kw: Any) -> bool:
        memory_began.set()
        return real_memory(*args, **kw)

    def copy(*args: Any, **kw: Any) -> Any:
        copy_began.set()
        return real_copy(*args, **kw)

    packed: list[tuple[str, ...]] = []
    real_git = history._git

    def spy(where: Path, *args: str, **kw: Any) -> bytes:
        if args[0] == "pack-objects":
            packed.append(args)
        return real_git(where, *args, **kw)

    monkeypatch.setattr(history, "_history_up_to", walk)
    monkeypatch.setattr(history, "_memory_from_snapshot", memory)
    monkeypatch.setattr(history, "copy_vouched", copy)
    monkeypatch.setattr(history, "_git", spy)
    fork = history.fork(home, 2, tmp_path / "fork").home
    with sqlite3.connect(fork / "memory.db") as db:
        assert db.execute("PRAGMA quick_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM items").fetchone()[0] > 0
    assert _changed(fork) == []
    assert [args for args in packed if "--threads=1" not in args] == [] and packed

    def broken(*args: Any, **kw: Any) -> bool:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(history, "_memory_from_snapshot", broken)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        history.fork(home, 2, tmp_path / "fork2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fork", "home"]


def test_a_forks_git_trusts_the_files_it_checked_out_and_still_sees_a_later_change(tmp_path, fake):
    """A fork's check-out wrote its files and git's index in one second: git held each file
    *racily clean* (it may have changed unseen) and read and hashed every one again at each
    later write of the index, twice in the fork's own commit (its 12 MB of chat months each
    time, at 20,000 ticks).  Now each file's mtime is before the index's: git trusts its stat.
    The fork's git status is clean, and a change made just after the fork, of the same size and
    in the same second, is still seen."""
    home = tmp_path / "home"
    run(home, fake, FUTURE_SESSION[:3])
    time.sleep(1.02 - time.time() % 1)  # at a second's start: the fork's files and index share that second
    fork = history.fork(home, 2, tmp_path / "fork").home
    index_second = int((fork / ".git" / "index").stat().st_mtime)
    mtimes = _index_mtimes(fork)
    assert {"agent-chat.org", "tick-state.json", "consciousness.el"} <= set(mtimes)
    assert {name: mtime for name, mtime in mtimes.items() if mtime >= index_second} == {}
    assert _changed(fork) == []
    scratch = fork / "consciousness.el"
    data = scratch.read_bytes()
    scratch.write_bytes(data[:-1] + (b"y" if data.endswith(b"x") else b"x"))
    assert _changed(fork) == [" M consciousness.el"]


def _blob_bytes(home: Path, commit: str, name: str) -> bytes:
    return subprocess.run(["git", "-C", str(home), "cat-file", "blob", f"{commit}:{name}"], capture_output=True,
                          check=True).stdout


def _vouched_months(home: Path, fake: Any, link_to: Path | None = None) -> dict[str, bytes]:
    """HOME served three sessions with six past months (name -> bytes) its third commit holds and
    its server's record vouches for (RACY_NS made 0.1 s by the caller), then chat/2026-02.org
    rewritten with the same size and mtime.  LINK_TO: a second name there for each month."""
    run(home, fake, [("say", "hello")])
    months = {name: b"".join(f"line {n} of {name}\n".encode() for n in range(300))
              for name in (f"{folder}/2026-0{m}.org" for folder in ("chat", "monologue") for m in (1, 2, 3))}
    for name, data in months.items():
        (home / name).parent.mkdir(exist_ok=True)
        (home / name).write_bytes(data)
        if link_to is not None:
            os.link(home / name, link_to / name.replace("/", "-"))
    time.sleep(0.2)
    run(home, fake, [("say", "two")])  # its commit holds the months, and its record vouches for them
    time.sleep(0.2)
    run(home, fake, [("say", "three")])
    assert {name: entry.key[1] for name, entry in read_seen(home).items() if name in months} == {
        name: len(data) for name, data in months.items()}
    rewritten = home / "chat" / "2026-02.org"
    st = rewritten.stat()
    rewritten.write_bytes(months["chat/2026-02.org"].replace(b"line 7 ", b"LINE 7 "))
    os.utime(rewritten, ns=(st.st_atime_ns, st.st_mtime_ns))
    return months


def test_a_fork_copies_the_months_the_servers_record_vouches_for_and_git_writes_the_rest(tmp_path, fake,
                                                                                         monkeypatch):
    """A fork's past months are copied from the home, not inflated from git (at 20,000 ticks, 60
    blobs through their delta chains), when the server's record of the home's files (SEEN_FILE)
    says they hold the tick's blob and their stat is still what it read, before and after the
    copy.  Not copied, written by git: the current month, appended since the tick; a month
    rewritten since with the same size, its mtime set back to the very nanosecond; a month written
    to while it was being copied.  Every file of the fork is its commit's, byte for byte, and its
    git finds nothing changed.  Each copy's writeback is begun as it is made (the fork's final
    sync, which waits for all, then finds them mostly written)."""
    monkeypatch.setattr(git_repo, "RACY_NS", 100_000_000)  # the record trusts a file 0.1 s after its write, not 3 s
    home = tmp_path / "home"
    months = _vouched_months(home, fake)
    raced = home / "monologue" / "2026-03.org"
    copy = git_repo.copy_range

    def racing(src: int, out: int, size: int) -> None:
        copy(src, out, size)
        if os.fstat(src).st_ino == raced.stat().st_ino:  # the server writes to it meanwhile
            with raced.open("r+b") as fh:
                fh.write(b"L")
    monkeypatch.setattr(git_repo, "copy_range", racing)
    written: list[str] = []
    git = history._git

    def spy(where: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
        if args[0] in ("checkout-index", "read-tree"):
            written.extend((stdin or b"").decode().split("\0")[:-1] if "--stdin" in args else ["*"] if "-u" in args else [])
        return git(where, *args, stdin=stdin, env=env)

    monkeypatch.setattr(history, "_git", spy)
    advise, begun = os.posix_fadvise, []

    def advised(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_DONTNEED and (offset, length) == (0, 0):
            begun.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        advise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", advised)
    fork = history.fork(home, 2, tmp_path / "fork").home
    monkeypatch.setattr(os, "posix_fadvise", advise)
    tick2 = history.tick_commit(home, 2)
    assert {"chat/2026-02.org", "monologue/2026-03.org", "agent-chat.org"} <= set(written)
    copied = {Path(name).name for name in set(months) - {"chat/2026-02.org", "monologue/2026-03.org"}}
    assert copied <= set(begun)  # each copy's writeback begun as it was made, beside the walk, not at the final sync
    assert not (set(months) - {"chat/2026-02.org", "monologue/2026-03.org"}) & set(written), written
    assert all((fork / name).read_bytes() == _blob_bytes(home, tick2, name) for name in months)
    for name in _git(fork, "ls-tree", "-r", "--name-only", "HEAD").splitlines():
        assert (fork / name).read_bytes() == _blob_bytes(fork, "HEAD", name), name
    # Each month's index entry has its file's stat: git hashes none of them again (before a git
    # status, which would refresh the index and write it).
    assert not set(_git(fork, "diff-files", "--name-only").split()) & set(months)
    assert _changed(fork) == [] and _git(fork, "diff", "--stat", "HEAD") == ""
    assert (home / "chat" / "2026-02.org").read_bytes() != months["chat/2026-02.org"]  # the home's, not the tick's


def test_a_rewind_writes_again_only_the_files_the_tick_has_otherwise(tmp_path, fake, monkeypatch):
    """A commit writes its index entries with no stat data, and a checkout over such an index took
    every file for changed: each rewind wrote every past month again (12 MB at 20,000 ticks, the
    rewind row 3.5x its 1,000-tick figure in CPU).  The months the server's record vouches for are
    settled in the index first: a rewind leaves them as they are (never written again),
    and writes a month rewritten since with the same size and mtime, which the record does not
    vouch for."""
    monkeypatch.setattr(git_repo, "RACY_NS", 100_000_000)  # the record trusts a file 0.1 s after its write, not 3 s
    home = tmp_path / "home"
    # A second name for each month: one git writes again is a new file (a new inode, which the
    # kept one cannot share), one it leaves is this one.
    months = _vouched_months(home, fake, link_to=tmp_path)
    history.rewind(home, 2)
    kept = {name for name in months
            if (home / name).stat().st_ino == (tmp_path / name.replace("/", "-")).stat().st_ino}
    assert kept == set(months) - {"chat/2026-02.org"}, kept
    assert all((home / name).read_bytes() == data for name, data in months.items())  # the tick's bytes
    assert _changed(home) == [] and _git(home, "diff", "--stat", "HEAD") == ""


def test_a_fork_of_a_tick_committed_with_an_older_gitignore_commits_the_one_it_has(tmp_path, fake):
    """A home made before a name was added to the .gitignore gets it at its next start; a fork of
    a tick committed before then got it too, but took the file as the tick's: its commit kept
    the old one and its git status said ``M .gitignore`` from the start."""
    home = tmp_path / "home"
    run(home, fake, FUTURE_SESSION[:3])
    ignore = home / ".gitignore"
    ignore.write_text("".join(line + "\n" for line in ignore.read_text().splitlines() if line != ".uncommitted-tick"))
    _git(home, "add", ".gitignore")
    _git(home, "commit", "--quiet", "--amend", "--no-edit")  # tick 3, committed with the older file
    fork = history.fork(home, 3, tmp_path / "fork").home
    assert ".uncommitted-tick" in _git(fork, "show", "HEAD:.gitignore").splitlines()
    assert _changed(fork) == []


def test_the_agent_searches_its_history_for_when_it_touched_something(tmp_path, fake):
    """agent-history-search (the tool, as the method Emacs calls runs it): commit subjects,
    monologue lines and diffs, each with its tick, newest first; one tick's only with :tick."""
    from amacs_server.tools.history import history_search

    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "note the plan"), ("say", "plain"), ("say", "note the plan again")])
    rt = runtime(home, fake.url)
    try:
        hits = history_search(rt.mind, "NOTED: note the plan")
        assert [(h["tick"], h["in"], h["file"]) for h in hits] == [(4, "diff", "scratchpad.org"),
                                                                  (2, "diff", "scratchpad.org")]
        assert hits[0]["line"] == "+noted: note the plan again"
        said = history_search(rt.mind, "thought about note the plan")
        assert [(h["tick"], h["in"]) for h in said if h["in"] != "diff"] == [(4, "subject"), (2, "subject")]
        one = history_search(rt.mind, "note the plan", {"tick": 2})
        assert {h["tick"] for h in one} == {2} and {"subject", "diff"} <= {h["in"] for h in one}
        assert any(h.get("file") == "agent-chat.org" and h["line"] == "+note the plan" for h in one)
        assert history_search(rt.mind, "plan", {"only": ["subject"], "limit": 1}) == [
            {"tick": 4, "in": "subject", "line": "[TICK 4][no-thread][calm] «note the plan again» — thought about note the plan again"}]
        assert history_search(rt.mind, "nowhere at all") == []
        with pytest.raises(Exception, match="only"):
            history_search(rt.mind, "plan", {"only": ["chat"]})
    finally:
        rt.stop()


def test_the_hub_lists_the_futures_rewinds_abandoned_with_their_inputs(tmp_path, fake):
    """Each future with its first input, its last and how many: a newcomer's future that held
    `note` and `eval` was labelled by `note` alone."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two"), ("say", "note the plan\non two lines")])
    first = history.rewind(home, 1)
    run(home, fake, [("say", "again")])
    second = history.rewind(home, 1)
    rt = runtime(home, fake.url)
    try:
        futures = on_loop(rt, lambda: views.hub_state(rt))["abandoned"]
    finally:
        rt.stop()
    assert [(f["ref"], f["from_tick"], f["to_tick"], f["first_input"], f["last_input"], f["inputs"])
            for f in futures] == [(second.abandoned, 2, 1, "again", "again", 1),
                                  (first.abandoned, 3, 1, "plain two", "note the plan on two lines", 2)]
    assert futures[1]["commit"] == _git(home, "rev-parse", first.abandoned).strip()


def test_a_second_rewind_to_a_tick_names_the_future_the_first_left_there(tmp_path, fake):
    """Two rewinds to one tick: the first's `** Rewound` note went onto the second's future with
    the rest of the chat log after that tick, so agent-chat.org named only the newest future.
    The newest note names the earlier futures kept after its tick; one left before it, not."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two"), ("say", "three")])
    first = history.rewind(home, 2)
    run(home, fake, [("say", "again")])
    second = history.rewind(home, 2)
    chat = (home / "agent-chat.org").read_text()
    notes = chat.split("** Rewound\n")[1:]
    assert len(notes) == 1 and second.abandoned in notes[0], chat
    assert f"An earlier rewind left a future after this tick too: it is kept on git ref {first.abandoned}." in notes[0]
    # The two futures are after tick 1: they go onto the future a rewind to it leaves, the note
    # that names them too, and the next rewind to tick 1 names that future alone.
    third = history.rewind(home, 1)
    chat = (home / "agent-chat.org").read_text()
    assert third.abandoned in chat and "earlier rewind" not in chat.lower(), chat
    assert f"kept on git ref {first.abandoned}." in _git(home, "show", f"{third.abandoned}:agent-chat.org")
    run(home, fake, [("say", "once more")])
    fourth = history.rewind(home, 1)
    note = (home / "agent-chat.org").read_text().split("** Rewound\n")[-1]
    assert fourth.abandoned in note and f"it is kept on git ref {third.abandoned}." in note, note


def test_a_third_rewind_to_a_tick_names_the_two_futures_before_it_in_the_plural(tmp_path, fake):
    """A newcomer read "Earlier rewinds left futures after this tick too: it is kept on git ref X"
    (plural, then "it"): one earlier future is said in the singular, two or more in the plural."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two"), ("say", "three")])
    first = history.rewind(home, 2)
    run(home, fake, [("say", "again")])
    second = history.rewind(home, 2)
    run(home, fake, [("say", "and again")])
    third = history.rewind(home, 2)
    note = (home / "agent-chat.org").read_text().split("** Rewound\n")[-1]
    assert third.abandoned in note, note
    assert ("Earlier rewinds left futures after this tick too: they are kept on git refs "
            f"{first.abandoned}, {second.abandoned}.") in " ".join(note.split()), note


def test_a_rewinds_note_reads_the_newest_commits_of_the_line_a_page_at_a_time(tmp_path, fake, monkeypatch):
    """A rewind's note looks for the tick's own commit below the rewinds to it: it read the whole
    line of commits (20,000 at 20,000 ticks: 0.2 s a rewind).  Now a page at a time, and a page
    of one commit still finds it below a rewind commit."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two"), ("say", "three")])
    first = history.rewind(home, 2)
    run(home, fake, [("say", "again")])
    monkeypatch.setattr(history, "LOG_PAGE", 1, raising=False)
    pages: list[int] = []
    real_git = history._git

    def spy(where: Path, *args: str, **kw: Any) -> bytes:
        out = real_git(where, *args, **kw)
        if args[:2] == ("log", "--first-parent"):
            pages.append(len(out.splitlines()))
        return out

    monkeypatch.setattr(history, "_git", spy)
    second = history.rewind(home, 2)
    note = (home / "agent-chat.org").read_text().split("** Rewound\n")[-1]
    assert second.abandoned in note and f"it is kept on git ref {first.abandoned}." in note, note
    assert pages and max(pages) == 1, pages


def test_a_fork_says_what_it_is_a_fork_of_at_hello(tmp_path, fake):
    """A fork opened alone showed no home in its shell's header: the status at hello names the
    home and tick it was forked from (None for a home that is no fork), and a fork of the fork
    names its own parent."""
    home = tmp_path / "home"
    run(home, fake, FUTURE_SESSION[:2])
    fork = history.fork(home, 1, tmp_path / "fork").home
    for where, want in ((home, None), (fork, {"from": str(home.resolve()), "tick": 1,
                                              "commit": history.tick_commit(home, 1)})):
        rt = runtime(where, fake.url)
        try:
            assert views.status(rt)["fork"] == want
        finally:
            rt.stop()
    again = history.fork(fork, 1, tmp_path / "again").home
    assert history.fork_origin(again) == {"from": str(fork), "tick": 1, "commit": history.tick_commit(fork, 1)}


def test_a_fork_inside_its_home_is_refused_in_one_line(tmp_path, fake, capsys):
    """Was accepted, even under skills/: HOME's commits then took in the fork's memory.db and transcripts."""
    home = tmp_path / "home"
    run(home, fake, SESSION[:2])
    for dest in (home / "skills" / "f", home / "f", home):
        assert server_main(["fork", str(home), "--tick", "1", str(dest)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"is inside {home}; name a folder outside the home" in err, err
    assert not (home / "skills" / "f").exists() and not (home / "f").exists()


def test_a_folder_that_is_not_a_home_gets_no_lock_file(tmp_path, capsys):
    folder = tmp_path / "not-a-home"
    folder.mkdir()
    assert server_main(["rewind", str(folder), "--tick", "1"]) == 1
    assert "has no git history: is it an AMACS home?" in capsys.readouterr().err
    assert list(folder.iterdir()) == []


def test_a_fork_killed_while_made_leaves_no_dest_and_the_retry_clears_what_it_left(tmp_path, fake, capsys):
    """Was: a half-made DEST refused on retry with no hint, and a session started on it ran as a
    fresh agent or with missing or future memory.  Now the fork is made beside DEST and renamed
    whole: killed, there is no DEST; the folder it was made in is never served; the next fork
    into DEST removes it, in one line, and forks."""
    import os
    import sys

    from amacs_server.persistence.recovery import StartupError, check_home

    home, dest = tmp_path / "home", tmp_path / "f"
    run(home, fake, SESSION[:2])
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMACS_")}
    killed = subprocess.run([sys.executable, "-m", "amacs_server", "fork", str(home), "--tick", "1", str(dest)],
                            env={**env, "AMACS_FAULT_POINT": "fork.checked-out"}, capture_output=True, text=True,
                            timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not dest.exists()
    [left] = tmp_path.glob(".f.forking-*")
    with pytest.raises(StartupError, match="is a fork whose making was cut short"):
        check_home(left)
    assert server_main(["fork", str(home), "--tick", "1", str(dest)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"removed {left.name} beside {dest}: a fork into it that was cut short" in err
    assert not left.exists()
    check_home(dest)  # whole: served
    # A fork whose DEST was half made by an older AMACS is still named on retry.
    old = tmp_path / "old"
    old.mkdir()
    (old / ".fork-unfinished").write_text("a fork, being made\n")
    assert server_main(["fork", str(home), "--tick", "1", str(old)]) == 1
    assert f"{old} is a fork whose making was cut short; remove it (rm -r {old})" in capsys.readouterr().err


def test_a_rewind_moves_the_server_logs_later_lines_and_a_later_sessions_lines_of_no_tick(tmp_path, fake):
    """Were kept: logs/server.log's lines of the abandoned future, and a transcript line of no
    tick (a viewpoint made, a session's start) that a later session wrote before its first tick.
    Both move onto the abandoned ref; the lines written before the tick ended stay."""
    import logging

    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    handler = logging.FileHandler(home / "logs" / "server.log")  # the server's stderr, in its format
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        said = logging.getLogger("amacs.test")
        rt = runtime(home, fake.url)
        try:
            said.warning("logged in tick one's session")
            for text in ("one", "two"):
                do(rt, ("say", text))
            assert rt.mind.commits.flush(60)
            said.warning("logged after tick two, before the session ended")
        finally:
            rt.stop()
        rt = runtime(home, fake.url)  # a later session: a viewpoint made before its first tick
        try:
            later = rt.transcript.path
            do(rt, ("viewpoint", "critic"))
            said.warning("logged in the later session")
            do(rt, ("say", "three"))
            assert rt.mind.commits.flush(60)
        finally:
            rt.stop()
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
    assert '"agent_start"' in later.read_text() and '"tick": null' in later.read_text()
    done = history.rewind(home, 2)
    log_text = (home / "logs" / "server.log").read_text()
    assert "logged in tick one's session" in log_text
    assert "after tick two" not in log_text and "later session" not in log_text
    assert not later.exists()  # every line of it on the ref: no empty file left to pass for a run
    kept = _git(home, "show", f"{done.abandoned}:logs/server.log")
    assert "logged after tick two" in kept and "logged in the later session" in kept and "tick one's" not in kept
    assert '"agent_start"' in _git(home, "show", f"{done.abandoned}:transcripts/{later.name}")
    everything = b"".join(p.read_bytes() for p in (home / "transcripts").glob("*.jsonl"))
    assert b"viewpoint-critic" not in everything and b'"human": "three"' not in everything


class _Program:
    """A program whose stderr is a file of logs/, as the local model's (a descriptor opened for
    appending, held for its life): it prints each line it is given."""

    def __init__(self, log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import sys\nfor line in sys.stdin: sys.stderr.write(line); sys.stderr.flush()"],
                stdin=subprocess.PIPE, stderr=out, text=True)

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        _written(self.log, line)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def _written(log: Path, line: str) -> None:
    deadline = time.monotonic() + 10
    while (line + "\n").encode() not in (log.read_bytes() if log.exists() else b""):
        assert time.monotonic() < deadline, f"{line!r} never reached {log}"
        time.sleep(0.01)


def test_a_rewind_moves_every_logs_files_lines_written_after_the_tick(tmp_path, fake, monkeypatch):
    """Were kept: a tool server's stderr (logs/mcp-NAME.log, its rotation .1 included) and the
    local model's log, and any other file of logs/, held the lines of the abandoned future, and
    the files of tool results kept after the tick stayed.  A rewind to tick 1 moves the lines of
    ticks 2 and 3 onto the abandoned ref, the whole of a file begun after tick 1 too, and the
    later results; the lines the programs (still running) write after it stay.  A file begun
    after tick 1 is gone, but for one a running program of this process writes (the tool
    server's, whose lines a thread copies; the local model's, whose descriptor the server keeps
    while llama.cpp runs): emptied, it takes that program's next lines."""
    from amacs_server.local_model import LocalModel
    from amacs_server.scrub import Scrubber
    from amacs_server.tools_mcp import logs as mcp_logs

    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    program = _Program(home / "logs" / "program.log")
    tool = mcp_logs.StderrLog(home / "logs" / "mcp-fake.log", Scrubber({}))
    mcp = home / "logs" / "mcp-fake.log"
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).with_name("fake_llama")))  # llama.cpp's stand-in
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    local = LocalModel(Path(sys.executable), tmp_path / "m.gguf", home / "logs" / "local-model.log")
    rt = runtime(home, fake.url)
    try:
        for tick in (1, 2, 3):
            program.say(f"program line at tick {tick}")
            if tick == 3:  # this line rotates the tool server's log: ticks 1-2 go to mcp-fake.log.1
                monkeypatch.setattr(mcp_logs, "MAX_LOG", mcp.stat().st_size + 1)
            tool.say(f"tool line at tick {tick}")
            _written(mcp, f"tool line at tick {tick}")
            monkeypatch.setattr(mcp_logs, "MAX_LOG", 1 << 20)
            if tick == 2:
                (home / "logs" / "other.log").write_text("another program's line at tick 2\n")
                (home / "logs" / "empty.log").touch()  # a program's log it never wrote a line in
                local.start()  # the local model, started after tick 1
                local.wait_ready(20)
                _written(local.log_file, 'INFO: 127.0.0.1 - "GET /v1/models HTTP/1.1" 200 -')
            results = home / "transcripts" / "results"  # a tool's result too long for the agent, kept whole
            results.mkdir(parents=True, exist_ok=True)
            (results / f"r{tick}.txt").write_text(f"a long result at tick {tick}")
            do(rt, ("say", f"input {tick}"))
        assert rt.mind.commits.flush(60)
    finally:
        rt.stop()
    try:
        assert (home / "logs" / "mcp-fake.log.1").read_text() == "tool line at tick 1\ntool line at tick 2\n"
        asked = (home / "logs" / "local-model.log").read_text()
        done = history.rewind(home, 1)
        assert done.abandoned is not None
        logs = {p.name: p.read_text() for p in (home / "logs").iterdir()}
        assert logs == {"program.log": "program line at tick 1\n", "mcp-fake.log.1": "tool line at tick 1\n",
                        "mcp-fake.log": "", "local-model.log": ""}, logs
        moved = {name: _git(home, "show", f"{done.abandoned}:logs/{name}")
                 for name in ("program.log", "mcp-fake.log.1", "mcp-fake.log", "other.log", "local-model.log")}
        assert moved == {"program.log": "program line at tick 2\nprogram line at tick 3\n",
                         "mcp-fake.log.1": "tool line at tick 2\n", "mcp-fake.log": "tool line at tick 3\n",
                         "other.log": "another program's line at tick 2\n", "local-model.log": asked}, moved
        assert sorted(p.name for p in (home / "transcripts" / "results").iterdir()) == ["r1.txt"]
        assert _git(home, "show", f"{done.abandoned}:transcripts/results/r3.txt") == "a long result at tick 3"
        program.say("program line after the rewind")  # the programs write on, through the same descriptors
        tool.say("tool line after the rewind")
        _written(mcp, "tool line after the rewind")
        assert local.ready()
        _written(local.log_file, 'INFO: 127.0.0.1 - "GET /v1/models HTTP/1.1" 200 -')
    finally:
        local.stop()
        program.stop()
        tool.close()
    assert (home / "logs" / "program.log").read_text() == "program line at tick 1\nprogram line after the rewind\n"
    assert mcp.read_text() == "tool line after the rewind\n"
    fork = history.fork(home, 1, tmp_path / "fork").home  # a fork holds no log: its programs' start empty
    assert not (fork / "logs").exists()


class _KilledAt(Exception):
    pass


@pytest.mark.parametrize("rewritten", [False, True], ids=["appended", "rewritten-whole"])
def test_a_rewind_moves_the_shells_later_inputs_and_draft_onto_the_abandoned_ref(tmp_path, fake, monkeypatch,
                                                                                  rewritten):
    """Were kept: a rewind to tick 1 (to before input 2) left in shell-history (M-p) the inputs of
    the ticks it abandoned, and in shell-draft an unsent input saved after tick 1.  Now the history
    holds the entries written through tick 1's end, the draft is gone, and both later parts are on
    the abandoned ref; also when the history was rewritten whole since (Emacs's ring dropped its
    oldest entry).  Killed after the cut, the rewind done again changes nothing."""
    home = tmp_path / "home"
    hist, draft = home / "shell-history", home / "shell-draft"

    def entry(n: int) -> bytes:  # an input as Emacs writes it, longer than a mark's tail
        return f"{'words ' * 12}of input {n}".encode() + b"\0\n"

    rt = runtime(home, fake.url)
    try:
        hist.parent.mkdir(parents=True, exist_ok=True)
        hist.write_bytes(entry(0))  # an input of an earlier session
        for tick in (1, 2, 3):  # Emacs appends an input to the history as it sends it
            with hist.open("ab") as fh:
                fh.write(entry(tick))
            if tick == 1:
                draft.write_text("typed at tick 1, not sent")
            if tick == 2:  # the person typed on after tick 1 ended
                draft.write_text("typed after tick 1, not sent")
            if tick == 3 and rewritten:  # the ring was full: its oldest entry left it, the file written whole
                hist.write_bytes(entry(1) + entry(2) + entry(3))
            do(rt, ("say", f"input {tick}"))
        assert rt.mind.commits.flush(60)
    finally:
        rt.stop()
    real_point = history.faults.point

    def killed_after_the_cut(name: str) -> None:
        real_point(name)
        if name == "rewind.removed":
            raise _KilledAt(name)

    monkeypatch.setattr(history.faults, "point", killed_after_the_cut)
    with pytest.raises(_KilledAt):
        history.rewind(home, 1)
    monkeypatch.setattr(history.faults, "point", real_point)
    journal = json.loads((home / history.REWIND_JOURNAL).read_text())
    first = (hist.read_bytes(), draft.exists())
    assert history.finish_unfinished(home) is not None  # the cut and the removal done again
    assert (hist.read_bytes(), draft.exists()) == first
    # rewritten: tick 1's entries end where the mark's bytes are found; input 0 had left the ring
    assert hist.read_bytes() == (entry(1) if rewritten else entry(0) + entry(1))
    assert not draft.exists(), "the unsent input saved after tick 1 stays only on the ref"
    ref = journal["ref"]
    moved = subprocess.run(["git", "-C", str(home), "cat-file", "blob", f"{ref}:shell-history"],
                           capture_output=True, check=True).stdout
    assert moved == entry(2) + entry(3)
    assert _git(home, "show", f"{ref}:shell-draft") == "typed after tick 1, not sent"
    # The abandoned future's log (the hub's) shows the inputs abandoned as text, not "Bin".
    stat = _git(home, "log", "--stat", "--format=", f"HEAD..{ref}")
    assert re.search(r"shell-history +\| +2 \+\+\n", stat) and "Bin" not in stat, stat
    # Its patch shows each input on a line of its own, without the NUL (^@) that ends it in the file.
    patch = _git(home, "log", "-p", "--format=", f"HEAD..{ref}", "--", "shell-history")
    assert "\0" not in patch and f"\n+{'words ' * 12}of input 3\n" in patch, patch


def test_a_rewind_to_a_tick_before_the_history_began_moves_it_whole(tmp_path, fake):
    """A history and a draft first written after the tick go whole onto the ref, and are gone."""
    home = tmp_path / "home"
    rt = runtime(home, fake.url)
    try:
        do(rt, ("say", "input 1"))
        (home / "shell-history").write_bytes(b"input 2\0\n")
        (home / "shell-draft").write_text("a draft")
        do(rt, ("say", "input 2"))
        assert rt.mind.commits.flush(60)
    finally:
        rt.stop()
    done = history.rewind(home, 1)
    assert not (home / "shell-history").exists() and not (home / "shell-draft").exists()
    assert _git(home, "show", f"{done.abandoned}:shell-history") == "input 2\0\n"
    assert _git(home, "show", f"{done.abandoned}:shell-draft") == "a draft"


LOG_OPS = st.lists(st.tuples(st.sampled_from(["append", "rotate", "begin"]), st.sampled_from(["a.log", "b.log"]),
                             st.binary(min_size=1, max_size=80)), max_size=3)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ticks=st.lists(LOG_OPS, min_size=2, max_size=5), cut=st.integers(min_value=0, max_value=3))
def test_property_a_rewind_leaves_each_log_as_its_tick_left_it(tmp_path_factory, fake, ticks, cut):
    """Programs append to logs, rotate them (NAME to NAME.1, a new NAME) and begin others at random
    ticks; a rewind to a random tick N (no program running) leaves in logs/ only files this test
    recorded at N's end, each with its name and bytes then: all of them, but for what a program
    threw away after N (a NAME.1 a rotation wrote over; NAME's bytes of before a second
    rotation); and every byte it took from a file is on the abandoned ref, after what it kept."""
    home = tmp_path_factory.mktemp("logs-prop") / "home"
    logs = home / "logs"
    logs.mkdir(parents=True)
    recorded: list[dict[str, bytes]] = []
    rotations: list[tuple[int, str]] = []
    rt = runtime(home, fake.url)
    try:
        for number, ops in enumerate(ticks, 1):
            for what, name, data in ops:
                path = logs / (f"begun-{number}-{name}" if what == "begin" else name)
                if what == "rotate" and path.exists():
                    os.replace(path, path.with_name(name + ".1"))
                    rotations.append((number, name))
                with path.open("ab") as fh:
                    fh.write(data)
            do(rt, ("say", f"input {number}"))
            recorded.append({p.name: p.read_bytes() for p in logs.iterdir()})
        assert rt.mind.commits.flush(60)
    finally:
        rt.stop()
    tick = 1 + cut % (len(ticks) - 1)
    at_n = recorded[tick - 1]
    whole = {p.name: p.read_bytes() for p in logs.iterdir()}
    done = history.rewind(home, tick)
    after = {p.name: p.read_bytes() for p in logs.iterdir()}
    assert all(at_n.get(name) == data for name, data in after.items()), (tick, at_n, after)
    for name, data in at_n.items():
        base = name.removesuffix(".1")
        rotated = sum(1 for number, rotated_name in rotations if number > tick and rotated_name == base)
        if rotated == 0 or (rotated == 1 and name == base):
            assert after.get(name) == data, (tick, name, at_n, after)
    listed = subprocess.run(["git", "ls-tree", "--name-only", f"{done.abandoned}:logs"], cwd=home,
                            capture_output=True, text=True).stdout.split()
    for name, data in whole.items():
        moved = subprocess.run(["git", "cat-file", "blob", f"{done.abandoned}:logs/{name}"], cwd=home,
                               capture_output=True, check=True).stdout if name in listed else b""
        assert data.endswith(moved), name
        kept = data[:len(data) - len(moved)]
        assert kept == b"" or kept in (after.get(name), after.get(name.removesuffix(".1"))), (name, kept, after)


def test_a_rewind_refuses_a_damaged_home_in_one_line_before_changing_anything(tmp_path, fake, capsys):
    """Were: "file is not a database" after the files were rewound (memory.db); a bad ref name and
    a stray ``[TICK ?][abandoned]`` commit per try (tick-state.json); a traceback (a held
    index.lock).  Each is now one line, and the home (files, refs, reflog) is as it was."""
    import sys

    home = tmp_path / "home"
    run(home, fake, FUTURE_SESSION[:3])

    def looks() -> tuple[bytes, str, str]:
        files = b"".join(p.read_bytes() for p in history.tracked(home) if p.exists())
        return files, _git(home, "for-each-ref"), _git(home, "reflog", "--all")

    was = looks()
    good = (home / "memory.db").read_bytes()
    (home / "memory.db").write_bytes(b"not a database at all" * 300)
    assert server_main(["rewind", str(home), "--tick", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "memory.db is damaged" in err and "nothing was changed" in err, err
    assert looks() == was
    assert server_main(["fork", str(home), "--tick", "1", str(tmp_path / "f")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "memory.db is damaged" in err and "then fork again" in err, err
    assert list(tmp_path.iterdir()) == [home]  # no DEST, nothing left beside it
    (home / "memory.db").write_bytes(good)
    state = (home / history.STATE_FILE).read_bytes()
    (home / history.STATE_FILE).write_text("{ not json")
    for _ in range(2):
        assert server_main(["rewind", str(home), "--tick", "1"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "tick-state.json is damaged" in err and "nothing was changed" in err, err
    (home / history.STATE_FILE).write_bytes(state)
    assert looks() == was  # no stray commit
    # index.lock held by a live git (the person's, mid-command)
    holder = subprocess.Popen(["git", "update-index", "--add", "--stdin"], cwd=home, stdin=subprocess.PIPE)
    try:
        lock = home / ".git" / "index.lock"
        for _ in range(200):
            if lock.exists():
                break
            threading.Event().wait(0.02)
        assert lock.exists()
        done = subprocess.run([sys.executable, "-m", "amacs_server", "rewind", str(home), "--tick", "1"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "git is busy" in done.stderr and "index.lock" in done.stderr and "nothing was changed" in done.stderr
        assert "Traceback" not in done.stderr
    finally:
        holder.kill()
        holder.wait()
    (home / ".git" / "index.lock").unlink(missing_ok=True)
    assert looks() == was
    assert server_main(["rewind", str(home), "--tick", "1"]) == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.tuples(st.sampled_from([0, 1, 1, 2]), st.booleans(), st.sampled_from([0, 300, 30_000, 90_000]),
                                st.floats(0, 4.9)), min_size=1, max_size=40),
       cut=st.integers(0, 40), late=st.floats(0, 0.99))
def test_a_transcripts_future_is_found_reading_its_end_where_a_whole_read_finds_it(tmp_path, lines, cut, late):
    """A rewind finds where a transcript's lines after the tick start from the file's end (a few
    reads of a file of any length): the same place, and the same lines, as reading it whole line
    by line.  The lines as a session writes them: ticks that never go back, lines of no tick (a
    session's start, a subagent's message) among them, some a whole request long, stamped in
    order to within seconds; the tick ended after its last line and before the next tick's first."""
    path = tmp_path / "t.jsonl"
    tick, ts, rows, stamps = 0, 1000.0, [], []  # stamped 10 s apart, a line of no tick up to 4.9 s early
    for step, no_tick, pad, jitter in lines:
        tick, ts = tick + step, ts + 10
        stamps.append((tick, no_tick, ts))
        rows.append(json.dumps({"seq": len(rows), "ts": ts - (jitter if no_tick else 0), "event": "e",
                                "tick": None if no_tick else tick, "data": {"text": "x" * pad}}) + "\n")
    data = "".join(rows).encode()
    path.write_bytes(data)
    last = max([at for t, no, at in stamps if t <= cut and not no], default=1000.0)
    nxt = min([at for t, no, at in stamps if t > cut and not no], default=last + 30)
    for ended in (None, last + late * (nxt - last)):
        whole = history._future_of_transcript(data, cut, ended)
        parsed = [json.loads(row) for row in rows]  # the rule, read off the rows as written
        first = next((i for i, row in enumerate(parsed) if (row["tick"] is not None and row["tick"] > cut) or
                      (row["tick"] is None and ended is not None and row["ts"] > ended)), None)
        assert whole == (None if first is None else len("".join(rows[:first]).encode()))
        assert history._transcript_future(path, cut, ended) == (None if whole is None else (whole, data[whole:]))


# A process that rewinds a copy of a home and forks it, again and again, a hangup only noted as a
# stopping server notes it.
HANGUP_REWINDER = """
import json, shutil, signal, sys, time
from pathlib import Path
from amacs_server.persistence import history
signal.signal(signal.SIGHUP, lambda *_: None)
home, work = Path(sys.argv[1]), Path(sys.argv[2])
made, failed = 0, []
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    copy, fork = work / "copy", work / "fork"
    try:
        shutil.copytree(home, copy)
        history.rewind(copy, 1)
        history.fork(home, 2, fork)
        made += 1
    except Exception as err:
        failed.append(repr(err))
    for folder in work.iterdir():  # the copy, the fork, a fork cut short
        shutil.rmtree(folder)
print(json.dumps({"made": made, "failed": failed}), flush=True)
"""


def test_a_hangup_to_the_servers_group_during_a_rewind_or_fork_kills_none_of_its_gits(tmp_path, fake):
    """Was: a rewind's and a fork's gits ran in the server's process group, so the hangup Emacs
    sends that group when it quits killed the git at work ("git read-tree failed in ...: ") and cut
    the rewind short (the next start finished it).  Here hangups come every 2 ms to the group of a
    process that rewinds and forks: every rewind and fork is made."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "note the plan"), ("say", "and then")])
    work = tmp_path / "work"
    work.mkdir()
    sent, result = hang_up_on(HANGUP_REWINDER, str(home), str(work), "3")
    assert sent > 100, sent
    assert result["failed"] == [], f"{len(result['failed'])} of {result['made'] + len(result['failed'])} failed: " \
        f"{result['failed'][:3]}"
    assert result["made"] >= 2


def test_a_home_made_before_the_inputs_diff_driver_gets_it_at_its_next_start(tmp_path, fake):
    """Homes made earlier mark shell-history "diff" alone, whose patches showed a NUL (^@) ending each
    input: their next server names the driver that leaves it out, and sets it in the home's config."""
    from amacs_server.persistence.git_repo import ATTRIBUTES

    home = tmp_path / "home"
    for step in ("first", "again"):
        rt = runtime(home, fake.url)
        try:
            do(rt, ("say", f"input at the {step} start"))
            assert rt.mind.commits.flush(60)
        finally:
            rt.stop()
        if step == "first":
            (home / ".git" / "info" / "attributes").write_text("shell-history diff\n")
            subprocess.run(["git", "-C", str(home), "config", "--local", "--remove-section", "diff.amacs-inputs"],
                           check=True)
    assert (home / ".git" / "info" / "attributes").read_text() == ATTRIBUTES
    assert _git(home, "config", "--local", "diff.amacs-inputs.textconv").strip() == "tr -d '\\000' <"


def test_a_rewind_made_from_a_script_is_said_once_at_the_next_start(tmp_path, fake):
    """A newcomer's finding: after `amacs-server rewind HOME --tick N` with no Emacs running,
    the next shell resumed at the older tick and the newest inputs just vanished, unexplained.
    The next server's start says it once (its hello's notice); the start after that, not.  A
    rewind the server makes itself is said in the shell as it is made, not again."""
    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "plain two"), ("say", "three")])
    assert server_main(["rewind", str(home), "--tick", "1"]) == 0
    ref = history.abandoned_futures(home)[0]["ref"]
    rt = runtime(home, fake.url)
    try:
        notes = [n for n in rt.startup_notes if "rewound" in n]
        assert len(notes) == 1 and notes[0].startswith("This home was rewound to tick 1 from tick 3 on "), notes
        assert notes[0].endswith(f"(amacs-server rewind): the inputs after it are kept with the abandoned future, "
                                 f"on git ref {ref}."), notes
        assert asyncio.run_coroutine_threadsafe(rt.rewind(1), rt.loop).result(60)["ref"]
    finally:
        rt.stop()
    rt = runtime(home, fake.url)
    try:
        assert not [n for n in rt.startup_notes if "rewound" in n], rt.startup_notes
    finally:
        rt.stop()
