"""The server command of an interactive Emacs: a server forked from the warm server, else a fresh one.

    python -S .../amacs_server/warm_launch.py [ARG...]

Run by path with ``-S`` (standard library only: it starts in ~10 ms).  The warm server
(:mod:`amacs_server.warm`) is a process of this user that has imported the server's
modules and the model SDK (``anthropic`` alone is 1.3-2 s of CPU) and forks a server
for each launch; it outlives the Emacs sessions that used it.  This launcher connects to
the one for this checkout and venv, listening on a Unix socket in a private folder
(``$AMACS_WARM_DIR``, else ``$XDG_RUNTIME_DIR/amacs-warm-UID``, else
``/tmp/amacs-warm-UID``), and hands it its standard input, output and error, its
environment, its folder and ARGs: the fork prints its port on this process's standard
output, as ``python -m amacs_server`` does.  This process then stands in for the fork:
signals it gets are passed on, and it exits as the fork did (killed by the same signal,
or with its status).  When this process ends first (Emacs killed it) or Emacs goes, the
fork sees the socket close and stops.

``./amacs`` asks for the home's server before it starts Emacs (``--early DIR``): the fork then
starts while Emacs does, and has said its port and read the home when Emacs first asks.  That
early launcher names the fork to the launcher Emacs starts (found by ``$AMACS_EARLY``, the
folder DIR) only if it shows the one-time token ``./amacs`` gave both (``$AMACS_EARLY_TOKEN``,
which Emacs sends the server as its own); that launcher then stands in for the fork as above,
passing on what the fork prints.  A fork asked for otherwise than Emacs would ask (another
environment, folder or ARGs) is stopped and Emacs's own is asked for.

When no warm server answers, this process becomes ``python -m amacs_server ARG...``
(exec) and starts a warm server for the launches after it.  The socket's name holds a
stamp of the server's sources and the venv: code changed since the warm server started
is never served by it (a new one starts; the old one exits once its forks have).
"""

from __future__ import annotations

import os
import select
import stat
import struct
import sys
import time
import zlib

# The C modules under socket, signal and json: this process is on the path from Emacs's start to
# the server's port, and those three import enum, re and collections (~25 ms of CPU of its ~45,
# profiled on 2 cores at load 4; its wall time 120-270 ms from Emacs's call to its main).  The
# early start's paths, off that path, import them as they need them.
from _json import encode_basestring_ascii as _quote
from _signal import SIG_DFL, SIGHUP, SIGINT, SIGQUIT, SIGTERM, signal
from _socket import AF_UNIX, SCM_RIGHTS, SOCK_STREAM, SOL_SOCKET, socket

PACKAGE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(PACKAGE)
# Folders of the package that hold data, not the server's code.
DATA_DIRS = frozenset({"__pycache__", "builtin_skills", "elisp"})
ORPHAN_CHECK = 0.5  # seconds between looks whether the Emacs that started this is still there
EARLY_WAIT = 60.0  # seconds an early server waits for its Emacs to take it; then it is stopped
EARLY_FIND = 5.0  # seconds Emacs's launcher waits for the early launcher's socket (on a loaded machine)
EARLY_SOCKET = "early.sock"
# What may differ between the environments of ./amacs's early request and Emacs's: the early
# request's own names, the shell's name of the program it runs, and the shell level (Emacs
# counts itself as one).
EARLY_IGNORED = frozenset({"AMACS_EARLY", "AMACS_EARLY_TOKEN", "_", "SHLVL"})


def warm_dir() -> str:
    """The folder of this user's warm servers' sockets, locks and logs."""
    chosen = os.environ.get("AMACS_WARM_DIR")
    if chosen:
        return chosen
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return os.path.join(base, f"amacs-warm-{os.getuid()}")


def private_dir(path: str) -> bool:
    """Make PATH (mode 0700) if missing; True when it is a folder of this user's that others cannot open."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def stamp() -> str:
    """What the warm server must have started from: this Python, this package's sources, the venv's packages."""
    newest, count = 0, 0
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d not in DATA_DIRS]
        for name in files:
            if name.endswith(".py"):
                newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime_ns)
                count += 1
    # The venv's packages, found from the interpreter's path (``-S`` leaves sys.prefix the base Python's).
    venv = os.path.dirname(os.path.dirname(sys.executable))
    site = os.path.join(venv, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
    try:
        packages = os.stat(site).st_mtime_ns  # a package installed, removed or upgraded there
    except OSError:
        packages = 0
    key = f"{sys.executable}|{PACKAGE}|{newest}|{count}|{packages}"
    return f"{zlib.crc32(key.encode()):08x}"


def _read_int(sock: socket) -> int | None:
    """The next 4-byte integer from SOCK, or None if it closed first."""
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    return int(struct.unpack("!i", data)[0])


def start_warm(directory: str, key: str) -> None:
    """Start a warm server for KEY in DIRECTORY, in a session of its own, without waiting for it.

    Its environment is this one's without secrets and AMACS's per-session settings (each
    fork gets its launcher's); what it says goes to KEY.log there."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_"))
           and not any(word in k.upper() for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))}
    for keep in ("AMACS_WARM_DIR", "AMACS_WARM_IDLE", "AMACS_WARM_DELAY"):
        if keep in os.environ:
            env[keep] = os.environ[keep]
    log = os.path.join(directory, f"{key}.log")
    code = f"import sys; sys.path.insert(0, {ROOT!r}); from amacs_server.warm import main; sys.exit(main())"
    # Started by a child that exits at once: the warm server is nobody's child (no Emacs, no
    # server waits for it or counts it among its own), in a session of its own.
    try:
        child = os.fork()
    except OSError:
        return  # no warm server: every launch starts a fresh one, as before
    if child:
        os.waitpid(child, 0)
        return
    try:
        os.posix_spawn(sys.executable, [sys.executable, "-c", code, directory, key], env,
                       file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
                                     (os.POSIX_SPAWN_DUP2, 1, 2)],
                       setsid=True)
    finally:
        os._exit(0)


def _json(value: object) -> str:
    """VALUE (str, int, bool, None, and lists and str-keyed dicts of them) in JSON, as ``json.dumps``
    writes it (with its C string encoder), without importing json (re, enum)."""
    if isinstance(value, str):
        return str(_quote(value))
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(_json, value)) + "]"
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return "{" + ", ".join(f"{_quote(k)}: {_json(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not sent as JSON: {type(value).__name__}")


def _send(sock: socket, message: dict[str, object], fds: list[int] | None = None) -> None:
    data = _json(message).encode()
    rights = [(SOL_SOCKET, SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    sock.sendmsg([struct.pack("!I", len(data)) + data], rights)


def _receive(sock: socket, maxfds: int = 0) -> tuple[dict[str, object], list[int]]:
    """A message of :func:`_send` (at most 1 MiB) and the files sent with it."""
    import json
    import socket as sockets

    data, fds, _flags, _addr = sockets.recv_fds(sock, 65536, maxfds)  # type: ignore[arg-type]
    if len(data) < 4 or struct.unpack("!I", data[:4])[0] > 1 << 20:
        raise OSError("bad message")
    (length,) = struct.unpack("!I", data[:4])
    body = data[4:]
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            raise OSError("message cut off")
        body += chunk
    message = json.loads(body)
    if not isinstance(message, dict):
        raise OSError("bad message")
    return message, fds


def _ask_warm(argv: list[str], env: dict[str, str], fds: list[int]) -> tuple[socket, int] | None:
    """Ask the warm server for a fork serving ARGV with ENV and standard files FDS: its socket and pid.

    None when none answered (one is then started for next time)."""
    directory = warm_dir()
    if not private_dir(directory):
        return None
    key = stamp()
    sock = socket(AF_UNIX, SOCK_STREAM)
    try:
        sock.connect(os.path.join(directory, f"{key}.sock"))
    except OSError:
        sock.close()
        start_warm(directory, key)
        _first_start_note(directory)
        return None
    try:
        _send(sock, {"argv": argv, "env": env, "cwd": os.getcwd()}, fds)
        pid = _read_int(sock)
    except OSError:
        pid = None
    if pid is None:  # the warm server went before it forked: nothing was started
        sock.close()
        return None
    return sock, pid


def early(directory: str, argv: list[str]) -> int:
    """``--early DIR``: ask for the home's server now and give it to the launcher Emacs starts.

    ./amacs runs this before Emacs, with ``$AMACS_EARLY_TOKEN``.  It listens on DIR/early.sock
    (DIR: ./amacs's private folder for this start) before anything else, so that Emacs's
    launcher finds it however late this process got the CPU; then asks the warm server for
    the fork Emacs would ask for (this environment with the token as ``AMACS_TOKEN``, the home
    as Emacs names it).  The first connection of this user that shows the token gets the
    fork's pid, its request, its socket to the warm server and the read ends of its standard
    output and error; others are closed unanswered.  Nobody took it within EARLY_WAIT seconds,
    or ./amacs is gone: the fork is stopped."""
    import hmac
    import socket as sockets

    token = os.environ.get("AMACS_EARLY_TOKEN", "")
    if len(token) < 32 or not private_dir(directory):
        return 2
    listener = sockets.socket(AF_UNIX, SOCK_STREAM)
    listener.bind(os.path.join(directory, EARLY_SOCKET))
    listener.listen(4)
    env = {k: v for k, v in os.environ.items() if k not in EARLY_IGNORED}
    env["AMACS_TOKEN"] = token
    # As Emacs names the home (`amacs--home-directory'): another name would not be taken.
    env["AMACS_HOME"] = os.path.abspath(os.path.expanduser(env.get("AMACS_HOME") or "~/.agent"))
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    asked = _ask_warm(argv, env, [null, out_w, err_w])
    for fd in (null, out_w, err_w):
        os.close(fd)
    parent, deadline = os.getppid(), time.monotonic() + EARLY_WAIT
    while time.monotonic() < deadline and os.getppid() == parent:
        if not select.select([listener], [], [], ORPHAN_CHECK)[0]:
            continue
        conn, _ = listener.accept()
        with conn:
            try:
                creds = conn.getsockopt(SOL_SOCKET, sockets.SO_PEERCRED, struct.calcsize("3i"))
                shown, _fds = _receive(conn)
                if struct.unpack("3i", creds)[1] != os.getuid() or not hmac.compare_digest(
                        str(shown.get("token", "")), token):
                    continue  # not the Emacs ./amacs started
                if asked is None:
                    _send(conn, {"pid": None})
                    return 0
                _send(conn, {"pid": asked[1], "argv": argv, "env": env, "cwd": os.getcwd()},
                      [asked[0].fileno(), out_r, err_r])
                return 0
            except (OSError, ValueError):
                continue
    if asked is not None:  # the fork stops when its launcher's end closes, as for a killed launcher
        os.kill(asked[1], SIGTERM)
    return 1


def _take_early(argv: list[str]) -> tuple[socket, int, int, int] | None:
    """The early fork ./amacs asked for ($AMACS_EARLY), if it was asked for as this launch of ARGV would be:
    its socket to the warm server, its pid, the read ends of its stdout and stderr.

    A fork asked for otherwise is stopped (it holds the home) before None is returned."""
    directory = os.environ.pop("AMACS_EARLY", "")
    os.environ.pop("AMACS_EARLY_TOKEN", None)
    if not directory:
        return None
    path = os.path.join(directory, EARLY_SOCKET)
    sock = socket(AF_UNIX, SOCK_STREAM)
    deadline = time.monotonic() + EARLY_FIND
    while True:
        try:
            sock.connect(path)
            break
        except OSError:
            if time.monotonic() > deadline or not os.path.isdir(directory):
                sock.close()
                return None
            time.sleep(0.005)
    try:
        _send(sock, {"token": os.environ.get("AMACS_TOKEN", "")})
        answer, fds = _receive(sock, 3)
    except (OSError, ValueError):
        return None
    finally:
        sock.close()
    pid = answer.get("pid")
    if not isinstance(pid, int) or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    warm = socket(fileno=fds[0])
    env = {k: v for k, v in os.environ.items() if k not in EARLY_IGNORED}
    if answer.get("env") == env and answer.get("argv") == argv and answer.get("cwd") == os.getcwd():
        return warm, pid, fds[1], fds[2]
    try:  # asked for otherwise: stopped, and its end waited for (it holds the home's lock)
        os.kill(pid, SIGTERM)
        _read_int(warm)
    except OSError:
        pass
    warm.close()
    os.close(fds[1])
    os.close(fds[2])
    return None


def _relay(source: int, target: int) -> bool:
    """Pass what SOURCE has on to TARGET; False once SOURCE is closed."""
    try:
        data = os.read(source, 65536)
    except OSError:
        return False
    if data:
        try:
            os.write(target, data)
        except OSError:
            pass
    return bool(data)


def stand_in(sock: socket, pid: int, relayed: list[tuple[int, int]]) -> int:
    """Stand in for fork PID (its warm server's socket SOCK) until it exits: its status.

    Signals to this process are passed on to it; RELAYED pairs (read end, target fd) are copied
    as they come (an early fork's stdout and stderr); when Emacs is gone, the fork is left to
    stop as its launcher's end closes."""

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in (SIGTERM, SIGHUP, SIGINT, SIGQUIT):
        signal(sig, forward)
    parent = os.getppid()
    open_ends = dict(relayed)
    while True:
        ready = select.select([sock.fileno(), *open_ends], [], [], ORPHAN_CHECK)[0]
        for source in ready:
            if source in open_ends and not _relay(source, open_ends[source]):
                del open_ends[source]
        if sock.fileno() in ready:
            status = _read_int(sock)
            break
        if os.getppid() != parent:
            return 1  # Emacs is gone: closing the socket stops the fork
    for source, target in open_ends.items():  # the fork is gone: what it wrote last
        while _relay(source, target):
            pass
    if status is None:
        return 1  # the warm server and the fork are both gone
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed: so is this process, as Emacs would have seen the server killed
        signal(-code, SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def hand_over(argv: list[str]) -> int | None:
    """Have the warm server fork the server ARGV asks for and stand in for it until it exits: its status.

    The early fork ./amacs asked for is taken when it was asked for alike.  None when no warm
    server took it (one is started for next time)."""
    taken = _take_early(argv)
    if taken is not None:
        sock, pid, out, err = taken
        return stand_in(sock, pid, [(out, 1), (err, 2)])
    asked = _ask_warm(argv, dict(os.environ), [0, 1, 2])
    if asked is None:
        return None
    return stand_in(asked[0], asked[1], [])


def servers(directory: str) -> list[tuple[int, str]]:
    """This user's warm servers in DIRECTORY, each as (pid, the checkout it serves).

    Each names itself in its KEY.lock while it runs, and the checkout is the folder its command
    puts first on its path (:func:`start_warm`).  Read, not locked: a lock taken to look would make
    a warm server starting that instant give up."""
    found = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".lock"):
            continue
        try:
            with open(os.path.join(directory, name)) as lock:
                pid = int(lock.read().strip() or 0)
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read().decode(errors="replace")
        except (OSError, ValueError):
            continue
        if pid > 0 and "amacs_server.warm" in command:
            found.append((pid, _checkout(command)))
    return found


def _checkout(command: str) -> str:
    """The folder COMMAND (a warm server's, as :func:`start_warm` writes it) puts first on its path; "" if none."""
    start = command.find(_PATH_CALL)
    if start < 0:
        return ""
    rest = command[start + len(_PATH_CALL):]
    quote = rest[:1]
    end = rest.find(quote, 1)
    return rest[1:end] if quote in ("'", '"') and end > 0 else ""


_PATH_CALL = "sys.path.insert(0, "


def running(directory: str) -> list[int]:
    """The pids of this checkout's warm servers in DIRECTORY (others' serve other checkouts)."""
    return [pid for pid, root in servers(directory) if root == ROOT]


# When it exits, in the notes below: after IDLE (warm.py) without a start, or once the checkout's code
# changed (a git pull, a pip install: its stamp, :func:`stamp`), when the next ./amacs starts another.
EXITS = "it exits after 8 idle hours, or when a git pull or pip install changes its code"
QUIT_NOTE = ("AMACS: your warm server (pid {pids}) keeps running after Emacs, so that\n"
             "the next ./amacs answers at once (about 100 MB; it exits after 8 idle hours,\n"
             "or when a git pull or pip install changes its code).  To stop it now:\n"
             "./amacs --stop-warm (or kill {pids}).\n"
             "To never start one: AMACS_WARM=0 ./amacs.  (Said once.)")


def told_mark(directory: str) -> str:
    """The file in DIRECTORY whose presence says the quit note was said for this checkout."""
    return os.path.join(directory, f"told-at-quit-{zlib.crc32(ROOT.encode()):08x}")


def quit_note() -> str:
    """What ./amacs says once Emacs has quit: that a warm server stays, and how to stop it.

    Said once for each checkout (until the folder is cleared, at a reboot for $XDG_RUNTIME_DIR): ""
    when no warm server of this checkout runs or it was said before.  Marked said by :func:`said_at_quit`, once it was."""
    directory = warm_dir()
    pids = running(directory)
    if not pids or os.path.exists(told_mark(directory)) or not private_dir(directory):
        return ""
    return QUIT_NOTE.format(pids=" ".join(map(str, pids)))


def said_at_quit(note: str) -> None:
    """Say NOTE on stdout and mark it said, unless the terminal is gone.

    A closed terminal window hangs up on Emacs and ./amacs; ./amacs may still run this, and what
    it writes is lost (EIO): then it is not marked said, and the next start's shell says it
    (:func:`start_note`)."""
    try:
        print(note, flush=True)
    except OSError:
        return
    with open(told_mark(warm_dir()), "w"):
        pass


FIRST_NOTE = ("This start left a warm server running for the next ones: it stays after Emacs quits, so that "
              f"./amacs answers at once (about 100 MB; {EXITS}).  ./amacs --stop-warm stops it.  (Said once.)")


def _first_start_note(directory: str) -> None:
    """Have the server this launch becomes say, at hello, that it left a warm server (FIRST_NOTE), when
    this checkout's note was never said: in the shell of the person's first start, not after Emacs
    (a window that closes with ./amacs shows nothing).  The server marks it said (:func:`told_mark`)
    as it takes it: a launch that serves no Emacs (``--help``) leaves it due."""
    mark = told_mark(directory)
    if not os.path.exists(mark):
        os.environ["AMACS_WARM_NOTE"] = FIRST_NOTE
        os.environ["AMACS_WARM_TOLD"] = mark


START_NOTE = ("Your warm server (pid {pid}) stays after Emacs quits, so that ./amacs answers at once "
              f"(about 100 MB; {EXITS}).  ./amacs --stop-warm stops it.  (Said once.)")


def _stat(pid: int) -> tuple[int, int] | None:
    """Process PID's parent and start time (clock ticks since boot), from /proc; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            fields = stat_file.read().rsplit(b") ", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def start_note(directory: str, pid: int, asker: int, emacs: bool = False) -> str:
    """What a server warm server PID forks for launcher ASKER says in the shell at hello, when the
    quit note was never said (the terminal closed with Emacs, and ./amacs with it): that it
    stays, and how to stop it.  "" once said for this checkout, here or at a quit
    (:func:`told_mark`), and "" when ASKER's Emacs (or ./amacs, for an early request) started
    before the warm server: that Emacs's session started it, and its quit says the note (a fork's
    or a restart's server in it would say it in a shell of its own, and leave the quit silent).
    EMACS: ASKER is that Emacs itself (it asked with no launcher)."""
    asked, warm = _stat(asker), _stat(pid)
    started = asked if emacs else _stat(asked[0]) if asked is not None else None
    if started is None or warm is None or started[1] <= warm[1]:
        return ""
    try:
        with open(told_mark(directory), "x"):  # only the first to make it says it
            pass
    except OSError:
        return ""
    return START_NOTE.format(pid=pid)


def stop_warm() -> tuple[list[int], list[tuple[int, str]]]:
    """Stop this checkout's warm servers (the servers they forked go on).

    Returns the pids stopped, and the warm servers left running for other checkouts."""
    stopped, others = [], []
    for pid, root in servers(warm_dir()):
        if root != ROOT:
            others.append((pid, root))
            continue
        try:
            os.kill(pid, SIGTERM)
            stopped.append(pid)
        except OSError:
            pass
    return stopped, others


def stop_report(stopped: list[int], others: list[tuple[int, str]]) -> str:
    """What ``./amacs --stop-warm`` says: what it stopped, and what it left to other checkouts."""
    said = (f"AMACS: stopped the warm server of {ROOT} (pid {' '.join(map(str, stopped))})." if stopped
            else f"AMACS: no warm server of {ROOT} was running.")
    for pid, root in others:
        said += (f"\nAMACS: left the warm server of another checkout, {root or 'unknown'} (pid {pid}): "
                 f"its ./amacs --stop-warm stops it, or kill {pid}.")
    return said


def main(argv: list[str]) -> int:
    """A forked server if the warm server answers; else this process becomes ``python -m amacs_server``.

    ``--quit-note`` prints :func:`quit_note`; ``--stop`` stops this checkout's warm servers (./amacs runs both)."""
    if argv == ["--quit-note"]:
        note = quit_note()
        if note:
            said_at_quit(note)
        return 0
    if argv[:1] == ["--early"] and len(argv) >= 2:
        return early(argv[1], argv[2:])
    if argv == ["--stop"]:
        print(stop_report(*stop_warm()))
        return 0
    status = hand_over(argv)
    if status is not None:
        return status
    os.execv(sys.executable, [sys.executable, "-m", "amacs_server", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
