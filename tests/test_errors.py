"""Errors keep their cause (issue 14): expected failures share AmacsError; anything else is logged."""

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sexpdata import Symbol

from amacs_server.agents.agent import AgentError, AgentStopped
from amacs_server.agents.talk import Overloaded
from amacs_server.config import ConfigError
from amacs_server.errors import AmacsError, Refused, Stopping
from amacs_server.files import PersistenceError
from amacs_server.inference.anthropic_backend import StreamBrokeOff, StreamError, StreamOverloaded
from amacs_server.inference.model_call import CallFailed, WindowRefusal
from amacs_server.inference.openai_backend import InvalidRequest, StreamCut
from amacs_server.inference.parse import AnswerCut, ResponseFormatError
from amacs_server.inference.retry import InferenceError
from amacs_server.local_model import LocalModelError
from amacs_server.loop.primary import TurnAborted
from amacs_server.memory.active import MemoryRefused
from amacs_server.memory.ltm import LtmError
from amacs_server.memory.memid import MemIdError
from amacs_server.methods import NotYours
from amacs_server.persistence.git_repo import CommitError, GitFailed
from amacs_server.persistence.history import HistoryError, NoSuchTick
from amacs_server.persistence.history_search import HistorySearchError
from amacs_server.persistence.home_lock import HomeInUse
from amacs_server.persistence.recovery import StartupError
from amacs_server.research.judge import JudgeError
from amacs_server.research.spec import SpecError
from amacs_server.skills import SkillError
from amacs_server.state.consciousness import ConsciousnessError
from amacs_server.text.lisp import LispFormatError
from amacs_server.threads import ThreadError
from amacs_server.tools.kit import ToolError
from amacs_server.tools.mcp import Blocked
from amacs_server.tools_mcp.config import _Bad as McpConfigProblem
from amacs_server.tools_mcp.hub import McpError
from amacs_server.transport.emacs_face import EmacsGone
from amacs_server.transport.server import (
    AmacsEPCServer,
    OutboxFull,
    RemoteError,
    StartFailed,
    Unauthorized,
)

from .test_transport import TOKEN, connect, hello, recv, send

EXPECTED = {  # each expected failure, with the builtin base its callers catch it by
    AgentError: ValueError, AgentStopped: RuntimeError, Overloaded: RuntimeError, ConfigError: ValueError,
    ResponseFormatError: ValueError, AnswerCut: ValueError, InferenceError: RuntimeError, StreamError: Exception,
    StreamOverloaded: Exception, StreamBrokeOff: Exception, TurnAborted: Exception, MemoryRefused: ValueError, LtmError: ValueError,
    MemIdError: ValueError, PersistenceError: OSError, CommitError: RuntimeError, GitFailed: RuntimeError,
    StartupError: RuntimeError,
    HomeInUse: RuntimeError, HistoryError: RuntimeError, NoSuchTick: RuntimeError, SkillError: ValueError,
    ConsciousnessError: ValueError,
    ThreadError: ValueError,
    ToolError: ValueError, EmacsGone: RuntimeError, LispFormatError: ValueError, RemoteError: Exception,
    Unauthorized: Exception, StartFailed: Exception, Refused: ValueError, Stopping: RuntimeError, SpecError: ValueError,
    InvalidRequest: Exception, StreamCut: Exception, LocalModelError: RuntimeError, CallFailed: RuntimeError, WindowRefusal: Exception,
    JudgeError: ValueError, Blocked: RuntimeError, McpConfigProblem: ValueError, McpError: RuntimeError,
    NotYours: PermissionError, HistorySearchError: RuntimeError, OutboxFull: RuntimeError,
}


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_expected_errors_derive_from_amacs_error_and_keep_their_base(cls):
    assert issubclass(cls, AmacsError)
    assert issubclass(cls, EXPECTED[cls])


def test_no_project_exception_class_is_left_out():
    """Every exception class defined in amacs_server is an AmacsError (a new one must choose)."""
    import importlib
    import inspect
    import pkgutil

    import amacs_server

    found = set()
    for info in pkgutil.walk_packages(amacs_server.__path__, "amacs_server."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _name, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("amacs_server"):
                found.add(obj)
    assert found - set(EXPECTED) - {AmacsError} == set()


@pytest.fixture
def failing_server():
    """An in-process server (real socket, authenticated) with methods that fail, expectedly or not."""

    def boom(_arg):
        return {}["key"]  # a bug: KeyError('key')

    def refuse():
        raise AgentError("task-1 has ended (done)")

    srv = AmacsEPCServer(TOKEN, headless=True)
    srv.register("boom", boom)
    srv.register("refuse", refuse)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    sock = connect(srv.server_address[1])
    assert hello(sock)[0] == Symbol("return")
    yield sock
    sock.close()
    srv.shutdown()
    srv.server_close()


def test_an_unexpected_exception_is_logged_with_its_traceback_and_answered_in_one_line(failing_server, caplog):
    caplog.set_level(logging.INFO, logger="amacs.transport")
    send(failing_server, "call", 5, Symbol("boom"), ["x"])
    reply = recv(failing_server)
    assert reply == [Symbol("return-error"), 5, "internal error in boom: KeyError('key') (see logs/server.log)"]
    records = [r for r in caplog.records if r.exc_info]
    assert len(records) == 1 and records[0].levelno == logging.ERROR
    assert "internal error in boom" in records[0].getMessage()
    assert isinstance(records[0].exc_info[1], KeyError)
    assert 'return {}["key"]' in caplog.text  # the traceback, down to the line that failed


def test_an_expected_error_is_answered_with_its_message_alone_and_not_logged(failing_server, caplog):
    caplog.set_level(logging.INFO, logger="amacs.transport")
    send(failing_server, "call", 6, Symbol("refuse"), [])
    assert recv(failing_server) == [Symbol("return-error"), 6, "task-1 has ended (done)"]
    assert not [r for r in caplog.records if r.exc_info]


def test_the_real_server_writes_the_traceback_to_server_log(tmp_path):
    """The server run as Emacs runs it: a bug in a method (a RuntimeError, injected) is in server.log."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
    env.update(AMACS_HOME=str(home), AMACS_TOKEN=TOKEN, AMACS_FAULT_POINT="ping.bug")
    proc = subprocess.Popen([sys.executable, "-m", "amacs_server"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        sock = connect(port)
        assert hello(sock)[0] == Symbol("return")
        send(sock, "call", 2, Symbol("ping"), [])  # a call refused at the boundary: its message, no traceback
        assert recv(sock) == [Symbol("return-error"), 2, "ping: VALUE is required"]
        send(sock, "call", 3, Symbol("ping"), ["x"])  # the bug
        reply = recv(sock)
        assert reply[:2] == [Symbol("return-error"), 3]
        assert reply[2].startswith("internal error in ping: RuntimeError(") and "\n" not in reply[2]
        assert reply[2].endswith("(see logs/server.log)")
        log = Path(home / "logs" / "server.log")
        deadline = time.time() + 5
        while "Traceback" not in log.read_text() and time.time() < deadline:
            time.sleep(0.05)
        text = log.read_text()
        assert "internal error in ping" in text and "Traceback (most recent call last)" in text
        assert "RuntimeError: AMACS_FAULT_POINT ping.bug" in text and "VALUE is required" not in text
        sock.close()
    finally:
        proc.kill()
        proc.wait()
