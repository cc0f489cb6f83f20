"""Consciousness: every RFC v4 §3.1 field, ROM fields refused (§3.2)."""

import pytest

from amacs_server.state.consciousness import (
    HARNESS_FIELDS,
    Consciousness,
    ConsciousnessError,
    EvalResult,
)

RFC_FIELDS = [
    "identity", "current_tick", "current_time", "mood", "confidence", "active_thread",
    "pending_threads", "last_eval_result", "budget", "chat_context_depth",
    "monologue_context_depth", "global_scratchpad_depth", "thread_scratchpad_depth", "api_settings",
]


def test_every_rfc_field_present_in_order():
    c = Consciousness()
    assert list(c.to_dict()) == RFC_FIELDS
    assert set(c.to_dict()["budget"]) == {"cost_so_far", "budget_limit", "pressure"}
    assert set(c.to_dict()["api_settings"]) == {"temperature", "top_p", "thinking", "max_tokens", "effort"}


@pytest.mark.parametrize("field", sorted(HARNESS_FIELDS))
def test_harness_fields_refused(field):
    c = Consciousness()
    before = c.to_dict()
    with pytest.raises(ConsciousnessError, match="owned by the harness"):
        c.agent_set(field.replace("_", "-"), 1)
    assert c.to_dict() == before


def test_agent_may_change_ram_fields():
    c = Consciousness()
    assert c.agent_set("mood", "😤") == "😤"
    assert c.agent_set("chat-context-depth", 3) == 3
    assert c.agent_set("api-settings-max-tokens", 1000) == 1000
    assert c.api_settings.max_tokens == 1000


@pytest.mark.parametrize(
    ("field", "value"),
    [("confidence", 2), ("confidence", "high"), ("chat-context-depth", -1), ("chat-context-depth", 1.5),
     ("api-settings-temperature", 3.0), ("api-settings-max-tokens", 0), ("no-such-field", 1), ("mood", "")],
)
def test_bad_values_refused_as_data(field, value):
    with pytest.raises(ConsciousnessError):
        Consciousness().agent_set(field, value)


def test_budget_pressure():
    c = Consciousness()
    c.budget.budget_limit = 1.0
    for spent, pressure in [(0.1, "low"), (0.6, "medium"), (0.9, "high")]:
        c.budget.cost_so_far = spent
        assert c.budget.pressure == pressure


def test_elisp_round_trip_keeps_state():
    c = Consciousness(mood="🤔", confidence=0.7, current_tick=41, chat_context_depth=3)
    c.budget.cost_so_far = 0.25
    c.last_eval_result = EvalResult(success=False, error="boom")
    back = Consciousness.from_elisp(c.to_elisp())
    assert (back.mood, back.confidence, back.current_tick, back.chat_context_depth) == ("🤔", 0.7, 41, 3)
    assert back.budget.cost_so_far == 0.25
    assert back.last_eval_result == EvalResult(success=False, error="boom")
