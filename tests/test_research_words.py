"""The research record says the same thing everywhere: the experiment's last line (after a C-c too),
the dataset's summary, the report and the transcripts summary count the same runs, in the same order,
and say the same dollars the same way.

Found by a newcomer (newcomer6): after a run ran again the experiment ended "$0.4496 ..., and $0.0322
by earlier attempts" (no total) while the report and the dataset said "runs $0.4818 ($0.0322 of it by
earlier attempts)", and the dataset's own status and arm lines summed to $0.4496; a C-c said only
"interrupted"; the report's first table and the dataset's summary listed the arms by name, the rest
of the report in the spec's order; ``transcripts`` said "runs": 20 for 10 runs and their 10
judgements."""

import json
import re
import shutil
from pathlib import Path

import pytest

from amacs_server.research.dataset import load, summary_text
from amacs_server.research.report import build_report
from amacs_server.research.runs import INTERRUPTED
from amacs_server.research.spec import arms_of
from amacs_server.research.spec import load as load_spec
from tests.research_fakes import write_runs
from tests.test_research_record import GRID, headline

WHERE = "127.0.0.1:35029"
EARLIER = 0.125
AGAIN = "question.two-views.fake-small.r0"  # the run that ran again
SAID = f"${EARLIER:.4f} of it by earlier attempts of runs that ran again"


@pytest.fixture
def ran(tmp_path, monkeypatch):
    """An experiment's runs (the 8 arms of GRID, once each) against a fake at WHERE, one of which ran
    again after an attempt that paid EARLIER; (the experiment, its runs folder, the total paid)."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://{WHERE}")
    runs_dir = tmp_path / "runs"
    write_runs(runs_dir, 8, errors=False)
    (runs_dir / "experiment.toml").write_text(GRID.format(reference=""))
    total = 0.0
    for path in runs_dir.glob("*/manifest.json"):
        manifest = json.loads(path.read_text())
        manifest.update(endpoint=WHERE, status="done", error=None, failed_turn=None)
        manifest["earlier_cost"] = EARLIER if path.parent.name == AGAIN else 0.0
        total += manifest["cost"] + manifest["earlier_cost"]
        path.write_text(json.dumps(manifest))
    return load_spec(runs_dir / "experiment.toml"), runs_dir, total


def test_the_runs_cost_is_said_as_one_total_and_of_it_the_earlier_attempts_everywhere(ran):
    from amacs_server.research.experiment import record_words

    experiment, runs_dir, total = ran
    line = record_words(experiment, runs_dir)
    assert line == (f"8 of 8 done, 0 failed, ${total:.4f} estimated at list prices (the model calls went to "
                    f"{WHERE}, not Anthropic's API; {SAID})"), line
    con = load(runs_dir)
    text = summary_text(con, runs_dir, 0.1)
    # every dollar line of the summary adds up to the same total
    status = re.findall(r"^  done +8 runs  \$([0-9.]+)", text, re.M)
    arms = [float(d) for d in re.findall(r"^  \S+ / \S+ / \S+ +1 runs  \$([0-9.]+)", text, re.M)]
    assert status == [f"{total:.4f}"] and len(arms) == 8 and round(sum(arms), 4) == pytest.approx(total, abs=1e-3)
    assert f"  {AGAIN.removesuffix('.r0').replace('.', ' / ')}" in text
    # as the experiment's last line says it: where the calls went, so that the dollars are an estimate
    assert (f"cost: runs ${total:.4f} estimated at list prices (the model calls went to {WHERE}, not Anthropic's "
            f"API; {SAID}) in all") in text, text
    first = headline(build_report(con, runs_dir, [], None).render("t"))
    con.close()
    # one parenthesis after the total: where the calls went, and the earlier attempts' part of it
    assert first.endswith(f"${total:.4f} in all (all estimated at list prices: the model calls went to {WHERE}, "
                          f"not Anthropic&#x27;s API; {SAID}; see Prices)."), first


def test_the_interrupted_line_says_what_is_done_failed_and_to_run_and_what_it_cost(ran):
    """After a C-c, the line counts the runs as the last line does: done, failed, the runs the C-c
    stopped, those still to run, and every attempt's dollars so far."""
    from amacs_server.research.experiment import record_words

    experiment, runs_dir, _total = ran
    folders = sorted(p.parent for p in runs_dir.glob("*/manifest.json"))
    stopped, failed, gone = folders[0], folders[1], folders[2:4]
    for folder, change in ((stopped, {"status": "failed", "error": INTERRUPTED, "cost": 0.03}),
                           (failed, {"status": "failed", "error": "timed out after 300 s"})):
        path = folder / "manifest.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    for folder in gone:  # never started
        (folder / "manifest.json").unlink()
    paid = sum(m["cost"] + m["earlier_cost"] for m in
               (json.loads(p.read_text()) for p in runs_dir.glob("*/manifest.json")))
    line = record_words(experiment, runs_dir)
    assert line.startswith(f"4 of 8 done, 1 failed, 1 interrupted, 4 to run, ${paid:.4f} estimated at list "
                           f"prices (the model calls went to {WHERE}"), line


def test_every_table_of_arms_lists_them_in_the_spec_s_order(ran):
    """docs/research.md: the report lists the arms in the order the spec lists them. Its first table
    and the dataset's summary listed them by name (three-views before two-views)."""
    _experiment, runs_dir, _total = ran
    spec_order = arms_of(runs_dir / "experiment.toml")[0]
    assert spec_order != sorted(spec_order)  # else this test could not tell
    con = load(runs_dir)
    text = summary_text(con, runs_dir, 0.1)
    assert re.findall(r"^  (\S+ / \S+ / \S+) ", text, re.M) == spec_order, text
    page = build_report(con, runs_dir, [], None).render("t")
    con.close()
    table = page[page.index("arm (prompt / variant / model)"):]
    table = table[:table.index("</table>")]
    assert re.findall(r"<tr><td>([^<]+ / [^<]+ / [^<]+)</td>", table) == spec_order, table


def test_transcripts_count_runs_and_judgements_apart(ran, monkeypatch):
    """``amacs-server transcripts RUNS_DIR`` said ``"runs": 20`` for 10 runs and their 10 judgements."""
    from amacs_server.research import judge as judging
    from amacs_server.transcripts import summarize
    from tests.fake_anthropic import FakeAnthropic
    from tests.fake_debate import debate_or_judge_reply

    _experiment, runs_dir, _total = ran
    judge = judging.read_judge(judging.find_judge("viewpoints-used"))
    fake = FakeAnthropic(default=debate_or_judge_reply).start()
    try:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "fake")
        for folder in sorted(runs_dir.glob("*/manifest.json"))[:3]:
            job = judging.Job(run_id=folder.parent.name, material="<final-reply>r</final-reply>",
                              backend="anthropic", model="claude-sonnet-4-5", base_url=fake.url)
            judging.judge_one(judge, job, runs_dir)
    finally:
        fake.stop()
    summary = summarize(runs_dir)
    assert (summary["sessions"], summary["runs"], summary["judgements"]) == (11, 8, 3), summary
    assert len(summary["experiment_runs"]) == 8  # each run's session, with its folder and arm


def test_a_home_s_transcripts_have_no_judgements(ran):
    from amacs_server.transcripts import summarize

    _experiment, runs_dir, _total = ran
    home = Path(next(runs_dir.glob("*/home")))
    summary = summarize(home)
    assert (summary["sessions"], summary["runs"], summary["judgements"]) == (1, 1, 0), summary


class _OneAtATime:
    """Jobs (:class:`~amacs_server.research.experiment.Jobs`) that end as soon as they start, each done at $0.45."""

    def __init__(self) -> None:
        self.going: list[str] = []

    def submit(self, job) -> None:
        self.going.append(job.run_id)

    def finished(self, timeout: float):
        from amacs_server.research.runs import Outcome

        ended, self.going = self.going, []
        return [Outcome(run_id=r, status="done", cost=0.45, seconds=1.0, turns_done=1, started_at=0.0,
                        ended_at=1.0) for r in ended]

    def close(self) -> None:
        pass


def test_the_progress_bar_s_last_line_is_whole_when_piped(capsys):
    """Piped, the bar's last line read ``... $0.45 0:00:… ETA 0:00:…``: cut to the 80 columns Rich
    assumes without a terminal."""
    from types import SimpleNamespace

    from amacs_server.research.experiment import execute, progress_console

    runs = [SimpleNamespace(run_id=f"cars.two-views.sonnet.r{n}") for n in range(10)]
    execute(runs, _OneAtATime(), 2, None, 0.0, 10, "debate", progress_console())
    bar = [line for line in capsys.readouterr().err.splitlines() if line.startswith("debate (10 runs)")][-1]
    assert re.search(r"10 done · 0 running · 0 failed · \$4\.50 +\d+:\d\d:\d\d ETA +\d+:\d\d:\d\d$", bar.rstrip()), bar


def test_transcripts_count_an_earlier_attempt_apart_and_map_it_to_its_run(ran):
    """``transcripts RUNS_DIR`` counted the session of a run's earlier attempt (kept in
    ``<run>/attempts/<n>/`` when the run ran again) as one more run, and mapped it to no run."""
    from amacs_server.research.runs import keep_attempt, read_manifest
    from amacs_server.transcripts import summarize

    _experiment, runs_dir, _total = ran
    folder = runs_dir / AGAIN
    [before] = (folder / "home" / "transcripts").glob("*.jsonl")
    session = json.loads(before.read_text().splitlines()[0])["session_id"]
    keep_attempt(folder, {**read_manifest(folder), "status": "failed"})  # its record moves aside, as a rerun's
    again = folder / "home" / "transcripts" / "again.jsonl"  # the attempt that counted: a session of its own
    again.parent.mkdir()
    again.write_text((folder / "attempts" / "1" / "transcripts" / before.name).read_text().replace(session, "the-rerun"))
    summary = summarize(runs_dir)
    assert (summary["sessions"], summary["runs"], summary["earlier_attempts"], summary["judgements"]) == (9, 8, 1, 0)
    rerun = summary["experiment_runs"]["the-rerun"]
    assert rerun["run"] == AGAIN and "attempt" not in rerun
    assert summary["experiment_runs"][session] == {**rerun, "attempt": 1}


class _StoppedBeforeTheyStart:
    """Jobs (local runs) of which the first ends done; the second, submitted while every worker was
    busy, is cancelled by the C-c's stop before it started, so it never has an outcome."""

    def __init__(self) -> None:
        self.going: list[str] = []
        self.looks = 0

    def submit(self, job) -> None:
        self.going.append(job.run_id)

    def finished(self, timeout: float):
        from amacs_server.research.runs import Outcome

        self.looks += 1
        if self.looks == 2:
            raise KeyboardInterrupt
        ended, self.going = self.going[:1] if self.looks == 1 else [], self.going[1:] if self.looks == 1 else []
        return [Outcome(run_id=r, status="done", cost=0.45, seconds=1.0, turns_done=1, started_at=0.0,
                        ended_at=1.0) for r in ended]

    def finishing(self) -> list[str]:
        return []

    def close(self) -> None:
        self.going = []  # stopped before it started: still to do, no outcome


def test_after_a_c_c_the_bar_counts_no_run_running(capsys):
    """At a C-c a run submitted but not started (cancelled by the stop: still to do) has no outcome;
    the bar still counted it running afterwards (newcomer8 #24: ``1 done · 2 running`` at --parallel 1)."""
    from types import SimpleNamespace

    from amacs_server.research.experiment import execute, progress_console

    runs = [SimpleNamespace(run_id=f"cars.two-views.sonnet.r{n}") for n in range(3)]
    with pytest.raises(KeyboardInterrupt):
        execute(runs, _StoppedBeforeTheyStart(), 2, None, 0.0, 3, "debate", progress_console())
    bar = [line for line in capsys.readouterr().err.splitlines() if line.startswith("debate (3 runs)")][-1]
    assert "1 done · 0 running · 0 failed · $0.45" in bar, bar


class _EndedBeforeTheCc:
    """Jobs of which the first had ended when the C-c came (not yet said) and the second, every turn
    replied to, is let end by it."""

    def __init__(self) -> None:
        self.ended: list[str] = []
        self.looks = 0

    def submit(self, job) -> None:
        if job.run_id.endswith("r0"):  # it ends at once; r1 goes on
            self.ended.append(job.run_id)

    def finished(self, timeout: float):
        from amacs_server.research.runs import Outcome

        self.looks += 1
        if self.looks == 1:
            raise KeyboardInterrupt
        ended, self.ended = self.ended, []
        return [Outcome(run_id=r, status="done", cost=0.45, seconds=1.0, turns_done=1, started_at=0.0,
                        ended_at=1.0) for r in ended]

    def finishing(self) -> list[str]:
        return ["cars.two-views.sonnet.r1"]

    def close(self) -> None:
        self.ended.append("cars.two-views.sonnet.r1")  # the one the C-c let end


def test_a_c_c_says_the_runs_that_had_ended_before_the_ones_it_lets_end(capsys):
    """One C-c said "1 run whose every turn got its reply ends first", then two done lines came
    (newcomer9 #24): one run had ended before the C-c, unsaid.  It is said first, then the C-c's line
    and the run it let end."""
    from types import SimpleNamespace

    from amacs_server.research.experiment import execute, progress_console

    runs = [SimpleNamespace(run_id=f"cars.two-views.sonnet.r{n}") for n in range(2)]
    with pytest.raises(KeyboardInterrupt):
        execute(runs, _EndedBeforeTheCc(), 2, None, 0.0, 2, "debate", progress_console())
    err = capsys.readouterr().err.splitlines()
    said = [n for n, line in enumerate(err) if line.startswith(("done ", "C-c: "))]
    assert [err[n].split()[:2] for n in said] == [["done", "cars.two-views.sonnet.r0"], ["C-c:", "1"],
                                                 ["done", "cars.two-views.sonnet.r1"]], err
    assert err[said[1]].endswith("(C-c again to stop it now): cars.two-views.sonnet.r1"), err  # the run it names


def test_judging_dollars_at_list_prices_of_another_server_s_tokens_say_so(ran):
    """The judging's dollars, list prices for what a fake reported, said "judging $0.0434 (1 judge: ...)"
    where the runs' beside them said "estimated at list prices" (rj8); each score.json keeps where its
    model ran (``estimated_where``), and the dataset's scores table too."""
    from tests.test_research_record import judged

    _experiment, runs_dir, _total = ran
    judged(runs_dir, "viewpoints-used", [0.01, 0.02])
    elsewhere = f"{WHERE}, not Anthropic's API"
    for path in runs_dir.glob("*/judges/*/score.json"):
        path.write_text(json.dumps({**json.loads(path.read_text()), "estimated_where": elsewhere}))
    con = load(runs_dir)
    assert {w for (w,) in con.execute("SELECT estimated_where FROM scores").fetchall()} == {elsewhere}
    text = summary_text(con, runs_dir, 0.1)
    assert (f"judging $0.0300 estimated at list prices (the model calls went to {elsewhere}; 1 judge: "
            "viewpoints-used, 2 judgements)") in text, text
    page = build_report(con, runs_dir, [], None).render("t")
    assert "judging $0.0300 estimated at list prices (the model calls went to" in page, page


def test_a_run_stopped_after_its_last_reply_is_said_stopped_not_failed_everywhere(ran, tmp_path, capsys):
    """A second C-c stopped a run after its every turn got its reply: the resume records it done, not run
    again.  Until then its manifest said ``failed``, and the dataset, the report (in red, "1 of 8 runs
    failed") and the inspect export (an errored sample) showed a failure that was not one.  Its status is
    ``stopped`` and each says what it is; the judge says why it is not judged yet."""
    import zipfile

    from amacs_server.research import judge
    from amacs_server.research.experiment import record_words
    from amacs_server.research.export import export
    from amacs_server.research.runs import INTERRUPTED_REPLIED, STOPPED_WORDS
    from tests.test_research_record import judged

    experiment, runs_dir, total = ran
    folders = sorted(p.parent for p in runs_dir.glob("*/manifest.json"))
    path = folders[-1] / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "status": "stopped", "error": INTERRUPTED_REPLIED}))
    line = record_words(experiment, runs_dir)
    assert line.startswith("7 of 8 done, 0 failed, 1 stopped after its last reply (recorded done when you resume), "
                           f"1 to run, ${total:.4f}"), line
    con = load(runs_dir)
    text = summary_text(con, runs_dir, 0.1)
    assert re.search(rf"^  stopped +1 runs  \$[0-9.]+  \({re.escape(STOPPED_WORDS)}\)$", text, re.M), text
    page = build_report(con, runs_dir, [], None).render("t")
    con.close()
    assert "runs failed" not in page and "class='failures'" not in page, page[:2000]
    assert f"1 run stopped ({STOPPED_WORDS}): {folders[-1].name}." in page.replace("&#x27;", "'")
    assert "8 runs in " in headline(page) and "1 stopped" in headline(page), headline(page)
    export(runs_dir, tmp_path / "inspect")
    samples = {}
    for log in (tmp_path / "inspect").glob("*.eval"):
        with zipfile.ZipFile(log) as z:
            for name in z.namelist():
                if name.startswith("samples/"):
                    sample = json.loads(z.read(name))
                    samples[sample["metadata"]["run_id"]] = sample
    assert len(samples) == 8 and not any("error" in s for s in samples.values()), samples.keys()
    assert samples[folders[-1].name]["metadata"]["status"] == "stopped"
    judged(runs_dir, "viewpoints-used", [0.001] * 7)  # every done run judged: nothing to ask a model
    capsys.readouterr()
    assert judge.main([str(runs_dir), "viewpoints-used"]) == 0
    out = capsys.readouterr().out
    assert ("; 1 runs not done are not judged (1 of them stopped after its last reply: resume the experiment to "
            "record it done, then judge again)") in out, out
    shutil.rmtree(folders[0])  # a run not started, and none failed: the red heading says only that
    con = load(runs_dir)
    page = build_report(con, runs_dir, [], None).render("t")
    con.close()
    assert "<h2 id='failures'>1 of 8 runs not started</h2>" in page, page[:3000]
