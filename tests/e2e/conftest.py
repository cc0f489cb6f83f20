"""Fixtures for end-to-end tests: a temp AMACS home and the fake model."""

import pytest

from tests.fake_anthropic import FakeAnthropic


@pytest.fixture
def fake():
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture
def home(tmp_path):
    return tmp_path / "agent"
