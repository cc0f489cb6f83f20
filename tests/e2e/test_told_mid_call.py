"""What a subagent is told while its model call is out is its next message, after the answer.

A newcomer's run (by hand, then here): `@skeptic why?' was still being answered when
agent-consider told the skeptic its prompt; the prompt was joined to the message being answered,
so the skeptic's next request ended with its own answer to `why?' and never asked the prompt."""

from __future__ import annotations

import json

from tests.e2e.agent_fakes import say, send, session, wait_text, who
from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json


def test_a_prompt_told_while_the_viewpoint_answers_is_asked_after_that_answer(fake, home):
    def answer(body):
        _me, kind, _t = who(body)
        if kind == "viewpoint":
            return Reply(agent_json(f"answer {len(body['messages'])}", monologue="m"), delay=1.5)
        return say("ok")

    fake.respond_with(answer)
    program = session(
        '(agent-viewpoint "skeptic" "debater")',
        '(amacs-e2e-send-no-wait "@skeptic why?")',
        '(let ((end (+ (float-time) 0.5))) (while (< (float-time) end) (accept-process-output nil 0.05)))',
        '(agent-consider "Is Emacs an operating system?")',
        wait_text("viewpoint-skeptic (debater) said:"),
        '(amacs-e2e-wait (lambda () (not amacs-shell-busy)) "the woken turn")',
        send("done"))
    run_emacs(home, fake.url, program, timeout=180).check()
    asked = [r["body"]["messages"] for r in fake.requests if who(r["body"])[1] == "viewpoint"]
    assert len(asked) == 2, asked
    first, second = asked
    assert "why?" in json.dumps(first) and "Is Emacs" not in json.dumps(first), first
    assert [m["role"] for m in second] == ["user", "assistant", "user"], second
    assert "Is Emacs an operating system?" in second[-1]["content"] and "why?" not in second[-1]["content"], second
