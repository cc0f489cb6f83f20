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
    program = [Symbol(":origin"), "program"]  # as Emacs marks a call its batch program made in no eval
    send(sock, "call", 3, Symbol("set_consciousness"), ["current-tick", 99, program])
    err = recv(sock)
    assert err[0] == Symbol("return-error") and err[1] == 3
    assert "owned by the harness" in err[2] and "Error(" not in err[2]
    send(sock, "call", 4, Symbol("set_consciousness"), ["mood", "🙂", program])
    assert recv(sock) == [Symbol("return"), 4, "🙂"]
    # A method nobody published is an error answered (python-epc looks it up with xmlrpc.server,
    # which the server imports only then), and the connection goes on.
    send(sock, "call", 5, Symbol("no_such_method"), [])
    err = recv(sock)
    assert err[0] == Symbol("epc-error") and err[1] == 5 and "no_such_method" in str(err[2]), err
    send(sock, "call", 6, Symbol("ping"), ["still here"])
    assert recv(sock) == [Symbol("return"), 6, "still here"]
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


def test_a_malformed_price_table_is_refused_with_what_is_wrong_and_the_server_stays(server):
    _proc, port = server
    sock = connect(port)
    bad = [Symbol(":eval-timeout"), 5, Symbol(":prices"), [[Symbol(":model"), "x", Symbol(":input"), "cheap"]]]
    send(sock, "call", 1, Symbol("hello"), [TOKEN, os.getpid(), bad])
    reply = recv(sock)
    assert reply[:2] == [Symbol("epc-error"), 1]
    assert reply[2].startswith("hello: :prices item 0 :input must be a number, got 'cheap'; :prices item 0 :output is required;")
    assert reply[2].endswith("fix it, then M-x amacs-restart")
    sock.close()
    sock = connect(port)  # not adopted: the same Emacs, its table fixed, connects
    good = [Symbol(":prices"), [[Symbol(":model"), "x", Symbol(":input"), 1, Symbol(":output"), 2,
                                 Symbol(":cache-write"), 3, Symbol(":cache-read"), 0.5]]]
    send(sock, "call", 1, Symbol("hello"), [TOKEN, os.getpid(), good])
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


def test_the_replys_last_delta_sends_the_held_ones_at_once(inproc, monkeypatch):
    """The reply's last text waited up to a window (16 ms, longer on a loaded machine: the flusher
    is a thread) after the model's last byte; once the reply is complete nothing can merge with it."""
    from amacs_server.transport import server

    monkeypatch.setattr(server, "DELTA_WINDOW", 30.0)  # held deltas would wait 30 s
    srv, sock = inproc
    srv.notify({"type": "reply-delta", "text": "a"})
    recv(sock)
    t0 = time.monotonic()
    srv.notify({"type": "reply-delta", "text": "b"})  # held: inside the window
    srv.notify({"type": "reply-delta", "text": "c"}, now=True)
    sock.settimeout(10)
    message = recv(sock)
    assert time.monotonic() - t0 < 10
    assert message[2] == [[Symbol(":type"), "reply-delta", Symbol(":text"), "bc"]]
    srv.notify({"type": "reply-delta", "text": ""}, now=True)  # complete, nothing new and nothing held
    srv.notify({"type": "annotation", "text": "n", "kind": "info"})
    assert [e[1] for e in recv(sock)[2]] == ["annotation"]


def test_the_replys_last_delta_is_not_dropped_by_the_reply_of_its_loop_step(inproc):
    """The model's last chunk, its parse and the streamed reply ran in one loop step: the reply
    dropped the deltas of that step, and the reply's end showed only once the reply was written."""
    import asyncio

    srv, sock = inproc

    async def one_step() -> None:
        srv.notify({"type": "reply-delta", "text": "a"})
        srv.notify({"type": "reply-delta", "text": "b"}, now=True)
        srv.notify({"type": "reply", "text": "ab", "streamed": True})

    asyncio.run(one_step())
    sock.settimeout(5)
    events = recv(sock)[2]
    if len(events) == 1:
        events += recv(sock)[2]
    assert [e[1::2] for e in events] == [["reply-delta", "ab"], ["reply", "ab", True]]


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
    """turn-start and input-taken (and, here, the turn's whole end: no API key) reach Emacs together;
    input-taken comes after the write-ahead, and says the input is saved (issue 12)."""
    _proc, port = server
    sock = connect(port)
    assert hello(sock)[0] == Symbol("return")
    send(sock, "call", 2, Symbol("submit"), ["hi", [Symbol(":origin"), "key", Symbol(":command"), "amacs-shell-return"]])
    messages = []
    while not any(m[0] == Symbol("amacs-events") for m in messages):
        messages.append(recv(sock))
    events = next(m for m in messages if m[0] == Symbol("amacs-events"))[2]
    types = [e[1] for e in events]
    assert types[:2] == ["turn-start", "input-taken"], types
    assert events[1][2:] == [Symbol(":saved"), True], events[1]
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


# Local security (issue 12): one Emacs per server; a connection must say hello within HELLO_TIMEOUT.

def _threads(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def test_a_second_emacs_is_refused_and_the_first_goes_on(server):
    """A second hello, token and all, is refused with a message that answers its call; the first
    session is untouched, and the second leaving does not stop the server (it used to take over
    the session, and its leaving shut the server down)."""
    proc, port = server
    first = connect(port)
    assert hello(first)[0] == Symbol("return")
    second = connect(port)
    send(second, "call", 41, Symbol("hello"), [TOKEN, 4242, [Symbol(":eval-timeout"), 5]])
    reply = recv(second)
    assert reply[:2] == [Symbol("epc-error"), 41], reply  # answers the hello: Emacs shows the message
    assert reply[2].startswith(f"another Emacs (pid {os.getpid()}) is connected to this AMACS server"), reply
    assert recv(second) is None  # and closed
    second.close()
    time.sleep(0.3)
    assert proc.poll() is None  # the second leaving did not stop the server
    send(first, "call", 2, Symbol("ping"), ["still mine"])
    assert recv(first) == [Symbol("return"), 2, "still mine"]
    send(first, "call", 3, Symbol("status"), [])
    assert recv(first)[:2] == [Symbol("return"), 3]


def test_connections_that_never_say_hello_are_closed_within_the_bound(server, tmp_path):
    """Silent connections, and one that trickles a hello a byte a second, are closed by the server
    HELLO_TIMEOUT after they opened, and their threads go with them; the Emacs stays served."""
    from amacs_server.transport.server import HELLO_TIMEOUT

    proc, port = server
    emacs = connect(port)
    assert hello(emacs)[0] == Symbol("return")
    log = tmp_path / "home" / "logs" / "server.log"
    deadline = time.monotonic() + 30
    while "imported anthropic" not in log.read_text():  # its import holds the GIL for a second or two
        assert time.monotonic() < deadline
        time.sleep(0.05)
    base = _threads(proc.pid)
    opened = time.monotonic()
    idle = [connect(port) for _ in range(50)]
    trickle = connect(port)
    message = encode_message("call", 1, Symbol("hello"), [TOKEN, os.getpid(), []])
    peak = 0
    # Until all 51 threads are counted: a peak taken when only some were started would make
    # the server's own threads look like ones left behind below.
    while peak < base + 51 and time.monotonic() - opened < HELLO_TIMEOUT - 1:
        peak = max(peak, _threads(proc.pid))
        time.sleep(0.02)
    assert peak >= base + 51  # one thread each while they wait
    closed_at = {}
    for sock in [*idle, trickle]:
        sock.setblocking(False)
    sent = 0
    while len(closed_at) < len(idle) + 1 and time.monotonic() - opened < HELLO_TIMEOUT + 5:
        if sent < len(message) and time.monotonic() - opened >= sent:  # a byte a second
            try:
                trickle.send(message[sent:sent + 1])
                sent += 1
            except OSError:
                pass
        for sock in [*idle, trickle]:
            if sock in closed_at:
                continue
            try:
                if sock.recv(1) == b"":
                    closed_at[sock] = time.monotonic() - opened
            except BlockingIOError:
                pass
            except OSError:
                closed_at[sock] = time.monotonic() - opened
        time.sleep(0.05)
    assert len(closed_at) == len(idle) + 1, f"{len(idle) + 1 - len(closed_at)} connections still open"
    assert 2 <= sent < len(message)  # the trickler was still sending when it was cut off
    times = sorted(closed_at.values())
    assert HELLO_TIMEOUT - 0.5 <= times[0] and times[-1] <= HELLO_TIMEOUT + 2, times
    deadline = time.monotonic() + 5
    while _threads(proc.pid) > peak - 51 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _threads(proc.pid) <= peak - 51  # their threads are gone (900 idle ones were 904 threads)
    send(emacs, "call", 2, Symbol("ping"), ["served"])  # the authenticated one is never timed out
    assert recv(emacs) == [Symbol("return"), 2, "served"]


def test_a_headless_server_takes_the_next_emacs_once_the_first_hung_up():
    """M-x amacs-restart against a headless server: the old connection closes and the new hello
    follows at once, before the server's reader of the old one has noticed (here it is busy with
    a call).  The new Emacs is accepted, and only after the old session ended (its turn stopped);
    while the old one is still connected, the same hello is refused."""
    import threading

    from amacs_server.transport.server import AmacsEPCServer

    srv = AmacsEPCServer(TOKEN, headless=True)
    order = []
    srv.on_emacs_gone = lambda: order.append("gone")
    srv.on_hello = lambda _settings: order.append("hello") or {}
    srv.register("ping", lambda value: time.sleep(0.5) or value)  # runs on the reader thread (inline)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        port = srv.server_address[1]
        old = connect(port)
        assert hello(old)[0] == Symbol("return")
        send(old, "call", 2, Symbol("ping"), ["busy"])  # the old reader is busy for half a second
        time.sleep(0.1)
        refused = connect(port)
        assert hello(refused)[0] == Symbol("epc-error")  # the old one is still there
        old.close()
        new = connect(port)
        started = time.monotonic()
        assert hello(new)[0] == Symbol("return")
        assert time.monotonic() - started > 0.1  # it waited for the old session to end
        assert order == ["hello", "gone", "hello"]
        send(new, "call", 3, Symbol("ping"), ["new"])
        assert recv(new) == [Symbol("return"), 3, "new"]
        new.close()
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_message_with_bytes_that_are_not_utf8_is_read_with_replacement_characters():
    """Emacs writes a surrogate it holds as ED A0 80; a stray byte may come too: data, not a drop."""
    from amacs_server.transport.server import unpack

    name, uid, args = unpack(b'(return 7 "a\xed\xa0\x80b")')
    assert (name, uid, args) == ("return", 7, ["a\ufffdb"])
    assert unpack(b'(return 8 "x\xffy")')[2] == ["x\ufffdy"]


def test_an_answer_too_long_for_epcs_length_field_is_its_methods_error_and_the_link_stays(inproc):
    srv, sock = inproc
    srv.register("huge", lambda: "x" * (1 << 24))
    send(sock, "call", 1, Symbol("huge"), [])
    err = recv(sock)
    assert err[0] == Symbol("return-error") and err[1] == 1, err
    assert "the answer is 16 MiB, more than the 16 MiB a message to Emacs can carry" in err[2]
    send(sock, "call", 2, Symbol("ping"), ["still here"])
    assert recv(sock) == [Symbol("return"), 2, "still here"]


def test_a_burst_of_calls_over_the_bound_is_refused_at_once_and_none_taken_is_lost(inproc, monkeypatch):
    """memid spec, bounded queues: calls from Emacs past the bound (waiting for a worker or running)
    are refused at once with a clear message; every call taken is answered."""
    import threading

    from amacs_server.transport import server as transport

    srv, sock = inproc
    monkeypatch.setattr(transport, "MAX_CALLS", 4)
    gate = threading.Event()
    srv.register("held", lambda n: gate.wait(10) and n)
    for uid in range(10, 16):  # 6 calls: 4 taken (held), 2 refused
        send(sock, "call", uid, Symbol("held"), [uid])
    refused = [recv(sock) for _ in range(2)]
    assert [m[0] for m in refused] == [Symbol("return-error")] * 2
    assert {m[1] for m in refused} == {14, 15}
    assert all("overloaded: 4 calls from Emacs are waiting or running" in m[2] for m in refused)
    gate.set()
    answered = sorted(recv(sock)[1:3] for _ in range(4))
    assert answered == [[10, 10], [11, 11], [12, 12], [13, 13]]
    send(sock, "call", 20, Symbol("ping"), ["again"])  # room again once they are answered
    assert recv(sock)[1:3] == [20, "again"]


def test_a_burst_of_events_over_the_bound_is_refused_at_once_and_none_taken_is_lost(inproc, caplog):
    """memid spec, bounded queues: an Emacs that stops reading makes events wait, never the
    sender; past the bound an event is refused at once, with a clear message; every event taken
    reaches Emacs, in order, once it reads again."""
    import threading

    srv, sock = inproc
    srv.emacs.outbox.limit = 32
    srv.emacs.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    size = 64 * 1024
    taken: list[bool] = []

    def burst():
        for n in range(200):
            taken.append(srv.notify({"type": "annotation", "text": f"{n:03d}" + "x" * size, "kind": "info"}))

    sender = threading.Thread(target=burst, daemon=True)
    t0 = time.monotonic()
    sender.start()
    sender.join(20)
    try:
        assert not sender.is_alive(), "the sender waited on an Emacs that does not read"
        assert time.monotonic() - t0 < 10
        accepted = taken.count(True)
        assert 32 <= accepted < 200 and taken == [True] * accepted + [False] * (200 - accepted)
        assert "overloaded: 32 events to Emacs are waiting to be sent" in caplog.text
    finally:
        sock.settimeout(30)
        received = []
        while len(received) < taken.count(True):  # Emacs reads again: everything taken comes, in order
            received += [int(e[3][:3]) for e in recv(sock)[2]]
    assert received == list(range(accepted))
    assert srv.notify({"type": "annotation", "text": "room again", "kind": "info"})
    assert recv(sock)[2][0][3] == "room again"
