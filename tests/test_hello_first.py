"""Hello is answered without pydantic: its settings read by hand when plainly valid, the
methods published just after it, and a call that comes sooner waits for them."""

from __future__ import annotations

import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sexpdata import Symbol

from amacs_server.errors import Refused
from amacs_server.hello import HelloSettings, checked_settings, plainly_valid, read_settings
from amacs_server.inference.pricing import Price
from amacs_server.transport.server import AmacsEPCServer
from tests.test_transport import TOKEN, connect, hello, recv, send

ROOT = Path(__file__).resolve().parents[1]
ROW = {"model": "claude", "input": 3, "output": 15.0, "cache_write": 3.75, "cache_read": 0.3}

# Settings as Emacs's hello carries them (from_lisp made), valid and not.
SAMPLES: list[object] = [
    None, {}, {"eval_timeout": 30, "max_steps": 8, "prices": None},  # Emacs's defaults
    {"eval_timeout": 2.5}, {"max_steps": 1}, {"prices": [ROW]}, {"prices": [ROW, {**ROW, "model": "gpt"}]},
    {"prices": [{**ROW, "input": 0}]}, {"prices": [{**ROW, "input": 0.0, "cache_read": 10**6}]},
    {"eval_timeout": 0}, {"eval_timeout": -1}, {"eval_timeout": True}, {"eval_timeout": "30"},
    {"eval_timeout": math.inf}, {"eval_timeout": math.nan}, {"eval_timeout": 10**400},
    {"max_steps": 0}, {"max_steps": 2.0}, {"max_steps": True}, {"max_steps": "8"}, {"max_steps": -3},
    {"prices": "cheap"}, {"prices": [ROW, 3]}, {"prices": [{**ROW, "input": "cheap"}]},
    {"prices": [{**ROW, "input": -1}]}, {"prices": [{**ROW, "input": True}]}, {"prices": [{**ROW, "model": 3}]},
    {"prices": [{k: v for k, v in ROW.items() if k != "output"}]}, {"prices": [{**ROW, "extra": 1}]},
    {"prices": [{**ROW, "input": math.nan}]}, {"prices": {"model": "x"}},
    {"colour": "blue"}, {"max_steps": 8, "colour": "blue"}, [1, 2], "settings", 3,
]


def _by_the_model(raw: object) -> HelloSettings | str:
    try:
        return checked_settings(raw)
    except Refused as err:
        return str(err)


@pytest.mark.parametrize("raw", SAMPLES, ids=lambda raw: repr(raw)[:60])
def test_the_hand_check_accepts_only_what_the_declared_model_accepts_and_reads_it_the_same(raw: object) -> None:
    """Whatever the hand check takes plainly, the model takes, as the same values; anything else goes to
    the model, whose answer (the settings, or what is wrong) is hello's."""
    plain = plainly_valid(raw)
    judged = _by_the_model(raw)
    if plain is not None:
        assert plain == judged
        assert all(type(v) is float for p in (plain.prices or {}).values() for v in vars(p).values())
    if isinstance(judged, str):
        with pytest.raises(Refused) as refused:
            read_settings(raw)
        assert str(refused.value) == judged and judged.startswith("hello: ")
    else:
        assert read_settings(raw) == judged


def test_what_emacs_sends_by_default_is_read_without_the_model() -> None:
    """The defcustoms' defaults, and a price table as the customize type makes it, are plainly valid."""
    assert plainly_valid({"eval_timeout": 30, "max_steps": 8, "prices": None}) == HelloSettings(8, None, 30.0)
    assert plainly_valid({"prices": [ROW]}) == HelloSettings(prices={"claude": Price(3.0, 15.0, 3.75, 0.3)})


@contextmanager
def _greeted(srv: AmacsEPCServer) -> Iterator[socket.socket]:
    """A connection to SRV, serving and built, whose hello was answered; SRV is shut after."""
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    sock = connect(srv.server_address[1])
    try:
        srv.start_done()
        assert hello(sock)[0] == Symbol("return")
        yield sock
    finally:
        sock.close()
        srv.shutdown()
        srv.server_close()


def test_a_method_called_before_the_methods_are_published_waits_and_then_runs() -> None:
    """Hello is answered at once; a call sent right after it (ping: otherwise run on the reader thread)
    is answered once the methods are published, and the reader goes on meanwhile."""
    srv = AmacsEPCServer(TOKEN, headless=False, starting=True)
    srv.on_hello = lambda _settings: {"status": "ok"}
    with _greeted(srv) as sock:
        send(sock, "call", 2, Symbol("ping"), ["early"])
        send(sock, "call", 3, Symbol("ping"), ["second"])
        sock.settimeout(0.4)
        with pytest.raises(TimeoutError):
            recv(sock)  # not published yet: no answer, not an error
        srv.register("ping", lambda value: value)
        srv.publish_done()
        sock.settimeout(10)
        replies = [recv(sock), recv(sock)]
        assert sorted(replies, key=lambda r: r[1]) == [[Symbol("return"), 2, "early"], [Symbol("return"), 3, "second"]]
        send(sock, "call", 4, Symbol("no_such_method"), [])
        assert recv(sock)[:2] == [Symbol("epc-error"), 4]


def test_methods_that_could_not_be_published_are_said_to_every_call() -> None:
    srv = AmacsEPCServer(TOKEN, headless=True, starting=True)
    with _greeted(srv) as sock:
        send(sock, "call", 2, Symbol("status"), [])
        srv.publish_done("the server could not publish its methods: ImportError('x') (see logs/server.log)")
        assert recv(sock) == [Symbol("return-error"), 2,
                              "the server could not publish its methods: ImportError('x') (see logs/server.log)"]


def test_the_server_answers_hello_before_it_imports_pydantic_and_a_call_sent_at_once_is_answered(
        tmp_path: Path) -> None:
    """The real server, its imports timed (``-X importtime`` writes to its log): hello is answered
    (its reply read here) before pydantic is imported; status, sent with hello, gets its answer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_"))}
    env.update(AMACS_HOME=str(tmp_path), AMACS_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-test")
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "amacs_server"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    try:
        assert proc.stdout is not None
        sock = connect(int(proc.stdout.readline()))
        settings = [Symbol(":eval-timeout"), 30, Symbol(":max-steps"), 8, Symbol(":prices"), []]
        send(sock, "call", 1, Symbol("hello"), [TOKEN, os.getpid(), settings])
        send(sock, "call", 2, Symbol("status"), [])
        answered = recv(sock)
        assert answered[:2] == [Symbol("return"), 1]
        status = recv(sock)
        assert status[:2] == [Symbol("return"), 2] and status[2] == answered[2]
        log = tmp_path / "logs" / "server.log"
        deadline = time.monotonic() + 30
        while not re.search(r"\| +pydantic$", log.read_text(encoding="utf-8"), re.M):
            assert time.monotonic() < deadline, "pydantic was never imported (the methods need it)"
            time.sleep(0.05)
        text = log.read_text(encoding="utf-8")
        first_pydantic = re.search(r"^import time:.*\| +pydantic(\.|$)", text, re.M)
        assert first_pydantic is not None
        assert text.index("answered hello") < first_pydantic.start(), text[:2000]
        sock.close()
    finally:
        proc.terminate()
        proc.wait(10)
