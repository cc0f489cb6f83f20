"""The events the server sends Emacs are declared once, with their fields (transport/emacs_face.py,
EVENTS): the face sends only those, and Emacs's handlers read only those."""

from __future__ import annotations

import re
from pathlib import Path

from amacs_server.inference.retry import Retrying
from amacs_server.text.lisp import kebab
from amacs_server.transport.emacs_face import EVENTS, EmacsFace
from tests.test_memory import silent_runtime

ROOT = Path(__file__).resolve().parents[1]
ELISP = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "elisp").glob("*.el")}


class Recording:
    """An EPC server that keeps what it is asked to send."""

    def __init__(self) -> None:
        self.sent: list[dict[str, object]] = []

    def notify(self, event: dict[str, object], now: bool = False) -> bool:
        self.sent.append(dict(event))
        return True


def handlers() -> dict[str, list[str]]:
    """Each event type Emacs handles -> the names of its handler functions."""
    out: dict[str, list[str]] = {}
    for text in ELISP.values():
        for kind, fn in re.findall(r"\(amacs-on-event \"([a-z-]+)\" #'([\w-]+)\)", text):
            out.setdefault(kind, []).append(fn)
    return out


def fields_read(fn: str) -> set[str]:
    """The fields handler FN reads of its event: ``(plist-get ARG :field)``, ARG its first argument."""
    for text in ELISP.values():
        found = re.search(rf"^\(defun {re.escape(fn)} \(([\w-]+)[^)]*\)(.*?)(?=^\(|\Z)", text, re.S | re.M)
        if found:
            arg, body = found.groups()
            return set(re.findall(rf"\(plist-get {re.escape(arg)} :([\w-]+)\)", body))
    raise AssertionError(f"no defun {fn}")


def test_every_event_emacs_handles_is_declared_and_every_declared_one_handled():
    assert sorted(set(handlers()) - set(EVENTS)) == []
    assert sorted(set(EVENTS) - set(handlers())) == []


def test_emacs_reads_only_the_declared_fields():
    undeclared = {}
    for kind, fns in handlers().items():
        declared = {kebab(f) for f in EVENTS[kind]} | {"type"}
        for fn in fns:
            extra = fields_read(fn) - declared
            if extra:
                undeclared[f"{kind} {fn}"] = sorted(extra)
    assert undeclared == {}
    assert fields_read("amacs-shell--on-reply") >= {"text", "streamed"}  # the reader still finds them


def test_the_face_sends_only_declared_fields(tmp_path):
    server = Recording()
    face = EmacsFace(server)  # type: ignore[arg-type]
    rt = silent_runtime(tmp_path / "home")
    try:
        face.reply("r", streamed=True)
        face.reply_delta("d")
        face.thinking_delta("t")
        face.reply_abandon("why")
        face.annotate("n", "warning")
        face.retrying(Retrying(text="overloaded", seconds=2.0, attempt=1, attempts=3))
        face.preparing("starting tool server slow…")
        face.agent_ended("task-1", "done", True, "done")
        face.turn_started()
        face.step_started(1, 8)
        face.turn_done(3)
        face.input_taken(saved=True)
        face.agents([], rt.ledger.spending())
        rt.face = face
        rt.ledger.tell_ticked(rt.face)  # the tick event as the runtime makes it
    finally:
        rt.mind.ltm.close()
    assert {e["type"] for e in server.sent} == set(EVENTS) - {"eval", "hydrate"}
    for event in server.sent:
        assert set(event) - {"type"} <= EVENTS[str(event["type"])], event


def test_an_undeclared_field_is_said_in_the_log(caplog):
    face = EmacsFace(Recording())  # type: ignore[arg-type]
    face._send(type="reply", text="r", colour="blue")
    assert "colour" in caplog.text
