"""A turn's progress and the settings that shape it, through batch Emacs and the real server.

A newcomer's findings: a multi-tick turn showed no progress, and ``M-x set-variable RET
amacs-max-steps`` did nothing until ``M-x amacs-restart`` (the settings went to the server
only at hello).  Now the header says which tick of the step limit the turn is on, and a
setting changed however it is set (customize, set-variable, setq; ``setopt`` on Emacs 29 is
customize's setter too) shapes the turn the next input starts.
"""

import re

import pytest

from tests.e2e.agent_fakes import send, session
from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e


def evals(n, start=0):
    return [Reply(agent_json(None, eval=f"(+ {i} 1)")) for i in range(start, start + n)]


def test_settings_set_while_the_server_runs_shape_the_next_turn_and_the_header_counts_its_ticks(fake, home):
    fake.script(*evals(2), *evals(3, 10), Reply(agent_json(None, eval="(while t)")), Reply(agent_json("it stopped")))
    program = session(
        "(defvar e2e-headers nil)",
        "(amacs-on-event \"step\" (lambda (_event) (push (amacs-shell-state-string) e2e-headers)))",
        "(customize-set-variable 'amacs-max-steps 2)", send("first"),
        "(set-variable 'amacs-max-steps 3)", send("second"),
        "(setq amacs-eval-timeout 1)", send("third"),
        "(princ (format \"HEADERS %S\\n\" (reverse e2e-headers)))",
        setup="(setq amacs-max-steps 20 amacs-eval-timeout 30)")
    run = run_emacs(home, fake.url, program).check()
    assert "Step limit reached (2 ticks this turn)" in run.shell
    assert "Step limit reached (3 ticks this turn)" in run.shell
    assert len(fake.requests) == 2 + 3 + 2
    loop_result = fake.user_texts()[-1]
    assert "time limit of 1 s" in loop_result, loop_result
    headers = re.search(r"HEADERS \((.*)\)", run.stdout).group(1)
    ticks = re.findall(r"tick (\d+) of (\d+)", headers)
    assert ticks == [("1", "2"), ("2", "2"), ("1", "3"), ("2", "3"), ("3", "3"), ("1", "3"), ("2", "3")], headers


def test_an_agents_eval_may_not_change_the_persons_settings(fake, home):
    """The settings method acts for the person: from an agent's eval it is refused, and the step
    limit stays the person's."""
    fake.script(Reply(agent_json(None, eval="(amacs--call-sync 'settings (list (list :max-steps 99)))")),
                *evals(5))
    run = run_emacs(home, fake.url, session(send("raise it"), setup="(setq amacs-max-steps 3)")).check()
    result = fake.user_texts()[1]
    assert "refused" in result and "acts for the person" in result, result
    assert "Step limit reached (3 ticks this turn)" in run.shell
