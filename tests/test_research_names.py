"""What the research commands say to a researcher who names something wrong, and the record of a
judging asked again: found by a newcomer using them (notes/sessions/2026-11-29f/newcomer7.md)."""

import json
import subprocess
from pathlib import Path

import pytest

from amacs_server.persistence import history
from amacs_server.research import judge, report
from amacs_server.research.dataset import load as load_dataset
from amacs_server.research.dataset import summary_text
from amacs_server.research.report import build_report
from amacs_server.research.runs import manifest, moved_origin
from amacs_server.research.spec import SpecError, load
from amacs_server.transcripts import summarize
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
from tests.research_fakes import write_runs
from tests.test_rewind import run as run_steps


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
                                                                                        capsys, monkeypatch):
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
    # asked again of another endpoint (one that scores): each attempt's dollars said where they went
    scorer = FakeAnthropic(default=lambda _body: Reply(text=json.dumps({"score": 4, "rationale": "fine"}))).start()
    try:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", scorer.url)
        assert judge.main([str(tmp_path), "answer-quality", "--parallel", "1"]) == 0
    finally:
        scorer.stop()
    out = capsys.readouterr().out
    earlier = sum(paid.values())
    assert "0 judged before, 2 to judge (2 of them again: failed or interrupted before)" in out, out
    last = next(line for line in out.splitlines() if line.startswith("judge answer-quality: 2 of 2"))
    now = sum(json.loads((tmp_path / r / "judges" / "answer-quality" / "score.json").read_text())["cost"]
              for r in runs)
    assert f"${now + earlier:.4f} estimated at list prices" in last, last  # every attempt's dollars
    hosts = sorted(url.removeprefix("http://") for url in (fake.url, scorer.url))
    assert f"(the model calls went to {hosts[0]}, not Anthropic's API; {hosts[1]}, not Anthropic's API;" in last
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
    con = load_dataset(tmp_path)
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


def _home_of_a_two_tick_turn(tmp_path: Path) -> Path:
    """A home whose first input took two ticks (an eval, then the reply: ticks 1-2), the next one (3)."""
    fake = FakeAnthropic(default=lambda _body: Reply(agent_json("answered"))).start()
    fake.script(Reply(agent_json(None, eval="(+ 1 2)")))
    try:
        home = tmp_path / "origin"
        assert run_steps(home, fake, [("say", "first question"), ("say", "second question")])[1] == 3
        return home
    finally:
        fake.stop()



def test_fork_and_rewind_refuse_a_tick_inside_a_turn_as_from_does(tmp_path, capsys):
    """The newcomer's case: ``amacs-server fork HOME --tick N DEST`` at the tick an input began (its
    turn not yet replied to) made a fork whose mind answered that turn, not the next input (and a
    ``from`` on the fork side-stepped from's refusal); ``rewind`` too.  Refused with from's words;
    a turn's end and ``now`` still fork, and rewind to a turn's end."""
    home = _home_of_a_two_tick_turn(tmp_path).resolve()
    head = history.tick_commit(home, 3)
    for command in (["fork", str(home), "--tick", "1", str(tmp_path / "mid")], ["rewind", str(home), "--tick", "1"]):
        assert history.main(command) == 1
        said = capsys.readouterr().err
        assert (f"amacs-server {command[0]}: refused: tick 1 of {home} is inside the turn of «first question» "
                "(ticks 1-2): ") in said, said
        assert ("from a mind that has not replied to it; `--tick 2` starts after that turn's reply, and before "
                "its input the mind was new (a new home); `amacs-server ticks ") in said, said
    assert not (tmp_path / "mid").exists() and history.tick_commit(home, 3) == head
    assert history.main(["fork", str(home), "--tick", "now", str(tmp_path / "now")]) == 0
    assert history.main(["fork", str(home), "--tick", "2", str(tmp_path / "two")]) == 0
    assert history.fork_origin(tmp_path / "two")["tick"] == 2
    assert history.main(["rewind", str(home), "--tick", "2"]) == 0
    assert history.last_tick(home) == 2


def test_a_rewind_inside_the_last_turn_is_not_told_to_go_to_where_the_mind_is(tmp_path, capsys):
    """`amacs-server rewind --tick 1` inside the home's last turn (ticks 1-2) advised "`--tick 2`
    starts after that turn's reply": the mind is at tick 2, and a rewind there changes nothing.
    The refusal says so and gives the tick before the input; a fork there is still offered."""
    home = _home_of_a_two_tick_turn(tmp_path).resolve()
    history.rewind(home, 2)  # the turn of «first question», ticks 1-2, is now the home's last
    assert history.main(["rewind", str(home), "--tick", "1"]) == 1
    said = capsys.readouterr().err
    assert ("from a mind that has not replied to it; the turn ends at tick 2, the home's last (the mind is there "
            "now: a rewind there changes nothing), and before its input the mind was new (a new home)") in said, said
    assert "`--tick 2`" not in said, said
    assert history.main(["fork", str(home), "--tick", "1", str(tmp_path / "mid")]) == 1
    assert "`--tick 2` starts after that turn's reply" in capsys.readouterr().err


def test_from_on_a_served_home_is_refused_and_the_docs_say_so(tmp_path):
    """The newcomer kept the shell open on the home they studied and learnt from the refusal alone
    that ``from``'s home must not be served: research.md's ``from`` paragraph never said so."""
    _home_of_a_two_tick_turn(tmp_path)
    held = history.lock((tmp_path / "origin").resolve())  # as its server holds it
    try:
        with pytest.raises(SpecError, match=r"refused: an AMACS server \(pid \d+\) serves "):
            load(_spec(tmp_path, "origin@2"))
    finally:
        held.release()
    said = " ".join((Path(__file__).parents[1] / "docs" / "research.md").read_text().split())
    assert ("The home must not be served when the experiment starts or resumes: quit the Emacs whose shell is "
            "open on it first") in said


def test_from_says_what_a_short_id_and_now_are(tmp_path):
    """The newcomer's ``@55adeb`` (6 characters) and ``@now`` (which ``fork --tick now`` takes) got the
    bare "must be PATH@TICK or PATH@COMMIT".  A short id hears how long an id must be; ``@now`` is
    refused (a resume reads the spec again, when the home may have gone on) with the tick it is now."""
    home = _home_of_a_two_tick_turn(tmp_path).resolve()
    commit = history.tick_commit(home, 3)
    with pytest.raises(SpecError, match=r"a commit is named by 7 characters or more of its id\), got 'origin@"):
        load(_spec(tmp_path, f"origin@{commit[:6]}"))
    with pytest.raises(SpecError) as now:
        load(_spec(tmp_path, "origin@now"))
    assert (f"experiment.from: `@now` is not taken here: a resume reads the spec again, and by then {home} may have "
            f"gone on, its runs started from another mind; its last tick now is 3: write `@3` (or its commit, "
            f"`@{commit[:12]}`)") in str(now.value), now.value

def _spec(tmp_path: Path, origin: str) -> Path:
    spec = tmp_path / "experiment.toml"
    spec.write_text(f'[experiment]\nname = "fromtick"\nfrom = "{origin}"\n\n[[prompts]]\nname = "next"\n'
                    'turns = ["what comes next?"]\n\n[[models]]\nname = "fake"\nmodel = "claude-sonnet-4-5"\n'
                    'base_url = "http://127.0.0.1:1"\n')
    return spec


def test_a_tick_inside_a_turn_is_refused_naming_the_turn_s_ends(tmp_path):
    """``from = "HOME@1"`` where the input of tick 1 was answered at tick 2: the runs started from a
    mind that had not replied to it, and nothing said so (the pickers offer only a turn's ends)."""
    home = _home_of_a_two_tick_turn(tmp_path)
    with pytest.raises(SpecError) as refused:
        load(_spec(tmp_path, "origin@1"))
    said = str(refused.value)
    assert (f"experiment.from: tick 1 of {home.resolve()} is inside the turn of «first question» (ticks 1-2): a run "
            "forked there would start from a mind that has not replied to it; `@2` starts after that turn's "
            "reply, and before its input the mind was new (a spec without `from`)") in said, said
    assert "turn_around" not in said and "lists the inputs and the tick each began" in said
    for tick in (2, 3):  # the end of a turn, and the home's last tick
        (run_,) = load(_spec(tmp_path, f"origin@{tick}")).runs
        assert run_.origin == (str(home.resolve()), tick)
        assert run_.origin_commit == history.tick_commit(home.resolve(), tick)


def test_a_fork_s_origin_names_its_commit_which_a_rewind_cannot_make_another_mind(tmp_path):
    """Tick numbers are used again after a rewind: ``HOME@2`` and a fork's "a fork of HOME at tick 2"
    named whatever tick 2 is now.  The fork records the commit beside the tick (its record, its
    commit message, the status its header is drawn from), a run's manifest and the dataset's ``runs``
    too (``origin_commit``); ``from = "HOME@COMMIT"`` names one mind, refused once a rewind left it;
    and a resume whose ``HOME@TICK`` is now another commit than its done runs forked is refused."""
    home = _home_of_a_two_tick_turn(tmp_path).resolve()
    commit = history.tick_commit(home, 2)
    fork = history.fork(home, 2, tmp_path / "fork").home
    assert history.fork_origin(fork) == {"from": str(home), "tick": 2, "commit": commit}
    body = subprocess.run(["git", "log", "-1", "--format=%B"], cwd=fork, capture_output=True, text=True).stdout
    assert f"Its commit there: {commit}" in body, body
    (run_,) = load(_spec(tmp_path, f"origin@{commit[:9]}")).runs
    assert (run_.origin, run_.origin_commit) == ((str(home), 2), commit)
    assert manifest(run_, "done", 0.0)["origin_commit"] == commit
    runs_dir = tmp_path / "runs"
    (runs_dir / run_.run_id).mkdir(parents=True)
    (runs_dir / run_.run_id / "manifest.json").write_text(json.dumps(manifest(run_, "done", 0.0)))
    assert moved_origin([run_], runs_dir) is None
    # the home rewound before tick 2 and gone on: its tick 2 is another mind
    history.rewind(home, 1)
    fake = FakeAnthropic(default=lambda _body: Reply(agent_json("another answer"))).start()
    try:
        run_steps(home, fake, [("say", "another question")])
    finally:
        fake.stop()
    now = history.tick_commit(home, 2)
    assert now != commit
    ref = history.abandoned_futures(home)[0]["ref"]
    with pytest.raises(SpecError, match=rf"commit {commit[:9]} is not in {home}'s history as it stands") as left:
        load(_spec(tmp_path, f"origin@{commit[:9]}"))
    assert f"(a rewind left it on the abandoned future kept on git ref {ref}): " in str(left.value), left.value
    (again,) = load(_spec(tmp_path, "origin@2")).runs
    said = moved_origin([again], runs_dir)
    assert said is not None and said.startswith(
        f"{home}@2 is commit {now[:12]} now, but run {run_.run_id} was forked from commit {commit[:12]}: "), said
    # the newcomer followed its advice, from = HOME@<that commit>, into the refusal above: it says where it is
    assert "write from" not in said, said
    assert (f"The mind the runs done started from is no longer in its history (the rewind left it on the abandoned "
            f"future kept on git ref {ref}, a fork cannot start from: ") in said, said
    assert said.endswith("so the runs left cannot start from it: to start from the new one, a new --runs-dir (the "
                         "runs done here stay readable: dataset, report)"), said
    assert (runs_dir / run_.run_id / "manifest.json").exists()
    con = load_dataset(runs_dir)
    assert con.execute("SELECT origin, origin_commit FROM runs").fetchall() == [(f"{home}@2", commit)]
    con.close()


def test_a_c_c_while_a_judgement_is_asked_again_still_counts_its_earlier_attempts(tmp_path):
    """Found using it: C-c while two failed judgements were asked again said $0.0036 where $0.0072 had
    been paid: their earlier attempts were kept aside and their new scores not yet written."""
    write_runs(tmp_path, 2, errors=False)
    first, second = sorted(p.parent.name for p in tmp_path.glob("*/manifest.json"))
    kept = tmp_path / first / "judges" / "answer-quality" / "attempts" / "1"
    kept.mkdir(parents=True)
    (kept / "score.json").write_text(json.dumps({"status": "failed", "cost": 0.002, "earlier_cost": 0.0,
                                                 "estimated_where": None}))
    said = judge.record_words(judge.read_judge(judge.find_judge("answer-quality")), tmp_path, 2,
                              {first: None, second: None}, going=1)
    assert said == ("0 of 2 judged, 0 failed, 1 stopped while being judged (asked again when you resume), 2 to judge, "
                    "$0.0020 spent ($0.0020 of it by earlier attempts of judgements that ran again)"), said
