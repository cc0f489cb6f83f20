"""@NAME at the shell prompt, typed in a real terminal: the person talks to a subagent.

agent-world-architecture.md, Interlocutor control: "simple mechanisms by which the user
could talk to a Viewpoint or a Compulsion".  The line typed stays in the conversation,
the answer shows under the agent's name, and the primary is not asked.
"""

from __future__ import annotations

import pytest

from tests.e2e.agent_fakes import transcript, who
from tests.fake_anthropic import Reply, agent_json
from tests.tmux.test_terminal_shell import send, wait_turn_over

pytestmark = pytest.mark.tmux


def test_at_name_talks_to_a_viewpoint_and_the_answer_shows_under_its_name(terminal, fake):
    def answer(body):
        me, _kind, _template = who(body)
        if me == "viewpoint-skeptic":
            said = transcript(body)[-1]
            return Reply(agent_json("Because the tests are red." if said == "[person] why?" else "?"))
        if "<last-eval-result>" in transcript(body)[-1]:
            return Reply(agent_json("The skeptic is here."))
        return Reply(agent_json(None, eval='(agent-viewpoint "skeptic" "debater")'))

    fake.respond_with(answer)
    term = terminal()
    send(term, "bring a skeptic")
    term.wait_for("The skeptic is here.", timeout=20)
    wait_turn_over(term)
    primary_calls = len([r for r in fake.requests if who(r["body"])[0] == "primary"])

    send(term, "@skeptic why?")
    term.wait_for("[viewpoint-skeptic] Because the tests are red.", timeout=20)
    screen = term.screen()
    assert screen.index("@skeptic why?") < screen.index("[viewpoint-skeptic] Because the tests are red.")
    assert "queued" not in screen  # it went to the skeptic, not into the primary's queue
    assert term.elisp("amacs-shell-busy") == "nil"
    assert len([r for r in fake.requests if who(r["body"])[0] == "primary"]) == primary_calls

    # A name nobody has is refused, naming who is there.
    send(term, "@nobody hello")
    term.wait_for("Not sent: no agent 'nobody'; live: viewpoint-skeptic", timeout=10)
