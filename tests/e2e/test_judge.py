"""``amacs-server judge`` over the debate example's runs, with a scripted judge model.

The shipped debate experiment runs once (4 runs: two variants, two repetitions)
against the fake that plays it; the fake also answers as the judge
(tests/fake_debate.py, ``judge_reply``: its score counts the viewpoints the final
reply quotes).  Then the two shipped judges score the runs: the ``scores``
table, the judges' own transcripts, the report's score charts (in Chromium);
a judge killed halfway resumes without asking again; a budget stops it.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from amacs_server.research import report
from amacs_server.research.dataset import load
from tests.e2e.harness import ROOT, TEST_KEY
from tests.e2e.test_report import chromium, watched_copy
from tests.fake_anthropic import FakeAnthropic
from tests.fake_debate import JUDGE_MARK, debate_or_judge_reply

pytestmark = pytest.mark.e2e

SPEC = ROOT / "experiments" / "debate" / "debate.toml"
RUNS = 4


def environment(fake: FakeAnthropic) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
    env.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY=TEST_KEY)
    return env


def command(runs: Path, judge: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "amacs_server", "judge", str(runs), judge, *extra]


def judge(fake: FakeAnthropic, runs: Path, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(runs, name, *extra), env=environment(fake), cwd=ROOT, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def debate_runs(tmp_path_factory) -> Path:
    """The shipped debate experiment, 2 repetitions, run once for the module."""
    tmp = tmp_path_factory.mktemp("debate")
    copy = tmp / "debate"
    shutil.copytree(SPEC.parent, copy, ignore=shutil.ignore_patterns("runs"))
    text = (copy / "debate.toml").read_text()
    (copy / "debate.toml").write_text(re.sub(r"(?m)^repetitions = \d+$", "repetitions = 2", text))
    runs = tmp / "runs"
    fake = FakeAnthropic(default=debate_or_judge_reply).start()
    try:
        done = subprocess.run([sys.executable, "-m", "amacs_server", "experiment", str(copy / "debate.toml"),
                               "--runs-dir", str(runs), "--parallel", "4"], env=environment(fake), cwd=ROOT,
                              capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    finally:
        fake.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    return runs


@pytest.fixture
def runs(debate_runs, tmp_path) -> Path:
    """A fresh copy of the debate's runs (each test judges its own)."""
    copy = tmp_path / "runs"
    shutil.copytree(debate_runs, copy)
    return copy


@pytest.fixture
def fake():
    server = FakeAnthropic(default=debate_or_judge_reply).start()
    yield server
    server.stop()


def scores(runs: Path, name: str) -> dict[str, dict]:
    return {p.parts[-4]: json.loads(p.read_text()) for p in runs.glob(f"*/judges/{name}/score.json")}


def test_judges_score_every_run_and_the_report_draws_them(runs, fake):
    for name in ("answer-quality", "viewpoints-used"):
        proc = judge(fake, runs, name, "--parallel", "2")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"judge {name}: {RUNS} of {RUNS} judged, 0 failed" in proc.stdout, proc.stdout
        done = [line for line in proc.stderr.splitlines() if line.startswith("done ")]  # the console's lines
        for line in done:  # each says its score as it comes in
            views = 3 if "three-views" in line else 2
            assert f"  score {min(5, 2 + views) if name == 'answer-quality' else 5} (1-5)  $" in line, line
        assert len(done) == RUNS, proc.stderr
        # list prices for the tokens the fake reported: an estimate, said so
        where = fake.url.removeprefix("http://").rstrip("/")
        assert f"estimated at list prices (the model calls went to {where}, not Anthropic's API)" in proc.stdout
        last = proc.stdout.strip().splitlines()[-1]  # names the folder the scores are in, not RUNS_DIR/<run>
        assert f"scores in {runs.resolve()}/*/judges/{name}/score.json" in last, last
    asked = [r["body"] for r in fake.requests]
    assert len(asked) == 2 * RUNS and all(JUDGE_MARK in json.dumps(b["system"]) for b in asked)
    rubric = [b for b in asked if "Answer quality" in json.dumps(b["system"])]
    assert len(rubric) == RUNS and all("<final-reply>" in json.dumps(b["messages"]) for b in rubric)
    turns = [b for b in asked if "Viewpoints used" in json.dumps(b["system"])]
    assert all('type=\\"viewpoint\\"' in json.dumps(b["messages"]) for b in turns)  # every agent's turns

    con = load(runs)
    rows = con.execute("SELECT judge, variant, score, rationale, cost, judged, judge_model, status "
                       "FROM scores ORDER BY judge, run_id").fetchall()
    assert len(rows) == 2 * RUNS
    for name, variant, score, rationale, cost, judged, model, status in rows:
        assert judged == "done" and status == "done" and cost > 0 and model == "claude-sonnet-4-5"
        views = {"two-views": 2, "three-views": 3}[variant]
        assert score == (min(5, 2 + views) if name == "answer-quality" else 5), (name, variant, score)
        assert rationale == f"The reply quotes {views} viewpoints: " + ", ".join(
            sorted(["opponent", "proponent"] + (["pragmatist"] if views == 3 else []))) + "."
    assert con.execute("SELECT count(*) FROM scores s JOIN runs r USING (run_id) WHERE s.arm = r.arm").fetchone() \
        == (2 * RUNS,)
    con.close()
    # each judgement's own transcript, as any agent's: its request and its answer
    for run in {p.parent.name for p in runs.glob("*/manifest.json")}:
        events = [json.loads(line) for line in
                  (runs / run / "judges" / "viewpoints-used" / "judge.jsonl").read_text().splitlines()]
        assert [e["event"] for e in events] == ["agent_start", "model_request", "model_response", "agent_end"]
        assert {e["agent_type"] for e in events} == {"judge"} and events[0]["data"]["run"] == run
        assert {e["session_id"] for e in events} == {f"{run}.judge-viewpoints-used"}
        assert TEST_KEY not in (runs / run / "judges" / "viewpoints-used" / "judge.jsonl").read_text()

    from amacs_server.transcripts import summarize

    counted = summarize(runs)  # the runs' agents and every judgement, each an agent of its own
    assert counted["agents_by_type"]["judge"] == 2 * RUNS and counted["agents_by_type"]["primary"] == RUNS
    assert report.main([str(runs)]) == 0
    page = runs / "report.html"
    text = page.read_text(encoding="utf-8")
    figures = int(re.search(r"<meta name='amacs-figures' content='(\d+)'>", text)[1])
    assert "answer-quality: score per arm" in text and "viewpoints-used: score per arm" in text
    dom = chromium(watched_copy(page).as_uri(), "--dump-dom")
    assert 'id="amacs-js-error"' not in dom
    assert dom.count('class="plotly-graph-div') == figures
    assert dom.count("score per arm") >= 2 and 'class="errorbar' in dom  # the intervals were drawn
    assert "95% interval low" in dom
    assert dom.count("cars.two-views.sonnet.r") >= 2 and "After hearing the panel" in dom  # the final replies


def test_judge_resumes_after_kill(runs, fake):
    """SIGKILL the judge after two scores; again: the two are not asked again, the rest are judged."""
    fake.respond_with(lambda body: replace(debate_or_judge_reply(body), delay=1.5))
    proc = subprocess.Popen(command(runs, "answer-quality", "--parallel", "1"), env=environment(fake), cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len([s for s in scores(runs, "answer-quality").values()
                                          if s["status"] == "done"]) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {k: s for k, s in scores(runs, "answer-quality").items() if s["status"] == "done"}
    assert 2 <= len(before) < RUNS, before
    fake.respond_with(debate_or_judge_reply)
    asked_before = len(fake.requests)
    done = judge(fake, runs, "answer-quality")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(before)} judged before, {RUNS - len(before)} to judge" in done.stdout, done.stdout
    after = scores(runs, "answer-quality")
    assert len(after) == RUNS and all(s["status"] == "done" for s in after.values())
    for run, score in before.items():
        assert after[run]["started_at"] == score["started_at"], run
    assert len(fake.requests) - asked_before == RUNS - len(before)
    # again with nothing left: what is judged and what it cost, the last line it ended with (it said none)
    last = next(line for line in done.stdout.splitlines() if line.startswith("judge answer-quality: "))
    again = judge(fake, runs, "answer-quality")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{RUNS} judged before, 0 to judge" in again.stdout, again.stdout
    assert again.stdout.splitlines()[-1] == last, (again.stdout, last)
    assert last.startswith(f"judge answer-quality: {RUNS} of {RUNS} judged, 0 failed, $"), last


def test_judge_stops_at_its_budget(runs, fake):
    """A budget below all judgements' cost: no judgement starts once it is spent (exit 3, said);
    a larger one judges the rest."""
    stopped = judge(fake, runs, "answer-quality", "--parallel", "1", "--budget", "0.0001")
    assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    assert "Budget spent" in stopped.stdout and f"{RUNS - 1} runs not judged" in stopped.stdout, stopped.stdout
    first = scores(runs, "answer-quality")
    assert len(first) == 1 and len(fake.requests) == 1
    done = judge(fake, runs, "answer-quality", "--budget", "1")
    assert done.returncode == 0 and "1 judged before, 3 to judge" in done.stdout, done.stdout
    assert len(scores(runs, "answer-quality")) == RUNS and len(fake.requests) == RUNS


def test_judge_s_budget_counts_the_judgements_going(runs, fake):
    """The judgements going count against the budget at the most one cost, the first alone (newcomer8 #41:
    `--budget 0.01` spent $0.0158): at parallel 2 a budget below one judgement's cost judges one, and says
    how far over and why; then a budget of 3.5 of them judges 2 more, not 3, within it."""
    stopped = judge(fake, runs, "answer-quality", "--parallel", "2", "--budget", "0.0001")
    assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    first = scores(runs, "answer-quality")
    assert len(first) == 1 and len(fake.requests) == 1, stopped.stdout
    one = next(iter(first.values()))["cost"]
    assert (f"Budget spent: ${one:.4f} of $0.0001, over by ${one - 0.0001:.4f} (a judgement starts only if"
            in stopped.stdout), stopped.stdout
    assert ("but a judgement can cost more than was expected of it (the most one had cost before it started; "
            "the first judgement goes before any cost is known)" in stopped.stdout), stopped.stdout
    budget = round(3.5 * one, 6)
    more = judge(fake, runs, "answer-quality", "--parallel", "2", "--budget", str(budget))
    assert more.returncode == 3, more.stdout + more.stderr
    judged = scores(runs, "answer-quality")
    spent = sum(s["cost"] for s in judged.values())
    assert len(judged) == 3 and spent <= budget, (more.stdout, spent, budget)
    assert f"Budget spent: ${spent:.4f} of ${budget:.4f} (a judgement starts only if" in more.stdout, more.stdout


@pytest.mark.parametrize("point", [f"{p}@{n}" for p in ("judge.asked", "judge.scored", "judge.written")
                                   for n in range(1, RUNS + 1)])
def test_judge_killed_at_a_score_loses_no_other_and_judges_that_one_again(runs, fake, point):
    """The judge SIGKILLed at its Nth run (one at a time): its request written but the model not
    asked, the model's score in but nothing written, or the score half written (score.json.tmp
    only): the run again judges that run, and only it, with the rest; none judged before is lost."""
    nth = int(point.partition("@")[2])
    killed = subprocess.run(command(runs, "answer-quality", "--parallel", "1"),
                            env={**environment(fake), "AMACS_FAULT_POINT": point}, cwd=ROOT, capture_output=True,
                            text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    before = {k: s for k, s in scores(runs, "answer-quality").items() if s["status"] == "done"}
    assert len(before) == nth - 1, before
    asked_before = len(fake.requests)
    done = judge(fake, runs, "answer-quality")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{nth - 1} judged before, {RUNS - nth + 1} to judge" in done.stdout, done.stdout
    after = scores(runs, "answer-quality")
    assert len(after) == RUNS and all(s["status"] == "done" for s in after.values())
    assert all(after[k] == s for k, s in before.items())  # a score written before the kill is kept as it was
    assert len(fake.requests) - asked_before == RUNS - nth + 1
    assert not list(runs.glob("*/judges/answer-quality/*.tmp"))
    # the judgement cut short is kept as an earlier attempt, with what its transcript says it paid
    (path,) = runs.glob("*/judges/answer-quality/attempts/1/score.json")
    kept = json.loads(path.read_text())
    assert kept["status"] == "failed" and "killed" in kept["error"] and path.parts[-6] not in before, kept
    assert (kept["cost"] > 0) == (not point.startswith("judge.asked")), kept  # asked: the model never was
    assert after[path.parts[-6]]["earlier_cost"] == kept["cost"]


def test_a_judgements_seconds_are_its_own_not_the_sdks_import(runs, fake):
    """The newcomer's case: the first judgements (one per thread) said ``3.0 s`` where the rest said
    ~0.01 s against a zero-latency fake: they had waited for the model SDK's import (and the fake for
    its request checks). The SDK is imported before the first judgement starts; each judgement's
    seconds (score.json's, the console's) are its model call and its transcript."""
    from tests.fake_anthropic import warm_up

    warm_up()  # the fake's own checks built, as `python -m tests.fake_debate` does before its URL
    proc = judge(fake, runs, "viewpoints-used", "--parallel", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seconds = {run: s["seconds"] for run, s in scores(runs, "viewpoints-used").items()}
    assert len(seconds) == RUNS and max(seconds.values()) < 0.5, seconds
    said = {m[1]: float(m[2]) for m in re.finditer(r"done\s+(\S+)\s+score \S+ \(\S+\)\s+\$\S+\s+([\d.]+) s", proc.stderr)}
    assert said == {run: round(s, 1) for run, s in seconds.items()}, (said, proc.stderr)


def test_c_c_while_the_judge_loads_the_sdk_says_so_in_one_line(runs, fake):
    """C-c (SIGINT to the command's process group, as a terminal sends it) the moment the judge has said
    what it will judge, while it imports the model SDK (~1.3 s): the experiment's one line and exit 130,
    not a 25-line traceback; nothing judged, and the line says so with the counts and dollars the
    experiment's interrupted line has (it said only "interrupted")."""
    proc = subprocess.Popen(command(runs, "viewpoints-used"), env=environment(fake), cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    first = proc.stdout.readline()  # said just before the SDK is loaded
    assert "to judge" in first, first
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode == 130, first + out + err
    # what is judged and what it cost, as an experiment's interrupted line says its runs
    where = fake.url.removeprefix("http://").rstrip("/")
    assert (f"judge viewpoints-used: interrupted: 0 of {RUNS} judged, 0 failed, {RUNS} to judge, $0.0000: no model "
            f"call got an answer (the model is at {where}, not Anthropic's API); run the same command again "
            "to resume.") in out, out
    assert not scores(runs, "viewpoints-used")


def test_a_short_key_does_not_blank_out_the_words_of_the_judges_record(runs, fake):
    """The newcomer's case: with the docs' ``ANTHROPIC_API_KEY=fake`` and a model named ``fake``, the
    judge's transcript wrote every "fake" as ``[REDACTED]``: its session ids no longer named their
    runs, and the judged text lost the word.  The judge scrubs as the server does (a value shorter
    than a secret can be is an ordinary word); a key long enough is still taken out."""
    env = {**environment(fake), "ANTHROPIC_API_KEY": "cars"}  # a word of every run's id (cars.two-views...)
    proc = subprocess.run(command(runs, "viewpoints-used"), env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    logs = sorted(runs.glob("*/judges/viewpoints-used/judge.jsonl"))
    assert len(logs) == RUNS
    for log in logs:
        text = log.read_text()
        assert "REDACTED" not in text and "redacted" not in text, text[:400]
        sessions = {json.loads(line)["session_id"] for line in text.splitlines()}
        assert sessions == {f"{log.parts[-4]}.judge-viewpoints-used"}


def test_c_c_at_the_first_done_line_lets_the_judgements_going_end_and_counts_them(runs):
    """The newcomer's case: C-c the moment the first ``done`` line showed, two judgements at once.  The
    last line said ``2 of 10 judged, ... 2 still being judged (each ends first and is kept), 8 to
    judge, $0.0105`` while the disk then had 4 scores and $0.0211: it was built before the judgements
    it let end had ended.  Now it is built after they end, from the score files, as the experiment's
    is after the runs it lets finish; each judgement has its ``done`` line, once."""
    # Each call 1-2.5 s: two judgements started together seldom end together, so one is mostly still
    # going at the first done line (when both have ended, no line need say any is let end).
    pace = random.Random(7)
    slow = FakeAnthropic(default=lambda body: replace(debate_or_judge_reply(body), delay=pace.uniform(1.0, 2.5))).start()
    try:
        proc = subprocess.Popen(command(runs, "viewpoints-used", "--parallel", "2"), env=environment(slow),
                                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stderr is not None
        seen = b""  # read unbuffered: what a buffered reader read ahead, communicate() would not see
        deadline = time.time() + 120
        while not re.search(rb"(?m)^done ", seen) and time.time() < deadline:
            seen += os.read(proc.stderr.fileno(), 65536) or b""
        os.killpg(proc.pid, signal.SIGINT)
        before = len(re.findall(rb"(?m)^done ", seen))  # done lines said before the C-c
        out_bytes, err_bytes = proc.communicate(timeout=120)
    finally:
        slow.stop()
    out, err = out_bytes.decode(), (seen + err_bytes).decode()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err, err
    written = scores(runs, "viewpoints-used")
    judged = [run for run, score in written.items() if score["status"] == "done"]
    assert len(judged) >= 2, (written, out, err)  # the first, and the one going at the C-c (or ended by then)
    said = sorted(re.findall(r"(?m)^done\s+(\S+)", err))
    assert said == sorted(judged), err  # each once
    if len(judged) > before:  # some were let end after the C-c: the C-c's note said so
        assert "being judged end" in err or "being judged ends" in err, err
    cost = sum(score["cost"] for score in written.values())
    left = f", {RUNS - len(judged)} to judge" if len(judged) < RUNS else ""
    assert f"judge viewpoints-used: interrupted: {len(judged)} of {RUNS} judged, 0 failed{left}, ${cost:.4f} " in out, \
        (out, err)
    assert "still being judged" not in out
