"""What a newcomer in tmux saw during a turn that was wrong, in a real terminal.

A long eval froze the shell under a stale "writing…" with no word that C-g
stops it; while the primary slept on its subagents the header said
"thinking…"; C-c C-p and C-c C-n stopped on the agent's eval lines instead of
going from one of the person's inputs to the next.
"""

from __future__ import annotations

import itertools
import re
import threading
import time

import pytest

from tests.e2e.agent_fakes import transcript, transcript_events, who
from tests.fake_anthropic import Reply, agent_json
from tests.tmux.terminal import PROMPT
from tests.tmux.test_terminal_actions import header
from tests.tmux.test_terminal_shell import send, wait_turn_over

pytestmark = pytest.mark.tmux


def primary_waits_for_two_researchers(task_reply, later):
    """The fake model's answers: the primary's first call starts two researchers ("Find A",
    "Find B") and waits for both; TASK_REPLY(body) answers each task; the primary's later calls
    get LATER."""
    primary_calls = itertools.count()
    lock = threading.Lock()

    def answer(body):
        me, _kind, _template = who(body)
        if me != "primary":
            return task_reply(body)
        with lock:
            call = next(primary_calls)
        if call == 0:
            return Reply(agent_json("I'll ask two researchers.", eval=(
                '(agent-wait-for (list (plist-get (agent-task "researcher" "Find A") :talk-id) '
                '(plist-get (agent-task "researcher" "Find B") :talk-id)))')))
        return later

    return answer


def test_a_long_eval_says_so_in_the_header_and_c_g_stops_it(terminal, fake):
    """A busy loop blocks Emacs: the header and the eval line are drawn before it runs and say
    that C-g stops it; C-g does, the agent gets the stop as its result, and the prompt takes
    typing at once."""
    fake.script(Reply(agent_json("Let me spin for a while.", eval="(while t)"), chunks=6, chunk_delay=0.02),
                Reply(agent_json("Stopped, as you asked."), delay=1.5))
    term = terminal()
    send(term, "spin")
    term.wait_for(lambda _s: "running an eval" in header(term), timeout=10,
                  what="'running an eval' in the header while the loop blocks Emacs")
    assert "C-g stops it" in header(term), header(term)
    assert "writing" not in header(term)
    assert "▸ eval (while t) … (C-g stops it)" in term.screen()
    term.press("C-g")
    term.wait_for("▸ eval (while t) → error: quit: the eval was stopped (C-g)", timeout=5)
    term.wait_for("You stopped the eval (C-g): the agent gets that as its result and goes on; "
                  "C-c C-c stops its turn.", timeout=5)
    term.type("still here")  # while the agent thinks about the stop: the shell is usable at once
    term.wait_for(lambda _s: term.line_at_cursor() == f"{PROMPT}still here", timeout=2,
                  what="the typed text at the prompt right after C-g")
    term.wait_for("Stopped, as you asked.")
    wait_turn_over(term)
    assert fake.wait_for_requests(2)
    assert "quit: the eval was stopped (C-g)" in fake.user_texts()[1]  # nothing lost: the agent heard it
    assert term.line_at_cursor() == f"{PROMPT}still here"


def test_the_header_names_the_subagents_the_primary_waits_for(terminal, fake):
    """The primary evaluates an agent-wait-for on two tasks: the header says it waits for them,
    not that it thinks, names only those still out, and goes back to idle when the turn ends."""
    def task(body):
        short = transcript(body)[0] == "Find A"
        return Reply(agent_json("A is found." if short else "B is found."), delay=2.0 if short else 6.0)

    fake.respond_with(primary_waits_for_two_researchers(task, Reply(agent_json("Both answered."))))
    term = terminal()
    send(term, "research A and B")
    term.wait_for(lambda _s: "waiting for task-1, task-2…" in header(term), timeout=10,
                  what="the header naming both tasks")
    assert "thinking" not in header(term)
    term.wait_for("✓ task-1 (researcher) done", timeout=10)
    term.wait_for(lambda _s: "waiting for task-2…" in header(term) and "task-1" not in header(term),
                  timeout=5, what="the header naming only the task still out")
    term.wait_for("Both answered.", timeout=15)
    wait_turn_over(term)
    term.wait_for(lambda _s: "waiting for you" in header(term), timeout=5, what="the idle header")


def test_c_c_c_while_the_primary_waits_for_subagents_ends_its_turn_with_no_model_call(terminal, fake):
    """C-c C-c while the primary sleeps on two slow tasks: the tasks and the turn stop, the tasks'
    "interrupted" events wake no new model call, and the tick is recorded as interrupted."""
    fake.respond_with(primary_waits_for_two_researchers(
        lambda _body: Reply(agent_json("found it, too late"), delay=30.0),
        Reply(agent_json("Done: that was the eval above, a call nobody asked for."))))
    term = terminal()
    send(term, "research A and B")
    term.wait_for(lambda _s: "waiting for task-1, task-2…" in header(term), timeout=10,
                  what="the header naming both tasks")
    term.press("C-c C-c")
    term.wait_for("✗ task-1 (researcher) interrupted", timeout=10)
    term.wait_for("✗ task-2 (researcher) interrupted", timeout=10)
    term.wait_for("Interrupted. Your input is kept", timeout=10)
    wait_turn_over(term)
    time.sleep(3)  # long enough for the tasks' events to have woken a turn, had they
    assert "a call nobody asked for" not in term.screen()
    primaries = [r for r in fake.requests if who(r["body"])[0] == "primary"]
    assert len(primaries) == 1, f"{len(primaries)} primary model calls; the interrupt must end the turn"
    rows = transcript_events(term.amacs_home, "primary")
    ticks = [r.get("tick") for r in rows if r["event"] == "tick_start"]
    assert ticks == [1], ticks
    assert [r.get("tick") for r in rows if r["event"] == "interrupted"] == [1]
    # The person's next input is a turn, and it carries the tasks' news.
    send(term, "what happened?")
    term.wait_for("a call nobody asked for", timeout=15)
    assert "interrupted" in fake.user_texts()[-1]


def test_c_c_c_p_and_c_c_c_n_go_from_input_to_input_over_eval_lines(terminal, fake):
    """Three turns, each with an eval: C-c C-p lands on the person's inputs only, newest first,
    and C-c C-n comes back down to the live prompt."""
    fake.script(*[reply for n, word in ((2, "Two"), (4, "Four"), (6, "Six"))
                  for reply in (Reply(agent_json(f"Computing {word}.", eval=f"(+ {n // 2} {n // 2})")),
                                Reply(agent_json(f"It is {word}.")))])
    term = terminal()
    for text, reply in (("first", "It is Two."), ("second", "It is Four."), ("third", "It is Six.")):
        send(term, text)
        term.wait_for(reply)
        wait_turn_over(term)
    term.wait_idle(timeout=5)
    assert term.screen().count("▸ eval") == 3
    for expected in ("third", "second", "first"):
        term.press("C-c C-p")
        term.wait_for(lambda _s, e=expected: term.line_at_cursor() == f"{PROMPT}{e}", timeout=3,
                      what=f"the cursor on the input {expected!r}")
        assert term.cursor()[1] == len(PROMPT)
    for expected in ("second", "third", ""):
        term.press("C-c C-n")
        term.wait_for(lambda _s, e=expected: term.line_at_cursor() == f"{PROMPT}{e}", timeout=3,
                      what=f"the cursor on the input {expected!r}")
        assert term.cursor()[1] == len(PROMPT)


def test_the_mode_line_counts_what_a_subagent_spends_after_the_turn_ended(terminal, fake):
    """The primary starts a task and ends its turn; the task's first step costs ~$0.30: the
    mode line's session cost shows it while the task is still at work, before any next tick."""
    task_calls, primary_calls = itertools.count(), itertools.count()
    lock = threading.Lock()
    costly = {"input_tokens": 100_000, "output_tokens": 20, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 0}

    def answer(body):
        me, _kind, _template = who(body)
        with lock:
            call = next(task_calls if me != "primary" else primary_calls)
        if me != "primary":
            if call == 0:
                return Reply(agent_json("Looking.", eval="(+ 1 2)"), usage=costly, delay=1.5)
            return Reply(agent_json("Dug it up."), delay=6.0)
        if call == 0:
            return Reply(agent_json("I'll ask a researcher.", eval='(agent-task "researcher" "Dig")'))
        return Reply(agent_json("A researcher is on it."))

    fake.respond_with(answer)
    term = terminal()
    send(term, "dig")
    term.wait_for("A researcher is on it.", timeout=10)
    wait_turn_over(term)

    def session_cost() -> float:
        found = re.search(r"\$(\d+\.\d+) session", term.mode_line())
        return float(found.group(1)) if found else 0.0

    assert session_cost() < 0.3, term.mode_line()
    term.wait_for(lambda _s: session_cost() >= 0.3, timeout=5,
                  what="the task's $0.30 in the mode line while it is at work")
    assert "✓ task-1" not in term.screen(), term.screen()  # still at work: no tick since the turn
    term.wait_for("✓ task-1 (researcher) done", timeout=15)
