"""Quitting Emacs during a reply: the model call is closed and the server exits at once.

A newcomer quit Emacs (C-x C-c) while a slow reply streamed: the server said
"turn interrupted" at once, then kept receiving the reply nobody would see
until it ended (7 s), and `./amacs` on that home waited for it meanwhile.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.e2e.harness import elisp_string, finish_emacs, start_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is gone too
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("reply", ["slow-to-start", "slow-stream"])
def test_quitting_emacs_mid_reply_closes_the_call_and_the_server_exits(fake, home, reply):
    """A reply that takes ~10 s (its headers late, or its stream slow); Emacs quits while it
    comes: the server closes the request (the fake sees the connection cut) and exits within
    2 s, not when the reply would have ended."""
    story = "Once upon a time " + "there was a very long story that went on and on. " * 20
    if reply == "slow-to-start":
        fake.script(Reply(agent_json(story), delay=10.0, chunks=50, chunk_delay=0.01))
    else:
        fake.script(Reply(agent_json(story), chunks=50, chunk_delay=0.2))
    marker = home.parent / "quit-now"
    program = ('(amacs-e2e-open) (amacs-e2e-send-no-wait "tell me a long story") '
               f'(amacs-e2e-wait (lambda () (file-exists-p {elisp_string(str(marker))})) "the model call") '
               '(kill-emacs 0)')
    emacs = start_emacs(home, fake.url, program)
    try:
        assert fake.wait_for_requests(1, timeout=60), "the model was never called"
        pid = json.loads((home / "server.json").read_text())["pid"]
        time.sleep(1.0)  # the answer is under way (its headers awaited, or its text streaming)
        marker.touch()
        run = finish_emacs(emacs, home, timeout=60)
        quit_at = time.monotonic()
    finally:
        if emacs.poll() is None:
            emacs.kill()
    assert run.returncode == 0, (run.stdout, run.stderr)
    while _alive(pid) and time.monotonic() < quit_at + 15:
        time.sleep(0.05)
    took = time.monotonic() - quit_at
    assert not _alive(pid), "the server still runs 15 s after Emacs quit"
    while not fake.cut_off and time.monotonic() < quit_at + 2.0:
        time.sleep(0.05)
    assert took < 2.0, f"the server took {took:.1f} s to exit after Emacs quit mid-reply"
    assert fake.cut_off, "the model call was not closed: the fake sent the whole reply"
    assert fake.cut_off[0] - quit_at < 2.0


def test_a_signal_while_the_server_stops_is_one_log_line_not_a_traceback(fake, home):
    """C-x C-c asks the server to stop, then Emacs going sends SIGHUP while the server cleans up:
    that is normal, one line in logs/server.log, no traceback. Here the clean-up waits for a
    running turn (its model call is slow): SIGTERM starts it, SIGHUP comes in the middle."""
    fake.respond_with(lambda body: Reply(agent_json("late"), delay=3.0))
    signal_server = "(signal-process (process-id (amacs-server-process)) '{})"
    program = (f"(amacs-e2e-open) (amacs-e2e-send-no-wait {elisp_string('hi')}) "
               "(amacs-e2e-wait (lambda () fake-requested) \"the model call\") "
               f"{signal_server.format('SIGTERM')} (sleep-for 0.7) {signal_server.format('SIGHUP')} "
               "(amacs-e2e-wait-disconnect) (amacs-e2e-finish)")
    proc = start_emacs(home, fake.url, f"(defvar fake-requested nil) (run-with-timer 0 0.05 (lambda () "
                       f"(setq fake-requested (file-exists-p {elisp_string(str(home / 'requested'))})))) "
                       + program)
    deadline = time.monotonic() + 60
    while (not any(r["path"].rstrip("/") == "/v1/messages" for r in fake.requests)
           and time.monotonic() < deadline):
        time.sleep(0.05)
    (home / "requested").write_text("")
    finish_emacs(proc, home, timeout=60).check()
    log = (home / "logs" / "server.log").read_text(errors="replace")
    assert "Traceback" not in log, log
    assert log.count("stopping on signal SIGTERM") == 1, log
    assert "signal SIGHUP while stopping: the clean-up goes on" in log, log
