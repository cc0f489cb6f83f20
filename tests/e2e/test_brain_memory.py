"""Per-brain memory end to end (issue 11; memid-active-memory.md, Active Memory Contract and
Phase 2: RAM scoped per brain, LTM shared across brains).

A task's `agent-memory-create' lands in the task's own RAM under its own brain
(`<EOT>amacs-instance-1:task-1:NAME:1<EOT>'), its next request shows the item
in a `<memory>' section, the primary's `<memory>' never holds it, and the
primary finds it in the shared long-term memory with `agent-memory-search'.
"""

import re

import pytest

from tests.context_items import eval_result, parse_context, request_text
from tests.e2e.agent_fakes import (
    calls_by,
    event_lines,
    last_eval_result,
    primary_texts,
    run_elisp,
    say,
    session,
    transcript,
    who,
)
from tests.e2e.harness import elisp_string, run_emacs

pytestmark = pytest.mark.e2e
TASK_ITEM = "<EOT>amacs-instance-1:task-1:finding:1<EOT>"
NOTE = "the grey heron nests in the tall pine"


def memory_section(text):
    """The items of every `<memory>' section in TEXT (a subagent's message), as dicts."""
    return [line for block in re.findall(r"<memory>\n(.*?)\n</memory>", text, re.S) for line in block.splitlines()]


def test_a_tasks_memory_is_its_own_and_shared_through_ltm(fake, home):
    """Task memory under its own brain, shown in its own next request, absent from the primary's
    `<memory>', found by the primary's agent-memory-search."""

    def answer(body):
        me = who(body)[0]
        msgs = transcript(body)
        if me == "primary":
            newest = msgs[-1]
            if any(e.get("type") == "Agent" for e in event_lines(newest)):  # the task is done
                return run_elisp('(agent-memory-search "heron")')
            if "<last-eval-result>" in newest:
                found = str(eval_result(request_text(body)).get("result"))
                return say(f"Search found: {found}") if "heron" in found else say("Started the task.")
            return run_elisp('(agent-task "researcher" "Find where herons nest")')
        if "<last-eval-result>" in msgs[-1]:
            return say("I wrote it down.")
        return run_elisp(f'(agent-memory-create "finding" {elisp_string(NOTE)})')

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(f"(amacs-e2e-send {elisp_string('research herons')})",
                                      f"(amacs-e2e-wait-text {elisp_string('Search found:')})")).check()

    task = calls_by(fake, "task-1")
    assert len(task) == 2
    # The task's create acted in its own brain...
    created = last_eval_result(transcript(task[1])[-1])
    assert created["success"] and created["result"] == f'(:mem-id "{TASK_ITEM}" :version 1 :tier "ram" :kind "note")'
    # ...and its next request shows the item under that MemId, in a <memory> section like the primary's.
    shown = memory_section(transcript(task[1])[-1])
    assert len(shown) == 1 and f'"mem_id": "{TASK_ITEM}"' in shown[0] and NOTE in shown[0], shown
    assert "<memory>" not in "\n".join(transcript(task[0]))  # nothing before it made the item
    assert task[1]["system"] == task[0]["system"]  # the system prompt did not change: still cached
    assert "amacs-instance-1:task-1:NAME" in task[0]["system"][0]["text"]

    # No primary request holds the item in its <memory>.
    primary = primary_texts(fake)
    assert len(primary) >= 3
    for text in primary:
        assert all("finding" not in item["mem_id"] for item in parse_context(text).get("memory", [])), text
        assert "<EOT>amacs-instance-1:primary:finding" not in text

    # The primary finds it in the shared long-term memory.
    searched = eval_result(primary[-1])
    assert searched["success"], searched
    assert searched["result"].startswith(f'((:mem-id "{TASK_ITEM}" :kind "note"'), searched["result"]
    assert "[heron]" in searched["result"]
