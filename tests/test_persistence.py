"""Persistence (RFC v4 §8): org chat structure, durable writes, git per tick, transcripts."""

import json
import os
import subprocess
import sys
import time

import orgparse
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amacs_server.files import PersistenceError, atomic_write
from amacs_server.persistence.chat_log import (
    ChatLog,
    escape_org,
    nest_reply,
    unescape_org,
    unnest_reply,
)
from amacs_server.persistence.git_repo import CommitError, HomeRepo, commit_message
from amacs_server.persistence.monologue import MonologueLog
from amacs_server.persistence.transcript import Transcript


def test_chat_org_structure_and_round_trip(tmp_path):
    """RFC §8.3: `* Tick N', :TIMESTAMP:, `** Human', `** Agent'; read back with orgparse."""
    log = ChatLog(tmp_path / "agent-chat.org")
    log.write_human(1, "2025-01-02T14:30:00Z", "What's *this*?\n* not a heading")
    log.write_agent(1, "2025-01-02T14:30:00Z", "Line one\n** also not a heading", with_heading=False)
    log.write_agent(2, "2025-01-02T14:30:05Z", "continued", with_heading=True)
    log.write_human(3, "2025-01-02T14:31:00Z", "interrupted one")
    text = (tmp_path / "agent-chat.org").read_text()
    assert text.startswith("* Tick 1\n:PROPERTIES:\n:TIMESTAMP: 2025-01-02T14:30:00Z\n:END:\n\n** Human\n")
    entries = log.read()
    assert [(e.tick, e.human, e.agent) for e in entries] == [
        (1, "What's *this*?\n* not a heading", "Line one\n** also not a heading"),
        (2, None, "continued"),
        (3, "interrupted one", None),
    ]
    assert entries[2].interrupted and not entries[0].interrupted


def test_a_tick_without_a_reply_says_why_in_the_chat_log(tmp_path):
    """A newcomer's finding: an interrupted turn showed as `** Human slow' and nothing after."""
    log = ChatLog(tmp_path / "agent-chat.org")
    log.write_human(1, "2025-01-02T14:30:00Z", "slow")
    log.write_no_reply("interrupted by the person")
    log.write_human(2, "2025-01-02T14:31:00Z", "and now?")
    log.write_agent(2, "2025-01-02T14:31:00Z", "Here.", with_heading=False)
    assert "** Human\nslow\n\n** No reply\ninterrupted by the person\n\n* Tick 2" in log.path.read_text()
    first, second = log.read()
    assert (first.human, first.agent, first.no_reply) == ("slow", None, "interrupted by the person")
    assert not first.interrupted  # it said why: not a server that stopped
    assert (second.human, second.agent, second.no_reply) == ("and now?", "Here.", None)
    assert [n.heading for n in orgparse.load(str(log.path))[1:]] == [
        "Tick 1", "Human", "No reply", "Tick 2", "Human", "Agent"]


def test_org_escape_round_trip():
    for text in ["* a", ",* b", "plain", "**", " * indented", ",,* c"]:
        assert unescape_org(escape_org(text)) == text
    assert not any(line.startswith("*") for line in escape_org("* a\n** b").split("\n"))


def test_failed_append_leaves_no_half_entry(tmp_path):
    """A write cut short (here by RLIMIT_FSIZE, as a full disk would) is rolled back."""
    path = tmp_path / "agent-chat.org"
    ChatLog(path).write_human(1, "t", "first")
    size = path.stat().st_size
    script = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({size + 40}, {size + 40}))
from amacs_server.persistence.chat_log import ChatLog
from amacs_server.files import PersistenceError
try:
    ChatLog(__import__('pathlib').Path({str(path)!r})).write_human(2, "t", "x" * 500)
except PersistenceError as err:
    print("refused:", err.strerror)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=os.getcwd())
    assert "refused: could not write" in out.stdout or "refused: disk full" in out.stdout, out.stderr
    assert path.stat().st_size == size
    assert [e.tick for e in ChatLog(path).read()] == [1]


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "consciousness.el"
    atomic_write(path, "((a . 1))\n")
    atomic_write(path, "((a . 2))\n")
    assert path.read_text() == "((a . 2))\n"
    assert not list(tmp_path.glob(".*.tmp"))


def test_atomic_write_error_is_clear_and_leaves_no_temp(tmp_path):
    target = tmp_path / "consciousness.el"
    target.mkdir()  # a rename onto a folder fails, even for root
    with pytest.raises(PersistenceError, match="could not write .*consciousness.el"):
        atomic_write(target, "x")
    assert not list(tmp_path.glob(".*.tmp"))


def test_commit_message_format():
    """RFC §8.2: [TICK 42][thread-id][mood] monologue, on one line."""
    assert commit_message(42, "rust-debugging", "focused", "Fixed the\nborrow issue") == (
        "[TICK 42][rust-debugging][focused] Fixed the borrow issue"
    )
    assert commit_message(1, None, "🤔", "x") == "[TICK 1][no-thread][🤔] x"


def test_commit_message_body_holds_the_eval_form_and_its_result_cut(tmp_path):
    """Issue 13: after an eval, the body has its form and result (or error), cut at a readable
    length and with no NUL (git's arguments cannot hold one); the subject stays one line."""
    assert commit_message(3, None, "ok", "sum", eval_form="(+ 2\n   2)", eval_result="4") == (
        "[TICK 3][no-thread][ok] eval (+ 2 2) — sum\n\neval: (+ 2\n   2)\nresult: 4")
    assert commit_message(3, None, "ok", "x", eval_form="(car 1)", eval_error="Wrong type argument").endswith(
        "\n\neval: (car 1)\nerror: Wrong type argument")
    long = commit_message(3, None, "ok", "x", eval_form="(f \0" + "y" * 3000 + ")", eval_result="z" * 1500)
    assert "\0" not in long and "eval: (f \ufffd" + "y" * 1996 + "… [1,005 more characters]\n" in long
    assert long.endswith("result: " + "z" * 1000 + "… [500 more characters]")
    repo = HomeRepo(tmp_path)
    (tmp_path / "a.org").write_text("a")
    repo.commit([tmp_path / "a.org"], long)
    assert repo.log() == ["[TICK 3][no-thread][ok] eval (f \ufffd" + "y" * 55 + "… — x"]


def test_commit_per_tick_and_stale_lock(tmp_path):
    repo = HomeRepo(tmp_path)
    f = tmp_path / "agent-chat.org"
    f.write_text("a")
    repo.commit([f], "[TICK 1][no-thread][ok] one")
    lock = tmp_path / ".git" / "index.lock"
    lock.write_text("")
    old = time.time() - 60
    os.utime(lock, (old, old))
    f.write_text("b")
    _sha, note = repo.commit([f], "[TICK 2][no-thread][ok] two")
    assert note and "stale" in note and not lock.exists()
    assert repo.log() == ["[TICK 2][no-thread][ok] two", "[TICK 1][no-thread][ok] one"]
    # A lock a live git holds (however fresh or old) is waited for, then refused clearly, untouched.
    from tests.test_commit_worker import live_git_holding_index_lock

    with live_git_holding_index_lock(tmp_path) as git:
        with pytest.raises(CommitError, match=rf"git is busy: .*index.lock exists and git \(pid {git.pid}\)"):
            repo.commit([f], "[TICK 3][no-thread][ok] three")
        assert lock.exists()
    ignored = (tmp_path / ".gitignore").read_text()
    assert "memory.db" in ignored and "transcripts/" in ignored


@pytest.mark.parametrize("old_home", [False, True])
def test_the_shell_s_own_files_are_never_committed(tmp_path, old_home):
    """shell-history and shell-draft (the input typed and not yet sent) are the person's, kept in
    the home by Emacs: git ignores them in a new home and in one whose .gitignore predates them."""
    if old_home:
        (tmp_path / ".gitignore").write_text("memory.db*\ntranscripts/\nshell-history")  # no newline at its end
    repo = HomeRepo(tmp_path)
    f = tmp_path / "agent-chat.org"
    f.write_text("a")
    repo.commit([f], "[TICK 1][no-thread][ok] one")
    for name in ("shell-history", "shell-draft"):
        (tmp_path / name).write_text("what the person typed")
        ignored = subprocess.run(["git", "check-ignore", "-q", name], cwd=tmp_path, check=False)
        assert ignored.returncode == 0, f"{name} is not git-ignored: {(tmp_path / '.gitignore').read_text()!r}"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True,
                            check=True).stdout
    assert "shell-draft" not in status and "shell-history" not in status


def test_monologue_keeps_lines_across_restart(tmp_path):
    path = tmp_path / "monologue.org"
    log = MonologueLog(path)
    for i in range(5):
        log.append(i, "t", f"thought {i}\nwrapped")
    assert MonologueLog(path).read()[-2:] == [(3, "thought 3 wrapped"), (4, "thought 4 wrapped")]


def test_transcript_lines_share_columns_and_hide_secrets(tmp_path):
    from amacs_server.records import Eval, ModelRequest

    t = Transcript(tmp_path, "run-1", secrets=("sk-SECRET",))
    t.write(ModelRequest(request={"headers": "x-api-key: sk-SECRET"}), tick=1)
    t.write(Eval(form="(+ 2 2)"), tick=1)
    lines = [json.loads(x) for x in (tmp_path / "run-1.jsonl").read_text().splitlines()]
    assert [x["seq"] for x in lines] == [1, 2]
    assert set(lines[0]) == set(lines[1])
    assert "sk-SECRET" not in (tmp_path / "run-1.jsonl").read_text()


def test_scratchpad_org_format_and_round_trip(tmp_path):
    """RFC §4.2: a heading with :THREAD: (null for global) and :TICK:, then the content."""
    from amacs_server.persistence.scratchpad import ScratchpadEntry, ScratchpadLog

    log = ScratchpadLog(tmp_path / "scratchpad.org")
    log.append(ScratchpadEntry(42, "Working Notes", None, "line\n* not a heading"))
    log.append(ScratchpadEntry(45, "Parser Investigation", "rust-debugging", "Content here..."))
    text = (tmp_path / "scratchpad.org").read_text()
    assert text.startswith("* Working Notes\n:PROPERTIES:\n:THREAD: null\n:TICK: 42\n:END:\nline\n,* not a heading\n")
    assert log.read() == [
        ScratchpadEntry(42, "Working Notes", None, "line\n* not a heading"),
        ScratchpadEntry(45, "Parser Investigation", "rust-debugging", "Content here..."),
    ]


# Replies as org (issue 9, RFC v4 §8.3): the reply's headings nest under `** Agent'.

ORG_REPLY = """\
* Plan
Some *bold* and ~code~.
** Details
- a list
  - nested
1. numbered
#+begin_src python
* a star line in code
#+not a keyword
,* already a comma
def f(**kw): pass
#+end_src
*bold* at the start, not a heading
,* a literal comma-star
* Last
| a | b |
|---+---|"""


def test_org_reply_round_trips_exactly(tmp_path):
    log = ChatLog(tmp_path / "agent-chat.org")
    log.write_human(1, "t1", "* human star\nhello")
    log.write_agent(1, "t1", ORG_REPLY, with_heading=False)
    log.write_agent(2, "t2", "\n  leading and trailing blank lines\n\n", with_heading=True)
    log.write_human(3, "t3", "next")
    assert [(e.tick, e.human, e.agent) for e in log.read()] == [
        (1, "* human star\nhello", ORG_REPLY),
        (2, None, "\n  leading and trailing blank lines\n\n"),
        (3, "next", None),
    ]


def test_org_reply_headings_fold_under_agent(tmp_path):
    """orgparse sees the reply's headings two levels down, inside `** Agent'."""
    path = tmp_path / "agent-chat.org"
    ChatLog(path).write_agent(1, "t1", ORG_REPLY, with_heading=True)
    ChatLog(path).write_agent(2, "t2", "* Second", with_heading=True)
    root = orgparse.load(str(path))
    assert [n.heading for n in root.children] == ["Tick 1", "Tick 2"]
    agent = root.children[0].children[0]
    assert agent.heading == "Agent" and agent.level == 2
    assert [(n.level, n.heading) for n in agent[1:]] == [(3, "Plan"), (4, "Details"), (3, "Last")]
    assert [(n.level, n.heading) for n in root.children[1][1:]] == [(2, "Agent"), (3, "Second")]


def test_star_line_in_src_block_is_comma_escaped(tmp_path):
    """As org escapes src blocks: `,*' and `,#+' in the file, the code back on read."""
    path = tmp_path / "agent-chat.org"
    reply = "#+begin_src org\n* code heading\n  ** indented\n#+TITLE: x\n#+end_src\n* real"
    ChatLog(path).write_agent(1, "t", reply, with_heading=True)
    lines = path.read_text().split("\n")
    assert ",* code heading" in lines and "  ,** indented" in lines and ",#+TITLE: x" in lines
    assert "*** real" in lines and "* code heading" not in lines
    assert ChatLog(path).read()[0].agent == reply


def test_old_agent_escaping_still_reads(tmp_path):
    """Files written before issue 9 escaped every `*' line of the reply with a comma."""
    path = tmp_path / "agent-chat.org"
    path.write_text(
        "* Tick 1\n:PROPERTIES:\n:TIMESTAMP: t\n:END:\n\n** Agent\n"
        ",* was a heading\n,,* comma star\n#+begin_src\n,* code\n#+end_src\n\n"
    )
    old_reply = "* was a heading\n,* comma star\n#+begin_src\n* code\n#+end_src"
    assert ChatLog(path).read()[0].agent == old_reply


_REPLY_PIECES = st.sampled_from(
    ["*", "**", " ", "\t", ",", "a", "\n", "#+", "- ", "|", ":PROPERTIES:", ":END:", "CLOCK:"]
    + ["#+begin_src", "#+BEGIN_EXAMPLE", "#+end_src", "#+end_example", "SCHEDULED: <2020-01-01>"]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=st.lists(_REPLY_PIECES, max_size=40).map("".join))
def test_any_reply_round_trips(tmp_path, reply):
    assert unnest_reply(nest_reply(reply)) == reply
    path = tmp_path / "agent-chat.org"
    path.unlink(missing_ok=True)
    log = ChatLog(path)
    log.write_human(1, "t", "hi")
    log.write_agent(1, "t", reply, with_heading=False)
    log.write_agent(2, "t", reply, with_heading=True)
    assert [(e.human, e.agent) for e in log.read()] == [("hi", reply), (None, reply)]


def test_a_commit_subject_shows_a_memory_address_as_the_shell_does_and_a_bare_mood_tag():
    """A small local model wrote a mood "focused," and a monologue that is an address: the subject
    read ``[focused,] <EOT>amacs-instance-1:primary:monologue.7:1<EOT>``.  The delimiters go (a
    lone one too), the tag loses its end punctuation; a mood that is only punctuation stays."""
    assert commit_message(13, "demo-tour", "focused,", "<EOT>amacs-instance-1:primary:monologue.7:1<EOT>") == (
        "[TICK 13][demo-tour][focused] amacs-instance-1:primary:monologue.7:1")
    assert commit_message(2, None, " calm ;", "see <EOT>a:b:c:1<EOT>, then (<EOT>a:b:d") == (
        "[TICK 2][no-thread][calm] see a:b:c:1, then (a:b:d")
    assert commit_message(3, None, "?", "x", eval_form="(f \"<EOT>a:b:c<EOT>\")", eval_result="1").startswith(
        "[TICK 3][no-thread][?] eval (f \"a:b:c\") — x\n\neval: (f \"<EOT>a:b:c<EOT>\")")  # the body's form is the code as run


def test_a_commit_body_shows_the_result_s_memory_address_as_the_shell_does():
    """The demo's thread eval returned ``(:thread "demo-tour" :mem-id "<EOT>amacs-instance-1:...<EOT>")``:
    the body's result and error read as the shell's eval line does, without the delimiters."""
    result = '(:thread "demo-tour" :mem-id "<EOT>amacs-instance-1:primary:thread.demo-tour:1<EOT>")'
    assert commit_message(3, "demo-tour", "ok", "x", eval_form="(agent-create-thread \"demo-tour\")",
                          eval_result=result).endswith(
        '\nresult: (:thread "demo-tour" :mem-id "amacs-instance-1:primary:thread.demo-tour:1")')
    assert commit_message(3, None, "ok", "x", eval_form="(f)", eval_error="no <EOT>a:b:c:2<EOT>").endswith(
        "\nerror: no a:b:c:2")


def test_a_tick_subject_says_the_input_that_began_it_else_what_it_did():
    """``git log --oneline`` of a demo home read ``[TICK 3][no-thread][focused] thinking`` for every
    tick: which input began a tick, or what it did, was only in agent-chat.org.  The subject names
    the input (its first words, one line), else the eval, else the reply; then the monologue."""
    assert commit_message(1, None, "curious", "(no response: no API key)", said="What is the capital of France?") == (
        "[TICK 1][no-thread][curious] «What is the capital of France?» — (no response: no API key)")
    assert commit_message(3, None, "focused", "thinking", said="help", eval_form="(agent-create-thread)",
                          eval_result="t").startswith("[TICK 3][no-thread][focused] «help» — thinking\n\neval:")
    assert commit_message(6, "demo-tour", "focused", "step 2", eval_form='(format "demo step 2 of 3")',
                          eval_result='"demo step 2 of 3"').partition("\n")[0] == (
        '[TICK 6][demo-tour][focused] eval (format "demo step 2 of 3") — step 2')
    assert commit_message(8, "demo-tour", "focused", "thinking", reply="Done in 4 ticks: one per eval.") == (
        "[TICK 8][demo-tour][focused] reply: Done in 4 ticks: one per eval. — thinking")
    long = commit_message(9, None, "ok", "", said="line one\nline two " + "x" * 100, reply="not named")
    assert long == "[TICK 9][no-thread][ok] «line one line two " + "x" * 41 + "…»"
    assert commit_message(10, None, "ok", "thinking") == "[TICK 10][no-thread][ok] thinking"  # said nothing, did nothing


def test_a_tick_subject_says_what_a_compulsion_blocked_and_what_events_began_it():
    """A demo home's ``git log`` read ``[TICK 6][demo-tour][focused] the eval failed: say nothing
    changed`` seven times while a compulsion held every reply back, and ``[TICK 42] eval
    (agent-wait-for …`` for a tick viewpoints' comments began: only the transcript said a
    compulsion blocked it, or what woke the agent.  The subject says both, naming who."""
    why = "blocked by compulsion compulsion-3 (spawn-limiter): You said: . (I am the demo model)"
    assert commit_message(6, "demo-tour", "focused", "the eval failed", blocked=("reply", why)) == (
        "[TICK 6][demo-tour][focused] reply blocked by compulsion-3 (spawn-limiter): You said: . (I am the "
        "demo model) — the eval failed")
    assert commit_message(5, None, "ok", "go", said="eval", blocked=("reply", why)).startswith(
        "[TICK 5][no-thread][ok] «eval» reply blocked by compulsion-3 (spawn-limiter): You said")
    assert commit_message(7, None, "ok", "t", eval_form="(+ 2 2)", eval_error=why, blocked=("eval", why)).partition(
        "\n")[0] == "[TICK 7][no-thread][ok] eval (+ 2 2) blocked by compulsion-3 (spawn-limiter): You said: . (I am the demo model) — t"
    assert commit_message(42, None, "ok", "ask two", began="viewpoints pro and con commented",
                          eval_form="(agent-wait-for 1)", eval_result="t").partition("\n")[0] == (
        "[TICK 42][no-thread][ok] on viewpoints pro and con commented: eval (agent-wait-for 1) — ask two")
    assert commit_message(43, None, "ok", "(no response: interrupted by the person)", began="task-7 (researcher) done"
                          ) == "[TICK 43][no-thread][ok] on task-7 (researcher) done — (no response: interrupted by the person)"


@pytest.mark.parametrize("old_home", [False, True])
def test_the_model_capabilities_cache_is_not_in_git_status(tmp_path, old_home):
    """model-capabilities.json, the server's cache of what each model can do, is no part of the mind
    (no tick commits it): git ignores it, in a new home and in one whose .gitignore predates it, so
    that `git status` of a whole home (an experiment's run) says nothing."""
    if old_home:
        (tmp_path / ".gitignore").write_text("memory.db*\ntranscripts/\nshell-history\n")
    repo = HomeRepo(tmp_path)
    f = tmp_path / "agent-chat.org"
    f.write_text("a")
    repo.commit([f], "[TICK 1][no-thread][ok] one")
    (tmp_path / "model-capabilities.json").write_text("{}")
    status = subprocess.run(["git", "status", "--porcelain", "--", "model-capabilities.json"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert status == "", status
