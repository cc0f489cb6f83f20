"""The server killed mid-turn, as a newcomer saw it in tmux.

Two notices said nearly the same ("The server stopped before the agent
replied; ..." and "AMACS server stopped (killed). Send a message to restart
it ... Log:"), and the log's path stood on a row of its own without ``;;``.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from tests.fake_anthropic import Reply, agent_json
from tests.tmux.test_terminal_shell import send

pytestmark = pytest.mark.tmux


def test_a_killed_server_is_one_notice_with_its_log_on_a_comment_line(terminal, fake):
    hold = threading.Event()
    fake.script(Reply(agent_json("never seen"), hold=hold), Reply(agent_json("Here I am again.")))
    term = terminal(width=200, height=30)
    try:
        send(term, "remember the milk")
        assert fake.wait_for_requests(1, timeout=20)
        chat = term.amacs_home / "agent-chat.org"
        term.wait_for_elisp("amacs-shell-busy")
        pid = json.loads((term.amacs_home / "server.json").read_text())["pid"]
        assert "** Human\nremember the milk" in chat.read_text()
        os.kill(pid, signal.SIGKILL)
        log = str(term.amacs_home / "logs" / "server.log")
        screen = term.wait_for(log, timeout=20, what="the notice with the log's path")
        rows = screen.split("\n")
        notice = [row for row in rows if row.startswith(";;") and "stopped" in row]  # not the header
        assert len(notice) == 1, screen
        assert notice[0].startswith(";; AMACS server stopped (killed) before the agent replied; your input is saved "
                                    "in agent-chat.org, not answered (M-p brings it back). Send a message to restart it, "
                                    "or M-x amacs-restart."), screen
        assert f";; Log: {log}" in rows, screen
        assert not any(row.startswith("/") for row in rows), screen
        send(term, "are you back?")
        term.wait_for("Here I am again.", timeout=30)
    finally:
        hold.set()
