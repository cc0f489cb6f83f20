"""Transcript events are declared once (amacs_server/records.py), written and read
through those records; what the research readers ask of a transcript is declared there too."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from amacs_server import records as events
from amacs_server.agents.agent import Agent
from amacs_server.persistence.transcript import AgentIdentity, Transcript
from amacs_server.state.consciousness import EvalResult

ROOT = Path(__file__).resolve().parents[1]
# The readers that query transcripts by SQL (DuckDB): the dataset, the report, the summary.
READERS = sorted((ROOT / "amacs_server" / "research").glob("*.py")) + [ROOT / "amacs_server" / "transcripts.py"]


def declared_keys() -> set[str]:
    """Every key a declared record writes in ``data`` (a spread field's: the dicts spread there)."""
    keys = {f.metadata.get("key", f.name) for cls in events.KINDS.values() for f in fields(cls)
            if not f.metadata.get("spread")}
    spread = set(EvalResult(True).to_dict()) | set(Agent(id="t", type="task", template="x", parent="primary", depth=1).summary()) | {"score"}
    return keys | spread


@pytest.mark.parametrize("record", [
    events.ModelRetry(status="overloaded, retrying", seconds=2.0),
    events.Notified(sender="primary", text="hi", to="viewpoint-a"),
    events.EvalResultRecord({"success": True, "result": "4", "error": None, "skipped": False}),
    events.AgentEnd(state="done", summary={"steps": 2, "cost": 0.1}),
    events.ModelError(error="boom"),
    events.ModelSwitch(backend="openai", model="m", base_url=None, window=4096),
])
def test_a_record_is_its_lines_data_and_reads_back(tmp_path, record):
    t = Transcript(tmp_path, "run-1")
    t.write(record, tick=4, agent=AgentIdentity("task-1", "primary", "task", "researcher"))
    t.close()
    line = json.loads(t.path.read_text())
    assert line["event"] == record.kind and line["data"] == record.data()
    (back,) = t.lines("task-1")
    assert back.event == record and back.kind == record.kind and back.tick == 4 and back.template == "researcher"
    assert [x.event for x in events.read(t.path)] == [record]


def test_data_keys_are_as_they_were():
    """Keys renamed, left out or spread: the lines the dataset reads keep their shape."""
    assert events.Notified(sender="a", text="t").data() == {"from": "a", "text": "t", "to": "all"}
    assert events.ModelError(error="x").data() == {"error": "x"}
    assert events.ModelError(error="x", detail="d").data() == {"error": "x", "detail": "d"}
    assert events.EvalResultRecord({"success": True}).data() == {"success": True}
    assert events.AgentEnd(state="done", summary={"steps": 1}).data() == {"state": "done", "steps": 1}


def test_a_line_of_no_declared_kind_is_refused():
    line = {"run_id": "r", "agent_id": "primary", "seq": 1, "ts": 0.0, "event": "no_such_kind", "data": {}}
    with pytest.raises(ValueError, match="no_such_kind"):
        events.parse(line)


def test_each_kind_is_declared_once():
    assert len({cls.kind for cls in events.KINDS.values()}) == len(events.KINDS)
    with pytest.raises(AssertionError, match="declared twice"):
        type("Again", (events.Record,), {"kind": "model_retry"})


def sql_kinds_and_keys(text: str) -> tuple[set[str], set[str]]:
    """The event kinds (``event = 'x'``, ``event IN ('x', 'y')``) and the top-level data keys
    (``data->>'$.x'``) SQL in TEXT names."""
    kinds = set(re.findall(r"\bevent\s*=\s*'([a-z_]+)'", text))
    for group in re.findall(r"\bevent\s+IN\s*\(([^)]*)\)", text, re.IGNORECASE):
        kinds |= set(re.findall(r"'([a-z_]+)'", group))
    keys = set(re.findall(r"data->>?'\$\.([a-z_]+)", text))
    return kinds, keys


def test_research_names_a_kind_or_a_field_only_through_the_records():
    """The readers' SQL names no event kind and no data key as a literal: each comes from its
    record (transcripts.Of), so the check below covers every one."""
    literal = {path.name: sql_kinds_and_keys(path.read_text(encoding="utf-8")) for path in READERS}
    assert {name: found for name, found in literal.items() if found != (set(), set())} == {}


def test_the_reader_check_sees_a_literal_kind_and_key():
    kinds, keys = sql_kinds_and_keys("SELECT data->>'$.colour' FROM events WHERE event IN ('model_response', 'mood_swing')")
    assert kinds == {"model_response", "mood_swing"} and keys == {"colour"}


def renamed(monkeypatch: pytest.MonkeyPatch, record: type[events.Record], old: str, new: str) -> None:
    """RECORD's field OLD declared as NEW, as an edit of records.py would leave it (for this test)."""
    declared = dict(record.__dataclass_fields__)  # type: ignore[attr-defined]
    field = copy.copy(declared.pop(old))
    field.name = new
    monkeypatch.setattr(record, "__dataclass_fields__", {**declared, new: field})


def test_a_field_renamed_in_the_records_fails_the_research_readers(tmp_path, monkeypatch):
    """Renaming a field in records.py breaks the dataset and the transcripts summary where their
    queries are made (a KeyError naming it), not a researcher's report with an empty column."""
    import duckdb

    from amacs_server.research import dataset
    from amacs_server.transcripts import summarize
    from tests.research_fakes import write_runs

    write_runs(tmp_path, 1)
    with duckdb.connect() as con:
        dataset.build(con, tmp_path)  # as declared: it builds
        assert con.execute("SELECT sum(input_tokens) FROM model_calls").fetchone()[0] > 0
    summarize(tmp_path)
    for record, old, new in [(events.ModelResponse, "usage", "tokens"), (events.AgentEnd, "summary", "totals"),
                             (events.Blocked, "by", "compulsion"), (events.TickStart, "human", "person")]:
        with monkeypatch.context() as m:
            renamed(m, record, old, new)
            with duckdb.connect() as con, pytest.raises(KeyError, match=f"{record.kind}.*'{old}'"):
                dataset.build(con, tmp_path)
    with monkeypatch.context() as m:
        renamed(m, events.ModelResponse, "cost", "dollars")
        with pytest.raises(KeyError, match="model_response.*'cost'"):
            summarize(tmp_path)


def test_researchs_python_readers_take_a_lines_kind_and_data_through_its_record():
    """No reader of research picks ``event`` or ``data`` out of a line's JSON by hand: each reads
    records (events.scan), whose fields mypy checks where they are read."""
    by_hand = re.compile(r"""get\(\s*["'](event|data)["']\s*\)|\[\s*["'](event|data)["']\s*\]""")
    assert {p.name: by_hand.findall(p.read_text(encoding="utf-8")) for p in READERS
            if by_hand.search(p.read_text(encoding="utf-8"))} == {}


def test_a_runs_turns_phases_and_cost_are_read_through_the_records(tmp_path):
    """outcome.read_turns / verdict, runs.phases and runs.transcript_totals over a transcript
    written through the records: a turn answered, one whose reply a compulsion held back, a
    task's request, a cut line and a line of a kind this version does not know."""
    from amacs_server.research.outcome import read_turns, verdict
    from amacs_server.research.runs import phases, transcript_totals

    t = Transcript(tmp_path / "transcripts", "run-1")
    usage = {"input_tokens": 10, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0}
    t.write(events.TickStart(human="hi", consciousness={}, wrote=[]), tick=1)
    t.write(events.ModelRequest(request={"messages": []}), tick=1)
    t.write(events.ModelResponse(raw="{}", stop_reason="end_turn", usage=usage, cost=0.25, latency_ms=500.0), tick=1)
    t.write(events.Parsed(attempt=0, response={"reply": "hello", "fallback": False}), tick=1)
    t.write(events.TickEnd(response={"reply": "hello"}, eval_result={}, wrote=[]), tick=1)
    t.write(events.ModelRequest(request={"messages": []}), agent=AgentIdentity("task-1", "primary", "task", "r"))
    t.write(events.TickStart(human="again", consciousness={}, wrote=[]), tick=2)
    t.write(events.ModelResponse(raw="{}", stop_reason="end_turn", usage=usage, cost=None, latency_ms=250.0), tick=2)
    t.write(events.Parsed(attempt=0, response={"reply": "held"}), tick=2)
    t.write(events.ReplyBlocked(reply="held", reason="no"), tick=2)
    t.close()
    with t.path.open("a", encoding="utf-8") as out:
        out.write('{"run_id": "run-1", "event": "tick_start", "data": {"hum\n')  # cut by a kill
        out.write(json.dumps({"run_id": "run-1", "agent_id": "primary", "seq": 99, "ts": 1.0, "event": "mood_swing",
                              "data": {}}) + "\n")
    turns = read_turns(tmp_path)
    assert [(x.human, x.replied, x.ticks) for x in turns] == [("hi", True, 1), ("again", False, 1)]
    said = verdict(tmp_path, 2, None)
    assert (said.replied, said.failed_turn) == (1, 2)
    lines = [json.loads(x) for x in t.path.read_text().splitlines()[:10]]
    found = phases(tmp_path)
    assert found["first_turn_at"] == lines[0]["ts"] and found["first_request_at"] == lines[1]["ts"]
    assert found["last_reply_at"] == lines[4]["ts"]
    assert transcript_totals(tmp_path) == (None, 0.75, 1)  # one call unpriced: no total in dollars


# The modules that take a line's ``event`` or ``data`` out of its JSON by hand, and why.
BY_HAND = {
    "records.py": "the reader every other module reads through (parse, read, scan)",
    "persistence/recovery.py": "spent_in_transcripts: the money a damaged home spent, from the cost of any "
                               "model_response line; a whole record would pass over a line that lacks another "
                               "field, and an under-count lets the person spend past their limit",
    "inference/capabilities.py": "a model server's listing (its 'data'), not a transcript",
}


def test_no_module_takes_a_lines_kind_or_data_by_hand():
    """Beyond research too: a module that reads transcript lines reads records (parse, scan), so a
    kind or a field renamed in records.py is followed there (or fails mypy), not missed by a string."""
    by_hand = re.compile(r"""get\(\s*["'](event|data)["']\s*\)|\[\s*["'](event|data)["']\s*\]""")
    package = ROOT / "amacs_server"
    found = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                   if by_hand.search(p.read_text(encoding="utf-8")))
    assert [name for name in found if name not in BY_HAND] == []


def test_the_hubs_transcript_view_shows_memory_addresses_without_their_delimiters(tmp_path):
    """A newcomer's finding: RET on a subagent in the hub showed "<EOT>…<EOT>" around every
    address, which the shell and the commit subjects show without."""
    from amacs_server.views import agent_transcript

    transcript = Transcript(tmp_path, "run")
    task = AgentIdentity("task-1", "primary", "task", "researcher")
    try:
        transcript.write(events.Posted(type="User", content="<EOT>amacs-instance-1:task-1:chat.1:1<EOT> and "
                                                              "<EOT>amacs-instance-1:task-1:notes:2<EOT>"), agent=task)
        shown = agent_transcript(transcript, "task-1")
    finally:
        transcript.close()
    assert "<EOT>" not in shown and "amacs-instance-1:task-1:chat.1:1 and amacs-instance-1:task-1:notes:2" in shown, shown
