"""One server per AMACS home (a newcomer's two Emacs sessions on one home wrote every tick twice).

The holder is a real second process: ``flock`` is what the kernel gives
and takes back, also from a killed process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amacs_server.persistence.home_lock import HomeInUse, HomeLock

HOLDER = """
import sys, time
from pathlib import Path
from amacs_server.persistence.home_lock import HomeLock
lock = HomeLock(Path(sys.argv[1]), headless=sys.argv[2] == "headless")
lock.acquire()
print("held", flush=True)
for line in sys.stdin:
    if line.strip() == "stopping":
        lock.mark_stopping()
        print("marked", flush=True)
    elif line.strip() == "exit":
        break
"""


class Holder:
    """A process holding HOME's lock, told on its stdin to mark itself stopping or to exit."""

    def __init__(self, home: Path, headless: bool = False) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(home), "headless" if headless else "emacs"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "held\n"

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def holder(tmp_path: Path):
    made: list[Holder] = []

    def make(headless: bool = False) -> Holder:
        made.append(Holder(tmp_path, headless))
        return made[-1]

    yield make
    for h in made:
        h.close()


def test_a_second_server_on_a_served_home_is_refused_at_once_saying_who_serves_it(tmp_path, holder):
    h = holder()
    started = time.monotonic()
    with pytest.raises(HomeInUse) as caught:
        HomeLock(tmp_path, headless=False).acquire()
    assert time.monotonic() - started < 1  # no wait for a server that is not stopping
    message = str(caught.value)
    assert f"another AMACS server (pid {h.proc.pid}, started by another Emacs) serves {tmp_path}" in message
    assert "AMACS_HOME or amacs-home" in message


def test_a_headless_holder_is_named_with_how_to_join_it(tmp_path, holder):
    h = holder(headless=True)
    with pytest.raises(HomeInUse, match=rf"a headless AMACS server \(pid {h.proc.pid}\) serves .*M-x amacs-connect"):
        HomeLock(tmp_path, headless=False).acquire()


def test_the_next_server_waits_for_a_stopping_one_and_takes_the_home_when_it_exits(tmp_path, holder):
    h = holder()
    h.tell("stopping")
    assert h.proc.stdout is not None and h.proc.stdout.readline() == "marked\n"
    lock = HomeLock(tmp_path, headless=False)
    # The holder exits 0.5 s from now, while the next server waits for it.
    subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep(0.5); os.kill({h.proc.pid}, 15)"])
    started = time.monotonic()
    lock.acquire(stopping_wait=10)
    assert 0.3 < time.monotonic() - started < 5
    assert h.proc.wait(5) is not None


def test_a_stopping_server_that_does_not_exit_is_said_after_the_wait(tmp_path, holder):
    h = holder()
    h.tell("stopping")
    assert h.proc.stdout is not None and h.proc.stdout.readline() == "marked\n"
    with pytest.raises(HomeInUse, match=rf"\(pid {h.proc.pid}\) that served .* is still stopping"):
        HomeLock(tmp_path, headless=False).acquire(stopping_wait=0.3)


def test_a_killed_holder_leaves_the_home_free(tmp_path, holder):
    h = holder()
    os.kill(h.proc.pid, signal.SIGKILL)
    h.proc.wait()
    HomeLock(tmp_path, headless=False).acquire(stopping_wait=0)  # no wait, no error: the kernel let go


def test_a_file_system_without_locks_serves_unguarded_and_says_so(tmp_path, monkeypatch, caplog):
    """flock fails with ENOLCK on some network mounts: the home is still served (not refused for
    ever), and the log says two servers would not be stopped there."""
    import errno
    import fcntl

    def no_locks(_fd: int, _op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    lock = HomeLock(tmp_path, headless=False)
    with caplog.at_level("WARNING", logger="amacs.home_lock"):
        lock.acquire()
    assert "two servers on this home would not be stopped" in caplog.text
    lock.mark_stopping()  # holds nothing: does nothing, fails not
