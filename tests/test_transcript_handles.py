"""Transcripts keep one file handle (issue 11, the pool bound; DESIGN.md, Transcripts).

The transcript is written on the event loop for every model call of every agent:
it opens its file once, appends each event with one write, and closes it at the
runtime's stop.  The lines on disk are what they were when each write opened the
file: same columns, same bytes, the API key redacted.
"""

import gc
import json
import os
import stat

import pytest

from amacs_server.persistence import transcript as transcript_module
from amacs_server.persistence.transcript import AgentIdentity, Transcript
from amacs_server.records import (
    AgentStart,
    Eval,
    ModelRequest,
    ModelResponse,
    Paused,
    Posted,
    Resumed,
)


def descriptors_of(path):
    """This process's open descriptors on PATH."""
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                fds.append(fd)
        except OSError:
            continue
    return fds


@pytest.fixture
def opens(monkeypatch):
    """Count os.open calls made by the transcript module."""
    calls = []
    real = os.open

    def counting(path, *args, **kwargs):
        calls.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(transcript_module.os, "open", counting)
    return calls


A, B = Paused(by="person"), Resumed(by="person")  # two events of no matter


def test_many_events_open_the_file_once_and_close_leaves_none_open(tmp_path, opens):
    t = Transcript(tmp_path, "run-1")
    for i in range(50):
        t.write(Posted(type="User", content=i))
    assert opens == [str(t.path)]
    assert len(descriptors_of(t.path)) == 1
    t.close()
    assert descriptors_of(t.path) == []
    t.close()  # twice is harmless


def test_every_event_is_on_disk_at_once_for_a_reader(tmp_path):
    """Nothing waits in a buffer: the hub reads an agent's transcript while it runs."""
    t = Transcript(tmp_path, "run-1")
    task = AgentIdentity("task-1", "primary", "task", "researcher")
    t.write(AgentStart(depth=1), agent=task)
    t.write(ModelRequest(request={"messages": []}), agent=task)
    assert [e["event"] for e in t.read("task-1")] == ["agent_start", "model_request"]
    assert len(t.path.read_text().splitlines()) == 2
    t.close()


def test_a_write_after_close_reopens_and_appends(tmp_path, opens):
    """A late event (a task ending while the server stops) is not lost."""
    t = Transcript(tmp_path, "run-1")
    t.write(A)
    t.close()
    t.write(B)
    t.close()
    assert [json.loads(x)["seq"] for x in t.path.read_text().splitlines()] == [1, 2]
    assert len(opens) == 2


def test_lines_are_byte_for_byte_the_format_and_hide_the_key(tmp_path, monkeypatch):
    """The columns DuckDB loads, in order; non-ASCII kept; odd values as strings; key scrubbed."""
    monkeypatch.setattr(transcript_module.time, "time", lambda: 1700000000.25)
    t = Transcript(tmp_path, "run-1", secrets=("sk-SECRET", ""))
    t.write(ModelRequest(request={"headers": "x-api-key: sk-SECRET", "text": "é ✓", "path": tmp_path / "x"}), tick=3)
    t.write(Eval(form="(+ 2 2)"), agent=AgentIdentity("task-1", "primary", "task", "researcher"))
    t.close()
    assert t.path.read_bytes().decode("utf-8").splitlines() == [
        '{"run_id": "run-1", "session_id": "run-1", "agent_id": "primary", "parent_id": null, '
        '"agent_type": "primary", "template": "core", "seq": 1, "ts": 1700000000.25, "tick": 3, '
        '"event": "model_request", "data": {"request": {"headers": "x-api-key: [REDACTED]", "text": "é ✓", '
        f'"path": "{tmp_path / "x"}"}}}}}}',
        '{"run_id": "run-1", "session_id": "run-1", "agent_id": "task-1", "parent_id": "primary", '
        '"agent_type": "task", "template": "researcher", "seq": 2, "ts": 1700000000.25, "tick": null, '
        '"event": "eval", "data": {"form": "(+ 2 2)"}}',
    ]


def test_the_file_is_private_to_its_owner(tmp_path):
    t = Transcript(tmp_path, "run-1")
    t.write(A)
    t.close()
    assert stat.S_IMODE(t.path.stat().st_mode) == 0o600


def test_a_transcript_nobody_closed_closes_its_file_when_dropped(tmp_path):
    t = Transcript(tmp_path, "run-1")
    t.write(A)
    path = t.path
    assert len(descriptors_of(path)) == 1
    del t
    gc.collect()
    assert descriptors_of(path) == []


def test_a_lone_surrogate_is_written_as_a_json_escape(tmp_path):
    """The model's raw text may hold one (from \\ud800 in its JSON): the line is written, exactly."""
    t = Transcript(tmp_path, "run-1", secrets=("sk-SECRET",))
    t.write(ModelResponse(raw="a\ud800b sk-SECRET", stop_reason=None, usage={}, cost=None, latency_ms=0))
    t.write(B)
    lines = (tmp_path / "run-1.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["data"]["raw"] == "a\ud800b [REDACTED]" and json.loads(lines[1])["event"] == B.kind
