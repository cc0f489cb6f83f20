"""The shipped debate example (experiments/debate) against the fake that plays it (tests/fake_debate.py)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from amacs_server.persistence import history
from tests.e2e.agent_fakes import send, session, transcript_events, wait_text
from tests.e2e.harness import ROOT, TEST_KEY, run_emacs
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json
from tests.fake_debate import FINAL_MARK, PREFIX, debate_reply

pytestmark = pytest.mark.e2e

SPEC = ROOT / "experiments" / "debate" / "debate.toml"


def variant_templates(spec: dict, variant: str, path: Path = SPEC) -> dict[str, Path]:
    """The panel-* skills of VARIANT in the spec at PATH: name -> SKILL.md folder."""
    found = {}
    for folder in next(v for v in spec["variants"] if v["name"] == variant)["skills"]:
        for skill in sorted((path.parent / folder).glob("*/SKILL.md")):
            found[skill.parent.name] = skill.parent
    return found


def check_debate(home: Path, templates: list[str], question: str) -> None:
    """HOME's transcripts show one viewpoint per template, each one's comment, and the final reply."""
    events = transcript_events(home)
    evals = [e["data"] for e in events if e["event"] == "eval_result" and e["agent_id"] == "primary"]
    assert len(evals) == 2 and all(r["success"] for r in evals), evals  # list the skills; convene and consider
    starts = {e["agent_id"]: e for e in events if e["event"] == "agent_start"}
    assert {a: (s["agent_type"], s["template"], s["parent_id"]) for a, s in starts.items()} == {
        f"viewpoint-{t.removeprefix(PREFIX)}": ("viewpoint", t, "primary") for t in templates}
    consider = [e for e in events if e["agent_id"] == "primary" and "consider" in str(e["data"])
                and "comments" in str(e["data"])]
    assert consider, "no consider event reached the primary"
    replies = [str(e["data"]) for e in events if e["agent_id"] == "primary" and FINAL_MARK in str(e["data"])]
    assert replies, "the primary gave no final reply"
    for t in templates:
        name = t.removeprefix(PREFIX)
        assert f"[{name}] {name.capitalize()} (" in replies[-1]
    assert question in replies[-1]
    # A viewpoint names the others it heard, never the room's notices ("[system] ... joined the chat").
    heard = re.findall(r"Having heard (.+?), I keep my view", replies[-1])
    names = {t.removeprefix(PREFIX) for t in templates}
    assert heard and all(set(re.findall(r"the ([a-z0-9_-]+)", h)) <= names for h in heard), replies[-1]
    assert "system" not in " ".join(heard), heard


@pytest.mark.parametrize("variant", ["two-views", "three-views"])
def test_one_debate_session(tmp_path, variant):
    """One real session per variant: the primary lists its skills, starts the panel, considers, answers."""
    spec = tomllib.loads(SPEC.read_text())
    home = tmp_path / "agent"
    templates = variant_templates(spec, variant)
    for name, folder in templates.items():
        shutil.copytree(folder, home / "skills" / name)
    fake = FakeAnthropic(default=debate_reply).start()
    try:
        turn = spec["prompts"][0]["turns"][0]
        run = run_emacs(home, fake.url, session(send(turn), wait_text(FINAL_MARK))).check()
    finally:
        fake.stop()
    assert FINAL_MARK in run.shell
    check_debate(home, sorted(templates), "Should cities ban cars from their centres?")


def test_the_shipped_experiment_runs_against_the_fake(tmp_path):
    """experiments/debate as shipped (repetitions cut to 2): every run is done, costs something, and its
    transcripts show its variant's panel, their comments, and the primary's final reply."""
    copy = tmp_path / "debate"
    shutil.copytree(SPEC.parent, copy, ignore=shutil.ignore_patterns("runs"))
    text = (copy / "debate.toml").read_text()
    (copy / "debate.toml").write_text(re.sub(r"(?m)^repetitions = \d+$", "repetitions = 2", text))
    spec = tomllib.loads((copy / "debate.toml").read_text())
    runs_dir = tmp_path / "runs"
    fake = FakeAnthropic(default=debate_reply).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
        env.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY=TEST_KEY)
        done = subprocess.run([sys.executable, "-m", "amacs_server", "experiment", str(copy / "debate.toml"),
                               "--runs-dir", str(runs_dir), "--parallel", "4"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=240,
                              stdin=subprocess.DEVNULL)
    finally:
        fake.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    # Its dollars are list prices for the tokens the fake reported: said so, and where the calls went.
    where = fake.url.removeprefix("http://").rstrip("/")
    last = next(line for line in done.stdout.splitlines() if line.startswith("debate: 4 of 4 done"))
    assert re.fullmatch(rf"debate: 4 of 4 done, 0 failed, \$[0-9.]+ estimated at list prices \(the model calls "
                        rf"went to {re.escape(where)}, not Anthropic's API\)", last), last
    question = "Should cities ban cars from their centres?"
    manifests = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("*/manifest.json"))]
    assert {m["endpoint"] for m in manifests} == {where}
    assert sorted(m["run_id"] for m in manifests) == sorted(
        f"cars.{v}.sonnet.r{rep}" for v in ("two-views", "three-views") for rep in (0, 1))
    for m in manifests:
        assert m["status"] == "done" and m["turns_done"] == 1 and m["cost"] > 0, m
        templates = sorted(variant_templates(spec, m["variant"], copy / "debate.toml"))
        assert len(templates) == {"two-views": 2, "three-views": 3}[m["variant"]]
        check_debate(runs_dir / m["run_id"] / "home", templates, question)
    check_turns(runs_dir, manifests)


def chat_turns(home: Path) -> list[tuple[str, str]]:
    """(the person's input, the agent's replies joined by blank lines) per turn of HOME's agent-chat.org."""
    from amacs_server.persistence.chat_log import ChatLog

    turns: list[tuple[str, list[str]]] = []
    for entry in ChatLog(home / "agent-chat.org").read():
        if entry.human is not None:
            turns.append((entry.human, []))
        if entry.agent and turns:
            turns[-1][1].append(entry.agent)
    return [(human, "\n\n".join(replies)) for human, replies in turns]


def check_turns(runs_dir: Path, manifests: list[dict]) -> None:
    """The dataset's turns table, run by run: the primary's rows are agent-chat.org's turns word for word;
    each viewpoint's row is what the primary asked it and the reply in its transcript's model response."""
    from amacs_server.research.dataset import load

    con = load(runs_dir)
    for m in manifests:
        home = runs_dir / m["run_id"] / "home"
        rows = con.execute("SELECT agent_id, agent_type, template, turn, input, reply, model_calls, cost, variant "
                           "FROM turns WHERE run_id = ? ORDER BY agent_id, turn", [m["run_id"]]).fetchall()
        primary = [(r[4], r[5]) for r in rows if r[0] == "primary"]
        assert primary == chat_turns(home) and [p[0] for p in primary] == m["turns"], (primary, chat_turns(home))
        assert FINAL_MARK in primary[-1][1]
        events = transcript_events(home)
        views = sorted({e["agent_id"] for e in events if e["agent_type"] == "viewpoint"})
        assert views and [r[0] for r in rows if r[1] == "viewpoint"] == views  # one turn each
        for row in (r for r in rows if r[1] == "viewpoint"):
            said = [json.loads(e["data"]["raw"])["reply"] for e in events
                    if e["agent_id"] == row[0] and e["event"] == "model_response"]
            assert [row[5]] == said, (row, said)
            # what it was asked: every message of its first request since its last answer (the room's notes,
            # the question, the comments before its turn), word for word
            request = next(e["data"]["request"]["messages"] for e in events
                           if e["agent_id"] == row[0] and e["event"] == "model_request")
            assert request[-1]["role"] == "user" and all(m["role"] == "user" for m in request), request
            assert row[4] == "\n\n".join(m["content"] if isinstance(m["content"], str)
                                          else "".join(b.get("text", "") for b in m["content"]) for m in request)
            assert "[primary] Should cities ban cars from their centres?" in row[4], row
            assert row[6] == 1 and row[7] > 0 and row[8] == m["variant"], row
    con.close()


def test_readme_experiment_commands_run_as_written():
    """The research page's Experiments commands name what ./amacs installs: .venv/bin/amacs-server (not on
    PATH), .venv/bin/python for the fake and for DuckDB (no duckdb command); the runs' folder and cost are said."""
    page = (ROOT / "docs" / "research.md").read_text(encoding="utf-8")
    section = page[page.index("## Experiments\n"):page.index("## Dataset and report")]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, re.M | re.S)
    commands = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    assert commands, section
    for line in commands:
        words = [w for w in line.split() if "=" not in w.split("/")[0] and w != "\\"]
        if words:
            assert words[0].startswith(".venv/bin/"), line
    assert ".venv/bin/python -m tests.fake_debate" in section
    assert not re.search(r"(^|[`\s])duckdb [^`]*\.duckdb", section)
    assert "count against the spec's budget" in section and "--runs-dir" in section
    assert "experiments/debate/runs/debate/" in section
    line = next(c for c in commands if "import duckdb" in c)
    assert "read_json_auto('experiments/debate/runs/debate/*/manifest.json')" in line


def test_a_home_that_evaluated_before_still_holds_its_debate(tmp_path):
    """A newcomer's experiment started its runs from a home at a tick (``from = "HOME@2"``) whose last
    eval had no part in the debate; the fake read that result as the answer to a listing of skills it had
    not made yet, ended each run "I found no panel-* viewpoint skills", and every run still counted done.
    The fake decides from what the primary did in the turn it plays: here it lists the skills first."""
    spec = tomllib.loads(SPEC.read_text())
    home = tmp_path / "agent"
    templates = variant_templates(spec, "two-views")
    for name, folder in templates.items():
        shutil.copytree(folder, home / "skills" / name)
    fake = FakeAnthropic(default=debate_reply).start()
    try:
        fake.script(Reply(agent_json(None, eval="(+ 1 2)")), Reply(agent_json("It is 3.")))
        run_emacs(home, fake.url, session(send("what is 1+2?"), wait_text("It is 3."))).check()
        # The home at tick 1: its eval done, its reply not yet made.  `amacs-server fork` and `from` refuse a
        # tick inside a turn; a home whose last tick is an eval is still made, e.g. by a turn cut short
        # after it, so the fork is made here by the function they call.
        fork = tmp_path / "fork"
        history.fork(home, 1, fork)
        turn = spec["prompts"][0]["turns"][0]
        run = run_emacs(fork, fake.url, session(send(turn), wait_text(FINAL_MARK))).check()
    finally:
        fake.stop()
    assert "no panel-* viewpoint skills" not in run.shell
    assert FINAL_MARK in run.shell
