"""Issue 9: the status's ``interrupted`` means the server stopped mid-turn, not that a turn failed."""

from __future__ import annotations

import pytest

from amacs_server import views
from amacs_server.memory.active import INTERRUPTED, ActiveMemory
from amacs_server.memory.ltm import LongTermMemory
from amacs_server.runtime import Runtime
from tests.test_memory import silent_runtime


@pytest.fixture
def memory(tmp_path):
    ltm = LongTermMemory(tmp_path / "memory.db")
    yield ActiveMemory(ltm, agent="a")
    ltm.close()


def test_no_exchange_and_answered_exchange_are_not_interrupted(memory):
    assert not memory.last_chat_interrupted()
    memory.begin_chat(1, "hi")
    memory.finish_chat(1, "hello")
    assert not memory.last_chat_interrupted()


def test_a_turn_cut_off_mid_way_is_interrupted(memory):
    memory.begin_chat(1, "hi")
    assert memory.last_chat_interrupted()


@pytest.mark.parametrize("reason", ["no API key", "budget limit reached", "interrupted by the person",
                                    "the API key was refused (401)"])
def test_a_turn_that_ended_without_a_reply_is_not_interrupted(memory, reason):
    memory.begin_chat(1, "hi")
    memory.finish_chat(1, None, status=f"no reply: {reason}")
    assert not memory.last_chat_interrupted()


def test_the_restored_mark_of_a_killed_turn_still_counts(memory):
    memory.begin_chat(1, "hi")
    memory.finish_chat(1, None, status=INTERRUPTED)
    assert memory.last_chat_interrupted()


def _write_human(rt: Runtime, tick: int, text: str) -> None:
    rt.mind.chat_log.write_human(tick, "2026-01-01T00:00:00Z", text)
    rt.mind.memory.begin_chat(tick, text)


def test_failed_turn_is_not_reported_as_interrupted_after_a_restart(tmp_path):
    """`M-x amacs-restart' after fixing a missing key: no 'got no reply before the server stopped'."""
    home = tmp_path / "home"
    rt = silent_runtime(home, key="")
    _write_human(rt, 1, "hello")
    rt.mind.memory.finish_chat(1, None, status="no reply: no API key")
    assert views.status(rt)["interrupted"] is False
    rt.mind.ltm.close()
    again = silent_runtime(home)
    try:
        assert views.status(again)["interrupted"] is False
        assert again.mind.memory.chat[-1].content["status"] == "no reply: no API key"
        # The resumed shell says why the input got no reply (a newcomer missed the interrupt notes).
        assert views.status(again)["recent"][-1]["status"] == "no reply: no API key"
    finally:
        again.mind.ltm.close()


def test_killed_turn_is_reported_as_interrupted_after_each_restart(tmp_path):
    home = tmp_path / "home"
    rt = silent_runtime(home)
    _write_human(rt, 1, "remember the milk")
    rt.mind.ltm.close()  # the server dies here: no reply, no status
    for _ in range(2):
        again = silent_runtime(home)
        try:
            assert views.status(again)["interrupted"] is True
            assert again.mind.memory.chat[-1].content["status"] == INTERRUPTED
        finally:
            again.mind.ltm.close()


def test_hello_and_a_model_switch_say_whether_the_model_can_be_called(tmp_path):
    """The shell's header says "no API key" rather than "waiting for you" (a newcomer's finding):
    hello's status and set_model's answer both carry key_ok, from the backend in use."""
    from amacs_server.config import load_config
    from tests.test_memory import SilentFace

    rt = Runtime(load_config({"AMACS_HOME": str(tmp_path / "h")}), SilentFace())
    try:
        assert views.status(rt)["key_ok"] is False
        assert rt.set_model("anthropic", "claude-x", None)["key_ok"] is False
        # A local OpenAI-compatible server needs no key.
        assert rt.set_model("openai", "llama3", "http://localhost:11434/v1") == {
            "backend": "openai", "model": "llama3", "key_ok": True, "endpoint": "localhost:11434"}
    finally:
        rt.mind.ltm.close()


def test_a_switch_to_a_url_without_a_key_says_only_the_key_is_missing(tmp_path):
    """A newcomer's finding: `M-x amacs-set-model' with a new URL said "Now using … at URL" and
    nothing of the missing key; after `M-x amacs-restart' the notice still advised pointing
    ANTHROPIC_BASE_URL at another server, although it already pointed there."""
    from amacs_server.config import load_config
    from tests.test_memory import SilentFace

    rt = Runtime(load_config({"AMACS_HOME": str(tmp_path / "h")}), SilentFace())
    try:
        answer = rt.set_model("anthropic", "claude-x", "http://127.0.0.1:40335")
        assert answer["key_ok"] is False
        assert answer["missing"].startswith("No API key for http://127.0.0.1:40335 (ANTHROPIC_BASE_URL)")
        assert "point ANTHROPIC_BASE_URL" not in answer["missing"]
        assert "missing" not in rt.set_model("openai", "llama3", "http://localhost:11434/v1")
    finally:
        rt.mind.ltm.close()
    # The restarted server (ANTHROPIC_BASE_URL in its environment) says the same at hello.
    again = Runtime(load_config({"AMACS_HOME": str(tmp_path / "h"),
                                 "ANTHROPIC_BASE_URL": "http://127.0.0.1:40335"}), SilentFace())
    try:
        notice = str(views.status(again)["notice"])
        assert "No API key for http://127.0.0.1:40335" in notice and "point ANTHROPIC_BASE_URL" not in notice
    finally:
        again.mind.ltm.close()
    plain = load_config({"AMACS_HOME": str(tmp_path / "h")})
    assert plain.missing_key_message().startswith("No API key: try M-x amacs-demo")  # no endpoint chosen yet


def test_the_status_names_the_endpoint_when_it_is_not_the_providers_own(tmp_path):
    """The header said ``claude-sonnet-5-5 (anthropic)`` while the agent talked to the demo on
    127.0.0.1 (a newcomer's finding): the status names the endpoint whenever it is not the
    provider's default, from hello and from every model switch."""
    from amacs_server.config import load_config
    from tests.test_memory import SilentFace

    rt = Runtime(load_config({"AMACS_HOME": str(tmp_path / "h"), "ANTHROPIC_API_KEY": "sk-test-0123456789"}),
                 SilentFace())
    try:
        assert views.status(rt)["endpoint"] is None  # api.anthropic.com: the provider's own
        assert rt.set_model("anthropic", "claude-x", "https://api.anthropic.com")["endpoint"] is None
        assert rt.set_model("anthropic", "claude-x", "http://127.0.0.1:40335")["endpoint"] == "127.0.0.1:40335"
        assert views.status(rt)["endpoint"] == "127.0.0.1:40335"
        assert rt.set_model("openai", "qwen", "http://gpu.example.org/v1")["endpoint"] == "gpu.example.org"
    finally:
        rt.stop(grace=0)
