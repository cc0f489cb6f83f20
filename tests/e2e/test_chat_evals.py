"""A newcomer in tmux: the eval the live shell showed (``▸ eval (+ 2 2) → 4``) was missing from
agent-chat.org and from the shell resumed after C-x C-c.  Now the tick's ``** Eval`` part holds
the form and its result, and a restarted shell draws the eval line as the live one did."""

import pytest

from amacs_server.persistence.chat_log import ChatEval, ChatLog
from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

# The shell's visible text (the eval's details hidden), then the same after TAB on the eval line.
VISIBLE = r"""
(setq amacs-shell-resume-exchanges 10)
(amacs-e2e-open)
(accept-process-output nil 0.3)
(princ (format "VISIBLE<<%s>>\n" (amacs-e2e-visible)))
(with-current-buffer amacs-shell-buffer-name
  (goto-char (point-min))
  (search-forward "▸ eval (car 1)")
  (amacs-shell-tab))
(princ (format "EXPANDED<<%s>>\n" (amacs-e2e-visible)))
(amacs-e2e-finish)
"""


def between(text: str, tag: str) -> str:
    return text.split(f"{tag}<<", 1)[1].split(">>\n", 1)[0]


def test_evals_are_in_the_chat_log_and_the_resumed_shell(fake, home):
    fake.script(
        Reply(agent_json("Let me check in Emacs.", eval="(+ 2 2)")),
        Reply(agent_json("Done: that was the eval above (TAB on its line shows it).")),
        Reply(agent_json(None, eval="(car 1)")),  # an eval with no reply, and it fails
        Reply(agent_json("That one failed.")),
    )
    live = run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-send \"eval\") "
                     "(amacs-e2e-send \"again\") (amacs-e2e-finish)").check()
    assert "▸ eval (+ 2 2) → 4\n" in live.shell

    chat = (home / "agent-chat.org").read_text()
    assert ("** Agent\nLet me check in Emacs.\n\n** Eval\n#+begin_src emacs-lisp\n(+ 2 2)\n#+end_src\n"
            "#+RESULTS:\n#+begin_example\n4\n#+end_example\n") in chat
    assert "** Eval (error)\n#+begin_src emacs-lisp\n(car 1)\n#+end_src\n" in chat
    entries = ChatLog(home / "agent-chat.org").read()
    assert [(e.human, e.agent, e.eval) for e in entries] == [
        ("eval", "Let me check in Emacs.", ChatEval("(+ 2 2)", True, "4", None)),
        (None, "Done: that was the eval above (TAB on its line shows it).", None),
        ("again", "", ChatEval("(car 1)", False, None, "Wrong type argument: listp, 1")),
        (None, "That one failed.", None),
    ]

    run = run_emacs(home, fake.url, VISIBLE).check()
    assert len(fake.requests) == 4  # resuming calls no model
    visible = between(run.stdout, "VISIBLE")
    assert visible == (
        ";; Resumed: the last exchanges from agent-chat.org (C-c C-l opens it all):\n"
        f";; (Turns up to tick {entries[-1].tick} were in an earlier Emacs: no ▸ changed lines.)\n"
        "amacs> eval\n\nLet me check in Emacs.\n\n▸ eval (+ 2 2) → 4\n\n"
        "Done: that was the eval above (TAB on its line shows it).\n\n"
        "amacs> again\n▸ eval (car 1) → error: Wrong type argument: listp, 1\n\n"
        "That one failed.\n\n"
        ";; C-c C-v shows the agent and its subagents; @NAME text talks to one by the name shown there or in the footer while it works.\namacs> ")
    # As the live shell drew them: the same lines, its details hidden (TAB shows them).
    assert visible.split("lines.)\n", 1)[1].split("\n;; C-c C-v")[0] in live.shell.replace("(+ 2 2)\n⇒ 4\n", "").replace(
        "(car 1)\nerror: Wrong type argument: listp, 1\n", "")
    expanded = between(run.stdout, "EXPANDED")
    assert "▸ eval (+ 2 2) → 4\n\nDone" in expanded  # the other eval stays folded
    assert "▾ eval (car 1) → error: Wrong type argument: listp, 1\n(car 1)\nerror: Wrong type argument: listp, 1\n" \
        in expanded
