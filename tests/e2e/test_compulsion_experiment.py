"""experiments/compulsions: arms with and without each named compulsion (issue 27).

The spec loads; its arms are "without" and one "with-NAME" per compulsion the spec names
(each shipped as a skill of kind compulsion); and, run against the fake model with two arms,
the with- arm's agent attaches the compulsion its attach- skill names and the without arm's
none: the arms differ in exactly that.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from amacs_server.research.spec import load
from amacs_server.skills import SkillLibrary
from tests.e2e.agent_fakes import transcript, who
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "experiments" / "compulsions" / "compulsions.toml"
NAMED = ["planning-mode", "todo-reminder", "have-read-files-watcher", "spawn-limiter", "steel-man",
         "debate-closer", "correction-watcher"]
ATTACH = ('(let (done) (dolist (s (agent-list-available-skills)) (let ((n (plist-get s :name))) '
          '(when (string-prefix-p "attach-" n) (push (agent-compulsion (substring n 7)) done)))) done)')


def test_the_spec_has_an_arm_with_and_without_each_named_compulsion():
    """Arms: without, and with-NAME for each named compulsion, shipped as a skill of kind compulsion."""
    experiment = load(SPEC, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    arms = {v.name: v for v in experiment.spec.variants}
    assert sorted(arms) == sorted(["without", *(f"with-{n}" for n in NAMED)])
    shipped = SkillLibrary(ROOT / "skills", ROOT / "experiments" / "compulsions" / "no-personal-skills")
    for name in NAMED:
        assert shipped.get(name).kind == "compulsion", name
        (folder,) = {r.skills for r in experiment.runs if r.variant == f"with-{name}"}.pop()
        assert [p.name for p in folder.iterdir()] == [f"attach-{name}"]
    assert {r.skills for r in experiment.runs if r.variant == "without"} == {()}
    for prompt in experiment.spec.prompts:
        assert prompt.turns[0].startswith("First list your skills"), prompt.name


@pytest.mark.e2e
def test_two_arms_against_the_fake_differ_in_the_compulsion_attached(tmp_path):
    copy = tmp_path / "compulsions"
    shutil.copytree(SPEC.parent, copy, ignore=shutil.ignore_patterns("runs"))
    text = (copy / "compulsions.toml").read_text()
    text = re.sub(r"(?m)^repetitions = \d+$", "repetitions = 1", text)
    keep = {'name = "without"', 'name = "with-planning-mode"', 'name = "long-work"', 'name = "sonnet"'}
    head, *tables = re.split(r"(?m)^(?=\[\[)", text)  # the [experiment] table, then each [[...]] entry
    text = head + "".join(t for t in tables if any(k in t for k in keep))
    (copy / "compulsions.toml").write_text(text)

    def answer(body):
        if who(body)[1] == "compulsion":
            return Reply(agent_json(""))
        if "<last-eval-result>" in transcript(body)[-1] or "lastEvalResult" in transcript(body)[-1]:
            return Reply(agent_json("Four numbers: 385, 40320, 6765, 46."))
        return Reply(agent_json(None, eval=ATTACH))

    fake = FakeAnthropic(default=answer).start()
    runs_dir = tmp_path / "runs"
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
        env.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="sk-ant-test-fake")
        done = subprocess.run([sys.executable, "-m", "amacs_server", "experiment", str(copy / "compulsions.toml"),
                               "--runs-dir", str(runs_dir), "--parallel", "2"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=240,
                              stdin=subprocess.DEVNULL)
    finally:
        fake.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    manifests = {m["variant"]: m for m in (json.loads(p.read_text()) for p in runs_dir.glob("*/manifest.json"))}
    assert sorted(manifests) == ["with-planning-mode", "without"]
    for variant, m in manifests.items():
        assert m["status"] == "done", m
        home = runs_dir / m["run_id"] / "home"
        rows = [json.loads(x) for f in (home / "transcripts").glob("*.jsonl") for x in f.read_text().splitlines()]
        started = [r["template"] for r in rows if r["event"] == "agent_start"]
        assert started == (["planning-mode"] if variant == "with-planning-mode" else []), variant
