"""Tool servers that misbehave (tests/mcp_hostile_server.py, written with the SDK): the AMACS
server stays up, says what happened in a line, and leaves no process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.agent_fakes import send, session
from tests.e2e.harness import finish_emacs, run_emacs, start_emacs
from tests.mcp_servers import hostile_server, write_config

pytestmark = pytest.mark.e2e




def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def test_no_tool_server_is_left_when_the_amacs_server_is_killed_in_a_blocked_call(fake, evals, home):
    write_config(home, {"block": hostile_server("block", timeout=600)})
    evals.script([("block", '(agent-tool "block/block")')])
    emacs = start_emacs(home, fake.url, session(send("go")))
    try:
        log = home / "logs" / "mcp-block.log"
        deadline = time.monotonic() + 90
        while not (log.exists() and "blocking in" in log.read_text()):
            assert time.monotonic() < deadline and emacs.poll() is None, "the blocking call never started"
            time.sleep(0.2)
        blocked = int(re.search(r"blocking in (\d+)", log.read_text()).group(1))
        server = json.loads((home / "server.json").read_text())["pid"]
        assert alive(blocked)
        os.kill(server, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while alive(blocked) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(blocked), "the tool server outlived the killed AMACS server"
    finally:
        emacs.kill()
        finish_emacs(emacs, home, timeout=30)


def test_a_big_tool_result_is_cut_with_its_file_and_a_big_call_is_refused_with_the_link_kept(fake, evals, home):
    """17 MiB from a tool (over EPC's 16 MiB) reaches the agent cut, saying which private file holds
    it whole; an eval that sends 17 MiB gets an error; the evals after both still work."""
    write_config(home, {"big": hostile_server("big", timeout=300)})
    forms = [("big", '(let ((r (agent-tool "big/big" :megabytes 17))) (list (length r) (substring r 0 300)))'),
             ("after", "(+ 1 2)"),
             ("send", '(agent-tool "big/big" :megabytes (make-string (* 17 1024 1024) ?x))'),
             ("again", "(+ 2 3)")]
    evals.script(forms)
    run_emacs(home, fake.url, session(send("go")), timeout=180).check()
    big, after, sent, again = evals.results()
    assert big["success"], big
    found = re.search(r"\[cut: the server's answer is (\d+) bytes; its first 1040384 follow, as the server wrote "
                      r"them; the whole answer is in (\S+)\]", big["result"])
    assert found, big
    size, path = int(found.group(1)), found.group(2)
    assert path.startswith(str(home / "transcripts" / "results"))
    assert size > 17825792 and os.path.getsize(path) == size and oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert after == {**after, "success": True, "result": "3"}, after
    assert not sent["success"] and "more than a message to the AMACS server can" in sent["error"], sent
    assert again["success"] and again["result"] == "5", again

