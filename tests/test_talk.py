"""TalkIds, the event bus and waits (memid spec Phases 3-4, 6; unit test 5)."""

import asyncio

import pytest

from amacs_server.agents.talk import Event, EventBus, EventType, Overloaded, TalkIds


def test_talk_ids_are_monotonic_wrap_and_never_zero():
    ids = TalkIds(limit=5)
    assert [ids.next() for _ in range(12)] == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2]
    big = TalkIds(start=2**31 - 2)
    assert [big.next(), big.next(), big.next()] == [2**31 - 1, 1, 2]


def test_full_queue_refuses_at_once():
    async def run():
        bus = EventBus(size=2)
        bus.post("a", Event(EventType.USER, "user", "x"))
        bus.post("a", Event(EventType.USER, "user", "y"))
        with pytest.raises(Overloaded, match="event queue of a is full"):
            bus.post("a", Event(EventType.USER, "user", "z"))
        assert [e.content for e in bus.drain("a")] == ["x", "y"]
        assert bus.drain("a") == []  # clear on consume
        bus.post("a", Event(EventType.USER, "user", "again"))

    asyncio.run(run())


def test_wait_wakes_on_all_replies_and_times_out():
    async def run():
        bus = EventBus()
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, bus.post, "a", Event(EventType.AGENT, "b", "one", talk_id=1))
        loop.call_later(0.10, bus.post, "a", Event(EventType.AGENT, "c", "two", talk_id=2))
        started = loop.time()
        assert await bus.wait_for("a", frozenset({1, 2}), 5)
        assert 0.09 < loop.time() - started < 1  # woke on the second reply, not before
        assert not await bus.wait_for("a", frozenset({3}), 0.05)  # nobody answers talk 3

    asyncio.run(run())


def test_a_full_queue_refuses_new_work_and_loses_no_result(tmp_path):
    """Results are reserved at spawn: the 4th task of a queue of 3 is refused at once, and
    all 3 results arrive even though nothing consumed them in between."""
    from amacs_server.agents.kinds import PRIMARY
    from amacs_server.config import load_config
    from amacs_server.runtime import Runtime
    from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
    from tests.test_memory import SilentFace

    fake = FakeAnthropic(default=lambda _b: Reply(agent_json("r"), delay=0.05)).start()
    rt = Runtime(load_config({"AMACS_HOME": str(tmp_path / "h"), "ANTHROPIC_API_KEY": "k",
                              "ANTHROPIC_BASE_URL": fake.url, "AMACS_EVENT_QUEUE": "3"}), SilentFace())
    rt.turns.wake = lambda: None  # keep the primary asleep: nothing drains its queue

    async def run():
        for i in range(3):
            rt.world.task(PRIMARY, None, "researcher", f"q{i}")
        with pytest.raises(Overloaded, match="event queue of primary is full"):
            rt.world.task(PRIMARY, None, "researcher", "q3")
        while rt.world.tasks_live:
            await asyncio.sleep(0.01)
        return rt.world.bus.drain(PRIMARY)

    try:
        events = asyncio.run(run())
    finally:
        fake.stop()
        rt.mind.ltm.close()
    assert sorted(e.content["reply"] for e in events) == ["r", "r", "r"]


def test_an_answer_to_a_gone_agent_becomes_a_new_turn(tmp_path):
    """Nothing the person types is lost: if the agent that asked is gone, the input is a turn."""
    from tests.test_memory import silent_runtime

    rt = silent_runtime(tmp_path / "h")

    async def run():
        rt.turns._inbox = asyncio.Queue()
        rt.turns.expect_user_reply("task-9", 1)  # no such agent (any more)
        rt.turns._route_input("my answer")
        assert rt.turns._inbox.get_nowait() == "my answer"
        rt.turns.expect_user_reply("primary", 4)
        rt.turns._route_input("for the primary")
        events = rt.world.bus.drain("primary")
        assert [(e.content, e.talk_id) for e in events] == [("for the primary", 4)]
        assert rt.turns._inbox.get_nowait() is None  # and the primary is woken for it

    _run_world(rt, run)


# Issue 11: every delivery respects its bound and says so; ended agents free their queues;
# templates choose their actions and model; any agent can talk to the primary; notify.

def _runtime(tmp_path, fake=None, **env):
    from amacs_server.config import load_config
    from amacs_server.runtime import Runtime
    from tests.test_memory import SilentFace

    cfg = {"AMACS_HOME": str(tmp_path / "h"), "ANTHROPIC_API_KEY": "k", **env}
    if fake is not None:
        cfg["ANTHROPIC_BASE_URL"] = fake.url
    from amacs_server.loop.primary import run_turn

    rt = Runtime(load_config(cfg), SilentFace(), turn=run_turn)
    rt.turns.wake = lambda: None
    return rt


def _run_world(rt, run, fake=None):
    """Run RUN (a coroutine function driving RT's World) to its end; then stop FAKE and close RT's memory."""
    try:
        asyncio.run(run())
    finally:
        if fake is not None:
            fake.stop()
        rt.mind.ltm.close()


def _run_researchers(rt, fake, questions):
    """Ask a researcher task each of QUESTIONS for the primary, at once; return when all have
    ended; then stop FAKE and close RT's memory."""
    from amacs_server.agents.kinds import PRIMARY

    async def run():
        for question in questions:
            rt.world.task(PRIMARY, None, "researcher", question)
        while rt.world.tasks_live:
            await asyncio.sleep(0.01)

    _run_world(rt, run, fake)


def _finished_task(rt, template):
    """Run one task of TEMPLATE for the primary to its end; return its handle."""
    from amacs_server.agents.kinds import PRIMARY

    async def run():
        handle = rt.world.task(PRIMARY, None, template, "q")["handle"]
        while rt.world.tasks_live:
            await asyncio.sleep(0.01)
        return handle

    return asyncio.run(run())


def test_talk_log_on_a_full_queue_is_an_overload_error_to_the_sender(tmp_path):
    from amacs_server.agents.kinds import PRIMARY

    rt = _runtime(tmp_path, AMACS_EVENT_QUEUE="2")

    async def run():
        rt.world.talk_log(PRIMARY, None, "one")
        rt.world.talk_log(PRIMARY, None, "two")
        with pytest.raises(Overloaded, match="event queue of primary is full"):
            rt.world.talk_log(PRIMARY, None, "three")
        assert [e.content["logged"] for e in rt.world.bus.drain(PRIMARY)] == ["one", "two"]

    _run_world(rt, run)


def test_a_finished_task_frees_its_queue_and_bookkeeping(tmp_path):
    from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

    fake = FakeAnthropic(default=lambda _b: Reply(agent_json("r"))).start()
    rt = _runtime(tmp_path, fake)
    try:
        handle = _finished_task(rt, "researcher")
    finally:
        fake.stop()
        rt.mind.ltm.close()
    world = rt.world
    assert world.agents[handle].state == "done"  # its summary stays, for the hub
    assert handle not in world.bus._events and handle not in world.post._talk_ids and handle not in world.post._outstanding


def test_a_template_chooses_its_allowed_actions_and_model(tmp_path):
    from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

    skill = tmp_path / "h" / "skills" / "narrow"
    skill.mkdir(parents=True)
    skill.joinpath("SKILL.md").write_text("---\nname: narrow\ndescription: talks only\nkind: task\n"
                                          "allowed: talk\nmodel: claude-tiny-1\n---\nYou only talk.\n")
    fake = FakeAnthropic(default=lambda _b: Reply(agent_json("ok"))).start()
    rt = _runtime(tmp_path, fake)
    try:
        handle = _finished_task(rt, "narrow")
    finally:
        fake.stop()
        rt.mind.ltm.close()
    assert rt.world.agents[handle].allowed == frozenset({"talk"})
    assert fake.requests[0]["body"]["model"] == "claude-tiny-1"


def test_a_subagent_can_talk_to_the_primary_and_notify_reaches_viewpoints(tmp_path):
    from amacs_server.agents.kinds import PRIMARY

    rt = _runtime(tmp_path)

    async def run():
        rt.world.viewpoint(PRIMARY, "optimist", "debater")
        task = rt.world._new_agent(PRIMARY, "task", "researcher")
        said = rt.world.talk_agent(task.id, None, PRIMARY, "I need a file name")
        events = rt.world.bus.drain(PRIMARY)
        assert [(e.source, e.content, e.talk_id) for e in events] == [
            (task.id, {"message": "I need a file name", "from_talk_id": said["talk_id"]}, None)]
        assert rt.world.notify(PRIMARY, "the deadline moved to Monday") == {"notified": ["optimist"]}
        return [{"role": m["role"], "content": m["content"]} for m in rt.world.agents["viewpoint-optimist"].messages]

    try:
        messages = asyncio.run(run())
    finally:
        rt.mind.ltm.close()
    assert messages == [{"role": "user", "content": "[primary] the deadline moved to Monday"}]


def test_an_agent_controls_only_its_own_subagents(tmp_path):
    from amacs_server.agents.agent import AgentError
    from amacs_server.agents.kinds import PRIMARY

    rt = _runtime(tmp_path)

    async def run():
        outer = rt.world._new_agent(PRIMARY, "task", "researcher")
        inner = rt.world._new_agent(outer.id, "task", "researcher")
        other = rt.world._new_agent(PRIMARY, "task", "researcher")
        with pytest.raises(AgentError, match=f"{other.id} may control only its own subagents, not {inner.id}"):
            rt.world.control(other.id, "pause", inner.id)
        assert rt.world.control(outer.id, "pause", inner.id) == {"paused": inner.id}
        assert rt.world.agents[inner.id].summary()["state"] == "paused"
        assert rt.world.control(PRIMARY, "resume", inner.id) == {"resumed": inner.id}
        rt.world.control(PRIMARY, "cancel", outer.id)
        return outer, inner, other

    try:
        outer, inner, other = asyncio.run(run())
    finally:
        rt.mind.ltm.close()
    assert (outer.state, inner.state, other.state) == ("cancelled", "cancelled", "idle")


def test_the_primarys_inbox_is_bounded_with_a_clear_refusal(tmp_path):
    """While a turn runs, inputs wait; past AMACS_INBOX_LIMIT the next is refused with the reason."""
    import threading
    import time

    from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

    hold = threading.Event()
    fake = FakeAnthropic(default=lambda _b: Reply(agent_json("ok"), hold=hold)).start()
    rt = _runtime(tmp_path, fake, AMACS_INBOX_LIMIT="2")
    rt.start()
    try:
        rt.turns.submit("a")  # taken at once: its turn waits on the model
        deadline = time.monotonic() + 10
        while not fake.requests:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        rt.turns.submit("b")
        rt.turns.submit("c")
        time.sleep(0.1)
        with pytest.raises(ValueError, match="2 inputs already wait for the agent"):
            rt.turns.submit("d")
    finally:
        hold.set()
        rt.stop(grace=2)
        fake.stop()


def test_the_person_talking_to_an_agent_at_work_is_answered_after_its_response(tmp_path):
    """Found by trying it: the message was queued as an event and lost when the task ended."""
    from amacs_server.agents.agent import AgentError
    from amacs_server.agents.kinds import PRIMARY
    from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

    def answer(body):
        last = body["messages"][-1]["content"]
        text = last if isinstance(last, str) else last[-1]["text"]
        return Reply(agent_json("Yes, nearly done." if "[person]" in text else "the result"), delay=0.2)

    fake = FakeAnthropic(default=answer).start()
    rt = _runtime(tmp_path, fake)
    said = []
    rt.face.reply = lambda text, streamed=False: said.append(text)

    async def run():
        handle = rt.world.task(PRIMARY, None, "researcher", "q")["handle"]
        await asyncio.sleep(0.05)  # its model call is under way
        assert rt.world.person_talk(handle, "are you done?") == {"to": handle, "queued": True, "paused": False}
        while rt.world.tasks_live or len(fake.requests) < 2 or not said:
            await asyncio.sleep(0.02)
        with pytest.raises(AgentError, match=f"{handle} has already ended \\(done\\)"):
            rt.world.control(PRIMARY, "pause", handle)
        return handle

    try:
        handle = asyncio.run(run())
    finally:
        fake.stop()
        rt.mind.ltm.close()
    assert said == [f"[{handle}] Yes, nearly done."]
    assert rt.world.agents[handle].state == "done"  # answering the person did not reopen it


def test_the_runtime_imports_no_loop_module():
    """Issue 11: the runtime owns state and the inbox; the loop's turn runner is handed to it."""
    import ast
    from pathlib import Path

    import amacs_server.runtime as runtime

    tree = ast.parse(Path(runtime.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert "loop.primary" not in imported and "agents.loop" not in imported


def test_ended_agents_neither_count_nor_watch(tmp_path):
    """The World's indexes (issue 11, the pool bound: no scan of every agent per model call):
    an agent that ended frees its place under AMACS_MAX_AGENTS, and a compulsion that quit
    or failed is no longer consulted; a live one is, for the agent it is attached to only."""
    from amacs_server.agents.kinds import PRIMARY, AgentState
    from amacs_server.config import load_config
    from amacs_server.runtime import Runtime
    from tests.test_memory import SilentFace

    rt = Runtime(load_config({"AMACS_HOME": str(tmp_path / "h"), "ANTHROPIC_API_KEY": "k",
                              "AMACS_MAX_AGENTS": "2"}), SilentFace())
    try:
        world = rt.world
        first = world.viewpoint(PRIMARY, "one", "debater")["handle"]
        watcher = world.compulsion(PRIMARY, "spawn-limiter", None)["handle"]
        with pytest.raises(Overloaded, match="2 agents are live"):
            world.viewpoint(PRIMARY, "two", "debater")
        assert [a.id for a in world.compulsions_of(PRIMARY)] == [watcher]
        assert world.compulsions_of(first) == []
        world.discard(PRIMARY, "one")
        world.viewpoint(PRIMARY, "two", "debater")  # the discarded one's place
        world.agents[watcher].state = AgentState.FAILED
        assert world.compulsions_of(PRIMARY) == []
        world.viewpoint(PRIMARY, "three", "debater")  # the failed compulsion's place too
    finally:
        rt.mind.ltm.close()


def test_a_compulsion_obeys_neither_the_agent_it_watches_nor_its_ancestors(tmp_path):
    """A task's own compulsion: the task (watched) and the primary (its ancestor) are refused cancel,
    pause and resume; the person is refused until confirmed, then it is cancelled and says by whom."""
    import json

    from amacs_server.agents.agent import AgentError
    from amacs_server.agents.kinds import PRIMARY
    from amacs_server.methods import NotYours, person_power
    from amacs_server.transport.server import CALL_CONTEXT

    rt = _runtime(tmp_path)

    async def run():
        task = rt.world._new_agent(PRIMARY, "task", "researcher", allowed=["eval", "compulsion"])
        comp = rt.world._new_agent(task.id, "compulsion", "spawn-limiter")
        for caller in (task.id, PRIMARY):
            for action in ("cancel", "pause", "resume"):
                with pytest.raises(AgentError, match=f"is a compulsion watching {task.id}: it obeys no agent"):
                    rt.world.control(caller, action, comp.id)
        assert comp.state == "idle" and comp.resumed.is_set()
        # Nor by the person's road: the hub's method, called while the task's or the primary's eval
        # runs, is refused by the server (docs/ARCHITECTURE.md, Trust), confirmed or not.
        hub = person_power(rt, "person_agent_control", rt.world.person_control)
        for caller in (task.id, PRIMARY):
            token = CALL_CONTEXT.set(((7, caller),))
            try:
                with pytest.raises(NotYours, match=f"person_agent_control acts for the person, and {caller}'s eval"):
                    hub("cancel", comp.id, True, {"origin": "eval", "agent": caller})
                with pytest.raises(NotYours, match=f"and {caller}'s eval called it"):
                    hub("pause", comp.id, True)  # past Emacs's own functions: no origin at all
            finally:
                CALL_CONTEXT.reset(token)
        assert comp.state == "idle" and comp.resumed.is_set()
        with pytest.raises(AgentError, match="confirm to cancel it anyway"):
            rt.world.person_control("cancel", comp.id)
        assert rt.world.person_control("cancel", comp.id, confirmed=True) == {"cancelled": [comp.id]}
        return task, comp

    try:
        task, comp = asyncio.run(run())
    finally:
        rt.mind.ltm.close()
    assert (task.state, comp.state) == ("idle", "cancelled")
    rows = [json.loads(x) for f in (tmp_path / "h" / "transcripts").glob("*.jsonl") for x in f.read_text().splitlines()]
    mine = [(r["event"], r["data"]) for r in rows if r["agent_id"] == comp.id and r["event"] != "agent_start"]
    assert mine[-1] == ("cancelled", {"reason": "cancelled by the person (hub)"})
    assert [d["by"] for e, d in mine if e == "control_refused"] == [task.id] * 3 + [PRIMARY] * 3
    theirs = [(r["agent_id"], r["data"]["method"]) for r in rows if r["event"] == "control_refused"
              and r["data"].get("person_only")]
    assert theirs == [(task.id, "person_agent_control")] * 2 + [(PRIMARY, "person_agent_control")] * 2


def test_answers_that_come_together_let_the_waiting_calls_go_first_then_go_on_one_per_turn():
    # Five subagents' calls hold the pool; four are answered in the same turn of the loop, five
    # more calls wait for their slots.  Each answer frees its slot, then waits for its turn (answer_turn) before
    # it is taken further.  The four waiting calls must all be sent before any answer goes on;
    # then one answer per turn: a call whose slot is freed while the first answer goes on is sent
    # before the second goes on.  (With a single yield, each answer went on right after its own
    # waiter was sent: sent, taken, sent, taken ...)
    import asyncio

    from amacs_server.inference.model_call import answer_turn

    order: list[str] = []

    async def go() -> None:
        pool, lane, answers = asyncio.Semaphore(5), asyncio.Lock(), asyncio.Event()
        late = asyncio.Event()

        async def answered(i: int, came: asyncio.Event) -> None:
            await pool.acquire()
            await came.wait()
            pool.release()  # the slot is free: a waiting call may take it
            await answer_turn(lane)
            order.append(f"taken {i}")
            if i == 1:
                late.set()  # an answer that comes in while the first goes on

        async def waiting(i: int) -> None:
            async with pool:
                order.append(f"sent {i}")
                await asyncio.sleep(0.05)

        first = [asyncio.create_task(answered(i, answers)) for i in range(1, 5)]
        fifth = asyncio.create_task(answered(5, late))
        await asyncio.sleep(0)  # the five hold the pool
        behind = [asyncio.create_task(waiting(i)) for i in range(6, 11)]
        await asyncio.sleep(0)
        answers.set()
        await asyncio.gather(*first, fifth, *behind)

    asyncio.run(go())
    taken = [order.index(f"taken {i}") for i in range(1, 6)]
    assert all(order.index(f"sent {i}") < taken[0] for i in range(6, 10)), order
    assert order.index("sent 10") < taken[1], order  # the late answer's waiter before the second goes on


def test_what_a_task_is_told_is_in_long_term_memory_before_the_model_reads_it(tmp_path):
    # A subagent's message item is committed with the others told in the same turn of the loop
    # (LongTermMemory.put, soon): it must still be in the database, as another process reads it,
    # by the time its request reaches the model, for every task of a burst.
    import re
    import sqlite3

    from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

    seen: dict[str, bool] = {}

    def answer(body):
        asked = re.search(r"question number \d+", body["messages"][0]["content"])[0]
        db = sqlite3.connect(tmp_path / "h" / "memory.db")  # committed rows only
        try:
            seen[asked] = db.execute("SELECT 1 FROM items_text WHERE text LIKE ?", (f"%{asked}%",)).fetchone() is not None
        finally:
            db.close()
        return Reply(agent_json("r"), delay=0.01)

    fake = FakeAnthropic(default=answer).start()
    rt = _runtime(tmp_path, fake, AMACS_AGENT_POOL="4")

    _run_researchers(rt, fake, [f"question number {i}" for i in range(12)])
    assert seen == {f"question number {i}": True for i in range(12)}, seen


def test_a_call_that_will_wait_for_the_pool_makes_its_request_after_the_sending_of_the_calls_under_way(tmp_path):
    # aiohttp writes a request's body from a task it makes as the request is sent: work queued
    # in that turn of the loop.  A task that will wait for a slot must make its request after it,
    # not in the same turn (200 tasks at once: the first calls' bodies waited for 199 requests).
    from amacs_server.inference import request as subagent  # where RequestSpec builds a request
    from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

    order: list[str] = []
    fake = FakeAnthropic(default=lambda _b: Reply(agent_json("r"), delay=0.01)).start()
    rt = _runtime(tmp_path, fake, AMACS_AGENT_POOL="1")
    answer, build = rt.slot.backend.answer, subagent.build_request

    def sending(request, **kwargs):
        order.append("sent")
        asyncio.get_running_loop().call_soon(order.append, "sending queued by the call")
        return answer(request, **kwargs)

    def building(*args, **kwargs):
        order.append("request made")
        return build(*args, **kwargs)

    rt.slot.backend.answer = sending
    subagent.build_request = building

    try:
        _run_researchers(rt, fake, ["q0", "q1"])
    finally:
        subagent.build_request = build
    assert order[:4] == ["request made", "sent", "sending queued by the call", "request made"], order


def test_a_subagent_answer_cut_at_its_length_limit_is_asked_again_without_the_cut_text(tmp_path):
    """The one parse policy: a subagent's answer that stopped at the length limit, its JSON
    unfinished, is asked again with the cut answer's start only, marked, and the shorter prompt."""
    from amacs_server.inference.parse import CUT_KEPT, CUT_RETRY_PROMPT
    from tests.context_items import said
    from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

    cut = '{"eval": null, "reply": "' + "a long story, " * 300
    fake = FakeAnthropic(default=lambda _b: Reply(agent_json("r"))).start()
    fake.script(Reply(cut, stop="max_tokens"))
    rt = _runtime(tmp_path, fake)
    _run_researchers(rt, fake, ["q0"])
    first, again = (r["body"]["messages"] for r in fake.requests)
    assert [{**m, "content": said(m["content"])} for m in again[len(first):]] == [
        {"role": "assistant", "content": cut[:CUT_KEPT] + " [... cut off at the length limit]"},
        {"role": "user", "content": CUT_RETRY_PROMPT}]
    assert '"kind": "notice"' in again[-1]["content"]  # the harness's words, an item of its memory
    errors = [e["data"]["error"] for e in rt.transcript.read("task-1") if e["event"] == "parse_error"]
    assert [e.split(":")[0] for e in errors] == ["cut off at the length limit"]
