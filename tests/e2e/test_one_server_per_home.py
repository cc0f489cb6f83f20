"""One server per AMACS home: a newcomer's two Emacs sessions on one home wrote
``* Tick 41`` twice in agent-chat.org, two commits for it, and two budgets.

Two real batch Emacs on one home: the second one's server is refused, says
once who serves the home, and never writes; the first goes on untouched.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e.harness import finish_emacs, run_emacs, start_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e


def test_a_second_emacs_on_a_served_home_is_refused_and_the_first_goes_on(fake, home, tmp_path):
    go_on = tmp_path / "go-on"
    fake.script(Reply(agent_json("One.")), Reply(agent_json("Two.")))
    first = start_emacs(home, fake.url,
                        "(amacs-e2e-open) (amacs-e2e-send \"one\") "
                        f"(amacs-e2e-wait (lambda () (file-exists-p \"{go_on}\")) \"the second Emacs\") "
                        "(amacs-e2e-send \"two\") (amacs-e2e-finish)")
    try:
        assert fake.wait_for_requests(1, timeout=60)
        pid = json.loads((home / "server.json").read_text())["pid"]
        second = run_emacs(home, fake.url,
                           "(setq amacs--retry-base 0.2) (amacs-shell) (amacs-e2e-send-no-wait \"from the second\") "
                           "(amacs-e2e-wait-text \"Not trying again\") (amacs-e2e-finish)",
                           AMACS_E2E_OUT=str(tmp_path / "second.txt")).check()
        said = [line for line in second.shell.splitlines() if "did not start:" in line]
        assert len(said) == 1, second.shell
        assert f"another AMACS server (pid {pid}, started by another Emacs) serves {home}" in said[0]
        assert "Trying again in" not in second.shell  # it cannot help while the first serves the home
        assert "Not sent: the AMACS server could not start. M-p brings it back." in second.shell
        go_on.touch()
        run = finish_emacs(first, home).check()
    finally:
        go_on.touch()
        if first.poll() is None:
            first.kill()
    assert "One." in run.shell and "Two." in run.shell
    assert len(fake.requests) == 2  # the second Emacs's input never reached a model
    chat = (home / "agent-chat.org").read_text()
    ticks = re.findall(r"^\* Tick (\d+)$", chat, re.M)
    assert ticks == sorted(set(ticks), key=int), ticks  # each tick once
    assert "from the second" not in chat
