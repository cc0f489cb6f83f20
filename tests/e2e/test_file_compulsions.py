"""The World records the files each agent reads; have-read-files-watcher uses it (issue 11).

agent-world-architecture.md, Compulsions (have_read_files_watcher as a Compulsion) and The World
(tracking of known_content_files, per agent, with stamps: "A possible race condition, and a fix").
"""

import re

import pytest

from tests.context_items import chat_lines, eval_result, newest_message, request_text
from tests.e2e.agent_fakes import (
    primary_texts,
    run_elisp,
    say,
    send,
    session,
    transcript,
    transcript_events,
    who,
)
from tests.e2e.harness import elisp_string, run_emacs

pytestmark = pytest.mark.e2e

EVAL_ASKED = "[before action] The agent wants to evaluate:\n"
FILES_HEAD = "Files this agent has read or written in its evals, and whether each changed on disk since:"


def watcher(msgs):
    """The fake have-read-files-watcher: what its template says, for `with-temp-file' writes."""
    last = msgs[-1]
    if not last.startswith(EVAL_ASKED):
        return say("")
    target = re.search(r'\(with-temp-file "([^"]+)"', last)
    if target is None:
        return say("")
    path = target.group(1)
    listed = [line for line in last.split(FILES_HEAD, 1)[1].splitlines() if line.startswith(f"- {path} (")]
    if not listed:
        return say(f"You have not read {path}; read it (find-file-noselect or insert-file-contents) "
                   "before writing it.")
    if "changed on disk since" in listed[0] or "deleted since" in listed[0]:
        return say(f"{path} changed on disk since you read it; read it again before writing it.")
    return say("")


def test_watcher_sees_the_files_read_and_blocks_unread_or_changed_writes(fake, home):
    """The primary reads notes.txt in one eval; the watcher's [before action] for a later write lists
    it (read; unchanged since), so the write goes.  Writing other.txt, never read, is blocked; after a
    task rewrites notes.txt, the primary's next write is blocked as changed on disk since (the race of
    the spec, seen per agent: the task's write is not the primary's knowledge)."""
    work = home.parent / "work"
    work.mkdir(parents=True)
    notes, other = work / "notes.txt", work / "other.txt"
    notes.write_text("first notes")
    other.write_text("someone else's")
    steps = [
        ("read-notes", f"(with-temp-buffer (insert-file-contents {elisp_string(str(notes))}) (buffer-string))"),
        ("write-notes", f'(with-temp-file {elisp_string(str(notes))} (insert "the primary\'s notes"))'),
        ("write-other", f'(with-temp-file {elisp_string(str(other))} (insert "clobbered"))'),
        ("task-rewrites", '(agent-wait-for (plist-get (agent-task "researcher" "rewrite the notes") :talk-id) '
                          ':timeout 30)'),
        ("write-notes-again", f'(with-temp-file {elisp_string(str(notes))} (insert "the primary again"))'),
    ]

    def answer(body):
        _me, kind, _template = who(body)
        msgs = transcript(body)
        if kind == "compulsion":
            return watcher(msgs)
        if kind == "task":
            if "<last-eval-result>" in msgs[-1]:
                return say("rewrote the notes")
            return run_elisp(f'(with-temp-file {elisp_string(str(notes))} (insert "the task\'s much longer notes"))')
        ctx, newest = request_text(body), msgs[-1]
        said = [line for line in chat_lines(ctx) if line.startswith("Human: ")]
        if said[-1] == "Human: watch files":
            if "<last-eval-result>" not in newest:
                return run_elisp('(agent-compulsion "have-read-files-watcher")', monologue="attach")
            return say("Watching.")
        for marker, form in steps:
            if marker not in ctx:
                return run_elisp(form, monologue=marker)
        return say("Done editing.", monologue="done")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("watch files"), send("edit"))).check()

    # Emacs noted the files; the World kept them per agent.
    evals = [e["data"] for e in transcript_events(home) if e["event"] == "eval_result" and e["agent_id"] == "primary"]
    assert [e["files_read"] for e in evals if "files_read" in e] == [[str(notes)]]
    assert [e["files_written"] for e in evals if "files_written" in e] == [[str(notes)]]
    task_writes = [e["data"] for e in transcript_events(home) if e["event"] == "eval_result" and e["agent_type"] == "task"]
    assert task_writes[0]["files_written"] == [str(notes)]

    # The compulsion (its template is the shipped one) was asked before each eval, with the files.
    comp = [r["body"] for r in fake.requests if who(r["body"])[1] == "compulsion"]
    assert "# Have-read-files watcher" in comp[0]["system"][0]["text"]
    asked = list(dict.fromkeys(transcript(b)[-1] for b in comp if transcript(b)[-1].startswith(EVAL_ASKED)))
    by_form = {marker: [a for a in asked if a.startswith(EVAL_ASKED + form + "\n\n")] for marker, form in steps}
    assert by_form["read-notes"][0].endswith(f"{FILES_HEAD} none.")
    assert f"{FILES_HEAD}\n- {notes} (read; unchanged since)" in by_form["write-notes"][0]
    assert f"- {notes} (read and written; unchanged since)" in by_form["write-other"][0]
    assert str(other) not in by_form["write-other"][0].split(FILES_HEAD)[1]
    assert f"- {notes} (read and written; changed on disk since)" in by_form["write-notes-again"][0]

    # Its blocks reach the agent as the eval's error; the blocked writes did not happen.
    errors = [eval_result(t).get("error") for t in primary_texts(fake) if "<last-eval-result>" in newest_message(t)]
    assert ("blocked by compulsion compulsion-1 (have-read-files-watcher): You have not read "
            f"{other}; read it (find-file-noselect or insert-file-contents) before writing it.") in errors
    assert ("blocked by compulsion compulsion-1 (have-read-files-watcher): "
            f"{notes} changed on disk since you read it; read it again before writing it.") in errors
    assert other.read_text() == "someone else's"
    assert notes.read_text() == "the task's much longer notes"
    # The model sees the files of an eval that touched some, in camelCase like the rest.
    seen = [eval_result(t) for t in primary_texts(fake) if "<last-eval-result>" in newest_message(t)]
    assert {"success": True, "result": '"first notes"', "error": None, "skipped": False,
            "filesRead": [str(notes)]} in seen
