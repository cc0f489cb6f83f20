"""The shell as a person sees it, in a real terminal (issue 9).

``./amacs`` runs ``emacs -nw`` in tmux against the fake model API; keys are
typed with ``tmux send-keys`` and the screen and cursor are read back
(DESIGN.md, "The person's view": if point was at the prompt when output
arrived, it ends at the new prompt; what the person types during a stream
stays in the input area and is sent exactly as typed).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from tests.context_items import chat_lines
from tests.e2e.test_shell import USAGE
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
from tests.tmux.terminal import PROMPT, Terminal

pytestmark = pytest.mark.tmux

SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]


def send(term: Terminal, text: str) -> None:
    """Type TEXT at the prompt and press Enter."""
    term.type(text)
    term.press("Enter")


def wait_turn_over(term: Terminal, timeout: float = 20) -> None:
    """Wait until the agent's turn has ended (the screen may not show it: that is what is tested)."""
    term.wait_for_elisp("(not amacs-shell-busy)", timeout=timeout, what="the end of the agent's turn")


def prompt_below(text: str) -> Callable[[str], bool]:
    """A screen predicate: a prompt row somewhere below the row showing TEXT."""
    def check(screen: str) -> bool:
        _before, found, after = screen.partition(text)
        return bool(found) and any(row.startswith(PROMPT.rstrip()) for row in after.split("\n")[1:])
    return check


def last_human_input(fake: FakeAnthropic, request: int) -> str:
    """The newest line of the chat in model request number REQUEST."""
    return chat_lines(fake.user_texts()[request])[-1]


def test_the_shell_opens_with_the_cursor_at_an_empty_prompt(terminal):
    term = terminal()
    term.wait_idle(timeout=5)
    assert "*amacs-shell*" in term.mode_line()
    # Emacs's own start-up line ("For information about GNU Emacs...") is not left
    # in the echo area under the shell (a newcomer's tmux finding).
    assert "GNU Emacs" not in term.lines()[-1], term.screen()
    # While the person reads the greeting, org is loaded and warmed up at idle moments,
    # so the first reply's rendering does not freeze Emacs for ~0.75 s.
    term.wait_for_elisp('(get-buffer " *org-src-fontification:emacs-lisp-mode*")', timeout=10,
                        what="org preloaded at idle")
    # ./amacs holds garbage collection until Emacs is first idle, then gives it back its default.
    term.wait_for_elisp("(= gc-cons-threshold 800000)", timeout=5, what="garbage collection as by default")


def test_second_input_arrives_exactly_as_typed_after_a_streamed_reply(terminal, fake):
    first = "Two plus two is four. Arithmetic like this is something I can do in my head, no eval needed."
    fake.script(Reply(agent_json(first), chunks=20, chunk_delay=0.02), Reply(agent_json("You're welcome.")))
    term = terminal()
    send(term, "what is 2+2?")
    term.wait_for(first)
    wait_turn_over(term)
    term.wait_for(prompt_below(first), timeout=5, what="a prompt below the reply")
    send(term, "thanks")
    term.wait_for("You're welcome.")
    assert fake.wait_for_requests(2)
    assert last_human_input(fake, 1) == "Human: thanks"
    assert "** Human\nthanks\n" in (term.amacs_home / "agent-chat.org").read_text()


@pytest.mark.parametrize("size", SIZES)
def test_cursor_is_on_the_prompt_after_a_reply(terminal, fake, size):
    """A reply longer than the window: the window follows it and the cursor ends at the new prompt."""
    width, height = size
    reply = "\n".join(f"Line {n} of a reply that is longer than the window." for n in range(1, 61))
    fake.script(Reply(agent_json(reply), chunks=30, chunk_delay=0.02))
    term = terminal(width, height)
    send(term, "a long answer, please")
    wait_turn_over(term)
    term.wait_idle(timeout=5)
    y, x = term.cursor()
    assert y == height - 3, "the prompt is not on the window's last line (above mode line and echo area)"
    assert term.line_at_cursor().startswith(PROMPT)
    assert x == len(PROMPT)
    assert "Line 60 of a reply" in term.screen()


def test_a_person_reading_above_stays_there_while_a_reply_streams(terminal, fake):
    """Point moved up into the output: the window does not follow the stream; back at the end, it does."""
    first = "\n".join(f"Earlier line {n} of a long first reply." for n in range(1, 61))
    slow = "\n".join(f"Streaming line {n} of the second reply." for n in range(1, 31))
    fake.script(Reply(agent_json(first), chunks=10), Reply(agent_json(slow), chunks=30, chunk_delay=0.1))
    term = terminal(100, 30)
    send(term, "first")
    wait_turn_over(term)
    term.wait_for("Earlier line 60")
    send(term, "second")
    term.wait_for("Streaming line 1 ")
    term.press("M-<")  # to the top of the buffer, to read
    top = term.wait_for("Earlier line 1 ", timeout=5).split("\n")[2:8]  # below the menu and header lines
    wait_turn_over(term)
    time.sleep(0.3)  # the turn's last redisplay
    assert term.screen().split("\n")[2:8] == top, "the window followed the stream away from what was read"
    term.press("M->")
    screen = term.wait_for("Streaming line 30 ", timeout=5)
    assert term.line_at_cursor().startswith(PROMPT), screen


def test_input_typed_while_streaming_survives(terminal, fake):
    reply = "This reply streams slowly, word by word, while the person already types the next question."
    fake.script(Reply(agent_json(reply), chunks=40, chunk_delay=0.1), Reply(agent_json("Heard you.")))
    term = terminal()
    send(term, "talk slowly")
    term.wait_for("This reply")
    term.type("hello while busy")
    wait_turn_over(term)
    screen = term.wait_for(reply, timeout=5)
    reply_rows = [row for row in screen.split("\n") if "This reply" in row]
    assert reply_rows == [reply], f"the reply is cut or has the typed text inside it:\n{screen}"
    assert f"{PROMPT}hello while busy" in screen, f"the typed input is not on screen:\n{screen}"
    assert term.line_at_cursor() == f"{PROMPT}hello while busy"
    assert term.cursor()[1] == len(f"{PROMPT}hello while busy")
    term.press("Enter")
    assert fake.wait_for_requests(2)
    assert last_human_input(fake, 1) == "Human: hello while busy"


DOLLARS = re.compile(r"\$\d+(?:\.\d+)?")


def test_mode_line_fits_80_columns(terminal, fake):
    """The cost in the mode line is shown whole in an 80-column terminal, not cut mid-figure."""
    fake.script(Reply(agent_json("Priced."), usage=USAGE))
    term = terminal(80, 24, AMACS_MODEL="claude-sonnet-4-5")
    send(term, "hi")
    term.wait_for("Priced.")
    wait_turn_over(term)
    term.wait_for(lambda _screen: "$" in term.mode_line(), timeout=5, what="a cost in the mode line")
    shown = term.mode_line().rstrip()
    assert len(shown) <= 80
    formatted = term.elisp_string(
        '(let ((window (get-buffer-window "*amacs-shell*")))'
        "  (with-current-buffer (window-buffer window) (format-mode-line mode-line-format nil window)))")
    figures = DOLLARS.findall(formatted)
    assert figures, f"no cost in the mode line: {formatted!r}\nscreen: {shown!r}"
    missing = [figure for figure in figures if not re.search(re.escape(figure) + r"(?![\d.])", shown)]
    assert not missing, f"cut from the mode line: {missing}\nscreen: {shown!r}\nformat-mode-line: {formatted!r}"


def test_c_d_at_an_empty_prompt_does_not_end_the_shell(terminal, fake):
    """comint's C-d sent EOF to the shell's placeholder process: every RET after it failed."""
    fake.script(Reply(agent_json("Still here.")))
    term = terminal()
    # C-d at the end used to fail ("End of buffer"), and Emacs discards the keys typed after a
    # failed command: "are you there?" was lost in 1 run of 3 when it reached Emacs with the C-d.
    term.wait_for("@NAME text talks to one", timeout=20, what="the greeting after hello")
    term.wait_for_elisp("(not amacs-shell-busy)", timeout=20, what="the shell ready")
    term.press("C-d")
    send(term, "are you there?")
    term.wait_for("Still here.")
    assert "has no process" not in term.screen() and "finished" not in term.screen()


@pytest.mark.parametrize("command, answers", [
    pytest.param("amacs-set-budget", ["7"], id="set-budget"),
    pytest.param("amacs-set-model", ["", "", "", ""], id="set-model"),  # backend, model, URL, window
])
def test_keys_typed_just_after_an_m_x_command_are_all_kept(terminal, command, answers):
    """A newcomer typed "qwerty" just after M-x amacs-set-budget and got "qw": Emacs 28's M-x
    looks for a shorter name to suggest inside while-no-input, and typing meanwhile is lost,
    unless the command said something at once (then M-x waits on sit-for)."""
    term = terminal()
    term.wait_idle(timeout=20)
    for attempt in range(3):  # the loss needed the keys to come while M-x looked: try a few times
        term.press("M-x")
        term.wait_for(lambda _s: "M-x" in term.lines()[-1], timeout=5, what="M-x's prompt")
        term.type(command)
        term.press("Enter")
        for answer in answers:
            time.sleep(0.3)
            term.type(answer)
            term.press("Enter")
        time.sleep(0.2)
        term.type(f"wxyz{attempt}")
        term.wait_for(lambda _s, a=attempt: term.line_at_cursor().rstrip().endswith(f"wxyz{a}"), timeout=5,
                      what=f"all of wxyz{attempt} at the prompt")
        term.press("C-a", "C-k")


@pytest.mark.parametrize("pause", [2.3, 3.5])
def test_a_burst_of_keys_seconds_after_an_m_x_command_is_all_kept(terminal, fake, pause):
    """A newcomer pasted "hello world burst" 2-4 s after M-x amacs-set-model and got "he": 2 s after
    a command that said something, Emacs 28's M-x looks for a shorter name to suggest inside
    while-no-input (on a timer), and keys arriving then were lost but the first ones.  In the
    shell, M-x suggests no shorter name."""
    term = terminal()
    term.wait_idle(timeout=20)
    term.press("M-x")
    term.wait_for(lambda _s: "M-x" in term.lines()[-1], timeout=5, what="M-x's prompt")
    term.type("amacs-set-model")
    term.press("Enter")
    for answer in ["", "", fake.url, ""]:  # backend, model, base URL, context window
        time.sleep(0.3)
        term.type(answer)
        term.press("Enter")
    term.wait_for("Now using", timeout=10)
    time.sleep(pause)
    term.type("hello world burst")
    term.wait_for(lambda _s: term.line_at_cursor().rstrip().endswith("hello world burst"), timeout=5,
                  what="all of the burst at the prompt")
    term.press("Enter")
    fake.script(Reply(agent_json("Got the burst.")))
    term.wait_for("Got the burst.")
    assert last_human_input(fake, -1) == "Human: hello world burst"


@pytest.mark.parametrize("attempt", range(3))
def test_input_typed_before_the_server_is_ready_is_kept_and_sent(terminal, fake, attempt):
    """Input typed at the first prompt, before hello is answered and while its notes are written,
    is kept and sent once the server is ready: the words at the prompt (RET pressed later) and a
    line sent at once (RET pressed before hello).  Such input was lost in 1 start of 4."""
    fake.script(Reply(agent_json("First answer.")), Reply(agent_json("Second answer.")))
    term = terminal(connected=False)
    early = term.elisp("(and (amacs-live-p) t)") != "t"
    send(term, f"sent early {attempt}")
    term.type(f"typed early {attempt}")
    term.wait_for("@NAME text talks to one", timeout=30, what="the greeting after hello")
    term.wait_for("First answer.", timeout=30)
    wait_turn_over(term)
    term.wait_for(lambda _s: term.line_at_cursor().rstrip().endswith(f"typed early {attempt}"), timeout=10,
                  what="the words typed before hello, still at the prompt")
    term.press("Enter")
    term.wait_for("Second answer.", timeout=30)
    sent = [str(r["body"]["messages"]) for r in fake.requests if r["body"].get("messages")]
    assert any(f"sent early {attempt}" in m for m in sent), sent
    assert any(f"typed early {attempt}" in m for m in sent), sent
    assert early, "the server was ready before anything was typed: nothing was tested early"
