"""Issue 9: `M-x amacs-shell' joins a live headless server; server.json belongs to the server that wrote it."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.harness import elisp_string, emacs_env, run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

REPORT = '(princ (format "OWN-SERVER=%S\\n" (amacs-server-process)))'


def start_headless(home: Path, base_url: str, **extra: str) -> tuple[subprocess.Popen[str], int, str]:
    """Start `python -m amacs_server --headless'; return it, its port and its second stdout line."""
    env = emacs_env(home, base_url, **extra)
    server = subprocess.Popen([sys.executable, "-m", "amacs_server", "--headless"], env=env,
                              stdout=subprocess.PIPE, text=True)
    port_line = server.stdout.readline()
    assert port_line.strip().isdigit(), port_line  # the port stays the very first line
    return server, int(port_line), server.stdout.readline()


def wait_for(predicate, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def serving_lines(home: Path) -> list[str]:
    return [line for line in (home / "logs" / "server.log").read_text().splitlines() if "serving on" in line]


def stop(server: subprocess.Popen[str]) -> int:
    server.terminate()
    try:
        return server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
        raise


def test_shell_joins_a_live_headless_server(fake, home):
    """The shell connects to the headless server in server.json; no second server; the file survives."""
    server, port, banner = start_headless(home, fake.url)
    info_path = home / "server.json"
    try:
        wait_for(info_path.exists, "server.json")
        info = json.loads(info_path.read_text())
        assert info["port"] == port and info["pid"] == server.pid and info["headless"] is True
        token = info["token"]
        assert len(token) == 64
        assert f"AMACS headless server on 127.0.0.1:{port}, home {home.resolve()}" in banner
        assert "M-x amacs-connect" in banner

        fake.script(Reply(agent_json("Hello from the headless server.")))
        program = f"(amacs-e2e-open) (amacs-e2e-send {elisp_string('hi')}) {REPORT} (amacs-e2e-finish)"
        run = run_emacs(home, fake.url, program).check()
        connected = f"Connected to the headless AMACS server on port {port} (pid {server.pid})."
        assert connected in run.shell
        # Said after what the shell shows first (the greeting, a home's last exchanges), not above
        # it: a newcomer found it above the first screen and thought it missing.
        assert run.shell.index("Type to the agent") < run.shell.index(connected) < run.shell.index("amacs> hi"), run.shell
        assert "Hello from the headless server." in run.shell
        assert "OWN-SERVER=nil" in run.stdout
        assert len(serving_lines(home)) == 1  # only the headless server ever served this home
        assert server.poll() is None  # it outlives the Emacs that joined it
        assert json.loads(info_path.read_text())["token"] == token
        assert stat.S_IMODE(info_path.stat().st_mode) == 0o600

        # A second headless server on the same home refuses to start and leaves the file alone.
        second = subprocess.run([sys.executable, "-m", "amacs_server", "--headless"],
                                env=emacs_env(home, fake.url), capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert second.stdout.startswith(f"AMACS server error: a headless AMACS server (pid {server.pid}")
        assert json.loads(info_path.read_text())["token"] == token
    finally:
        returncode = stop(server)
    assert returncode == 0
    assert not info_path.exists()  # removed on SIGTERM


def test_stale_server_json_is_ignored(fake, home):
    """A server.json naming a dead pid is stale: Emacs starts its own server, which replaces it."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    home.mkdir(parents=True)
    info_path = home / "server.json"
    info_path.write_text(json.dumps({"port": 1, "pid": dead.pid, "headless": True, "token": "d" * 64}))
    fake.script(Reply(agent_json("My own server.")))
    program = (f"(amacs-e2e-open) (amacs-e2e-send {elisp_string('hi')}) "
               "(princ (format \"OWN-SERVER-LIVE=%S\\n\" (and (process-live-p (amacs-server-process)) t))) "
               "(princ (format \"PID-IN-FILE=%S\\n\" (alist-get 'pid (amacs--read-server-info)))) "
               "(princ (format \"SERVER-PID=%S\\n\" (process-id (amacs-server-process)))) "
               "(amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program).check()
    assert "My own server." in run.shell
    assert "Connected to the headless" not in run.shell
    assert "OWN-SERVER-LIVE=t" in run.stdout
    pids = dict(line.split("=", 1) for line in run.stdout.splitlines() if "PID" in line)
    assert pids["PID-IN-FILE"] == pids["SERVER-PID"]  # the stale file was replaced by the live server's
    assert not info_path.exists()  # and removed when that server exited


def test_a_live_headless_server_whose_token_emacs_lacks_keeps_the_home_to_itself(fake, home):
    """Emacs lacks the headless server's token: the server it starts refuses the served home
    (two servers on one home wrote every tick twice), says so once and leaves server.json alone."""
    server, port, _banner = start_headless(home, fake.url, AMACS_TOKEN="c" * 64)
    info_path = home / "server.json"
    try:
        wait_for(info_path.exists, "server.json")
        before = info_path.read_text()
        assert "token" not in json.loads(before)  # the person holds it; it is not written down
        program = ("(setq amacs--retry-base 0.2) (amacs-shell) (amacs-e2e-send-no-wait \"hi\") "
                   "(amacs-e2e-wait-text \"Not trying again\") (amacs-e2e-finish)")
        run = run_emacs(home, fake.url, program).check()
        said = [line for line in run.shell.splitlines() if "did not start:" in line]
        assert len(said) == 1, run.shell
        assert f"a headless AMACS server (pid {server.pid}) serves {home}: connect to it with M-x amacs-connect" \
            in said[0]
        assert not fake.requests
        assert info_path.read_text() == before
        assert len(serving_lines(home)) == 1  # only the headless server ever served this home
        assert server.poll() is None
    finally:
        returncode = stop(server)
    assert returncode == 0
    assert not info_path.exists()
