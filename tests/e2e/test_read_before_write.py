"""The optional read-before-write guard (agent-world-architecture.md, "A possible race
condition, and a fix": per-agent known files with checksums, "a deterministic guarantee
that files can't be written unless they've first been read").

With `amacs-read-before-write' on, an agent's write to a file that exists and that it has
not read at its current content (SHA-256, not modification time and size) is refused before
it happens, as an eval error naming the file.  Off (the default), nothing is checked.
"""

import os

import pytest

from tests.context_items import eval_result, newest_message, request_text
from tests.e2e.agent_fakes import primary_texts, run_elisp, say, send, session, transcript, who
from tests.e2e.harness import elisp_string, run_emacs

pytestmark = pytest.mark.e2e


def steps_answer(steps, before=None, task=None):
    """The primary runs STEPS (marker, form) in turn; BEFORE(marker) runs before a step is answered."""
    def answer(body):
        me, kind, _ = who(body)
        if kind == "task":
            return task(transcript(body)) if task else say("done")
        ctx = request_text(body)
        for marker, form in steps:
            if f"step:{marker}" not in ctx:
                if before:
                    before(marker)
                return run_elisp(form, monologue=f"step:{marker}")
        return say("Done editing.", monologue="done")
    return answer


def errors_by_step(fake):
    """The eval error (or None) the primary saw after each of its steps, by the step's marker."""
    out = {}
    for after in primary_texts(fake):
        if "<last-eval-result>" in newest_message(after):
            marker = after.split("step:")[-1].split('"')[0]
            out[marker] = eval_result(after).get("error")
    return out


def test_with_the_guard_an_agent_writes_only_what_it_read_as_it_is_now(fake, home):
    work = home.parent / "work"
    work.mkdir(parents=True)
    notes, other, new = work / "notes.txt", work / "other.txt", work / "new.txt"
    notes.write_text("first notes")
    other.write_text("someone else's")

    def write(path, text):
        return f"(with-temp-file {elisp_string(str(path))} (insert {elisp_string(text)}))"

    stamps = {}

    def before(marker):
        if marker == "write-notes-again":
            # Someone changes notes.txt behind the agent's back, same size and same mtime:
            # a (mtime, size) stamp says unchanged; the content hash does not.
            st = notes.stat()
            notes.write_text("THE primary's notes"[:len(notes.read_text())])
            os.utime(notes, ns=(st.st_atime_ns, st.st_mtime_ns))
            stamps["before"], stamps["after"] = (st.st_mtime_ns, st.st_size), (notes.stat().st_mtime_ns,
                                                                                 notes.stat().st_size)

    def task(msgs):
        if "<last-eval-result>" in msgs[-1]:
            return say("tried")
        return run_elisp(write(notes, "the task's notes"))

    steps = [
        ("write-other", write(other, "clobbered")),
        ("read-notes", f"(with-temp-buffer (insert-file-contents {elisp_string(str(notes))}) (buffer-string))"),
        ("write-notes", write(notes, "the primary's notes")),
        ("write-notes-again", write(notes, "the primary again")),
        ("task", '(agent-wait-for (plist-get (agent-task "researcher" "rewrite the notes") :talk-id) :timeout 30)'),
        ("write-new", write(new, "a new file")),
    ]
    fake.respond_with(steps_answer(steps, before, task))
    run_emacs(home, fake.url, session(send("edit"), setup="(setq amacs-max-steps 20) "
                                                          "(setq amacs-read-before-write t)")).check()

    errors = errors_by_step(fake)
    assert errors["write-other"] == (f"Read before write: {other} was never read by primary; "
                                     "read it, then write it")
    assert errors["read-notes"] is None and errors["write-notes"] is None
    assert stamps["before"] == stamps["after"]  # only the hash saw the change
    assert errors["write-notes-again"] == (f"Read before write: {notes} changed on disk since you read it; "
                                           "read it, then write it")
    # A subagent knows no file: its write of notes.txt, never read by it, is refused too.
    task_msgs = [transcript(r["body"]) for r in fake.requests if who(r["body"])[0] == "task-1"]
    assert f"Read before write: {notes} was never read by task-1" in task_msgs[-1][-1]
    assert errors["write-new"] is None
    assert other.read_text() == "someone else's"
    assert notes.read_text() == "THE primary's notes"[:len("the primary's notes")]
    assert new.read_text() == "a new file"


def test_without_the_guard_an_unread_file_is_written(fake, home):
    work = home.parent / "work"
    work.mkdir(parents=True)
    other = work / "other.txt"
    other.write_text("someone else's")
    steps = [("write-other", f'(with-temp-file {elisp_string(str(other))} (insert "clobbered"))')]
    fake.respond_with(steps_answer(steps))
    run_emacs(home, fake.url, session(send("edit"))).check()
    assert errors_by_step(fake)["write-other"] is None
    assert other.read_text() == "clobbered"


def test_the_guard_covers_copy_rename_and_delete_and_holds_against_the_agent_it_guards(fake, home):
    """Copying, renaming or deleting onto a file the agent never read is refused as writing it is;
    an eval that sets `amacs-read-before-write' to nil (for good or in a let) does not switch the
    guard off; a task that binds the primary's identity is checked against its own reads."""
    work = home.parent / "work"
    work.mkdir(parents=True)
    other, src, mine = work / "other.txt", work / "src.txt", work / "mine.txt"
    other.write_text("someone else's")
    mine.write_text("the primary's")

    def write(path, text):
        return f"(with-temp-file {elisp_string(str(path))} (insert {elisp_string(text)}))"

    o, s = elisp_string(str(other)), elisp_string(str(src))

    def task(msgs):
        if "<last-eval-result>" in msgs[-1]:
            return say("tried")
        return run_elisp(f'(let ((amacs-current-agent "primary")) {write(mine, "the task was here")})')

    steps = [
        ("make-src", write(src, "new text")),
        ("copy-onto", f"(copy-file {s} {o} t)"),
        ("rename-onto", f"(rename-file {s} {o} t)"),
        ("delete-other", f"(delete-file {o})"),
        ("switch-off", "(progn (setq amacs-read-before-write nil) \"off\")"),
        ("write-after-off", write(other, "clobbered")),
        ("let-off", f"(let ((amacs-read-before-write nil)) {write(other, 'clobbered')})"),
        ("read-mine", f"(with-temp-buffer (insert-file-contents {elisp_string(str(mine))}) (buffer-string))"),
        ("task", '(agent-wait-for (plist-get (agent-task "researcher" "rewrite mine") :talk-id) :timeout 30)'),
    ]
    fake.respond_with(steps_answer(steps, task=task))
    run_emacs(home, fake.url, session(send("edit"), setup="(setq amacs-max-steps 20) "
                                                          "(setq amacs-read-before-write t)")).check()
    errors = errors_by_step(fake)
    assert errors["make-src"] is None
    never = f"{other} was never read by primary"
    assert errors["copy-onto"] == f"Read before write: {never}; read it, then copy onto it"
    assert errors["rename-onto"] == f"Read before write: {never}; read it, then rename onto it"
    assert errors["delete-other"] == f"Read before write: {never}; read it, then delete it"
    assert errors["switch-off"] is None
    assert errors["write-after-off"] == f"Read before write: {never}; read it, then write it"
    assert errors["let-off"] == f"Read before write: {never}; read it, then write it"
    task_msgs = [transcript(r["body"]) for r in fake.requests if who(r["body"])[0] == "task-1"]
    assert f"Read before write: {mine} was never read by task-1" in task_msgs[-1][-1]
    assert other.read_text() == "someone else's" and mine.read_text() == "the primary's"
    assert src.read_text() == "new text"
