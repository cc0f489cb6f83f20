"""Issue 12, items 7 and 9: one Emacs per server, a private home, clean restarts and exits.

Real batch Emacs, the real server, the fake model API.  File modes are read
while the server runs (memory.db's -wal and -shm exist then) and after it
exited; ``.git`` is walked too: under the server's umask git writes its
objects 0400 and everything else 0600/0700 like the rest of the home.
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from tests.context_items import chat_lines
from tests.e2e.harness import elisp_string, finish_emacs, run_emacs, start_emacs
from tests.e2e.test_headless import start_headless, stop, wait_for
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

# Every file and folder of the home, with its mode, while the server runs.
LIST_MODES = ("(let ((home (amacs--home-directory))) "
              "(dolist (f (cons home (directory-files-recursively home \"\" t))) "
              "(princ (format \"MODE %o %s\\n\" (file-modes f 'nofollow) (file-relative-name f home)))))")
# The files the server (or, for shell-history, Emacs) writes in the home during one turn.
WRITTEN = {"agent-chat.org", "consciousness.el", "monologue.org", "memory.db", "memory.db-wal",
           "memory.db-shm", "shell-history", "server.json", "logs/server.log", ".gitignore", ".server.lock"}


def modes_listed(stdout: str) -> dict[str, int]:
    """The MODE lines Emacs printed, as {path relative to the home: mode}."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("MODE "):
            _tag, mode, name = line.split(" ", 2)
            out[name] = int(mode, 8)
    return out


def modes_on_disk(home: Path) -> dict[str, int]:
    """Every file and folder under HOME (.git included), with its mode; HOME itself as "."."""
    out = {".": stat.S_IMODE(home.lstat().st_mode)}
    for folder, dirs, files in os.walk(home):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            out[str(path.relative_to(home))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def open_to_others(modes: dict[str, int]) -> dict[str, str]:
    return {name: oct(mode) for name, mode in modes.items() if mode & 0o077}


def git(home: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=home, capture_output=True, text=True, check=True).stdout


def test_a_fresh_home_is_private_and_the_server_exits_cleanly(fake, home):
    """After one turn (an eval, a reply, a commit) every file in the home is 0600 (git's objects
    0400) and every folder 0700, while the server runs and after it exited; shell-history is
    ignored by the home's git, not left untracked; server.log has no traceback."""
    fake.script(Reply(agent_json(None, eval="(+ 1 1)")), Reply(agent_json("Two, privately.")))
    program = f"(amacs-e2e-open) (amacs-e2e-send \"hi\") {LIST_MODES} (amacs-e2e-finish)"
    run = run_emacs(home, fake.url, program).check()
    assert "Two, privately." in run.shell
    running = modes_listed(run.stdout)
    assert WRITTEN | {".", "transcripts", "logs", ".git"} <= running.keys(), sorted(running)
    assert any(name.startswith("transcripts/") and name.endswith(".jsonl") for name in running)
    assert open_to_others(running) == {}
    assert running["."] == 0o700 and running["server.json"] == 0o600 and running["shell-history"] == 0o600
    after = modes_on_disk(home)
    assert any(name.startswith(".git/objects/") for name in after)
    assert open_to_others(after) == {}
    # shell-history is Emacs's input ring, not the agent's mind: ignored, not untracked.
    status = git(home, "status", "--porcelain", "--ignored")
    assert "!! shell-history" in status.splitlines() and "?? shell-history" not in status
    log = (home / "logs" / "server.log").read_text()
    assert "Event loop is closed" not in log and "Traceback" not in log, log


def test_an_open_home_is_made_private_at_start(fake, home):
    """A home from before (folder 0755, files 0644, an old .gitignore without shell-history) is
    made private when the server starts, and its .gitignore gains shell-history.  Inside .git only
    the folder is changed: with the home 0700 nobody else reaches what is in it."""
    fake.script(Reply(agent_json("First.")), Reply(agent_json("Second.")))
    run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-send \"one\") (amacs-e2e-finish)").check()
    old_ignore = "memory.db*\ntranscripts/\nlogs/\nserver.json\nserver.pid\n.*.tmp\n"
    (home / ".gitignore").write_text(old_ignore)
    for folder, _dirs, files in os.walk(home):
        if Path(folder) != home and ".git" in Path(folder).relative_to(home).parts:
            continue
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(Path(folder) / name, 0o644)
    os.chmod(home / ".git", 0o755)
    assert set(open_to_others(modes_on_disk(home))) >= {".", ".git", "agent-chat.org", "shell-history",
                                                         "memory.db", "logs/server.log"}
    assert "?? shell-history" in git(home, "status", "--porcelain")

    program = f"(amacs-e2e-open) (amacs-e2e-send \"two\") {LIST_MODES} (amacs-e2e-finish)"
    run = run_emacs(home, fake.url, program).check()
    assert "Second." in run.shell
    running = modes_listed(run.stdout)
    assert open_to_others({k: v for k, v in running.items() if not k.startswith(".git/")}) == {}
    outside_git = {k: v for k, v in modes_on_disk(home).items() if not k.startswith(".git/")}
    assert outside_git[".git"] == 0o700 and outside_git["."] == 0o700
    assert open_to_others(outside_git) == {}
    assert "made the AMACS home" in (home / "logs" / "server.log").read_text()
    assert (home / ".gitignore").read_text() == old_ignore + ("shell-history\n.server.lock\nrewound-spend\nshell-draft\n"
                                                             "budget-limit\n.uncommitted-tick\nmodel-capabilities.json\n")
    status = git(home, "status", "--porcelain")
    assert "shell-history" not in status and ".server.lock" not in status


RESTART_MID_STREAM = (
    "(amacs-e2e-open) (amacs-e2e-send-no-wait \"tell me slowly\") "
    "(amacs-e2e-wait (lambda () (buffer-local-value (quote amacs-shell--stream-start) (get-buffer amacs-shell-buffer-name))) \"the reply to stream\") "
    "(amacs-restart) "
    "(princ (format \"AT-ONCE busy=%S\\n\" amacs-shell-busy)) "
    "(amacs-e2e-wait #'amacs-live-p \"the new server\") "
    "(amacs-e2e-send \"are you back?\") "
    "(princ (format \"AFTER busy=%S state=%S\\n\" amacs-shell-busy (amacs-shell-state))) "
    "(amacs-e2e-finish)")


def test_restart_mid_turn_gives_the_prompt_back(fake, home):
    """M-x amacs-restart while a reply streams: the shell ends the turn at once (the streamed text
    struck through, the prompt back), says the server restarted, and the next input is answered."""
    fake.script(Reply(agent_json("This reply is slow and is cut off by the restart, " * 4), chunks=80,
                      chunk_delay=0.1),
                Reply(agent_json("Back, and listening.")))
    run = run_emacs(home, fake.url, RESTART_MID_STREAM).check()
    assert "AT-ONCE busy=nil" in run.stdout
    assert "AFTER busy=nil state=waiting" in run.stdout
    assert "(the agent keeps none of the text above: the server stopped)" in run.shell
    assert "AMACS server restarted: " in run.shell
    assert "Send a message to restart it" not in run.shell  # stopped on purpose: not reported as a crash
    assert run.shell.count("Back, and listening.") == 1
    assert run.shell.rstrip().endswith("amacs>")
    # The cut-off turn is kept as what happened, not as the person's interrupt (a newcomer's finding).
    assert chat_lines(fake.user_texts()[-1])[-2] == "Agent: (no reply: Emacs disconnected (a restart, or Emacs quit))"


def test_restart_mid_turn_against_a_headless_server(fake, home, tmp_path):
    """The same against a headless server, with the model call hung: the new connection is accepted
    once the old one has gone and its turn stopped (it used to take the session over, the old turn
    going on or its end going nowhere, and the shell waited for ever)."""
    hold = threading.Event()
    called = tmp_path / "called"
    server, _port, _banner = start_headless(home, fake.url)
    try:
        wait_for((home / "server.json").exists, "server.json")
        fake.script(Reply(agent_json("never seen"), hold=hold), Reply(agent_json("Back, and listening.")))
        program = RESTART_MID_STREAM.replace(
            "(amacs-e2e-wait (lambda () (buffer-local-value (quote amacs-shell--stream-start) (get-buffer amacs-shell-buffer-name))) \"the reply to stream\")",
            f"(amacs-e2e-wait (lambda () (file-exists-p {elisp_string(str(called))})) \"the model call\")")
        emacs = start_emacs(home, fake.url, program)
        try:
            wait_for(lambda: len(fake.requests) >= 1, "the first model call", timeout=60)
            called.touch()
            run = finish_emacs(emacs, home).check()
        finally:
            if emacs.poll() is None:
                emacs.kill()
        assert "AT-ONCE busy=nil" in run.stdout
        assert "AFTER busy=nil state=waiting" in run.stdout
        assert "Reconnected to the headless AMACS server" in run.shell
        assert "refused" not in run.shell
        assert run.shell.count("Back, and listening.") == 1
        assert len(fake.requests) == 2
        assert server.poll() is None
    finally:
        hold.set()
        returncode = stop(server)
    assert returncode == 0
    log = (home / "logs" / "server.log").read_text()
    assert "Event loop is closed" not in log and "Traceback" not in log, log


def test_a_second_emacs_is_refused_and_the_first_goes_on(fake, home, tmp_path):
    """Two Emacs, one headless server: the second is refused with a message naming the first, and
    the first's session goes on as if nothing happened."""
    server, _port, _banner = start_headless(home, fake.url)
    go_on = tmp_path / "go-on"
    try:
        wait_for((home / "server.json").exists, "server.json")
        fake.script(Reply(agent_json("One.")), Reply(agent_json("Two, still yours.")))
        first = start_emacs(home, fake.url, (
            "(amacs-e2e-open) (amacs-e2e-send \"one\") "
            f"(amacs-e2e-wait (lambda () (file-exists-p {elisp_string(str(go_on))})) \"the second Emacs\") "
            "(amacs-e2e-send \"two\") (amacs-e2e-finish)"))
        try:
            wait_for(lambda: len(fake.requests) >= 1, "the first Emacs's turn")
            second = run_emacs(home, fake.url, (
                "(amacs-shell) (amacs-e2e-wait-text \"refused this Emacs\") "
                "(accept-process-output nil 0.3) (amacs-e2e-dump) (kill-emacs 0)"),
                AMACS_E2E_OUT=str(tmp_path / "second.txt")).check()
            go_on.touch()
            run = finish_emacs(first, home).check()
        finally:
            if first.poll() is None:
                first.kill()
        assert (f"The AMACS server refused this Emacs: another Emacs (pid {first.pid}) is connected "
                "to this AMACS server") in second.shell
        assert "One." in run.shell and "Two, still yours." in run.shell
        assert "refused" not in run.shell and "Lost the AMACS server" not in run.shell
        assert server.poll() is None
    finally:
        returncode = stop(server)
    assert returncode == 0
