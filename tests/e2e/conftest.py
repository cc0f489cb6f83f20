"""Fixtures for end-to-end tests: a temp AMACS home and the fake model."""

import pytest

from tests.e2e.agent_fakes import session
from tests.e2e.harness import run_emacs
from tests.fake_anthropic import FakeAnthropic


@pytest.fixture
def fake():
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture
def home(tmp_path):
    return tmp_path / "agent"


@pytest.fixture
def scripted(fake, home):
    """The scripted-model set-up of an e2e test: ``scripted(answer, *steps, timeout=120)``.

    The fake model answers each request with ANSWER (a function of the request's body), and a
    batch Emacs on HOME runs a shell session of STEPS (``agent_fakes.session``'s forms: send,
    wait_text, pause...; its ``setup=`` too), with ENV added to its environment; returns the run,
    checked."""

    def run(answer, *steps, timeout=120, setup=None, **env):
        fake.respond_with(answer)
        program = session(*steps) if setup is None else session(*steps, setup=setup)
        return run_emacs(home, fake.url, program, timeout=timeout, **env).check()

    return run
