"""Honest run statuses: an experiment whose runs cannot get the agent's reply says so.

Real batch Emacs sessions, the command run as a person runs it: against a dead
endpoint (nothing listens), a fake that answers 401 to every call, a fake whose
replies never parse, and a fake that never answers (the run killed by its
timeout).  Each run is ``failed`` with the reason in words and the turn it
stopped at; the command exits 1 and prints one line per reason; a dead endpoint
stops the experiment after three runs failed the same way; the report puts the
failures first, in red, and draws no cost axis below zero (rendered in Chromium).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from amacs_server.research import report
from tests.e2e.harness import ROOT, TEST_KEY
from tests.e2e.test_report import chromium, watched_copy
from tests.fake_anthropic import FakeAnthropic, Reply

pytestmark = pytest.mark.e2e

DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens there


def spec(folder: Path, url: str, repetitions: int, parallel: int, timeout: float = 90,
         turns: str = '"the first question", "the second question"') -> Path:
    path = folder / "experiment.toml"
    path.write_text(f"""
[experiment]
name = "failing"
repetitions = {repetitions}
parallel = {parallel}
timeout = {timeout}
max_steps = 3

[[prompts]]
name = "two-turns"
turns = [{turns}]

[[models]]
name = "fake"
model = "claude-sonnet-4-5"
base_url = "{url}"
""")
    return path


def experiment(path: Path, runs: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
    env["ANTHROPIC_API_KEY"] = TEST_KEY
    return subprocess.run([sys.executable, "-m", "amacs_server", "experiment", str(path), "--runs-dir", str(runs)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def manifests(runs: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in runs.glob("*/manifest.json")}


def check_failed(runs: Path, proc: subprocess.CompletedProcess[str], reason: str, turn: int,
                 total: int) -> dict[str, dict]:
    """Every run failed for REASON at TURN; exit 1; the command's summary line for it."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = manifests(runs)
    assert found
    for manifest in found.values():
        assert manifest["status"] == "failed", manifest
        assert manifest["error"] == reason and manifest["failed_turn"] == turn, manifest
        assert manifest["turns_done"] == turn - 1, manifest
        assert manifest["cost"] >= 0
    n = len(found)
    assert f"0 of {total} done, {n} failed" in proc.stdout, proc.stdout
    assert f"  {n} {'run' if n == 1 else 'runs'} failed (at turn {turn}): {reason}\n" in proc.stdout, proc.stdout
    assert f"turn {turn}: {reason}" in proc.stderr, proc.stderr  # each run's line
    return found


def test_dead_endpoint_fails_every_run_and_stops_early(tmp_path):
    """Nothing listens at the model's URL: three runs fail alike (one at a time), then no new run starts."""
    runs = tmp_path / "runs"
    proc = experiment(spec(tmp_path, DEAD, repetitions=6, parallel=1), runs)
    reason = f"model endpoint unreachable: {DEAD}"
    found = check_failed(runs, proc, reason, 1, 6)
    assert len(found) == 3, found
    assert (f"Stopped early: the last 3 runs failed the same way ({reason}); 3 runs not started. "
            "Fix the cause and run the same command again to resume.") in proc.stdout, proc.stdout
    assert "Budget spent" not in proc.stdout
    # no call got an answer: not "$0.0000 estimated at list prices (the model calls went to ...)" (newcomer8 #38)
    assert ", $0.0000: no model call got an answer (the model is at 127.0.0.1:9" in proc.stdout, proc.stdout
    failure_section_rendered(runs, reason, 3, of=6)


def test_refused_key_fails_with_401(tmp_path):
    fake = FakeAnthropic(default=lambda body: Reply(status=401)).start()
    try:
        runs = tmp_path / "runs"
        proc = experiment(spec(tmp_path, fake.url, repetitions=2, parallel=2), runs)
    finally:
        fake.stop()
    found = check_failed(runs, proc, "401: invalid API key", 1, 2)
    assert len(found) == 2 and "Stopped early" not in proc.stdout
    assert len(fake.requests) == 2 * 2  # one call per turn: a refused key is not retried


def test_replies_that_never_parse(tmp_path):
    """The model answers prose, never the JSON the agent speaks: the retries fail, the turn has no reply."""
    fake = FakeAnthropic(default=lambda body: Reply("I would rather chat in prose, thank you.")).start()
    try:
        runs = tmp_path / "runs"
        proc = experiment(spec(tmp_path, fake.url, repetitions=2, parallel=2), runs)
    finally:
        fake.stop()
    found = check_failed(runs, proc, "reply never parsed", 1, 2)
    assert len(found) == 2
    assert all(m["cost"] > 0 for m in found.values())  # the calls were answered, and paid for


def test_run_killed_by_its_timeout(tmp_path):
    """The model never answers: each run is killed at its timeout, failed at its first turn."""
    hold = threading.Event()
    fake = FakeAnthropic(default=lambda body: Reply(hold=hold)).start()
    try:
        runs = tmp_path / "runs"
        proc = experiment(spec(tmp_path, fake.url, repetitions=2, parallel=2, timeout=8), runs)
    finally:
        hold.set()
        fake.stop()
    found = check_failed(runs, proc, "timed out after 8 s", 1, 2)
    assert len(found) == 2
    assert all(8 <= m["wall_seconds"] < 20 for m in found.values()), found


def test_second_turn_failure_names_the_turn(tmp_path):
    """The first turn answered, the second's call refused: failed at turn 2, one turn done."""
    def answer(body: dict) -> Reply:
        asked = json.dumps(body.get("messages"))
        return Reply(status=401) if "the second question" in asked else Reply()

    fake = FakeAnthropic(default=answer).start()
    try:
        runs = tmp_path / "runs"
        proc = experiment(spec(tmp_path, fake.url, repetitions=1, parallel=1), runs)
    finally:
        fake.stop()
    check_failed(runs, proc, "401: invalid API key", 2, 1)


def failure_section_rendered(runs: Path, reason: str, n: int, of: int | None = None) -> None:
    """The report of RUNS: the failures first, in red, with the reason; no cost axis below zero.  OF: the
    spec's runs, those never started (the experiment stopped early) counted and named too."""
    assert report.main([str(runs)]) == 0
    page = runs / "report.html"
    text = page.read_text(encoding="utf-8")
    assert text.index("class='failures'") < text.index("Cost and tokens")
    of = of or n
    if of > n:
        assert f"{n} of {of} runs failed, {of - n} not started" in text, text[:3000]
        assert f"{of} runs in {runs}: {n} failed, {of - n} not started" in text
        assert report.NOT_STARTED in text
    if shutil.which("chromium") is None:
        return
    dom = chromium(watched_copy(page).as_uri(), "--dump-dom")
    assert 'id="amacs-js-error"' not in dom
    section = dom[dom.index('class="failures"'):]
    section = section[:section.index("</div>")]
    assert f"{n} of {of} runs failed" in section and reason in section, section
    assert "#b00000" in text  # red
    assert 'data-unformatted="−1"' not in dom and 'data-unformatted="-1"' not in dom  # no axis from -1
    assert dom.count("no run done (red: failed)") >= 3  # the cost, model-call and duration boxes say so
    assert "no run done" in dom.replace("no run done (red: failed)", "")  # and where the time went
