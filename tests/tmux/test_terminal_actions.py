"""What the agent does, as a person sees it in a real terminal (issue 9).

Each eval shows as a line where it happened and expands with TAB; a reply in
Markdown shows as org with its code in its language's faces, in the shell and in
``agent-chat.org``; the header line says which model works and what it is doing.
"""

from __future__ import annotations

import pytest

from tests.fake_anthropic import Reply, agent_json
from tests.tmux.terminal import Terminal
from tests.tmux.test_terminal_shell import send, wait_turn_over

pytestmark = pytest.mark.tmux


def header(term: Terminal) -> str:
    """The shell window's header line (below the menu bar)."""
    return term.lines()[1]


def face_at(term: Terminal, buffer: str, text: str) -> str:
    """The faces Emacs shows at the first TEXT in BUFFER, as printed elisp."""
    return term.elisp_string(
        f'(with-current-buffer "{buffer}" (save-excursion (goto-char (point-min)) (search-forward "{text}")'
        "  (font-lock-ensure) (let ((pos (match-beginning 0)))"
        "    (format \"%S\" (list (get-text-property pos 'font-lock-face) (get-text-property pos 'face))))))")


def test_an_eval_shows_as_a_line_that_tab_expands(terminal, fake):
    fake.script(Reply(agent_json("Let me compute it.", eval="(+ 2 2)")), Reply(agent_json("It is 4.")))
    term = terminal()
    send(term, "what is 2+2?")
    term.wait_for("It is 4.")
    wait_turn_over(term)
    screen = term.screen()
    assert "▸ eval (+ 2 2) → 4" in screen
    assert screen.index("Let me compute it.") < screen.index("▸ eval") < screen.index("It is 4.")
    assert "⇒ 4" not in screen  # the details are folded
    term.press("C-r")
    term.type("▸ eval")
    term.press("Enter")  # isearch leaves point on the eval line
    term.press("Tab")
    screen = term.wait_for("⇒ 4", timeout=5, what="the eval's details after TAB")
    rows = screen.split("\n")
    row = next(i for i, r in enumerate(rows) if "▾ eval (+ 2 2)" in r)  # shown: the arrow points down
    assert rows[row + 1].strip() == "(+ 2 2)" and rows[row + 1].startswith("    ")
    assert rows[row + 2].strip() == "⇒ 4"
    term.press("Tab")
    term.wait_for(lambda s: "⇒ 4" not in s, timeout=5, what="the details folded again")
    assert "▸ eval (+ 2 2) → 4" in term.screen()


def test_a_failed_eval_line_says_the_error(terminal, fake):
    fake.script(Reply(agent_json(None, eval="(car 1)")), Reply(agent_json("That failed.")))
    term = terminal()
    send(term, "break something")
    term.wait_for("That failed.")
    assert "▸ eval (car 1) → error: Wrong type argument: listp, 1" in term.screen()
    assert "amacs-shell-eval-error" in face_at(term, "*amacs-shell*", "▸ eval (car 1)")


MARKDOWN_REPLY = """## Squaring

Use **this** function:

```elisp
(defun demo-square (x)
  "Return X squared."
  (* x x))
```

* it is pure
* it is short
"""


def test_a_markdown_reply_shows_as_org_with_code_in_its_languages_faces(terminal, fake):
    fake.script(Reply(agent_json(MARKDOWN_REPLY), chunks=12, chunk_delay=0.02))
    term = terminal()
    send(term, "show me code")
    term.wait_for("it is short")
    wait_turn_over(term)
    # The first reply after a start is drawn before org is loaded with org's look (its code in one
    # face), then again in place once org is (a file at each idle moment), its code in its
    # language's faces: org's emphasis markers hidden, the text keeps them.
    screen = term.wait_for("Use this function", timeout=60, what="the reply drawn")
    assert "```" not in screen and "**this**" not in screen and "## " not in screen
    assert "#+begin_src emacs-lisp" in screen and "#+end_src" in screen
    assert "** Squaring" in screen and "- it is pure" in screen
    # The code is in emacs-lisp-mode's faces once org has drawn it, the heading in org's.
    term.wait_for(lambda _s: "font-lock-keyword-face" in face_at(term, "*amacs-shell*", "defun demo-square"),
                  timeout=60, what="the reply drawn again by org, its code in emacs-lisp's faces")
    assert "font-lock-doc-face" in face_at(term, "*amacs-shell*", "Return X squared")
    assert "org-level-2" in face_at(term, "*amacs-shell*", "** Squaring")
    assert "bold" in face_at(term, "*amacs-shell*", "this* function")
    assert "*this*" in (term.elisp_string('(with-current-buffer "*amacs-shell*" (buffer-string))'))
    assert "\x1b[" in term.screen_with_escapes().split("defun", 1)[0].rsplit("\n", 1)[-1]  # coloured on screen

    # The same reply in agent-chat.org: org, no Markdown, code fontified natively.
    chat = (term.amacs_home / "agent-chat.org").read_text()
    assert "```" not in chat and "#+begin_src emacs-lisp\n(defun demo-square (x)" in chat
    term.press("C-c C-l")
    term.wait_for(lambda s: "agent-chat.org" in term.mode_line(), timeout=10, what="the chat log opened")
    assert term.elisp('(and (get-buffer-window "*amacs-shell*") t)') == "t"  # beside the shell, not over it
    term.elisp("(with-current-buffer \"agent-chat.org\" (org-show-all))")
    screen = term.wait_for("#+begin_src emacs-lisp", timeout=5)
    assert "```" not in screen
    assert "font-lock-keyword-face" in face_at(term, "agent-chat.org", "defun demo-square")


def test_the_header_line_shows_the_model_and_what_the_agent_does(terminal, fake):
    fake.script(Reply(agent_json("Sleeping a little.", eval="(sit-for 3)"), delay=2.0),
                Reply(agent_json("Slept."), chunks=30, chunk_delay=0.1))
    term = terminal()
    term.wait_for(lambda _s: "waiting for you" in header(term), timeout=10, what="the idle header")
    # The fake is no provider's own endpoint: the header names its host (a newcomer could not
    # tell the demo on 127.0.0.1 from Claude).
    assert "claude-sonnet-5-5 (anthropic @ 127.0.0.1:" in header(term)
    send(term, "take your time")
    term.wait_for(lambda _s: "thinking" in header(term), timeout=5, what="'thinking' in the header")
    term.wait_for(lambda _s: "running an eval" in header(term), timeout=10, what="'running an eval'")
    assert "▸ eval (sit-for 3) …" in term.screen()  # shown while it runs (sit-for redisplays)
    term.wait_for(lambda _s: "writing" in header(term), timeout=10, what="'writing' while the reply streams")
    term.wait_for(lambda _s: "waiting for you" in header(term), timeout=15, what="the header back to idle")
    assert "▸ eval (sit-for 3) → t" in term.screen()


def test_an_input_of_several_lines_stays_whole_and_replies_follow_their_inputs(terminal, fake):
    """Composed in C-c C-e: two lines are one input, and the next input and reply come after it."""
    fake.script(Reply(agent_json("Got two lines.")), Reply(agent_json("Got the third.")))
    term = terminal(80, 24)
    term.press("C-c C-e")
    term.wait_for(lambda _s: "*amacs-compose*" in term.screen(), timeout=5, what="the compose buffer")
    term.type("first")
    term.press("Enter")
    term.type("second")
    term.press("C-c C-c")
    term.wait_for("Got two lines.")
    wait_turn_over(term)
    send(term, "third")
    term.wait_for("Got the third.")
    wait_turn_over(term)
    rows = [r for r in term.screen().split("\n") if r.strip()]
    start = rows.index("amacs> first")
    assert rows[start:start + 5] == ["amacs> first", "second", "Got two lines.", "amacs> third", "Got the third."]
    assert rows[start + 5] == "amacs>"
    assert "queued" not in face_at(term, "*amacs-shell*", "amacs> third")
