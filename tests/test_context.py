"""Context assembly (RFC v4 §4, IMP-038 chat and monologue, IMP-019)."""

import json
import re

from amacs_server.context.assemble import ContextInput, assemble, chat_lines
from amacs_server.persistence.chat_log import ChatEntry
from amacs_server.state.consciousness import Consciousness, EvalResult


def exchanges(n):
    return [ChatEntry(i, "t", f"message {i}", f"response {i}") for i in range(1, n + 1)]


def test_imp038_depth_scenario():
    """IMP-038: depth 3 and 10 exchanges -> the last 3 pairs, then the pending message."""
    lines = chat_lines(exchanges(10), 3, "message 11")
    assert lines == [
        "Human: message 8", "Agent: response 8",
        "Human: message 9", "Agent: response 9",
        "Human: message 10", "Agent: response 10",
        "Human: message 11",
    ]


def test_pending_always_included_even_at_depth_zero():
    assert chat_lines(exchanges(4), 0, "now") == ["Human: now"]


def test_interrupted_tick_is_shown_as_such():
    entries = [*exchanges(1), ChatEntry(2, "t", "lost?", None)]
    assert chat_lines(entries, 5, "again")[-3:] == [
        "Human: lost?", "Agent: (no reply: the tick was interrupted)", "Human: again"
    ]


def test_sections_in_order_and_eval_result_camel_case():
    c = Consciousness(current_tick=3, monologue_context_depth=2)
    c.last_eval_result = EvalResult(success=True, result="4")
    text = assemble(ContextInput(c, exchanges(2), ["a", "b", "c"], pending="next"))
    tags = re.findall(r"^<([a-z-]+)>$", text, re.M)
    assert tags == ["agent-consciousness", "chat", "monologue", "last-eval-result"]
    assert "<monologue>\nb\nc\n</monologue>" in text
    payload = json.loads(text.split("<last-eval-result>\n")[1].split("\n</last-eval-result>")[0])
    assert payload == {"lastEvalResult": {"success": True, "result": "4", "error": None, "skipped": False}}
    assert "(current-tick . 3)" in text and "last-eval-result" not in text.split("</agent-consciousness>")[0]


def test_eval_result_section_omitted_when_skipped():
    """IMP-019: no section when there was no eval."""
    c = Consciousness()
    c.last_eval_result = EvalResult.skipped_result()
    assert "<last-eval-result>" not in assemble(ContextInput(c, [], [], pending="x"))
