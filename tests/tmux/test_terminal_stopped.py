"""The server killed mid-turn, as a newcomer saw it in tmux.

Two notices said nearly the same ("The server stopped before the agent
replied; ..." and "AMACS server stopped (killed). Send a message to restart
it ... Log:"), and the log's path stood on a row of its own without ``;;``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fake_anthropic import Reply, agent_json
from tests.tmux.terminal import ROOT
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



def test_emacs_killed_leaves_amacs_to_say_so_and_exit(tmp_path):
    """./amacs run from a person's shell (job control: Emacs makes its own process group the
    terminal's foreground one), Emacs killed (SIGKILL): that group is left in the foreground, and
    ./amacs, in the background there, was stopped by its `stty sane` (SIGTTOU): `[1]+ Stopped`,
    nothing said until `fg`.  It says its one line and the shell takes input again."""
    sockets = Path(tempfile.mkdtemp(prefix="amacs-tmux-"))
    tmux = ["tmux", "-u", "-S", str(sockets / "tmux")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "AMACS_", "ANTHROPIC_"))}
    env.update(HOME=str(tmp_path / "user"), AMACS_HOME=str(tmp_path / "agent"), AMACS_WARM="0",
               TERM="xterm-256color", EMACS_INHIBIT_AUTOMATIC_NATIVE_COMPILATION="1")
    (tmp_path / "user").mkdir()

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "s"], capture_output=True, text=True,
                              env=env, check=True).stdout

    def wait(found: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            text = screen()
            if found(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"waited for {what}; the screen:\n{screen()}")

    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "s", "-x", "120", "-y", "30", "bash --norc -i"],
                       env=env, cwd=ROOT, check=True)
        wait(lambda text: "bash-" in text, "bash's prompt")
        subprocess.run([*tmux, "send-keys", "-t", "s", "./amacs --demo", "Enter"], env=env, check=True)
        wait(lambda text: "amacs>" in text, "the shell's prompt")
        emacs = [p for p in subprocess.run(["pgrep", "-f", "emacs -nw -Q"], capture_output=True, text=True).stdout.split()
                 if str(tmp_path / "agent") in Path(f"/proc/{p}/environ").read_bytes().decode(errors="replace")]
        assert len(emacs) == 1, emacs
        os.kill(int(emacs[0]), signal.SIGKILL)
        text = wait(lambda text: "stopped by signal" in text or "Stopped" in text, "./amacs's last line")
        assert "amacs: Emacs was stopped by signal 9 (KILL)" in text and "Stopped" not in text, text
        subprocess.run([*tmux, "send-keys", "-t", "s", "echo typed-$((6*7))", "Enter"], env=env, check=True)
        wait(lambda text: "typed-42" in text, "the shell to take input again")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, env=env)
        shutil.rmtree(sockets, ignore_errors=True)
