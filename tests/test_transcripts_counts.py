"""What a reader of a home's transcripts counts (``amacs-server transcripts``, the research
dataset) after a real rewind and a real fork: the file each writes of its own says a step of
the home's history, not a session a server ran, and holds no agent."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from amacs_server.persistence import history
from amacs_server.transcripts import summarize
from tests.fake_anthropic import FakeAnthropic
from tests.test_rewind import answer, run


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic(default=answer).start()
    yield server
    server.stop()


@pytest.fixture
def rewound(tmp_path: Path, fake: FakeAnthropic) -> tuple[Path, Path]:
    """A home of two server sessions with a rewind between them, and a fork of it (not yet run)."""
    home = tmp_path / "home"
    _, last = run(home, fake, [("say", "hello"), ("say", "note the plan"), ("say", "and then")])
    assert last == 3
    history.rewind(home, 1)
    run(home, fake, [("say", "again")])
    fork = history.fork(home, 2, tmp_path / "fork")
    assert len(list((home / "transcripts").glob("*-rewind.jsonl"))) == 1  # the rewind wrote its own file
    assert [p.stem.rpartition("-")[2] for p in (fork.home / "transcripts").glob("*.jsonl")] == ["fork"]
    return home, fork.home


def test_a_rewind_or_fork_is_no_run_and_no_agent_in_the_summary(rewound):
    home, fork = rewound
    summary = summarize(home / "transcripts")
    assert (summary["runs"], summary["agents"], summary["agents_by_type"]) == (2, 2, {"primary": 2}), summary
    assert all(not run.endswith("-rewind") for run in summary["agents_per_run"]), summary["agents_per_run"]
    assert (summary["rewinds"], summary["forks"]) == (1, 0)
    summary = summarize(fork / "transcripts")
    # A fork starts with no transcript but its own: no server has run in it yet.
    assert (summary["runs"], summary["agents"], summary["rewinds"], summary["forks"]) == (0, 0, 0, 1), summary


def test_a_research_run_whose_home_was_rewound_counts_its_sessions_and_agents(rewound, tmp_path):
    from amacs_server.research.dataset import load

    home, _ = rewound
    runs_dir = tmp_path / "runs"
    shutil.copytree(home / "transcripts", runs_dir / "r1" / "home" / "transcripts")
    (runs_dir / "r1" / "manifest.json").write_text(json.dumps({"run_id": "r1", "status": "ok"}))
    con = load(runs_dir)
    assert con.execute("SELECT sessions, agents FROM runs").fetchall() == [(2, 2)]
    assert con.execute("SELECT count(*), count(*) FILTER (WHERE session_id LIKE '%-rewind') FROM agents"
                       ).fetchone() == (2, 0)
    # The record is whole: the rewind's line is an event as it was written.
    assert con.execute("SELECT count(*) FROM events WHERE event = 'rewind'").fetchone()[0] >= 1


def test_a_run_from_a_fork_is_one_session_and_its_timeline_names_its_agents_plainly(rewound, fake, tmp_path):
    """A counterfactual arm's run starts from a fork: its home holds the fork's own file and the
    one session its server ran."""
    pytest.importorskip("plotly")
    from amacs_server.research.dataset import load
    from amacs_server.research.report import _timeline

    _, fork = rewound
    run(fork, fake, [("say", "from the fork")])
    runs_dir = tmp_path / "runs"
    shutil.copytree(fork / "transcripts", runs_dir / "r1" / "home" / "transcripts")
    (runs_dir / "r1" / "manifest.json").write_text(json.dumps({"run_id": "r1", "status": "ok"}))
    con = load(runs_dir)
    assert con.execute("SELECT sessions, agents FROM runs").fetchall() == [(1, 1)]
    labels = _timeline(con, "r1").layout.yaxis.ticktext
    assert list(labels) == ["primary (open at end)"], labels


def test_a_fork_rewound_to_before_its_fork_point_still_says_it_is_a_fork(rewound, fake):
    """A rewind abandons ticks, not the steps of the home's history: the fork's record (and an
    earlier rewind's) stays, and a session whose every line moved onto the abandoned ref leaves
    no empty file behind to be taken for a run."""
    _, fork = rewound
    run(fork, fake, [("say", "in the fork"), ("say", "more in the fork")])
    history.rewind(fork, 3)
    history.rewind(fork, 1)  # before the fork point (2) and before the first rewind's tick (3)
    files = sorted((fork / "transcripts").glob("*.jsonl"))
    assert [p.name for p in files if p.stat().st_size == 0] == [], files
    assert sorted(p.stem.rpartition("-")[2] for p in files) == ["fork", "rewind", "rewind"], files
    summary = summarize(fork / "transcripts")
    assert (summary["runs"], summary["rewinds"], summary["forks"]) == (0, 2, 1), summary


def test_a_rewind_the_server_made_is_counted_once(tmp_path, fake):
    """A rewind a served home makes writes its own file and a `rewind` line in the server's
    session; a session begun after the tick keeps no other line (they went onto the abandoned
    ref), so that line was taken for a second step: two rewinds counted three."""
    import asyncio

    from tests.test_rewind import do, runtime

    home = tmp_path / "home"
    run(home, fake, [("say", "hello"), ("say", "two"), ("say", "three")])
    rt = runtime(home, fake.url)  # a session begun at tick 3
    try:
        do(rt, ("say", "four"))
        assert rt.mind.commits.flush(60)
        done = asyncio.run_coroutine_threadsafe(rt.rewind(3), rt.loop).result(60)
        assert str(done["ref"]).startswith("refs/amacs/abandoned/")
    finally:
        rt.stop()
    assert summarize(home / "transcripts")["rewinds"] == 1
    run(home, fake, [("say", "again")])
    history.rewind(home, 2)  # and one from the command line
    assert summarize(home / "transcripts")["rewinds"] == 2
