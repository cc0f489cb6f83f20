"""One Emacs, two AMACS homes: a connection per home (``amacs-connection``).

A real batch Emacs opens the shell of its home A and, with
``(amacs-shell-open B)``, a shell on a second home B: two real servers, two
EPC connections.  A question is sent in each shell at once; each server asks
the fake model, whose answer has the agent evaluate which home its Emacs
connection is (``amacs-current-connection`` inside the eval), then reply.
Each shell must show its own server's reply and an eval that ran on its own
connection; each home's agent-chat.org holds its own question only; the
header names the home while both are live.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.e2e.harness import elisp_string, run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

EVAL = '(format "EVAL-RAN-IN<%s>" (file-name-nondirectory (amacs-connection-home (amacs-current-connection))))'


def _user_text(body: dict[str, Any]) -> str:
    parts = []
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message["content"]
        parts.append(content if isinstance(content, str) else " ".join(b.get("text", "") for b in content))
    return "\n".join(parts)


def _answer(body: dict[str, Any]) -> Reply:
    """The question's home answers: first an eval that names the connection it ran on, then a reply."""
    text = _user_text(body)
    which = "A" if "question for A" in text else "B" if "question for B" in text else None
    if which is None:
        return Reply(agent_json("Nothing asked."))
    if "EVAL-RAN-IN<" in text.replace("EVAL-RAN-IN<%s>", ""):
        return Reply(agent_json(f"Answer for {which}."))
    return Reply(agent_json(f"Checking where {which} runs.", eval=EVAL))


def test_one_emacs_talks_to_two_homes_each_on_its_own_connection(fake, home, tmp_path):
    other = tmp_path / "agent-b"
    other_out = tmp_path / "shell-b.txt"
    fake.respond_with(_answer)
    b = elisp_string(str(other))
    program = f"""
(amacs-e2e-open)
(setq e2e-b (amacs-shell-open {b}))
(amacs-e2e-wait (lambda () (amacs-live-p (amacs-connection-for {b}))) "the second home's server")
(princ (format "LIVE<<%d>>\\n" (length (amacs-live-connections))))
(dolist (pair (list (cons (get-buffer amacs-shell-buffer-name) "question for A")
                    (cons e2e-b "question for B")))
  (with-current-buffer (car pair)
    (goto-char (point-max)) (insert (cdr pair)) (comint-send-input)))
(amacs-e2e-wait (lambda () (and (not amacs-shell-busy)
                                (with-current-buffer e2e-b
                                  (save-excursion (goto-char (point-min))
                                                  (search-forward "Answer for B." nil t)))))
                "both replies")
(princ (format "HEADER-A<<%s>>\\n" (with-current-buffer amacs-shell-buffer-name (amacs-shell-header-line 300))))
(princ (format "HEADER-B<<%s>>\\n" (with-current-buffer e2e-b (amacs-shell-header-line 300))))
(princ (format "BUFFER-B<<%s>>\\n" (buffer-name e2e-b)))
(princ (format "PIDS<<%s %s>>\\n"
               (process-id (amacs-server-process (amacs-connection-for (getenv "AMACS_HOME"))))
               (process-id (amacs-server-process (amacs-connection-for {b})))))
(with-current-buffer e2e-b
  (write-region (point-min) (point-max) {elisp_string(str(other_out))} nil 'silent))
(amacs-stop-server (amacs-connection-for {b}))
(princ (format "AFTER-STOP<<%d %s>>\\n" (length (amacs-live-connections))
               (with-current-buffer amacs-shell-buffer-name (amacs-shell-header-line 300))))
(amacs-e2e-finish)
"""
    run = run_emacs(home, fake.url, program, timeout=180).check()
    shell_a, shell_b = run.shell, other_out.read_text()

    assert "LIVE<<2>>" in run.stdout
    # Each shell: its own question, an eval that ran on its own connection, its own reply.
    assert "amacs> question for A" in shell_a and "question for B" not in shell_a
    assert "amacs> question for B" in shell_b and "question for A" not in shell_b
    assert "EVAL-RAN-IN<agent>" in shell_a and "EVAL-RAN-IN<agent-b>" not in shell_a
    assert "EVAL-RAN-IN<agent-b>" in shell_b and "EVAL-RAN-IN<agent>\"" not in shell_b
    assert "Answer for A." in shell_a and "Answer for B." not in shell_a
    assert "Answer for B." in shell_b and "Answer for A." not in shell_b
    # Two servers, each writing its own home.
    pids = re.search(r"PIDS<<(\d+) (\d+)>>", run.stdout)
    assert pids and pids.group(1) != pids.group(2), run.stdout
    chat_a, chat_b = (home / "agent-chat.org").read_text(), (other / "agent-chat.org").read_text()
    assert "question for A" in chat_a and "question for B" not in chat_a
    assert "question for B" in chat_b and "question for A" not in chat_b
    assert json.loads((other / "server.json").read_text())["pid"] == int(pids.group(2)) if (
        other / "server.json").exists() else True
    # While both are live, each header and shell buffer names its home; with one left, no name.
    assert re.search(r"HEADER-A<< ~?[^ ]*/agent — ", run.stdout), run.stdout
    assert re.search(r"HEADER-B<< ~?[^ ]*/agent-b — ", run.stdout), run.stdout
    assert re.search(r"BUFFER-B<<\*amacs-shell: [^>]*/agent-b\*>>", run.stdout), run.stdout
    assert re.search(r"AFTER-STOP<<1 (?![^>]*/agent — )", run.stdout), run.stdout
