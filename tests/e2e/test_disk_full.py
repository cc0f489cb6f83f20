"""A disk that fills up mid-session (issue 12, item 5): one clear message, nothing raw, nothing lost.

Batch Emacs, the real server and the fake model in a mount namespace whose home
is a small tmpfs: a turn works, the disk is filled, the person keeps typing,
then room is made and the session goes on.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import emacs_env
from tests.e2e.test_startup_faults import NO_NAMESPACES, run_in_namespace
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

PROGRAM = r"""
(amacs-e2e-open)
(amacs-e2e-send "before")
(call-process "sh" nil nil nil "-c" (format "dd if=/dev/zero of=%s/filler bs=4k 2>/dev/null; true" (getenv "AMACS_HOME")))
(amacs-e2e-send "while full one")
(amacs-e2e-send "while full two")
(delete-file (expand-file-name "filler" (getenv "AMACS_HOME")))
(amacs-e2e-send "after")
(amacs-e2e-finish)
"""


@pytest.mark.skipif(NO_NAMESPACES is not None, reason=str(NO_NAMESPACES))
def test_a_disk_that_fills_mid_session_is_said_once_and_the_session_goes_on(tmp_path, fake, home):
    fake.respond_with(lambda body: Reply(agent_json("Answered.")))
    starts = tmp_path / "starts"
    starts.touch()
    home.mkdir(parents=True)
    setup = f"mount -t tmpfs -o size=4m tmpfs {home}"
    env_home = emacs_env(home, fake.url)["AMACS_HOME"]
    assert env_home == str(home)
    run = run_in_namespace(setup, home, fake.url, PROGRAM, starts)
    run.check()
    shell = run.shell
    print(shell)
    assert "OperationalError" not in shell and "Internal error" not in shell
    assert shell.count("The disk holding the AMACS home") == 2 and "Free some space there, then send again" in shell
    after = shell[shell.index("after"):]
    assert "Answered." in after  # room made: the session goes on
