"""What the research commands say to a researcher who names something wrong, and the record of a
judging asked again: found by a newcomer using them (notes/sessions/2026-11-29f/newcomer7.md)."""

import json

import pytest

from amacs_server.research import judge, report
from amacs_server.research.dataset import load, summary_text
from amacs_server.research.report import build_report
from amacs_server.transcripts import summarize
from tests.fake_anthropic import FakeAnthropic, Reply
from tests.research_fakes import write_runs


def test_a_timeline_of_no_such_run_says_so_as_the_other_commands_do_with_the_names(tmp_path, capsys):
    """``report RUNS --timeline nosuch`` said only ``no such run(s): nosuch`` (exit 1): no command
    prefix, no hint of what a run is called."""
    runs = sorted(r.run_id for r in write_runs(tmp_path, 3, errors=False))
    assert report.main([str(tmp_path), "--timeline", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("amacs-server report: no such run: nosuch; a run is named as its folder in "
                          f"{tmp_path} (3 runs: {', '.join(runs[:3])})"), err
    near = runs[0][:-1] + "9"  # a typo of a name it has
    assert report.main([str(tmp_path), "--runs", f"{runs[1]},{near}"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"no such run: {near}; did you mean {runs[0]}" in err, err
    assert not (tmp_path / "report.html").exists()


@pytest.fixture
def fake(monkeypatch):
    """A fake Messages API the judge asks (the runs' model: no spec copied, so the environment's URL)."""
    server = FakeAnthropic().start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-a-secret-0123456789")
    yield server
    server.stop()


def test_a_judgement_asked_again_keeps_its_earlier_attempt_and_says_what_it_cost_as_runs_do(tmp_path, fake,
                                                                                        capsys):
    """The newcomer's case: a judge whose answers never parsed (every judgement failed, twice here), run
    again with one that scores.  Its score.json kept ``earlier_cost``, but the earlier attempt's transcript
    was overwritten, the last line counted only that command's dollars, and neither it nor the
    dataset's summary nor the report said the earlier part apart, as they do for runs."""
    write_runs(tmp_path, 2, errors=False)
    runs = sorted(p.parent.name for p in tmp_path.glob("*/manifest.json"))
    paid = dict.fromkeys(runs, 0.0)
    for _ in range(2):  # twice: the fake's "ok" never reads as a score
        assert judge.main([str(tmp_path), "answer-quality", "--parallel", "1"]) == 1
        for run in runs:
            paid[run] += json.loads((tmp_path / run / "judges" / "answer-quality" / "score.json").read_text())["cost"]
    assert all(c > 0 for c in paid.values())
    second = capsys.readouterr().out
    assert f"judge answer-quality: 0 of 2 judged, 2 failed, 2 to judge, ${sum(paid.values()):.4f}" in second, second
    fake.respond_with(lambda _body: Reply(text=json.dumps({"score": 4, "rationale": "fine"})))
    assert judge.main([str(tmp_path), "answer-quality", "--parallel", "1"]) == 0
    out = capsys.readouterr().out
    earlier = sum(paid.values())
    assert "0 judged before, 2 to judge (2 of them again: failed or interrupted before)" in out, out
    last = next(line for line in out.splitlines() if line.startswith("judge answer-quality: 2 of 2"))
    now = sum(json.loads((tmp_path / r / "judges" / "answer-quality" / "score.json").read_text())["cost"]
              for r in runs)
    assert f"${now + earlier:.4f} estimated at list prices" in last, last  # every attempt's dollars
    assert f"${earlier:.4f} of it by earlier attempts of judgements that ran again" in last, last
    for run in runs:  # each earlier attempt kept as a run's is: its score and its transcript
        folder = tmp_path / run / "judges" / "answer-quality"
        for attempt in (1, 2):
            kept = json.loads((folder / "attempts" / str(attempt) / "score.json").read_text())
            assert kept["status"] == "failed" and kept["cost"] > 0
            sessions = {json.loads(line)["session_id"]
                        for line in (folder / "attempts" / str(attempt) / "judge.jsonl").read_text().splitlines()}
            assert sessions == {f"{run}.judge-answer-quality" + (".attempt-2" if attempt == 2 else "")}
        sessions = {json.loads(line)["session_id"] for line in (folder / "judge.jsonl").read_text().splitlines()}
        assert sessions == {f"{run}.judge-answer-quality.attempt-3"}
        assert round(json.loads((folder / "score.json").read_text())["earlier_cost"], 8) == round(paid[run], 8)
    con = load(tmp_path)
    calls = con.execute("SELECT judge, attempt, count(*), sum(cost) FROM earlier_calls GROUP BY ALL "
                        "ORDER BY attempt").fetchall()
    assert [(j, a, n) for j, a, n, _c in calls] == [("answer-quality", 1, 6), ("answer-quality", 2, 6)], calls
    assert round(sum(c for *_x, c in calls), 8) == round(earlier, 8)
    said = f"; ${earlier:.4f} of it by earlier attempts of judgements that ran again)"
    assert said in summary_text(con, tmp_path, 0.1)
    assert said in build_report(con, tmp_path, [], None).render("t")
    con.close()
    counted = summarize(tmp_path)  # each attempt a session of its own: the earlier ones apart
    assert (counted["judgements"], counted["earlier_attempts"], counted["runs"]) == (2, 4, 2), counted
