"""The EPC server: 127.0.0.1 only, token required, errors always answered (DESIGN.md defects)."""

import os
import socket
import subprocess
import sys
import time

import pytest
from epc.handler import encode_message
from sexpdata import Symbol, loads

TOKEN = "a" * 64


@pytest.fixture
def server(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
    env.update(AMACS_HOME=str(tmp_path / "home"), AMACS_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "amacs_server"], env=env, stdout=subprocess.PIPE, text=True)
    port_line = proc.stdout.readline()
    assert port_line.strip().isdigit(), f"first line must be the port, got {port_line!r}"
    yield proc, int(port_line)
    proc.kill()
    proc.wait()


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def send(sock, *msg):
    sock.sendall(encode_message(*msg))


def recv(sock):
    head = b""
    while len(head) < 6:
        chunk = sock.recv(6 - len(head))
        if not chunk:
            return None
        head += chunk
    length = int(head, 16)
    data = b""
    while len(data) < length:
        data += sock.recv(length - len(data))
    return loads(data.decode())


def hello(sock, token=TOKEN):
    send(sock, "call", 1, Symbol("hello"), [token, os.getpid(), [Symbol(":eval-timeout"), 5]])
    return recv(sock)


def test_listens_on_loopback_only(server):
    _proc, port = server
    rows = open("/proc/net/tcp").read().splitlines()[1:]
    listening = [r.split()[1] for r in rows if r.split()[3] == "0A" and int(r.split()[1].split(":")[1], 16) == port]
    assert listening == [f"0100007F:{port:04X}"]


def test_call_without_hello_is_refused_and_closed(server):
    _proc, port = server
    sock = connect(port)
    send(sock, "call", 7, Symbol("ping"), ["x"])
    reply = recv(sock)
    assert reply[0] == Symbol("epc-error") and reply[2] == "unauthorized"
    assert recv(sock) is None  # connection closed, ping never answered


def test_wrong_token_refused(server):
    _proc, port = server
    sock = connect(port)
    reply = hello(sock, token="b" * 64)
    assert reply[0] == Symbol("epc-error")
    assert recv(sock) is None


def test_hello_then_methods_and_errors_as_replies(server):
    proc, port = server
    sock = connect(port)
    reply = hello(sock)
    assert reply[0] == Symbol("return")
    status = reply[2]
    keys = status[::2]
    assert Symbol(":key-ok") in keys
    notice = status[status.index(Symbol(":notice")) + 1]
    assert "ANTHROPIC_API_KEY" in notice and "\n" not in notice  # one clear line
    send(sock, "call", 2, Symbol("ping"), ["héllo"])
    assert recv(sock) == [Symbol("return"), 2, "héllo"]
    # Defect 3: an error inside a method is answered, with the plain message.
    send(sock, "call", 3, Symbol("set_consciousness"), ["current-tick", 99])
    err = recv(sock)
    assert err[0] == Symbol("return-error") and err[1] == 3
    assert "owned by the harness" in err[2] and "Error(" not in err[2]
    send(sock, "call", 4, Symbol("set_consciousness"), ["mood", "🙂"])
    assert recv(sock) == [Symbol("return"), 4, "🙂"]
    # The server serves only this Emacs: when it goes, the server exits.
    sock.close()
    deadline = time.time() + 10
    while proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() == 0


def test_no_token_no_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
    env["AMACS_HOME"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-m", "amacs_server"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert out.stdout.startswith("AMACS server error: AMACS_TOKEN is not set")


def test_a_malformed_price_table_is_ignored_not_fatal(server):
    _proc, port = server
    sock = connect(port)
    bad = [Symbol(":eval-timeout"), 5, Symbol(":prices"), [[Symbol(":model"), "x", Symbol(":input"), "cheap"]]]
    send(sock, "call", 1, Symbol("hello"), [TOKEN, os.getpid(), bad])
    assert recv(sock)[0] == Symbol("return")
    send(sock, "call", 2, Symbol("ping"), ["still here"])
    assert recv(sock) == [Symbol("return"), 2, "still here"]


# The fast path (issue 10): NODELAY, one-way events, coalesced deltas, no thread per message.

@pytest.fixture
def inproc():
    """An AmacsEPCServer in this process, with ping and a slow method, and an authenticated client."""
    import threading

    from amacs_server.transport.server import AmacsEPCServer

    srv = AmacsEPCServer(TOKEN, headless=True)
    srv.register("ping", lambda value: value)
    srv.register("slow", lambda: time.sleep(0.3) or "slow done")
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    sock = connect(srv.server_address[1])
    assert hello(sock)[0] == Symbol("return")
    yield srv, sock
    sock.close()
    srv.shutdown()
    srv.server_close()


def test_accepted_socket_has_nodelay(inproc):
    srv, _sock = inproc
    assert srv.emacs.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_events_are_one_way_and_deltas_coalesced_in_order(inproc):
    from amacs_server.transport.server import DELTA_WINDOW

    srv, sock = inproc
    t0 = time.monotonic()
    assert srv.notify({"type": "reply-delta", "text": "a"})
    first = recv(sock)
    assert time.monotonic() - t0 < DELTA_WINDOW  # the first delta is not held
    assert first == [Symbol("amacs-events"), 0, [[Symbol(":type"), "reply-delta", Symbol(":text"), "a"]]]
    for text in "bcd":  # inside the window: held and merged
        srv.notify({"type": "reply-delta", "text": text})
    srv.notify({"type": "annotation", "text": "n", "kind": "info"})  # flushes the held deltas first
    batch = recv(sock)
    assert batch[0] == Symbol("amacs-events")
    assert [e[1::2] for e in batch[2]] == [["reply-delta", "bcd"], ["annotation", "n", "info"]]


def test_held_deltas_go_when_the_window_ends(inproc):
    srv, sock = inproc
    srv.notify({"type": "reply-delta", "text": "a"})
    assert recv(sock)[2][0][3] == "a"
    srv.notify({"type": "reply-delta", "text": "b"})
    srv.notify({"type": "reply-delta", "text": "c"})
    sock.settimeout(1)
    message = recv(sock)
    assert message[2] == [[Symbol(":type"), "reply-delta", Symbol(":text"), "bc"]]


def test_a_streamed_reply_drops_held_deltas(inproc):
    srv, sock = inproc
    srv.notify({"type": "reply-delta", "text": "a"})
    recv(sock)
    srv.notify({"type": "reply-delta", "text": "b"})  # held: inside the window
    srv.notify({"type": "reply", "text": "ab", "streamed": True})
    message = recv(sock)
    assert [e[1] for e in message[2]] == ["reply"]  # "b" would be replaced at once: not sent


def test_events_of_one_loop_step_go_as_one_message(inproc):
    """On the loop's thread, what one step puts (reply, tick, turn-done) is one message, sent after the step."""
    import asyncio

    srv, sock = inproc

    async def one_step() -> bool:
        srv.notify({"type": "tick", "tick": 1})
        srv.notify({"type": "reply-delta", "text": "a"})
        srv.notify({"type": "reply-delta", "text": "b"})  # same step: merged, not held for the window
        srv.notify({"type": "turn-done", "tick": 1})
        sock.settimeout(0.05)
        try:
            recv(sock)
        except TimeoutError:
            return True  # nothing sent before the step is over
        return False

    async def two_steps() -> None:
        assert await one_step()
        await asyncio.sleep(0)
        srv.notify({"type": "reply-delta", "text": "c"})
        srv.notify({"type": "reply-delta", "text": "d"})

    asyncio.run(two_steps())
    sock.settimeout(1)
    assert [e[1::2][:2] for e in recv(sock)[2]] == [["tick", 1], ["reply-delta", "ab"], ["turn-done", 1]]
    assert recv(sock)[2] == [[Symbol(":type"), "reply-delta", Symbol(":text"), "cd"]]


def test_a_reply_goes_at_once_with_what_came_before_it_in_the_step(inproc):
    """The person waits for the reply, not for the tick's records that follow it in the same step."""
    import asyncio

    srv, sock = inproc

    async def step() -> None:
        srv.notify({"type": "reply-delta", "text": "a"})
        srv.notify({"type": "reply", "text": "ab", "streamed": True})  # drops the delta it replaces
        sock.settimeout(1)
        assert [e[1] for e in recv(sock)[2]] == ["reply"]  # before the step ends
        srv.notify({"type": "tick", "tick": 1})
        srv.notify({"type": "turn-done", "tick": 1})

    asyncio.run(step())
    assert [e[1] for e in recv(sock)[2]] == ["tick", "turn-done"]


def test_a_turn_starts_with_one_message(server):
    """input-taken and turn-start (and, here, the turn's whole end: no API key) reach Emacs together."""
    _proc, port = server
    sock = connect(port)
    assert hello(sock)[0] == Symbol("return")
    send(sock, "call", 2, Symbol("submit"), ["hi"])
    messages = []
    while not any(m[0] == Symbol("amacs-events") for m in messages):
        messages.append(recv(sock))
    events = next(m for m in messages if m[0] == Symbol("amacs-events"))[2]
    types = [e[1] for e in events]
    assert types[:2] == ["input-taken", "turn-start"], types
    sock.close()


def test_no_thread_per_message_and_slow_calls_do_not_block_replies(inproc):
    import threading

    _srv, sock = inproc
    send(sock, "call", 5, Symbol("slow"), [])  # runs on the pool
    send(sock, "call", 6, Symbol("ping"), ["fast"])
    assert recv(sock) == [Symbol("return"), 6, "fast"]  # answered while slow runs
    assert recv(sock) == [Symbol("return"), 5, "slow done"]
    before = threading.active_count()
    for uid in range(100, 300):
        send(sock, "call", uid, Symbol("ping"), [uid])
        assert recv(sock) == [Symbol("return"), uid, uid]
    assert threading.active_count() <= before
