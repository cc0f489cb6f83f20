"""Counterfactual experiments (issue 26): every run of an arm starts from a fork of one home at
one tick (``from = "PATH@TICK"``), so the arms share a history and differ only in what the
spec varies.  Real batch Emacs sessions (``amacs-server experiment``) against the fake model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amacs_server.persistence.history import tick_commit
from amacs_server.research.spec import SpecError, load
from tests.e2e.test_experiment import experiment, manifests
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
from tests.test_rewind import requests, run

pytestmark = pytest.mark.e2e


def _origin(tmp_path: Path) -> Path:
    """A home of three ticks, made by real turns."""
    fake = FakeAnthropic(default=lambda body: Reply(agent_json("the origin's answer", monologue="origin"))).start()
    try:
        home = tmp_path / "origin"
        run(home, fake, [("say", "origin question one"), ("create", "kept"), ("say", "origin question two"),
                         ("say", "origin question three")])
        return home
    finally:
        fake.stop()


def _spec(tmp_path: Path, origin: str) -> Path:
    for arm in ("terse", "chatty"):
        skill = tmp_path / "skills" / arm / f"style-{arm}"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(f"---\nname: style-{arm}\ndescription: a {arm} style\n---\nBe {arm}.\n")
    spec = tmp_path / "experiment.toml"
    spec.write_text(f'[experiment]\nname = "counterfactual"\nfrom = "{origin}"\nparallel = 1\ntimeout = 90\n'
                    'max_steps = 3\n\n[[prompts]]\nname = "next"\nturns = ["what comes next?"]\n\n'
                    '[[variants]]\nname = "terse"\nskills = ["skills/terse"]\n\n'
                    '[[variants]]\nname = "chatty"\nskills = ["skills/chatty"]\n\n'
                    '[[models]]\nname = "fake"\nmodel = "claude-sonnet-4-5"\nbase_url = "${FAKE_URL}"\n')
    return spec


def test_two_arms_forked_from_one_home_share_its_history(tmp_path):
    origin = _origin(tmp_path)
    spec = _spec(tmp_path, "origin@2")
    fake = FakeAnthropic(default=lambda body: Reply(agent_json("an arm's answer"))).start()
    try:
        runs = tmp_path / "runs"
        proc = experiment(fake, spec, runs)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        found = manifests(runs)
        assert sorted(m["variant"] for m in found.values()) == ["chatty", "terse"], found
        for run_id, manifest in found.items():
            assert manifest["status"] == "done", manifest
            assert manifest["origin"] == f"{origin.resolve()}@2", manifest
            assert manifest["origin_commit"] == tick_commit(origin.resolve(), 2), manifest  # the one mind
            chat = (runs / run_id / "home" / "agent-chat.org").read_text()
            assert "origin question two" in chat and "origin question three" not in chat
            assert "what comes next?" in chat
        first = requests(fake)
        assert len(first) == 2, len(first)
        a, b = (json.loads(r)["messages"] for r in first)
        assert a == b  # the same history, and the same new input: only the skills copied differ
        history = json.dumps(a)
        assert "origin question one" in history and "origin question two" in history
        assert "origin question three" not in history and "kept" in history  # the note made at tick 1
    finally:
        fake.stop()
    try:
        import duckdb

        from amacs_server.research.dataset import build
    except ImportError:
        return
    con = duckdb.connect()
    build(con, runs)
    assert {r[0] for r in con.execute("SELECT origin FROM runs").fetchall()} == {f"{origin.resolve()}@2"}
    report = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "amacs_server", "report", str(runs), "--output", str(report)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    page = report.read_text()
    assert "forked from (home@tick, and its commit)" in page and f"{origin.resolve()}@2 (commit " in page


def test_a_spec_forking_from_a_tick_that_is_not_there_is_refused(tmp_path):
    _origin(tmp_path)
    with pytest.raises(SpecError, match=r"experiment.from: .*no tick 9 .*; `amacs-server ticks .*` lists"):
        load(_spec(tmp_path, "origin@9"), {"FAKE_URL": "http://127.0.0.1:1"})
    (tmp_path / "experiment.toml").unlink()
    for arm in ("terse", "chatty"):
        (tmp_path / "skills" / arm / f"style-{arm}" / "SKILL.md").unlink()
        (tmp_path / "skills" / arm / f"style-{arm}").rmdir()
    with pytest.raises(SpecError, match="must be PATH@TICK"):
        load(_spec(tmp_path, "origin"), {"FAKE_URL": "http://127.0.0.1:1"})
