"""Switching models mid-session between one that thinks (adaptive) and one that does not (issue 22).

A real batch Emacs, the real server and SDK, the fake API holding each model to
what its Models API answer says: a thinking type or a format the model does not
take would be a 400, so a turn that went through was sent only what it accepts.
"""

from __future__ import annotations

import json

from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json, model_info


def test_set_model_between_a_thinking_model_and_a_plain_one(fake, home):
    fake.models["claude-adaptive"] = model_info("claude-adaptive", adaptive=True, structured=True, effort=True)
    fake.models["claude-plain"] = model_info("claude-plain", adaptive=False, enabled=False, structured=False,
                                             effort=False)
    fake.script(Reply(agent_json(None, eval="(agent-set-consciousness 'api-settings-thinking t)")),
                Reply(agent_json("Thinking on."), thinking="The person wants me to think."),
                Reply(agent_json("A plain answer.")),
                Reply(agent_json("Thinking again."), thinking="Back on the thinking model."))
    program = ("(amacs-e2e-open) (amacs-e2e-send \"think from now on\") "
               "(amacs-set-model \"anthropic\" \"claude-plain\") (amacs-e2e-wait-text \"Now using claude-plain\") "
               "(amacs-e2e-send \"two\") "
               "(amacs-set-model \"anthropic\" \"claude-adaptive\") (amacs-e2e-wait-text \"Now using claude-adaptive\") "
               "(amacs-e2e-send \"three\") (amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program, AMACS_MODEL="claude-adaptive").check()
    bodies = [r["body"] for r in fake.requests]
    assert [(b["model"], (b.get("thinking") or {}).get("type")) for b in bodies] == [
        ("claude-adaptive", None), ("claude-adaptive", "adaptive"), ("claude-plain", None),
        ("claude-adaptive", "adaptive")]
    assert "output_config" not in bodies[2]  # no structured outputs on the plain model, no effort
    assert all("format" in b["output_config"] for b in (bodies[0], bodies[1], bodies[3]))
    told = bodies[2]["messages"][-1]["content"][-1]["text"]
    assert "thinking (this model does not think on request)" in told
    for said in ("Thinking on.", "A plain answer.", "Thinking again."):
        assert said in run.shell
    assert "Model call failed" not in run.shell and "does not take" not in run.shell
    assert run.shell.count("▸ thinking") == 2
    assert fake.gets.count("/v1/models/claude-adaptive") == 1 and fake.gets.count("/v1/models/claude-plain") == 1
    events = [json.loads(line) for path in (home / "transcripts").glob("*.jsonl")
              for line in path.read_text().splitlines()]
    responses = [e["data"] for e in events if e["event"] == "model_response" and e["agent_id"] == "primary"]
    assert [r["thinking"] for r in responses] == ["", "The person wants me to think.", "",
                                                  "Back on the thinking model."]
    assert [r["constrained"] for r in responses] == [True, True, False, True]
