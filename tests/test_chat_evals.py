"""agent-chat.org records the agent's evals (a newcomer saw them only in the transcripts
and the hub): a tick's ``** Eval`` part, read back apart from the reply, and the shell's
last exchanges (``views.status`` "recent") carry them."""

from __future__ import annotations

from pathlib import Path

import orgparse

from amacs_server import views
from amacs_server.config import load_config
from amacs_server.context.assemble import assemble
from amacs_server.persistence.chat_log import (
    EVAL_CHARS,
    TASK_LINE_CHARS,
    ChatEval,
    ChatLog,
    ChatTaskEnded,
)
from amacs_server.runtime import Runtime
from tests.test_memory import SilentFace

T = "2026-01-01T00:00:00Z"


def test_a_tick_with_an_eval_round_trips(tmp_path):
    log = ChatLog(tmp_path / "agent-chat.org")
    log.write_human(1, T, "eval")
    log.write_agent(1, T, "Let me check in Emacs.", with_heading=False)
    log.write_eval(1, ChatEval.of("(+ 2 2)", True, "4", None))
    log.write_agent(2, T, "Done: that was the eval above.", with_heading=True)
    text = (tmp_path / "agent-chat.org").read_text()
    assert ("** Agent\nLet me check in Emacs.\n\n** Eval\n#+begin_src emacs-lisp\n(+ 2 2)\n#+end_src\n"
            "#+RESULTS:\n#+begin_example\n4\n#+end_example\n\n* Tick 2\n") in text
    first, second = ChatLog(tmp_path / "agent-chat.org").read()
    assert (first.human, first.agent) == ("eval", "Let me check in Emacs.")
    assert first.eval == ChatEval("(+ 2 2)", True, "4", None)
    assert (second.human, second.agent, second.eval) == (None, "Done: that was the eval above.", None)


def test_an_error_a_tick_without_reply_and_escaped_lines(tmp_path):
    """An eval that failed reads ``** Eval (error)``; a tick that evaluated without a reply
    still has it; lines org would read (``*``, ``#+end_src``) are comma-escaped."""
    path = tmp_path / "agent-chat.org"
    log = ChatLog(path)
    form = '(progn\n#+end_src\n* not a heading\n(car 1))'
    log.write_agent(1, T, "", with_heading=True)
    log.write_eval(1, ChatEval.of(form, False, None, "Wrong type argument: listp, 1\n* star"))
    assert "\n,#+end_src\n,* not a heading\n" in path.read_text()
    entry = ChatLog(path).read_tail(5)[0]
    assert (entry.human, entry.agent) == (None, "")
    assert entry.eval == ChatEval(form, False, None, "Wrong type argument: listp, 1\n* star")
    root = orgparse.load(str(path))
    assert [(n.level, n.heading) for n in root.children[0][1:]] == [(2, "Agent"), (2, "Eval (error)")]


def test_an_eval_s_result_shows_a_memory_address_as_the_shell_does(tmp_path):
    """The demo's thread eval left ``:mem-id "<EOT>amacs-instance-1:primary:thread.demo-tour:1<EOT>"``
    in agent-chat.org, while the shell's eval line read ``:mem-id "amacs-instance-1:…``: the
    result and the error are the person's to read; the form is the code as it ran."""
    path = tmp_path / "agent-chat.org"
    log = ChatLog(path)
    form = '(agent-memory-load "<EOT>amacs-instance-1:primary:notes:1<EOT>")'
    log.write_human(1, T, "help")
    log.write_eval(1, ChatEval.of(form, True, '(:thread "demo-tour" :mem-id '
                                  '"<EOT>amacs-instance-1:primary:thread.demo-tour:1<EOT>")', None))
    log.write_agent(2, T, "", with_heading=True)
    log.write_eval(2, ChatEval.of(form, False, None, "no item <EOT>amacs-instance-1:primary:x:3<EOT>"))
    text = path.read_text()
    assert ':mem-id "amacs-instance-1:primary:thread.demo-tour:1")\n' in text
    assert "\nno item amacs-instance-1:primary:x:3\n" in text
    assert text.count("<EOT>") == 4 and text.count(form) == 2, text
    first, second = ChatLog(path).read()
    assert first.eval is not None and second.eval is not None
    assert "<EOT>" not in (first.eval.result or "") + (second.eval.error or "")


def test_long_form_and_result_are_cut_saying_so(tmp_path):
    done = ChatEval.of("(list " + "x " * 3000 + ")", True, "y" * 5000, None)
    assert len(done.form) < EVAL_CHARS + 100 and "more characters cut" in done.form.splitlines()[-1]
    assert done.form.splitlines()[-1].startswith(";; ")
    assert done.result is not None and done.result.endswith("3,000 more characters cut: the transcript has them all]")
    log = ChatLog(tmp_path / "agent-chat.org")
    log.write_agent(1, T, "r", with_heading=True)
    log.write_eval(1, done)
    assert ChatLog(tmp_path / "agent-chat.org").read()[0].eval == done


def test_the_eval_is_not_in_the_reply_memory_or_context_shows(tmp_path):
    """After a restart the chat item is what was said; the shell's recent exchange has the eval."""
    home = tmp_path / "home"
    config = load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k"})
    rt = Runtime(config, SilentFace())
    rt.mind.chat_log.write_human(1, T, "eval")
    rt.mind.chat_log.write_agent(1, T, "Let me check in Emacs.", with_heading=False)
    rt.mind.chat_log.write_eval(1, ChatEval.of("(+ 2 2)", True, "4", None))
    rt.mind.ltm.close()
    again = Runtime(config, SilentFace())
    try:
        assert again.mind.memory.chat[-1].content == {"human": "eval", "agent": "Let me check in Emacs."}
        text = assemble(again.mind.memory.snapshot(again.mind.consciousness)).text
        assert "Let me check in Emacs." in text and "begin_src" not in text and "(+ 2 2)" not in text
        (recent,) = views.status(again)["recent"]  # type: ignore[misc]
        assert recent["eval"] == {"form": "(+ 2 2)", "success": True, "result": "4", "error": None}
        assert recent["agent"] == "Let me check in Emacs."
    finally:
        again.mind.ltm.close()


def test_rotation_keeps_the_eval_part_with_its_tick(tmp_path):
    path: Path = tmp_path / "agent-chat.org"
    log = ChatLog(path, rotate_bytes=200)
    log.write_human(1, "2026-01-31T23:59:00Z", "eval")
    log.write_agent(1, "2026-01-31T23:59:00Z", "ok", with_heading=False)
    log.write_eval(1, ChatEval.of("(+ 2 2)", True, "4", None))
    log.write_human(2, "2026-02-01T00:00:00Z", "next")
    entries = ChatLog(path, rotate_bytes=200).read()
    assert [(e.tick, e.eval) for e in entries] == [(1, ChatEval("(+ 2 2)", True, "4", None)), (2, None)]
    assert (tmp_path / "chat").is_dir()


def test_tasks_that_ended_go_under_the_tick_before_or_after_its_reply(tmp_path):
    """A subagent task's end (the shell's ``✓``/``✗`` line) is a ``** Task ended`` part of the tick
    last begun: before the reply when the reply was not written yet, else after it; the chat's
    memory and context do not get it; the shell's recent exchanges carry it, written or read
    back at a restart; a line is kept to TASK_LINE_CHARS, on one line."""
    home = tmp_path / "home"
    config = load_config({"AMACS_HOME": str(home), "ANTHROPIC_API_KEY": "k"})
    rt = Runtime(config, SilentFace())
    log = rt.mind.chat_log
    log.write_human(1, T, "pair")
    log.write_agent(1, T, "I'll ask two.", with_heading=False)
    log.write_eval(1, ChatEval.of("(agent-task ...)", True, "(:waiting-for (1 2))", None))
    log.write_task_ended("task-1 (researcher) done: A.", True)
    log.write_task_ended("task-2 (researcher) failed:\n* boom " + "x" * 2000, False)
    log.write_human(2, T, "slow")
    log.write_task_ended("task-3 (researcher) done: E.", True)
    log.write_agent(2, T, "Slowly said.", with_heading=False)
    text = (home / "agent-chat.org").read_text()
    assert ("#+end_example\n\n** Task ended\n✓ task-1 (researcher) done: A.\n\n"
            "** Task ended\n✗ task-2 (researcher) failed: * boom x") in text
    assert "** Human\nslow\n\n** Task ended\n✓ task-3 (researcher) done: E.\n\n** Agent\nSlowly said.\n" in text
    long = f"task-2 (researcher) failed: * boom {'x' * (TASK_LINE_CHARS - 36)}…"
    assert len(long) == TASK_LINE_CHARS
    wanted = {1: [ChatTaskEnded("task-1 (researcher) done: A.", True, before_reply=False),
                  ChatTaskEnded(long, False, before_reply=False)],
              2: [ChatTaskEnded("task-3 (researcher) done: E.", True, before_reply=True)]}
    assert log.recent_tasks == wanted
    first, second = ChatLog(home / "agent-chat.org").read()
    assert (first.agent, first.eval is not None, first.tasks) == ("I'll ask two.", True, wanted[1])
    assert (second.human, second.agent, second.tasks) == ("slow", "Slowly said.", wanted[2])
    rt.mind.ltm.close()
    again = Runtime(config, SilentFace())
    try:
        assert again.mind.chat_log.recent_tasks == wanted
        assert again.mind.memory.chat[-1].content == {"human": "slow", "agent": "Slowly said."}
        assert "task-3" not in assemble(again.mind.memory.snapshot(again.mind.consciousness)).text
        recent = views.status(again)["recent"]
        assert [r.get("tasks") for r in recent] == [  # type: ignore[attr-defined]
            [t.to_dict() for t in wanted[1]], [t.to_dict() for t in wanted[2]]]
        again.mind.chat_log.write_task_ended("task-4 (researcher) done: late.", True)  # after tick 2's reply
        assert again.mind.chat_log.recent_tasks[2][-1] == ChatTaskEnded("task-4 (researcher) done: late.", True,
                                                                     before_reply=False)
    finally:
        again.mind.ltm.close()


def test_what_began_a_tick_what_was_blocked_and_the_agents_talk_are_parts_of_it(tmp_path):
    """agent-chat.org had an empty ``** Agent`` for a reply a compulsion held back, nothing of what
    began a tick no input began, and none of the viewpoints' lines the shell showed: each is a part
    of its tick now (``** Event``, ``** Blocked``, ``** Talk``), read back as written; a person's
    input held back is answered (not cut off by a stopped server)."""
    log = ChatLog(tmp_path / "agent-chat.org")
    log.write_human(1, T, "eval")
    log.write_blocked(1, T, "A reply was held back: blocked by compulsion compulsion-3 (spawn-limiter): no",
                      with_heading=False)
    log.write_talk("viewpoint-pro (debater) said: [pro] yes\n* a heading")
    log.write_event(2, T, "viewpoints pro and con commented")
    log.write_agent(2, T, "Both spoke.", with_heading=False)
    log.write_blocked(3, T, "A reply was held back: by them", with_heading=True)
    first, second, third = ChatLog(tmp_path / "agent-chat.org").read()
    assert (first.human, first.agent, first.blocked) == (
        "eval", None, ["A reply was held back: blocked by compulsion compulsion-3 (spawn-limiter): no"])
    assert first.talk == ["viewpoint-pro (debater) said: [pro] yes\n* a heading"] and not first.interrupted
    assert (second.event, second.human, second.agent) == ("viewpoints pro and con commented", None, "Both spoke.")
    assert (third.tick, third.blocked, third.agent) == (3, ["A reply was held back: by them"], None)
    assert "** Agent\n\n" not in (tmp_path / "agent-chat.org").read_text()
