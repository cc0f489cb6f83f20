"""The research record is true: what a researcher reads in the report and the dataset is what
happened (the cost of judging, the reference arm and why, what a duration counts).

Found by a newcomer: after ``amacs-server judge`` the report still said ``10 runs ... $0.4571 in
all``, the runs' dollars alone; the judging's ``$0.0445`` was nowhere in the headline."""

import json
import re
import shutil
from pathlib import Path

from amacs_server.research.dataset import judging_cost, load, summary_text
from amacs_server.research.report import build_report
from tests.research_fakes import write_run, write_runs


def judged(runs_dir: Path, judge: str, costs: list[float | None], status: str = "done") -> None:
    """Score.json files of JUDGE for the first len(COSTS) runs, each with its cost."""
    for folder, cost in zip(sorted(p.parent for p in runs_dir.glob("*/manifest.json")), costs, strict=False):
        out = folder / "judges" / judge
        out.mkdir(parents=True)
        (out / "score.json").write_text(json.dumps({
            "run_id": folder.name, "judge": judge, "model": "claude-sonnet-4-5", "scale_low": 1, "scale_high": 5,
            "input": "final", "status": status, "score": 4 if status == "done" else None, "rationale": "r",
            "cost": cost, "error": None if status == "done" else "score never parsed", "seconds": 0.01}))


def headline(page: str) -> str:
    return re.search(r"<p>(\d+ runs in .*?)</p>", page)[1]


def test_the_headline_says_what_judging_cost_beside_the_runs_and_sums_both(tmp_path):
    write_runs(tmp_path, 4, errors=False)
    con = load(tmp_path)
    runs_cost = con.execute("SELECT sum(cost) FROM runs").fetchone()[0]
    before = headline(build_report(con, tmp_path, [], None).render("t"))
    assert before.endswith(f"; ${runs_cost:.4f} in all.") and "judging" not in before
    con.close()
    judged(tmp_path, "viewpoints-used", [0.01, 0.02, 0.005, 0.0045])
    judged(tmp_path, "answer-quality", [0.003], status="failed")  # a failed judgement's call was paid too
    con = load(tmp_path)
    dollars, *rest = judging_cost(con)
    assert round(dollars, 8) == 0.0425 and rest == [5, ["answer-quality", "viewpoints-used"], 0]
    # the runs' own dollars are not changed by judging them (a judge's calls are not in the run's home)
    assert con.execute("SELECT sum(cost) FROM runs").fetchone()[0] == runs_cost
    said = headline(build_report(con, tmp_path, [], None).render("t"))
    assert said.endswith(f"; runs ${runs_cost:.4f}, judging $0.0425 (2 judges: answer-quality, viewpoints-used, "
                         f"5 judgements), ${runs_cost + 0.0425:.4f} in all."), said
    text = summary_text(con, tmp_path, 0.1)
    assert (f"cost: runs ${runs_cost:.4f}, judging $0.0425 (2 judges: answer-quality, viewpoints-used, "
            f"5 judgements), ${runs_cost + 0.0425:.4f} in all") in text, text


def test_a_judgement_of_a_model_with_no_price_is_said_unknown(tmp_path):
    write_runs(tmp_path, 2, errors=False)
    judged(tmp_path, "viewpoints-used", [0.01, None])
    said = headline(build_report(load(tmp_path), tmp_path, [], None).render("t"))
    assert "judging $0.0100 (1 judge: viewpoints-used, 2 judgements; 1 of a model with no price, " \
           "their cost unknown)" in said, said


GRID = """
[experiment]
name = "debate"
{reference}

[[prompts]]
name = "question"
turns = ["q"]

[[prompts]]
name = "script"
turns = ["q", "r"]

[[variants]]
name = "two-views"

[[variants]]
name = "three-views"

[[models]]
name = "fake"

[[models]]
name = "fake-small"
"""


FAILED = {"status": "failed", "error": "model endpoint unreachable: http://127.0.0.1:9", "failed_turn": 1}


def failed_before(tmp_path: Path) -> tuple[object, Path, Path]:
    """A spec, its runs folder, and its first run's folder holding that run's earlier failure."""
    from amacs_server.research.spec import load as load_spec

    spec = tmp_path / "experiment.toml"
    spec.write_text(GRID.format(reference=""))
    experiment = load_spec(spec)
    runs_dir = tmp_path / "runs"
    folder = runs_dir / experiment.runs[0].run_id
    (folder / "home" / "transcripts").mkdir(parents=True)
    (folder / "emacs.log").write_text("the earlier attempt's log")
    (folder / "manifest.json").write_text(json.dumps({"run_id": experiment.runs[0].run_id, **FAILED}))
    return experiment, runs_dir, folder


def test_a_c_c_while_a_run_is_prepared_keeps_the_record_of_its_earlier_failure(tmp_path, monkeypatch):
    """The newcomer's case: C-c while the next run was prepared ahead deleted its earlier ``failed``
    manifest and wrote none; the report said ``not started`` and the resume's count was one short.
    Its manifest stays until the run's start replaces it, whether the C-c comes while its Emacs
    starts or once it is ready (then it is discarded)."""
    from amacs_server.research import runs
    from amacs_server.research.experiment import _pending

    experiment, runs_dir, folder = failed_before(tmp_path)
    run = experiment.runs[0]

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs.subprocess, "Popen", interrupted)  # C-c as its Emacs starts
    try:
        runs.prepare(run, runs_dir, gated=True)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the C-c was not raised")
    assert json.loads((folder / "manifest.json").read_text())["error"] == FAILED["error"]
    assert not (folder / "emacs.log").read_text()  # the rest is the new attempt's, started afresh

    def refused(*_a, **_k):
        raise OSError("no emacs")

    monkeypatch.setattr(runs.subprocess, "Popen", refused)
    ready = runs.prepare(run, runs_dir, gated=True)
    runs.discard(ready)  # prepared, never started (the executor's close on C-c)
    assert sorted(p.name for p in folder.iterdir()) == ["attempts", "manifest.json"]
    # the earlier attempt kept aside once, though the run was prepared twice
    assert sorted(p.name for p in (folder / "attempts").iterdir()) == ["1"]
    assert (folder / "attempts" / "1" / "emacs.log").read_text() == "the earlier attempt's log"
    assert runs.read_manifest(folder)["status"] == "failed"
    todo, _before, again, _earlier = _pending(experiment, runs_dir)
    assert len(todo) == 8 and again == 1  # "8 to run (1 of them again: failed or interrupted before)"
    # a run never recorded leaves no folder behind when discarded
    other = runs.prepare(experiment.runs[1], runs_dir, gated=True)
    runs.discard(other)
    assert not other.folder.exists()


def compared(page: str) -> tuple[str, list[str]]:
    """The Arms compared section's words and the arms column of its table."""
    section = page[page.index(">Arms compared<"):page.index(">Final replies<")]
    return section, re.findall(r"<td>([^<]* vs [^<]*)</td>", section)


def test_arms_are_compared_with_the_spec_s_first_arm_or_the_one_it_names_and_say_so(tmp_path):
    """The newcomer's case: the report compared every arm with the alphabetically first
    (three-views), though the spec lists two-views first and three-views is the treatment: the
    signs of every difference were the other way round from what they read."""
    write_runs(tmp_path, 16, errors=False)
    (tmp_path / "experiment.toml").write_text(GRID.format(reference=""))
    section, rows = compared(build_report(load(tmp_path), tmp_path, [], None).render("t"))
    assert ("Each arm against question / two-views / fake, the reference (the first arm the spec lists (its first "
            "prompt, variant and model); name another with reference = &quot;VARIANT&quot;") in section, section
    assert rows and all(r.endswith(" vs question / two-views / fake") for r in rows)
    assert "question / three-views / fake vs question / two-views / fake" in rows

    (tmp_path / "experiment.toml").write_text(GRID.format(reference='reference = "three-views"'))
    section, rows = compared(build_report(load(tmp_path), tmp_path, [], None).render("t"))
    assert ("Each arm against question / three-views / fake, the reference (the spec&#x27;s reference = "
            "&quot;three-views&quot;)") in section, section
    assert rows and all(r.endswith(" vs question / three-views / fake") for r in rows)


def test_a_reference_the_spec_does_not_have_is_refused_in_one_line(tmp_path):
    from amacs_server.research.spec import SpecError
    from amacs_server.research.spec import load as load_spec

    spec = tmp_path / "experiment.toml"
    spec.write_text(GRID.format(reference='reference = "four-views"'))
    try:
        load_spec(spec)
    except SpecError as err:
        assert "experiment.reference: no variant, model or prompt is named 'four-views' (variants: two-views, " \
               "three-views; models: fake, fake-small; prompts: question, script)" in str(err), err
    else:
        raise AssertionError("the spec was taken")
    spec.write_text(GRID.format(reference='reference = "fake-small"'))
    assert load_spec(spec).spec.experiment.reference == "fake-small"


def test_the_exports_hint_names_a_command_that_is_there(tmp_path, monkeypatch):
    """The newcomer's case: ``view them: inspect view --log-dir ...`` after an export, but no
    ``inspect`` is on the PATH of a checkout set up by ./amacs: copied, it said command not found."""
    from amacs_server.research.export import view_hint

    checkout, logs, nowhere = tmp_path / "checkout", Path("runs/inspect"), str(tmp_path / "empty-bin")
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "scripts" / "inspect.sh").write_text("#!/bin/sh\n")
    monkeypatch.chdir(checkout)
    venv = checkout / ".venv-inspect" / "bin"
    # whole paths (newcomer6): a command relative to the checkout works typed only there
    assert view_hint(logs, checkout, nowhere) == (f"to view them, install inspect-ai once ({checkout}/scripts/"
                                                  f"inspect.sh, a few minutes), then: {venv}/inspect view "
                                                  "--log-dir runs/inspect")
    venv.mkdir(parents=True)
    (venv / "inspect").write_text("#!/bin/sh\n")
    (venv / "inspect").chmod(0o755)
    assert view_hint(logs, checkout, nowhere) == f"view them: {venv}/inspect view --log-dir runs/inspect"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # outside the checkout: the same
    assert view_hint(logs, checkout, nowhere) == f"view them: {venv}/inspect view --log-dir runs/inspect"
    assert view_hint(logs, checkout, str(venv)) == "view them: inspect view --log-dir runs/inspect"  # on the PATH
    assert view_hint(logs, tmp_path / "installed", nowhere).startswith("to view them: pip install inspect-ai")


def test_a_warm_up_the_first_runs_alone_paid_is_said(tmp_path):
    """The newcomer's case: the first run of each slot took ~3 s, the other eight 0.15-0.66 s, against
    a zero-latency fake (the fake's own first requests: it built its request checks then); both first
    runs can fall on one arm. The report says so, with the numbers, and says nothing when the first
    runs took as long as the rest."""
    import duckdb

    from amacs_server.research.report import first_runs_note

    con = duckdb.connect(str(tmp_path / "d.duckdb"))
    con.execute("CREATE TABLE runs (run_id VARCHAR, arm VARCHAR, status VARCHAR, position BIGINT, seconds DOUBLE, "
                "started_at DOUBLE, ended_at DOUBLE)")
    rows = [("r0", "a", 0, 3.3, 0.0, 5.3), ("r1", "a", 1, 2.6, 0.0, 5.5)]  # two at once, from the start
    rows += [(f"r{n}", "ab"[n % 2], n, 0.4, 5.0 + n, 6.0 + n) for n in range(2, 10)]
    con.executemany("INSERT INTO runs VALUES (?, ?, 'done', ?, ?, ?, ?)", rows)
    assert first_runs_note(con) == (
        "The 2 runs that went first (started before any run ended: a) took 2.95 s on average, the other 8 0.4 s: "
        "a warm-up only they paid (of the model endpoint, e.g. a fake just started, or of the machine), inside "
        "their durations and so in their arms' means.")
    con.execute("UPDATE runs SET seconds = 0.5 WHERE position < 2")
    assert first_runs_note(con) == ""


def test_a_fresh_fake_has_built_its_request_checks_before_it_answers(tmp_path):
    """Why the first runs were slow: a fake just started built the SDK's types into its request checks
    on its first requests (3.4 s at load 8; after, a few ms). ``serve`` (what a person starts) warms
    them first, so that no request of the shape the server sends builds one."""
    import subprocess
    import sys

    probe = ("import json; from tests import fake_anthropic as fa; fa.warm_up(); n = len(fa._ADAPTERS); "
             "body = {**fa.WARM_UP, 'system': [{'type': 'text', 'text': 'x' * 50}], 'stream': True, "
             "'messages': fa.WARM_UP['messages'] + [{'role': 'assistant', 'content': 'b'}, "
             "{'role': 'user', 'content': [{'type': 'text', 'text': 'c', 'cache_control': {'type': 'ephemeral'}}]}]}; "
             "assert fa.sdk_refusal(body) is None; print(n, len(fa._ADAPTERS))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    built, after = out.stdout.split()
    assert int(built) > 0 and built == after, out.stdout
    source = (Path(__file__).resolve().parent / "fake_anthropic.py").read_text()
    serve = source[source.index("def serve("):]
    assert serve.index("warm_up()") < serve.index("print(fake.url")


def test_transcripts_say_which_run_folder_and_arm_each_session_ran_in(tmp_path):
    """The newcomer's case: a transcript line's ``run_id`` is its server session, the manifest's and
    the dataset's is the run's folder; ``amacs-server transcripts`` keyed agents by session only, so
    no line could be told to an arm without a join. It now says, beside each session, its run folder
    and arm (the stored field names unchanged)."""
    from amacs_server.transcripts import summarize

    made = write_runs(tmp_path, 3, errors=False)
    summary = summarize(tmp_path)
    assert summary["agents_per_run"] == {r.session_id: len(r.agents) for r in made}
    assert summary["experiment_runs"] == {
        r.session_id: {"run": r.run_id, "arm": " / ".join(r.run_id.split(".")[:3]), "agents": len(r.agents)}
        for r in made}
    home = tmp_path / "elsewhere" / "home"  # a home of no experiment: no run folder around it
    shutil.copytree(tmp_path / made[0].run_id / "home", home)
    assert "experiment_runs" not in summarize(home)


def test_what_earlier_attempts_cost_stays_counted(tmp_path, monkeypatch):
    """A run (or a judgement) that failed after paying for model calls and ran again: its manifest (its
    score.json) was replaced by the new attempt's, and what the failed attempt cost was gone from
    every total. Its ``earlier_cost`` carries it, and the first line counts it, said apart."""
    from amacs_server.research import judge as judging
    from amacs_server.research.runs import earlier_cost
    from tests.fake_anthropic import FakeAnthropic
    from tests.fake_debate import debate_or_judge_reply

    assert earlier_cost(None) == 0.0 and earlier_cost({"status": "done", "cost": 0.2}) == 0.0
    assert earlier_cost({"status": "failed", "cost": 0.125, "earlier_cost": 0.25}) == 0.375
    write_runs(tmp_path, 2, errors=False)
    con = load(tmp_path)
    runs_cost = con.execute("SELECT sum(cost) FROM runs").fetchone()[0]
    con.close()
    first = sorted(tmp_path.glob("*/manifest.json"))[0]
    first.write_text(json.dumps({**json.loads(first.read_text()), "earlier_cost": 0.125}))
    # a judgement that failed, paid, and is asked again
    judged(tmp_path, "viewpoints-used", [0.003], status="failed")
    fake = FakeAnthropic(default=debate_or_judge_reply).start()
    try:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "fake")
        run_id = first.parent.name
        job = judging.Job(run_id=run_id, material="<final-reply>r</final-reply>", backend="anthropic",
                          model="claude-sonnet-4-5", base_url=fake.url)
        judging.judge_one(judging.read_judge(judging.find_judge("viewpoints-used")), job, tmp_path)
    finally:
        fake.stop()
    score = json.loads((first.parent / "judges" / "viewpoints-used" / "score.json").read_text())
    assert score["earlier_cost"] == 0.003 and score["cost"] > 0
    con = load(tmp_path)
    said = headline(build_report(con, tmp_path, [], None).render("t"))
    total_runs, total_judging = runs_cost + 0.125, score["cost"] + 0.003
    assert (f"runs ${total_runs:.4f} ($0.1250 of it by earlier attempts of runs that ran again), "
            f"judging ${total_judging:.4f} estimated at list prices (the model calls went to "
            f"{fake.url.removeprefix('http://').rstrip('/')}, not Anthropic&#x27;s API; "
            "1 judge: viewpoints-used, 1 judgement; $0.0030 of it by earlier "
            "attempts of judgements that ran again), "
            f"${total_runs + total_judging:.4f} in all.") in said, said


def test_a_run_the_killed_experiment_left_running_keeps_what_it_paid(tmp_path, monkeypatch):
    """kill -9 of the experiment leaves a run's manifest ``running`` with cost 0; its transcripts have
    what it paid. Before the run starts again from nothing, its record says so, with that cost, which
    the new attempt then carries as ``earlier_cost``."""
    from amacs_server.research import runs

    experiment, runs_dir, folder = failed_before(tmp_path)
    shutil.rmtree(folder)
    assert write_run(runs_dir, 0, errors=False).run_id == folder.name  # a debate's transcripts in its home
    (folder / "manifest.json").write_text(json.dumps({"run_id": folder.name, "status": "running", "cost": 0.0,
                                                      "turns_done": 0, "failed_turn": None}))
    paid = runs.transcript_totals(folder / "home")[0]
    assert paid and paid > 0

    def refused(*_a, **_k):
        raise OSError("no emacs")

    monkeypatch.setattr(runs.subprocess, "Popen", refused)
    runs.prepare(experiment.runs[0], runs_dir, gated=True)
    record = runs.read_manifest(folder)
    assert record["status"] == "failed" and record["error"] == runs.KILLED and record["cost"] == round(paid, 6)
    assert runs.earlier_cost(record) == round(paid, 6)
    # and the turns its transcripts show replied to (the newcomer's: turns_done 0 beside a finished turn)
    turns = len(experiment.runs[0].turns)
    assert record["turns_done"] == turns >= 1 and record["failed_turn"] is None, record
    kept = runs.read_manifest(folder / "attempts" / "1")
    assert kept is not None and kept["turns_done"] == turns, kept


def test_a_budget_counts_what_every_attempt_so_far_cost(tmp_path):
    """A resumed experiment's budget starts from what was paid: the runs done, their failed attempts
    before them, and the failed runs about to run again; it counted the runs done alone."""
    from amacs_server.research.experiment import _pending

    experiment, runs_dir, folder = failed_before(tmp_path)
    (folder / "manifest.json").write_text(json.dumps({"run_id": folder.name, **FAILED, "cost": 0.02,
                                                      "earlier_cost": 0.01}))
    done = runs_dir / experiment.runs[1].run_id
    done.mkdir(parents=True)
    (done / "manifest.json").write_text(json.dumps({"run_id": done.name, "status": "done", "cost": 0.1,
                                                    "earlier_cost": 0.05}))
    todo, before, again, earlier = _pending(experiment, runs_dir)
    assert before == {done.name: 0.1} and round(earlier, 8) == 0.08 and again == 1
    assert [run.run_id for run in todo] == [run.run_id for run in experiment.runs if run.run_id != done.name]


def test_an_earlier_attempt_s_record_is_kept_aside_and_the_dataset_tells_its_calls_apart(tmp_path, monkeypatch):
    """A run that failed and runs again deleted its earlier attempt's transcripts: its dollars survived
    as ``earlier_cost`` but its model calls and tokens were gone. Now its record (manifest, transcripts,
    Emacs log) moves to ``attempts/1/`` as the run starts again, and the dataset has its calls in
    ``earlier_calls`` (their cost is the earlier_cost); the run's own figures stay its last attempt's."""
    from amacs_server.research import runs

    experiment, runs_dir, folder = failed_before(tmp_path)
    shutil.rmtree(folder)
    write_run(runs_dir, 0, errors=False)
    paid = round(runs.transcript_totals(folder / "home")[0], 6)
    words = {p.name: p.read_bytes() for p in (folder / "home" / "transcripts").glob("*.jsonl")}
    (folder / "emacs.log").write_text("the earlier attempt's log")
    (folder / "manifest.json").write_text(json.dumps({**json.loads((folder / "manifest.json").read_text()),
                                                      **FAILED, "cost": paid}))

    def refused(*_a, **_k):
        raise OSError("no emacs")

    monkeypatch.setattr(runs.subprocess, "Popen", refused)
    runs.prepare(experiment.runs[0], runs_dir, gated=True)
    kept = folder / "attempts" / "1"
    assert runs.read_manifest(kept)["status"] == "failed" and runs.read_manifest(kept)["cost"] == paid
    assert {p.name: p.read_bytes() for p in (kept / "transcripts").glob("*.jsonl")} == words
    assert (kept / "emacs.log").read_text() == "the earlier attempt's log"
    assert not list((folder / "home" / "transcripts").glob("*.jsonl"))

    # the run's second attempt, done, carrying the first's cost
    write_run(runs_dir, 0, seed=1, errors=False)
    now = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**now, "earlier_cost": paid}))
    con = load(runs_dir)
    earlier = con.sql("SELECT run_id, attempt, count(*), round(sum(cost), 6) FROM earlier_calls GROUP BY ALL").fetchall()
    assert earlier == [(folder.name, 1, earlier[0][2], paid)] and earlier[0][2] > 0
    mine = con.execute(f"SELECT round(sum(cost), 6) FROM model_calls WHERE run_id = '{folder.name}'").fetchone()[0]
    assert mine == round(now["cost"], 6)
    assert con.execute(f"SELECT round(cost, 6), round(earlier_cost, 6) FROM runs WHERE run_id = '{folder.name}'"
                       ).fetchone() == (round(now["cost"], 6), paid)


def test_a_run_s_console_line_says_which_seconds_it_shows(tmp_path):
    """The console's ``done RUN $COST 1.9 s`` showed the run's wall_seconds (start-up and stop too), which
    a newcomer compared with the report's duration (its seconds, 0.114) and found 5-15x apart. The line
    says both, named: the duration as the report has it, and the wall time; a judgement keeps its seconds."""
    from io import StringIO

    from rich.console import Console

    from amacs_server.research.experiment import execute
    from amacs_server.research.runs import Outcome, durations

    run = Outcome(run_id="cars.two-views.sonnet.r2", status="done", cost=0.0415, seconds=1.909, turns_done=1,
                  started_at=100.0, ended_at=101.909,
                  phases={"emacs_started_at": 100.0, "first_turn_at": 101.475, "last_reply_at": 101.589})
    judgement = Outcome(run_id="cars.two-views.sonnet.r2", status="done", cost=0.005, seconds=0.012, turns_done=1,
                        started_at=0.0, ended_at=0.012)
    assert durations(run)["seconds"] == 0.114

    class Done:
        def __init__(self, outcome: Outcome) -> None:
            self.outcome, self.going = outcome, 0

        def submit(self, _job) -> None:
            self.going += 1

        def finished(self, _timeout: float) -> list[Outcome]:
            out, self.going = [self.outcome] * self.going, 0
            return out

        def close(self) -> None:
            pass

    lines = []
    for outcome in (run, judgement):
        screen = StringIO()
        execute([outcome], Done(outcome), 1, None, 0.0, 1, "debate",
                Console(file=screen, width=200, force_terminal=False, color_system=None))
        lines.append(next(line for line in screen.getvalue().splitlines() if line.startswith("done")))
    assert lines[0].endswith("$0.0415  0.1 s duration, 1.9 s wall"), lines[0]
    assert lines[1].endswith("$0.0050  0.0 s"), lines[1]


def test_a_run_killed_after_its_last_reply_that_runs_again_says_why(tmp_path, monkeypatch):
    """A run whose transcripts hold every turn's reply, left ``running`` by a killed experiment, but
    whose home has no commit of its last tick and no record of one asked for (killed between the reply
    and its server asking for the tick's commit: which bytes the tick ended with is not known): the
    resume does not call it done; it runs again, and its attempt's record says exactly why."""
    from amacs_server.research import runs

    experiment, runs_dir, folder = failed_before(tmp_path)
    shutil.rmtree(folder)
    write_run(runs_dir, 0, errors=False)  # every turn replied to; its home has no git
    (folder / "manifest.json").write_text(json.dumps({"run_id": folder.name, "status": "running", "cost": 0.0,
                                                      "started_at": 1.0, "turns_done": 0, "failed_turn": None}))
    resumed = runs.finish_teardown(experiment.runs[0], runs_dir, wait=0)
    assert resumed is not None and resumed.outcome is None, resumed
    assert re.fullmatch(r"it was stopped before its server asked for tick \d+'s commit, so its home is not "
                        "known whole", resumed.words), resumed

    def refused(*_a, **_k):
        raise OSError("no emacs")

    monkeypatch.setattr(runs.subprocess, "Popen", refused)
    runs.prepare(experiment.runs[0], runs_dir, gated=True)
    kept = runs.read_manifest(folder / "attempts" / "1")
    assert kept is not None and kept["status"] == "failed" and kept[runs.RERUN] == resumed.words, kept
    assert kept["error"] == (f"the experiment was killed after its every turn had its reply, but {resumed.words}; "
                             "it ran again"), kept


def test_a_turn_that_used_its_max_steps_is_over_though_its_last_response_asked_for_a_step(tmp_path):
    """The primary's step limit leaves no record of its own: a turn whose every tick's response asked
    for another step (an eval) is over when it has had the spec's max_steps ticks, and going on with one
    fewer (the resume runs that run again rather than record it done)."""
    from amacs_server.research.runs import _last_turn_over

    def transcript(steps: int) -> Path:
        home = tmp_path / f"home{steps}"
        (home / "transcripts").mkdir(parents=True)
        lines, seq = [], 0
        for tick in range(1, steps + 1):
            for event, data in (
                    ("tick_start", {"human": "hi" if tick == 1 else None, "consciousness": {}, "wrote": []}),
                    ("tick_end", {"response": {"reply": "on it", "eval": "(+ 1 1)"}, "eval_result": {}, "wrote": []})):
                seq += 1
                lines.append(json.dumps({"run_id": "s", "session_id": "s", "agent_id": "p", "parent_id": None,
                                         "agent_type": "primary", "template": None, "seq": seq, "ts": float(seq),
                                         "tick": tick, "event": event, "data": data}))
        (home / "transcripts" / "s.jsonl").write_text("\n".join(lines) + "\n")
        return home

    assert _last_turn_over(transcript(3), max_steps=3) == (3, True)
    assert _last_turn_over(transcript(2), max_steps=3) == (2, False)


def test_a_run_stopped_after_its_commit_was_made_but_not_its_record_s_removal_is_said_done_on_resume(tmp_path):
    """Found by hand (C-c twice at a debate run's final reply): its server was killed after the last
    tick's commit was made and before the commit's record (.uncommitted-tick) was removed. The resume
    removes such a record and records the run done, but the second C-c's line said "it runs again":
    the look at what the resume will do counted the stale record as a commit not made."""
    from types import SimpleNamespace

    from amacs_server.persistence.git_repo import UNCOMMITTED
    from amacs_server.research.runs import done_on_resume
    from tests.fake_anthropic import FakeAnthropic
    from tests.test_rewind import answer, do, runtime

    folder = tmp_path / "run"
    home = folder / "home"
    fake = FakeAnthropic(default=answer).start()
    try:
        rt = runtime(home, fake.url)
        try:
            do(rt, ("say", "first"))
            assert rt.mind.commits.flush(60)
            files = rt.mind.commits._digests.of(rt.mind.repo.snapshots.take(rt.mind.tracked_files()))
        finally:
            rt.stop()
    finally:
        fake.stop()
    run = SimpleNamespace(turns=("first",), base_url=None, max_steps=10)
    assert done_on_resume(run, folder)  # type: ignore[arg-type]
    record = json.dumps({"message": "[TICK 1][no-thread][calm] thought about first", "files": files})
    (home / UNCOMMITTED).write_text(record)  # the commit made, its record not yet removed
    assert done_on_resume(run, folder)  # type: ignore[arg-type]
    assert (home / UNCOMMITTED).read_text() == record, "the look changed the home"
    assert not done_on_resume(SimpleNamespace(turns=("first", "second"), base_url=None, max_steps=10),  # type: ignore[arg-type]
                              folder)  # a turn without its reply: it runs again
