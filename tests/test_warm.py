"""The warm server (amacs_server/warm.py) and its launcher (warm_launch.py), as real processes.

A launch that finds no warm server becomes ``python -m amacs_server`` and starts one; once it
listens, a launch is a fork of it that prints its port on the launcher's stdout, serves a home,
and stops when the launcher is told to stop or is killed (as Emacs does).
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amacs_server import warm_launch

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "amacs_server" / "warm_launch.py"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def wait_until(check: object, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def warm_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A private warm folder (short: a Unix socket's path is at most ~108 bytes); its warm server
    is stopped at the end."""
    directory = Path(tempfile.mkdtemp(prefix="amw-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_"))}
    env.update(AMACS_WARM_DIR=str(directory), AMACS_WARM_DELAY="0", AMACS_HOME=str(tmp_path / "home"),
               AMACS_TOKEN="t" * 64, ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    yield env
    for lock in directory.glob("*.lock"):
        text = lock.read_text().strip()
        if text.isdigit() and alive(int(text)) and "amacs_server.warm" in Path(f"/proc/{text}/cmdline").read_text():
            os.kill(int(text), signal.SIGTERM)
    subprocess.run(["rm", "-rf", str(directory)], check=False)


def launch(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-S", str(LAUNCHER), *args], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def warm_pid(env: dict[str, str]) -> int:
    """Start the warm server (a launch that finds none does), wait until it listens; its pid."""
    launch(env, "--help").communicate(timeout=60)
    directory = Path(env["AMACS_WARM_DIR"])
    key = stamp_in(env)
    wait_until(lambda: (directory / f"{key}.sock").exists(), what="the warm server to listen")
    return int((directory / f"{key}.lock").read_text())


def stamp_in(env: dict[str, str]) -> str:
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from amacs_server.warm_launch import stamp; print(stamp())"
    return subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[1])


def test_a_launch_without_a_warm_server_is_served_at_once_and_starts_one(warm_env: dict[str, str]) -> None:
    out, _ = launch(warm_env, "--help").communicate(timeout=60)
    assert out.startswith("usage: amacs-server")  # python -m amacs_server, as before
    directory = Path(warm_env["AMACS_WARM_DIR"])
    wait_until(lambda: list(directory.glob("*.sock")), what="the warm server it started")
    assert oct(directory.stat().st_mode & 0o777) == "0o700"
    log = next(directory.glob("*.log")).read_text()
    assert "ready on" in log
    assert "sk-ant-test" not in Path(f"/proc/{int(next(directory.glob('*.lock')).read_text())}/environ").read_text()


def test_a_launch_is_a_fork_of_the_warm_server_serving_the_home(warm_env: dict[str, str]) -> None:
    """The fork prints its port on the launcher's stdout, serves the home named in the launcher's
    environment, and stops cleanly (server.json removed) when the launcher is told to stop."""
    warm = warm_pid(warm_env)
    proc = launch(warm_env)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    home = Path(warm_env["AMACS_HOME"])
    wait_until(lambda: (home / "server.json").exists(), what="server.json")
    info = json.loads((home / "server.json").read_text())
    assert info["port"] == port
    server = info["pid"]
    assert server != proc.pid
    assert parent_of(server) == warm  # forked, not started afresh
    assert f"forked server {server}" in "".join(p.read_text() for p in Path(warm_env["AMACS_WARM_DIR"]).glob("*.log"))
    log_file = home / "logs" / "server.log"
    wait_until(lambda: "serving on" in log_file.read_text(), what="the server to serve")
    proc.send_signal(signal.SIGTERM)  # passed on: the fork stops as a server does
    status = proc.wait(timeout=30)
    wait_until(lambda: not alive(server), what="the fork to stop")
    log = "".join(p.read_text() for p in Path(warm_env["AMACS_WARM_DIR"]).glob("*.log"))
    assert f"server {server} ended ({status})" in log  # the fork's status is the launcher's
    assert not (home / "server.json").exists()
    assert "stopping on signal SIGTERM" in (home / "logs" / "server.log").read_text()


def test_a_killed_launcher_stops_its_fork(warm_env: dict[str, str]) -> None:
    """Emacs killed the server process (delete-process: SIGKILL): the fork sees the socket close."""
    warm_pid(warm_env)
    proc = launch(warm_env)
    assert proc.stdout is not None
    proc.stdout.readline()
    home = Path(warm_env["AMACS_HOME"])
    wait_until(lambda: (home / "server.json").exists(), what="server.json")
    server = json.loads((home / "server.json").read_text())["pid"]
    proc.kill()
    proc.wait(timeout=10)
    try:
        wait_until(lambda: not alive(server), timeout=30, what="the fork to stop")
    except AssertionError:  # what the fork was doing, for a failure seen only under load
        threads = Path(f"/proc/{server}/task")
        stacks = {t.name: (t / "wchan").read_text() for t in threads.iterdir()} if threads.exists() else {}
        log = home / "logs" / "server.log"
        raise AssertionError(f"the fork {server} did not stop; its threads wait in {stacks}; its log:\n"
                             + (log.read_text() if log.exists() else "(none)")) from None


def test_the_launcher_imports_no_module_that_imports_re_or_enum(warm_env: dict[str, str]) -> None:
    """Profiled (tmux, load 4-5): Emacs's call to start the server reached the launcher's first line
    120-270 ms later, and its imports of json, socket, signal and hmac (re, enum, collections,
    functools: ~25 ms of its ~45 ms of CPU) were on the path to the server's port; it uses the C
    modules under them.  Seen in the launcher's own import times, on a launch the warm server forks."""
    warm = warm_pid(warm_env)
    proc = subprocess.Popen([sys.executable, "-S", "-X", "importtime", str(LAUNCHER)], env=warm_env, cwd=ROOT,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    home = Path(warm_env["AMACS_HOME"])
    wait_until(lambda: (home / "server.json").exists(), what="server.json")
    assert parent_of(json.loads((home / "server.json").read_text())["pid"]) == warm  # a fork: the launcher stood in
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    imported = {line.split("|")[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    assert {"os", "_socket", "_json"} <= imported
    assert not imported & {"re", "enum", "collections", "functools", "json", "socket", "signal", "hmac", "selectors"}


def test_emacs_runs_the_launcher_from_its_bytecode(warm_env: dict[str, str]) -> None:
    """Run by path, the launcher was compiled at every start (13-34 ms of CPU on 2 loaded cores,
    between Emacs's start of the server and its port line): Emacs imports it, and its code comes
    from the bytecode scripts/setup.sh writes.  Its path stays the command's last word."""
    elisp = ("(progn (add-to-list 'package-directory-list \"/usr/share/emacs/site-lisp/elpa\") (package-initialize) "
             "(require 'amacs-server) (let ((noninteractive nil)) "
             "(princ (mapconcat #'identity (amacs--server-launch-command) \"\\n\"))))")
    command = subprocess.run(["emacs", "-Q", "--batch", "-L", str(ROOT / "elisp"), "--eval", elisp], capture_output=True,
                             text=True, timeout=60, check=True).stdout.split("\n")
    assert command[0] == str(ROOT / ".venv" / "bin" / "python") and command[-1] == str(LAUNCHER)
    py_compile.compile(str(LAUNCHER), cfile=importlib.util.cache_from_source(str(LAUNCHER)), doraise=True)
    warm = warm_pid(warm_env)
    proc = subprocess.Popen([command[0], "-v", *command[1:]], env=warm_env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    home = Path(warm_env["AMACS_HOME"])
    wait_until(lambda: (home / "server.json").exists(), what="server.json")
    assert parent_of(json.loads((home / "server.json").read_text())["pid"]) == warm
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert f"code object from '{importlib.util.cache_from_source(str(LAUNCHER))}'" in err


def test_the_launchers_request_is_the_json_json_dumps_writes() -> None:
    """Its own encoder (json is not imported): the fork reads the request with json.loads."""
    message = {"argv": ["--home", "é\udcff\n\"\\"], "env": {**os.environ, "Z": "\u2028\x00"}, "cwd": "/tmp",
               "pid": 5, "none": None, "flag": True}
    assert warm_launch._json(message) == json.dumps(message)
    with pytest.raises(TypeError):
        warm_launch._json({"float": 1.5})


def test_the_forks_status_is_the_launchers(warm_env: dict[str, str]) -> None:
    warm_pid(warm_env)
    proc = launch(warm_env, "--no-such-option")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "unrecognized arguments: --no-such-option" in err
    key = stamp_in(warm_env)
    assert "forked server" in (Path(warm_env["AMACS_WARM_DIR"]) / f"{key}.log").read_text()


def test_an_idle_warm_server_exits(warm_env: dict[str, str]) -> None:
    warm_env["AMACS_WARM_IDLE"] = "1"
    warm = warm_pid(warm_env)
    wait_until(lambda: not alive(warm), timeout=30, what="the idle warm server to exit")
    assert not list(Path(warm_env["AMACS_WARM_DIR"]).glob("*.sock"))


def test_a_folder_others_can_open_is_not_used(warm_env: dict[str, str], tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    assert not warm_launch.private_dir(str(open_dir))
    warm_env["AMACS_WARM_DIR"] = str(open_dir)
    out, _ = launch(warm_env, "--help").communicate(timeout=60)
    assert out.startswith("usage: amacs-server")
    time.sleep(0.5)
    assert list(open_dir.iterdir()) == []  # no warm server was started there


def test_a_stopped_warm_server_removes_its_socket(warm_env: dict[str, str]) -> None:
    warm = warm_pid(warm_env)
    os.kill(warm, signal.SIGTERM)
    wait_until(lambda: not alive(warm), timeout=30, what="the warm server to stop")
    assert not list(Path(warm_env["AMACS_WARM_DIR"]).glob("*.sock"))
    assert not next(Path(warm_env["AMACS_WARM_DIR"]).glob("*.lock")).read_text()


def start_early(env: dict[str, str], directory: Path, token: str) -> subprocess.Popen[str]:
    """./amacs's early request, run by a shell that stays (./amacs waits for Emacs): its shell."""
    command = f"{sys.executable} -S {LAUNCHER} --early {directory} </dev/null >/dev/null 2>&1 & exec sleep 600"
    return subprocess.Popen(["sh", "-c", command], env={**env, "AMACS_EARLY_TOKEN": token}, cwd=ROOT, text=True)


def early_server(env: dict[str, str]) -> tuple[int, int]:
    """The port and pid of the early fork, once it serves the home (no launcher has asked yet)."""
    home = Path(env["AMACS_HOME"])
    wait_until(lambda: (home / "server.json").exists(), what="the early fork's server.json")
    info = json.loads((home / "server.json").read_text())
    return info["port"], info["pid"]


@pytest.fixture
def early_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="ame-"))  # as ./amacs's mktemp -d: 0700
    yield directory
    subprocess.run(["rm", "-rf", str(directory)], check=False)


def test_the_home_is_served_before_emacs_asks_and_emacs_takes_that_server(
        warm_env: dict[str, str], early_dir: Path) -> None:
    """./amacs asks for the home's server while Emacs starts; the launcher Emacs starts (with
    the token ./amacs gave both as its own) stands in for that server: its port, its status."""
    warm = warm_pid(warm_env)
    token = "e" * 64
    shell = start_early(warm_env, early_dir, token)
    try:
        port, server = early_server(warm_env)  # listening, and the home read, before anyone asked
        assert parent_of(server) == warm
        log_file = Path(warm_env["AMACS_HOME"]) / "logs" / "server.log"
        wait_until(lambda: "serving on" in log_file.read_text(), what="the early server to serve")
        proc = launch({**warm_env, "AMACS_EARLY": str(early_dir), "AMACS_TOKEN": token})
        assert proc.stdout is not None
        assert int(proc.stdout.readline()) == port  # the early fork's port, passed on
        assert json.loads((Path(warm_env["AMACS_HOME"]) / "server.json").read_text())["pid"] == server
        proc.send_signal(signal.SIGTERM)  # passed on to it, as to a fork asked for by Emacs
        status = proc.wait(timeout=30)
        wait_until(lambda: not alive(server), what="the early fork to stop")
        log = "".join(p.read_text() for p in Path(warm_env["AMACS_WARM_DIR"]).glob("*.log"))
        assert f"server {server} ended ({status})" in log
        assert "stopping on signal SIGTERM" in log_file.read_text()
    finally:
        shell.kill()


def test_a_connection_without_the_token_is_not_given_the_early_server(
        warm_env: dict[str, str], early_dir: Path) -> None:
    """Another program of this user that finds ./amacs's folder gets nothing without the token;
    the Emacs that has it still gets the server afterwards."""
    warm_pid(warm_env)
    token = "e" * 64
    shell = start_early(warm_env, early_dir, token)
    try:
        port, server = early_server(warm_env)
        import socket

        stranger = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stranger.settimeout(10)
        wait_until(lambda: (early_dir / warm_launch.EARLY_SOCKET).exists(), what="the early socket")
        stranger.connect(str(early_dir / warm_launch.EARLY_SOCKET))
        warm_launch._send(stranger, {"token": "x" * 64})
        data, fds, _flags, _addr = socket.recv_fds(stranger, 65536, 3)
        assert (data, fds) == (b"", [])  # closed unanswered
        stranger.close()
        proc = launch({**warm_env, "AMACS_EARLY": str(early_dir), "AMACS_TOKEN": token})
        assert proc.stdout is not None
        assert int(proc.stdout.readline()) == port
        proc.kill()
        proc.wait(timeout=10)
        wait_until(lambda: not alive(server), what="the early fork to stop with its launcher")
    finally:
        shell.kill()


def test_an_early_server_asked_for_otherwise_is_stopped_and_emacs_gets_its_own(
        warm_env: dict[str, str], early_dir: Path) -> None:
    """Emacs asked for another server than ./amacs did (here another model): the early one,
    which holds the home, is stopped first; Emacs's own serves."""
    warm_pid(warm_env)
    token = "e" * 64
    shell = start_early(warm_env, early_dir, token)
    try:
        port, server = early_server(warm_env)
        proc = launch({**warm_env, "AMACS_EARLY": str(early_dir), "AMACS_TOKEN": token,
                       "AMACS_MODEL": "claude-other"})
        assert proc.stdout is not None
        assert int(proc.stdout.readline()) != port
        assert not alive(server)
        own = json.loads((Path(warm_env["AMACS_HOME"]) / "server.json").read_text())["pid"]
        assert own != server and alive(own)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        shell.kill()


def test_an_early_server_nobody_takes_stops_when_amacs_is_gone(
        warm_env: dict[str, str], early_dir: Path) -> None:
    warm_pid(warm_env)
    shell = start_early(warm_env, early_dir, "e" * 64)
    _port, server = early_server(warm_env)
    shell.kill()  # ./amacs gone (its terminal closed) before Emacs asked
    shell.wait(timeout=10)
    wait_until(lambda: not alive(server), timeout=30, what="the early fork to stop")


def test_a_forks_first_request_finds_the_replys_schema_made() -> None:
    """Profiled: a fork's first turn imported the reply's model, built it and made its JSON schema
    (30-70 ms between the person's RET and the request, at load 4-11); the preload does it once."""
    code = ("import sys; from amacs_server.research.forkserver import preload; preload(['anthropic']); "
            "from amacs_server.inference.parse import response_schema; "
            "print('amacs_server.inference.response_model' in sys.modules, response_schema.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert out.split() == ["True", "1"]


def test_a_forks_first_reply_finds_its_org_converter_imported() -> None:
    """Profiled: a fork's first reply imported the markdown-to-org converter (its regexes compiled)
    between the model's last byte and the reply sent to Emacs; the preload imports it once."""
    code = ("import sys; from amacs_server.research.forkserver import preload; preload(['anthropic']); "
            "print('amacs_server.text.org_markup' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert out.split() == ["True"]


def test_a_forks_runtime_build_imports_nothing(tmp_path: Path) -> None:
    """Profiled: a fork's build imported hello (~12 ms at load 4) while Emacs's hello waited for
    the build; every module the build needs is preloaded (a new home and a returning one)."""
    code = f"""
import gc, os, sys
from pathlib import Path
os.environ.update(ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL="http://127.0.0.1:9", AMACS_TOKEN="t" * 64)
from amacs_server.research.forkserver import preload
preload(["anthropic"])
from amacs_server import serve
from amacs_server.config import load_config
from amacs_server.scrub import Scrubber
from amacs_server.transport.server import AmacsEPCServer
for run in range(2):
    os.environ["AMACS_HOME"] = {str(tmp_path / "home")!r}
    config = load_config(dict(os.environ))
    (config.home / "logs").mkdir(parents=True, exist_ok=True)
    before = set(sys.modules)
    server = AmacsEPCServer("t" * 64, headless=False, starting=True)
    rt = serve.RuntimeBuilder(config, server, Scrubber({{}}), headless=True)._build()
    print(sorted(set(sys.modules) - before))
    rt.stop()
    server.server_close()
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert out.split("\n")[:2] == ["[]", "[]"]


def test_a_fork_publishes_its_methods_before_it_answers_hello(tmp_path: Path) -> None:
    """Profiled (tmux, load 5): the methods were published by a thread started once hello was
    answered, 0.4-7 ms later, and the submit Emacs sent at once waited for it.  A fork has their
    module imported: they are published as the runtime is built, before hello's answer."""
    code = f"""
import os
os.environ.update(ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL="http://127.0.0.1:9", AMACS_TOKEN="t" * 64,
                  AMACS_HOME={str(tmp_path / "home")!r})
from amacs_server.research.forkserver import preload
preload(["anthropic"])
from amacs_server import serve
from amacs_server.config import load_config
from amacs_server.scrub import Scrubber
from amacs_server.transport.server import AmacsEPCServer
config = load_config(dict(os.environ))
(config.home / "logs").mkdir(parents=True, exist_ok=True)
server = AmacsEPCServer("t" * 64, headless=False, starting=True)
rt = serve.RuntimeBuilder(config, server, Scrubber({{}}), headless=False)._build()
print(server.published(), server.get_method("submit").__name__)
rt.stop()
server.server_close()
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert out.split() == ["True", "submit"]


def test_a_forks_first_input_and_command_line_find_what_the_warm_server_made(tmp_path: Path) -> None:
    """Profiled (tmux, load 11): a fork's first submit made its argument model (pydantic's
    create_model and its validator: 3-9 ms of CPU after the person's RET), its publish read every
    method's signature again, and its main built the command line's parser (~3 ms before the
    port line).  The warm server makes them once: in a fork's runtime (published as a fork's is),
    the person's first input is taken with no model made and no signature read, and main parses
    its arguments with the parser made before."""
    code = f"""
import argparse, inspect, os
os.environ.update(ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL="http://127.0.0.1:9", AMACS_TOKEN="t" * 64,
                  AMACS_HOME={str(tmp_path / "home")!r})
from amacs_server.research.forkserver import preload
preload(["anthropic"])
from amacs_server import arguments, serve
from amacs_server.config import load_config
from amacs_server.scrub import Scrubber
from amacs_server.transport.server import AmacsEPCServer
def made_again(*_args, **_kwargs):
    raise AssertionError("made in the fork")
arguments.create_model = inspect.signature = made_again
argparse.ArgumentParser.__init__ = made_again
config = load_config(dict(os.environ))
(config.home / "logs").mkdir(parents=True, exist_ok=True)
server = AmacsEPCServer("t" * 64, headless=False, starting=True)
rt = serve.RuntimeBuilder(config, server, Scrubber({{}}), headless=False)._build()
taken = server.get_method("submit")("ask at once", {{"origin": "key"}})
print(taken, serve.parser().parse_args([]).headless)
rt.stop()
server.server_close()
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["t", "False"]  # taken (t, as Emacs gets it); not headless


def test_a_forks_first_message_from_emacs_is_read_with_regexes_compiled_before() -> None:
    """sexpdata compiles its reader's regexes for each message it reads (re's cache keeps them): a
    fork's first message from Emacs, its hello, compiled them again (1.7 ms of CPU more than the
    second).  After the preload, reading one compiles nothing."""
    code = ("import re, sys; from amacs_server.research.forkserver import preload; preload(['anthropic']); "
            "from amacs_server.transport.server import unpack\n"
            "def compiled(*_args, **_kwargs):\n    raise AssertionError('a regex compiled in the fork')\n"
            "re._compiler.compile = compiled\n"
            "print(unpack(b'(call 7 submit \"ask at once\" (:origin \"key\"))')[:2])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["('call',", "7)"]


def test_the_quit_note_lost_with_a_closed_terminal_is_not_marked_said(warm_env: dict[str, str]) -> None:
    """A closed terminal window hangs up on Emacs and ./amacs; ./amacs's quit note then goes to a
    terminal that is gone (EIO) and must stay due, for the next start's shell to say it."""
    warm = warm_pid(warm_env)
    told = Path(warm_launch.told_mark(warm_env["AMACS_WARM_DIR"]))
    master, slave = os.openpty()
    os.close(master)  # the window closed
    try:
        subprocess.run([sys.executable, "-S", str(LAUNCHER), "--quit-note"], env=warm_env, cwd=ROOT,
                       stdout=slave, stderr=subprocess.DEVNULL, timeout=60, check=False)
    finally:
        os.close(slave)
    assert not told.exists()
    said = subprocess.run([sys.executable, "-S", str(LAUNCHER), "--quit-note"], env=warm_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"your warm server (pid {warm}) keeps running" in said
    assert told.exists()


def another_checkouts_warm_server(directory: Path, root: str) -> subprocess.Popen[bytes]:
    """A process that looks, to the launcher, like the warm server of the checkout ROOT: its
    command names amacs_server.warm after putting ROOT on its path, and a lock names its pid."""
    code = f"import sys; sys.path.insert(0, {root!r}); import time; 'amacs_server.warm'; time.sleep(120)"
    other = subprocess.Popen([sys.executable, "-c", code])
    (directory / "0000other.lock").write_text(str(other.pid))
    return other


def test_stop_warm_stops_this_checkouts_warm_server_and_names_the_others(warm_env: dict[str, str]) -> None:
    """A person with two checkouts who stops one's warm server must not lose the other's
    unawares: it is left running and named, with how to stop it."""
    warm = warm_pid(warm_env)
    other = another_checkouts_warm_server(Path(warm_env["AMACS_WARM_DIR"]), "/elsewhere/amacs")
    try:
        said = subprocess.run([sys.executable, "-S", str(LAUNCHER), "--stop"], env=warm_env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=True).stdout
        wait_until(lambda: not alive(warm), timeout=30, what="this checkout's warm server to stop")
        assert alive(other.pid)
        assert f"stopped the warm server of {ROOT} (pid {warm})" in said, said
        assert f"another checkout, /elsewhere/amacs (pid {other.pid})" in said, said
    finally:
        other.kill()
        other.wait()


def test_the_notes_say_a_change_of_the_code_ends_the_warm_server() -> None:
    """A newcomer was told at the first start that the warm server stays for 8 idle hours, pulled
    and reinstalled, and found it gone: a warm server exits once its sources or the venv changed
    (its stamp is stale: a warm server whose sources changed answers nothing, tested above), by
    design.  Each note that tells of it says so; the quit note's lines fit 80 columns."""
    for note in (warm_launch.QUIT_NOTE, warm_launch.FIRST_NOTE, warm_launch.START_NOTE):
        flat = " ".join(note.split())
        assert "8 idle hours, or when a git pull or pip install changes its code" in flat, note
    assert max(len(line) for line in warm_launch.QUIT_NOTE.format(pids="4194304").splitlines()) <= 80


def test_the_quit_note_is_due_once_for_each_checkout(warm_env: dict[str, str]) -> None:
    """Said for one checkout, the note stays due for another, whose warm server is another
    process; only this checkout's warm servers are named in it."""
    warm = warm_pid(warm_env)
    directory = Path(warm_env["AMACS_WARM_DIR"])
    other = another_checkouts_warm_server(directory, "/elsewhere/amacs")
    try:
        (directory / "told-at-quit-0badc0de").write_text("")  # said for some other checkout
        said = subprocess.run([sys.executable, "-S", str(LAUNCHER), "--quit-note"], env=warm_env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=True).stdout
        assert f"your warm server (pid {warm}) keeps running" in said, said
        assert str(other.pid) not in said
        again = subprocess.run([sys.executable, "-S", str(LAUNCHER), "--quit-note"], env=warm_env, cwd=ROOT,
                               capture_output=True, text=True, timeout=60, check=True).stdout
        assert again == ""
    finally:
        other.kill()
        other.wait()


def ask_as_emacs(env: dict[str, str], argv: list[str] | None = None) -> socket.socket:
    """Ask the warm server for a server as Emacs does itself (amacs-server.el, `amacs--ask-warm-server'):
    on its Emacs socket, the request without files."""
    from amacs_server.warm import emacs_socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(emacs_socket(env["AMACS_WARM_DIR"]))
    body = json.dumps({"argv": argv or [], "env": env, "cwd": str(ROOT)}).encode()
    sock.sendall(struct.pack("!I", len(body)) + body)
    return sock


def frames(sock: socket.socket) -> Iterator[tuple[bytes, bytes]]:
    """The warm server's messages to Emacs on SOCK, as they come: (kind, payload)."""
    data = b""
    while True:
        while len(data) < 5 or len(data) < 5 + struct.unpack("!I", data[1:5])[0]:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:  # closed with the request unread: as Emacs sees it, the end
                chunk = b""
            if not chunk:
                assert data == b"", data
                return
            data += chunk
        size = struct.unpack("!I", data[1:5])[0]
        yield data[:1], data[5:5 + size]
        data = data[5 + size:]


def test_emacs_asks_the_warm_server_itself_and_is_told_the_forks_pid_output_and_end(
        warm_env: dict[str, str]) -> None:
    """No launcher process: Emacs connects to the warm server's Emacs socket and sends no files; the
    warm server tells it the fork's pid, passes on what the fork writes to stdout (its port), and
    its wait status once it has ended (killed: signal 9, as Emacs would have seen the process)."""
    warm = warm_pid(warm_env)
    sock = ask_as_emacs(warm_env)
    messages = frames(sock)
    kind, pid = next(messages)
    assert kind == b"p" and parent_of(int(pid)) == warm
    kind, port = next(messages)
    assert kind == b"o"
    home = Path(warm_env["AMACS_HOME"])
    wait_until(lambda: (home / "server.json").exists(), what="server.json")
    info = json.loads((home / "server.json").read_text())
    assert (info["pid"], info["port"]) == (int(pid), int(port))
    os.kill(int(pid), signal.SIGKILL)
    rest = list(messages)
    assert rest[-1][0] == b"s" and os.WIFSIGNALED(int(rest[-1][1])) and os.WTERMSIG(int(rest[-1][1])) == 9


def test_a_server_emacs_asked_for_says_its_errors_and_status(warm_env: dict[str, str]) -> None:
    warm_pid(warm_env)
    said = list(frames(ask_as_emacs(warm_env, ["--no-such-option"])))
    assert [kind for kind, _ in said][0] == b"p" and said[-1] == (b"s", str(2 << 8).encode())
    assert "unrecognized arguments: --no-such-option" in b"".join(data for kind, data in said if kind == b"e").decode()


def test_a_server_emacs_asked_for_stops_when_emacs_closes_its_end(warm_env: dict[str, str]) -> None:
    """Emacs's delete-process, or Emacs gone: the fork stops as on SIGTERM (server.json removed)."""
    warm_pid(warm_env)
    sock = ask_as_emacs(warm_env)
    messages = frames(sock)
    next(messages)
    next(messages)
    home = Path(warm_env["AMACS_HOME"])
    wait_until(lambda: (home / "server.json").exists(), what="server.json")
    server = json.loads((home / "server.json").read_text())["pid"]
    log_file = home / "logs" / "server.log"
    wait_until(lambda: "serving on" in log_file.read_text(), what="the server to serve")
    sock.close()
    wait_until(lambda: not alive(server), timeout=30, what="the fork to stop")
    assert not (home / "server.json").exists()
    assert "stopping on signal SIGTERM" in (home / "logs" / "server.log").read_text()


def test_a_warm_server_whose_sources_changed_answers_emacs_nothing(warm_env: dict[str, str]) -> None:
    """Emacs names the socket without the sources' stamp: the warm server checks it, and a stale one
    closes Emacs's connection unanswered (Emacs then runs the launcher) and exits."""
    directory = warm_env["AMACS_WARM_DIR"]
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from amacs_server.warm import main; sys.exit(main())"
    stale = subprocess.Popen([sys.executable, "-c", code, directory, "0badc0de"], env=warm_env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from amacs_server.warm import emacs_socket

    wait_until(lambda: os.path.exists(emacs_socket(directory)), what="the stale warm server to listen")
    assert list(frames(ask_as_emacs(warm_env))) == []
    assert stale.wait(timeout=30) == 0
    assert not Path(warm_env["AMACS_HOME"], "server.json").exists()


def emacs_asking(env: dict[str, str], body: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run BODY in a batch Emacs whose server command is the warm launcher, as an interactive Emacs's is;
    `wait' there waits (at most a minute) until its form is true."""
    command = f"(list {json.dumps(sys.executable)} \"-S\" \"-c\" amacs--launcher-code {json.dumps(str(LAUNCHER))})"
    program = f"""(progn
  (add-to-list 'package-directory-list "/usr/share/emacs/site-lisp/elpa") (package-initialize)
  (require 'amacs)
  (defmacro wait (form)
    `(let ((deadline (+ (float-time) 60)))
       (while (and (not ,form) (< (float-time) deadline)) (accept-process-output nil 0.05))
       (or ,form (error "Timed out: %S" ',form))))
  (defun children () (split-string (with-temp-buffer (insert-file-contents
    (format "/proc/%d/task/%d/children" (emacs-pid) (emacs-pid))) (buffer-string))))
  (advice-add 'amacs--server-launch-command :override (lambda () {command}))
  {body})"""
    return subprocess.run(["emacs", "-Q", "--batch", "-L", str(ROOT / "elisp"), "--eval", program], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_emacs_is_served_by_a_fork_it_asked_for_itself_with_no_process_of_its_own(warm_env: dict[str, str]) -> None:
    """The launcher's Python (~86 ms a start, 15-30 ms of CPU) was on the path from Emacs's start of
    the server to its port: Emacs asks the warm server itself.  It has no child process while
    served; a killed server is reported killed; one stopped exits 0 (finished); the next stops when Emacs exits."""
    warm = warm_pid(warm_env)
    ran = emacs_asking(warm_env, """
  (amacs-start-server)
  (wait (amacs-live-p))
  (let ((proc (amacs-server-process)))
    (princ (format "served type=%s parent=%s children=%S\\n" (process-type proc)
                   (alist-get 'ppid (process-attributes (process-get proc 'amacs-pid))) (children)))
    (signal-process (process-get proc 'amacs-pid) 'SIGKILL)
    (wait (and (not (amacs-live-p)) (not (amacs-server-process)))))
  (amacs-start-server)
  (wait (amacs-live-p))
  (let ((proc (amacs-server-process)))
    (amacs-stop-server)
    (princ (format "stopped live=%s end=%s\\n" (process-live-p proc) (car (split-string (amacs--end-words proc))))))
  (amacs-start-server)
  (wait (amacs-live-p))
  (princ (format "again pid=%s\\n" (process-get (amacs-server-process) 'amacs-pid)))""")
    assert ran.returncode == 0, ran.stderr
    served, stopped, again = (line.split() for line in ran.stdout.splitlines())
    assert stopped == ["stopped", "live=nil", "end=finished"], ran.stdout  # stopped as a process: exit 0
    assert served[1:] == ["type=network", f"parent={warm}", "children=nil"], ran.stdout
    assert "AMACS server stopped (killed)" in ran.stderr, ran.stderr
    second = int(again[1].removeprefix("pid="))
    wait_until(lambda: not alive(second), timeout=30, what="the server to stop once Emacs exited")
    # SIGTERM stops it, or comes while it already stops for its Emacs's closed connection: both a stop
    said = (Path(warm_env["AMACS_HOME"]) / "logs" / "server.log").read_text()
    assert "stopping on signal SIGTERM" in said or "signal SIGTERM while stopping" in said, said


def test_emacs_runs_the_launcher_when_the_warm_server_answers_nothing(warm_env: dict[str, str]) -> None:
    """A warm server whose sources changed closes Emacs's connection unanswered: Emacs starts the
    launcher, which starts the server afresh (as with no warm server) and a new warm server."""
    directory = warm_env["AMACS_WARM_DIR"]
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from amacs_server.warm import main; sys.exit(main())"
    stale = subprocess.Popen([sys.executable, "-c", code, directory, "0badc0de"], env=warm_env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from amacs_server.warm import emacs_socket

    wait_until(lambda: os.path.exists(emacs_socket(directory)), what="the stale warm server to listen")
    ran = emacs_asking({**warm_env, "AMACS_WARM_DELAY": "600"}, """
  (amacs-start-server)
  (wait (amacs-live-p))
  (let ((proc (amacs-server-process)))
    (princ (format "served type=%s children=%d\\n" (process-type proc) (length (children)))))
  (amacs-stop-server)""")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["served", "type=real", "children=1"], ran.stdout
    assert stale.wait(timeout=30) == 0
    assert "AMACS server stopped" not in ran.stderr and "did not start" not in ran.stderr, ran.stderr


def test_the_start_note_of_an_emacs_that_asked_itself_goes_by_that_emacss_start(tmp_path: Path) -> None:
    """Emacs asked with no launcher: the peer is that Emacs, not a launcher whose parent is Emacs.
    An Emacs started after the warm server (from a shell older than it) is told; by its parent's
    start it would not be."""
    time.sleep(0.02)  # this process (the Emacs's parent here) started well before the "warm server"
    warm = subprocess.Popen(["sleep", "30"])
    time.sleep(0.05)
    emacs = subprocess.Popen(["sleep", "30"])
    try:
        assert warm_launch.start_note(str(tmp_path), warm.pid, emacs.pid) == ""
        assert warm_launch.start_note(str(tmp_path), warm.pid, emacs.pid, emacs=True).startswith(
            f"Your warm server (pid {warm.pid}) stays")
    finally:
        warm.kill()
        emacs.kill()
