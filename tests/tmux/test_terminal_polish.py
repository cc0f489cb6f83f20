"""What a new user found in the shell, each tried again in a real terminal.

TAB on a reply opened a ``*Completions*`` window of file names; a stray key
edited a reply (now it goes to the input); ``C-h m`` listed Shell-Dirtrack mode; an expanded form broke
``(goto-char`` from ``(point-max))``; the exchanges resumed after a restart were
greyed raw markup (``*bold*``, ``~code~``) while live ones were rendered.
"""

from __future__ import annotations

import pytest

from tests.fake_anthropic import Reply, agent_json
from tests.tmux.terminal import Terminal
from tests.tmux.test_terminal_shell import send, wait_turn_over

pytestmark = pytest.mark.tmux

FORM = '(progn (require (quote shell)) (goto-char (point-max)) (ignore "a string that is long enough to break the form over lines at a hundred columns"))'


def test_tab_keys_and_help_act_on_the_agents_shell(terminal, fake):
    fake.script(Reply(agent_json("Done: that was *bold* and ~code~.", eval=FORM)), Reply(agent_json("All done.")))
    term = terminal(100, 40)
    send(term, "do it")
    term.wait_for("All done.")
    wait_turn_over(term)
    # Rendered once org is loaded (shown plain before: the first replies after a start do not wait for it).
    term.wait_for("Done: that was bold and code.", timeout=60, what="the reply rendered once org is loaded")
    term.press("C-r")
    term.type("Done: that")
    term.press("Enter")                                    # point on the reply's text
    term.type("x")                                         # a key typed on the reply goes to the input
    term.wait_for("amacs> x", timeout=5, what="the key at the prompt")
    assert "Done: that was bold and code." in term.screen()
    term.press("BSpace")
    term.press("C-r")
    term.type("Done: that")
    term.press("Enter")                                    # point on the reply's text again
    term.press("C-a")
    term.press("Tab")                                      # on a reply: to the next eval line
    term.wait_for_elisp('(with-current-buffer "*amacs-shell*" (looking-at "▸ eval"))', timeout=5,
                        what="point on the eval line")
    assert "*Completions*" not in term.screen()
    term.press("Tab")                                      # on the eval line: its details, printed as code
    screen = term.wait_for("▾ eval", timeout=5, what="the eval's details")
    rows = [row.strip() for row in screen.split("\n")]
    start = rows.index("(progn")
    assert rows[start + 1:start + 3] == ["(require 'shell)", "(goto-char (point-max))"], screen
    term.press("C-h m")
    help_screen = term.wait_for("The AMACS shell: talk to the agent", timeout=5)
    assert "Shell-Dirtrack" not in help_screen
    assert "*Completions*" not in help_screen


def test_resumed_exchanges_are_rendered_as_live_ones(terminal, fake, tmp_path):
    fake.script(Reply(agent_json("It is *bold* and ~code~.")))
    term = terminal(100, 30)
    send(term, "show me")
    term.wait_for("It is bold and code.")
    wait_turn_over(term)
    term.close()
    again = Terminal(tmp_path / "terminal-0", fake.url, 100, 30)  # the same home, a new Emacs
    try:
        again.start()
        again.wait_for(";; Resumed", timeout=10)
        screen = again.wait_for("It is bold and code.", timeout=10, what="the resumed reply rendered")
        assert "*bold*" not in screen and "~code~" not in screen
        assert "amacs-shell-resumed" not in again.elisp(
            '(with-current-buffer "*amacs-shell*" (save-excursion (goto-char (point-min))'
            ' (search-forward "It is") (format "%S" (get-text-property (point) (quote font-lock-face)))))')
    finally:
        again.close()
