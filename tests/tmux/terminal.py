"""``./amacs`` in a real terminal: ``emacs -nw`` in a detached tmux session.

Batch Emacs has no windows and no redisplay, so point, windows, scrolling and
what the person sees are tested here (DESIGN.md, "The person's view"): keys go
in with ``tmux send-keys``, the screen comes back with ``tmux capture-pane``,
the cursor with ``tmux display -p '#{cursor_y} #{cursor_x}'``.  What the screen
cannot show (faces, variables) is asked of the Emacs itself through an Emacs
server started inside it (:meth:`Terminal.elisp`).

    term = Terminal(tmp_path, fake.url, width=80, height=24).start()
    term.type("what is 2+2?"); term.press("Enter")
    term.wait_for("four"); term.wait_idle()
    assert term.line_at_cursor() == "amacs> "
    term.close()
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "amacs> "
TEST_KEY = "sk-ant-test-SECRET-tmux-0123456789"
# remain-on-exit: the terminal stays once Emacs quits; a few rows of history: what ./amacs says
# then (Terminal.history).
TMUX_CONF = """\
set -g status off
set -g remain-on-exit on
set -g history-limit 50
"""


class TerminalTimeout(AssertionError):
    """A wait ran out; the message holds the last screen and the cursor."""


class Terminal:
    """One ``./amacs`` in a tmux session of its own, on a private tmux socket."""

    def __init__(self, tmp: Path, base_url: str, width: int = 120, height: int = 40,
                 env: dict[str, str | None] | None = None, args: tuple[str, ...] = ()) -> None:
        self.width, self.height = width, height
        self.args = args  # ./amacs's own, before the test's --eval (./amacs --local)
        self.home = tmp / "user-home"
        self.amacs_home = tmp / "agent"
        # Unix socket paths are limited to ~108 bytes: keep the sockets in a short directory.
        self._sockets = Path(tempfile.mkdtemp(prefix="amacs-tmux-"))
        self._tmux_socket = self._sockets / "tmux"
        self._emacs_socket = self._sockets / "emacs" / "server"
        self._env = self._environment(base_url, env or {})
        self._pane_pid: int | None = None
        self._pane_started: str | None = None  # its start time: a pid used again is not it

    def _environment(self, base_url: str, extra: dict[str, str | None]) -> dict[str, str]:
        """The caller's environment without its AMACS/Anthropic/tmux settings, plus the test's
        (a name given None is left out: ``./amacs``'s own choice, as a newcomer's shell has)."""
        dropped = ("ANTHROPIC_", "AMACS_", "OPENAI_", "TMUX", "EMACS", "INSIDE_EMACS", "LINES", "COLUMNS", "LC_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
        env.update(
            HOME=str(self.home),
            AMACS_HOME=str(self.amacs_home),
            ANTHROPIC_BASE_URL=base_url,
            ANTHROPIC_API_KEY=TEST_KEY,
            TERM="xterm-256color",
            LANG="C.UTF-8",
            # A fresh HOME has no eln-cache: without this, every test's Emacs would spend
            # its first seconds natively compiling libraries in the background (Debian's 28.2).
            EMACS_INHIBIT_AUTOMATIC_NATIVE_COMPILATION="1",
            # Each test's server starts afresh: a warm server would outlive the test (tests
            # that want one say AMACS_WARM=1 and give it a folder of its own).
            AMACS_WARM="0",
        )
        for name, value in extra.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    # Starting and stopping

    def start(self, timeout: float = 30, connected: bool = True) -> Terminal:
        """Run ``./amacs`` and wait until the shell shows its prompt and (CONNECTED) the server is connected."""
        self.home.mkdir(parents=True, exist_ok=True)
        conf = self._sockets / "tmux.conf"
        conf.write_text(TMUX_CONF)
        server = f'(progn (setq server-socket-dir "{self._emacs_socket.parent}") (server-start))'
        self._tmux("-f", str(conf), "new-session", "-d", "-s", "amacs", "-x", str(self.width),
                   "-y", str(self.height), "--", str(ROOT / "amacs"), *self.args, "--eval", server, cwd=ROOT)
        self._pane_pid = int(self._tmux("display", "-p", "-t", "amacs", "#{pane_pid}").strip())
        self._pane_started = _start_time(self._pane_pid)
        self.wait_for(lambda screen: any(line.startswith(PROMPT.rstrip()) for line in screen.splitlines()),
                      timeout=timeout, what="the shell's first prompt")
        if connected:
            self.wait_for_elisp("(and (amacs-live-p) t)", timeout=timeout, what="the server to connect")
        return self

    def close(self, grace: float = 10) -> list[str]:
        """End tmux, its Emacs and everything Emacs started; return those that had to be killed.

        Killing tmux hangs up on Emacs; the AMACS server exits when its Emacs goes.
        Whatever still runs GRACE seconds later is killed and named in the result.
        """
        family = _processes_under(self._pane_pid) if self._pane_pid else {}
        subprocess.run(["tmux", "-S", str(self._tmux_socket), "kill-server"], capture_output=True)
        killed = _reap(family, grace)
        shutil.rmtree(self._sockets, ignore_errors=True)
        return killed

    def resize(self, width: int, height: int) -> None:
        """Make the terminal WIDTH x HEIGHT, as a person resizes theirs: Emacs redraws at that size."""
        self._tmux("resize-window", "-t", "amacs", "-x", str(width), "-y", str(height))
        self.width, self.height = width, height

    # Typing

    def send_keys(self, *keys: str, literal: bool = False) -> None:
        """``tmux send-keys``: KEYS are key names ("Enter", "C-c"), or text when LITERAL."""
        self._tmux("send-keys", "-t", "amacs", *(["-l"] if literal else []), "--", *keys)

    def type(self, text: str, interval: float = 0.0) -> None:
        """Type TEXT as it is (nothing is read as a key name); INTERVAL seconds between characters."""
        if not interval:
            self.send_keys(text, literal=True)
            return
        for char in text:
            self.send_keys(char, literal=True)
            time.sleep(interval)

    def press(self, *keys: str) -> None:
        """Press keys by name: ``press("Enter")``, ``press("C-c C-c")``, ``press("Tab")``."""
        self.send_keys(*[key for chord in keys for key in chord.split()])

    # Reading

    def screen(self) -> str:
        """What the terminal shows, one line per screen row (trailing blanks removed)."""
        return self._tmux("capture-pane", "-p", "-t", "amacs")

    def history(self) -> str:
        """The rows scrolled above the screen (the terminal after Emacs quit), oldest first."""
        return self._tmux("capture-pane", "-p", "-S", "-200", "-E", "-1", "-t", "amacs")

    def under_emacs(self) -> str:
        """The terminal's own screen, kept under Emacs's while it runs: what shows again when Emacs quits."""
        return self._tmux("capture-pane", "-p", "-a", "-t", "amacs")

    def screen_with_escapes(self) -> str:
        """The screen with its colour and attribute escape sequences."""
        return self._tmux("capture-pane", "-p", "-e", "-t", "amacs")

    def lines(self) -> list[str]:
        """The screen's rows, exactly ``height`` of them."""
        rows = self.screen().split("\n")
        return (rows + [""] * self.height)[: self.height]

    def cursor(self) -> tuple[int, int]:
        """The cursor's (row, column), from 0."""
        y, x = self._tmux("display", "-p", "-t", "amacs", "#{cursor_y} #{cursor_x}").split()
        return int(y), int(x)

    def line_at_cursor(self) -> str:
        """The cursor's row, with the blanks before the cursor kept (so an empty prompt is "amacs> ")."""
        rows, (y, x) = self._snapshot()
        row = rows[y] if y < len(rows) else ""
        return row.ljust(x)[: max(len(row.rstrip()), x)]

    def _snapshot(self) -> tuple[list[str], tuple[int, int]]:
        """The rows (trailing blanks kept) and the cursor, read by one tmux command."""
        out = self._tmux("capture-pane", "-p", "-N", "-t", "amacs", ";",
                         "display", "-p", "-t", "amacs", "#{cursor_y} #{cursor_x}")
        *rows, position = out.rstrip("\n").split("\n")
        y, x = map(int, position.split())
        return rows, (y, x)

    def mode_line(self) -> str:
        """The row above the echo area (the mode line of a one-window frame)."""
        return self.lines()[self.height - 2]

    # Waiting

    def wait_for(self, expected: str | Callable[[str], object], timeout: float = 20,
                 what: str | None = None) -> str:
        """Wait until EXPECTED is on screen (text, or a predicate of the screen); return the screen."""
        check = (lambda screen: expected in screen) if isinstance(expected, str) else expected
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if check(screen):
                return screen
            if time.monotonic() > deadline:
                raise TerminalTimeout(self._report(what or repr(expected), timeout, screen))
            time.sleep(0.05)

    def wait_exited(self, timeout: float = 20) -> str:
        """Wait until ``./amacs`` has exited and its terminal is closed; return the screen then.

        Not tmux's "Pane is dead": tmux draws it once it has reaped the pane's process too, and
        Debian's tmux (linked with libutempter) can miss that SIGCHLD for good: at the terminal's
        end it runs utempter's helper under utempter's own SIGCHLD handler (tmux issues 311 and
        4559), and ``./amacs`` stayed an unreaped zombie, its output all read, the test waiting
        out its 20 s (1 quit in ~15 at load 8-12).  ``#{pane_dead}`` is the terminal's end: every
        process that held it is done with it, so the screen holds all they wrote."""
        def exited(_screen: str) -> bool:
            return (self._pane_pid is not None and _start_time(self._pane_pid) != self._pane_started
                    and self._tmux("display", "-p", "-t", "amacs", "#{pane_dead}").strip() == "1")

        self.wait_for(exited, timeout=timeout, what="./amacs to exit")
        return self.screen()

    def wait_idle(self, timeout: float = 20) -> None:
        """Wait until the cursor sits at an empty prompt: its row reads exactly ``amacs> ``."""
        def at_empty_prompt(_screen: str) -> bool:
            rows, (y, x) = self._snapshot()
            return y < len(rows) and rows[y].rstrip() == PROMPT.rstrip() and x == len(PROMPT)

        self.wait_for(at_empty_prompt, timeout=timeout, what="the cursor at an empty prompt")

    def fork_now(self, folder: Path, timeout: float = 40) -> None:
        """M-x amacs-fork as a person takes its defaults: now, into FOLDER; wait for the fork's server."""
        self.press("M-x")
        self.type("amacs-fork")
        self.press("Enter")
        self.wait_for("Fork now, or from before you typed (default now: the mind as it is):",
                      what="the fork's prompt, now first")
        self.press("Enter")
        self.wait_for("New home for the fork of the mind as it is", what="the fork's folder prompt")
        self.press("C-a", "C-k")
        self.type(str(folder))
        self.press("Enter")
        self.wait_for_elisp(f'(amacs-live-p (amacs-connection-for "{folder}"))', timeout=timeout,
                            what="the fork's server")

    def wait_for_elisp(self, form: str, timeout: float = 20, what: str | None = None) -> None:
        """Wait until FORM evaluates to non-nil in the Emacs (errors count as not yet)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.elisp(form) != "nil":
                    return
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
            if time.monotonic() > deadline:
                raise TerminalTimeout(self._report(what or form, timeout, self.screen()))
            time.sleep(0.05)

    def _report(self, what: str, timeout: float, screen: str) -> str:
        try:
            where = f"cursor (y, x) = {self.cursor()}"
        except subprocess.CalledProcessError:
            where = "no cursor: tmux is gone"
        return f"waited {timeout} s for {what}; {where}; the screen:\n{screen}"

    # The Emacs behind the screen

    def elisp(self, form: str, timeout: float = 10) -> str:
        """FORM's value, printed, from the Emacs in the terminal (``emacsclient --eval``)."""
        done = subprocess.run(["emacsclient", "-s", str(self._emacs_socket), "--eval", form],
                              capture_output=True, text=True, timeout=timeout, check=True)
        return done.stdout.strip()

    def elisp_string(self, form: str) -> str:
        """FORM's value as text (``format "%s"``, without text properties)."""
        printed = self.elisp(f'(substring-no-properties (format "%s" {form}))')
        assert printed.startswith('"') and printed.endswith('"'), printed
        return re.sub(r"\\(.)", r"\1", printed[1:-1], flags=re.S)

    def _tmux(self, *args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(["tmux", "-u", "-S", str(self._tmux_socket), *args], env=self._env,
                              capture_output=True, text=True, timeout=10, check=False, cwd=cwd)
        if done.returncode:
            raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
        return done.stdout


def _processes_under(pid: int) -> dict[int, str]:
    """PID and every process below it, each with its start time (Emacs gives its children
    sessions of their own, so they are not in the tmux pane's process group)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat)
        if fields:
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        current = todo.pop()
        started = _start_time(current)
        if started is not None:
            found[current] = started
        todo.extend(children.get(current, []))
    return found


def _reap(processes: dict[int, str], grace: float) -> list[str]:
    """Wait up to GRACE seconds for PROCESSES to exit on their own, then terminate, then kill them.
    Return the command lines of those that had to be ended."""
    deadline = time.monotonic() + grace
    while _alive(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    stragglers = [f"{pid} {_command(pid)}" for pid in _alive(processes)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _alive(processes):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    return stragglers


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def _alive(processes: dict[int, str]) -> list[int]:
    """Those of PROCESSES still running: same pid and start time, not a zombie."""
    return [pid for pid, started in processes.items() if _start_time(pid) == started]


def _stat_fields(stat: Path) -> list[str] | None:
    """The fields of a /proc/PID/stat after the command name: state, ppid, ..."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    """PID's start time (ticks since boot), or None when it is gone or a zombie."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    if not fields or fields[0] == "Z":
        return None
    return fields[19]  # field 22 of stat; fields[0] is field 3
