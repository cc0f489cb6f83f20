"""C-c C-c in the moment between an input reaching the server and its turn beginning: typed
while ``./amacs`` started, the input is sent at hello and the C-c C-c follows it at once.  The
interrupt found no turn at work, the shell said "the agent is not working on anything" under a
header saying "thinking…", and the turn ran on to its reply."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.fake_anthropic import FakeAnthropic
from tests.test_rewind import answer, on_loop, run, runtime


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic(default=answer).start()
    yield server
    server.stop()


def test_a_c_c_c_before_the_sent_inputs_turn_begins_interrupts_it(tmp_path, fake):
    home = tmp_path / "home"
    run(home, fake, [("say", "hello")])
    rt = runtime(home, fake.url)
    try:
        tick = rt.mind.consciousness.current_tick
        # In one step of the loop: the input is in the inbox, its turn not begun, and the
        # person's C-c C-c (methods.interrupt) comes.
        assert on_loop(rt, lambda: (rt.turns._route_input("typed at start"), rt.turns.interrupt(queued=True))[1])
        assert rt.mind.commits.flush(60)
        for _ in range(600):
            if on_loop(rt, lambda: rt.turns._turn_task is None and rt.turns._inputs_queued == 0):
                break
            time.sleep(0.05)
        last = rt.mind.memory.chat[-1].content
        assert last.get("human") == "typed at start" and not last.get("agent"), last
        assert "interrupted by the person" in str(last.get("status")), last
        assert rt.mind.consciousness.current_tick == tick + 1
        # The next input is a turn as any: the interrupt was for the one input.
        assert on_loop(rt, lambda: rt.turns.interrupt(queued=True)) is False
    finally:
        rt.stop()
