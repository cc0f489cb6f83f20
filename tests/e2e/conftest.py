"""Fixtures for end-to-end tests: a temp AMACS home, the fake model, and a primary scripted by evals."""

import re

import pytest

from tests.context_items import eval_result, newest_message, request_text
from tests.e2e.agent_fakes import primary_texts, run_elisp, say, scripted_run, who
from tests.fake_anthropic import FakeAnthropic

# Elisp that opens the hub, waits for it to be drawn and prints it between HUB<< and >>.
SHOW_HUB = ("(let ((n 0)) (add-hook 'amacs-hub-rendered-hook (lambda () (setq n (1+ n)))) (amacs-hub) "
            "(amacs-e2e-wait (lambda () (> n 0)) \"the hub\") (princ (format \"HUB<<%s>>\\n\" "
            "(with-current-buffer \"*amacs-hub*\" (buffer-substring-no-properties (point-min) (point-max))))))")


def shown_hub(stdout: str) -> str:
    """The hub SHOW_HUB printed in STDOUT."""
    found = re.search(r"HUB<<(.*?)>>\n", stdout, re.S)
    assert found, stdout[-2000:]
    return found.group(1)


@pytest.fixture
def fake():
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture
def home(tmp_path):
    return tmp_path / "agent"


class Evals:
    """The fake primary, scripted: it evaluates forms one per step, then says its last words."""

    def __init__(self, fake: FakeAnthropic) -> None:
        self.fake = fake

    def script(self, forms: list[tuple[str, str]], final: str = "done") -> None:
        """Each (MARKER, FORM) of FORMS is one step's eval, told apart by the monologue
        ``step MARKER.`` the context holds once it ran; then FINAL (a subagent says nothing)."""

        def answer(body):
            if who(body)[1] != "primary":
                return say("")
            ctx = request_text(body)
            for marker, form in forms:
                if f"step {marker}." not in ctx:
                    return run_elisp(form, monologue=f"step {marker}.")
            return say(final, monologue="end")

        self.fake.respond_with(answer)

    def results(self) -> list[dict]:
        """Each eval result the primary saw, in order."""
        return [eval_result(t) for t in primary_texts(self.fake) if "<last-eval-result>" in newest_message(t)]


@pytest.fixture
def evals(fake):
    """The fake model as a primary that runs the evals a test gives it (``evals.script``)."""
    return Evals(fake)


@pytest.fixture
def scripted(fake, home):
    """The scripted-model set-up of an e2e test (``agent_fakes.scripted_run``)."""
    return scripted_run(fake, home)
