"""Rewind and fork after a whole session, in batch Emacs with the real shell and server (issue 26):
the scripted model's evals open and switch threads, write scratchpad notes, create, mutate and
evict notes, make a viewpoint and ask it (agent-consider); the person edits a template between
inputs. After a rewind in place (M-x amacs-rewind), a headless fork and a fork of that fork, each
at a tick where the viewpoint is live, the same inputs make the same requests as the first time,
but for the clock. A rewind while a turn waits on the model interrupts it, and the input after
the tick asks again as it did. (Python twin: tests/test_rewind.py.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.context_items import text_of
from tests.e2e.agent_fakes import pause, who
from tests.e2e.harness import elisp_string, run_emacs
from tests.fake_anthropic import Reply, agent_json
from tests.test_rewind import same, unclocked

pytestmark = pytest.mark.e2e

TEMPLATE = "skills/core/SKILL.md"


def note_id(body: dict[str, Any], name: str) -> str:
    """The MemId the request BODY shows for the note NAME."""
    found = re.findall(r"<EOT>[^\"\\<]*:primary:" + name + r":\d+<EOT>", json.dumps(body, ensure_ascii=False))
    assert found, f"no note {name} in the request"
    return found[-1]


# What the agent does for each input (its first step's eval); the turn's next step only answers.
EVALS = {
    "hello": lambda b: '(agent-create-thread "alpha" :concern "the alpha question")',
    "note the plan": lambda b: '(agent-memory-create "plan" "about the plan")',
    "convene": lambda b: '(agent-viewpoint "critic" "debater")',
    "ask the critic": lambda b: '(agent-wait-for (plist-get (agent-consider "is this wise") :talk-id) :timeout 30)',
    "change the plan": lambda b: f'(agent-memory-mutate {elisp_string(note_id(b, "plan"))} "the plan, changed")',
    "note beta": lambda b: '(progn (agent-create-thread "beta") (agent-switch-thread "beta"))',
    "another note": lambda b: '(agent-memory-create "other" "about the other")',
    "drop it": lambda b: f'(agent-memory-evict {elisp_string(note_id(b, "other"))})',
    "back to alpha": lambda b: ('(progn (agent-switch-thread "alpha") (agent-wait-for (plist-get '
                                '(agent-consider "and now") :talk-id) :timeout 30))'),
}
# The session: inputs, and ("template", text) where the person edits the core template.
SESSION: list[tuple[str, str]] = [
    ("say", "hello"), ("say", "note the plan"), ("template", "Be brief."), ("say", "convene"),
    ("say", "ask the critic"), ("say", "change the plan"), ("say", "note beta"), ("say", "back to alpha"),
    ("say", "another note"), ("say", "drop it"), ("template", "Be very brief."), ("say", "note gamma"),
    ("say", "last words"),
]
# Where the rewinds and forks cut, in inputs before: by then the viewpoint is live and was asked,
# a note made and mutated, two threads opened, scratchpad notes written, the template edited.
CUT = 6  # the rewind and the first fork: up to "note beta"; the replay asks the live viewpoint again
# ("back to alpha"), makes a note and evicts it, edits the template. M-x amacs-rewind picks that
# input among all eleven (older than the chat's memory holds).
CUT2 = 5  # the fork of the fork: up to "change the plan"; the replay opens a thread, asks the viewpoint


INPUTS = [arg for what, arg in SESSION if what == "say"]


def newest_human(body: dict[str, Any]) -> tuple[str, int]:
    """The person's newest input in BODY and the index of the message that holds it."""
    for i in range(len(body["messages"]) - 1, -1, -1):
        said = re.findall(r'\\"human\\": \\"([^\\]*)\\"', json.dumps(text_of(body["messages"][i]["content"])))
        if said and body["messages"][i]["role"] == "user":
            return said[-1], i
    return "(none)", -1


def answer(body: dict[str, Any]) -> Reply:
    """The scripted model: a function of the request only (so a replay gets the same answers)."""
    me, kind, _ = who(body)
    if kind == "viewpoint":
        asked = text_of(body["messages"][-1]["content"]).split("[primary] ")[-1]
        return Reply(agent_json(f"{me} doubts {asked}", monologue=f"weighing {asked}"))
    human, at = newest_human(body)
    first = not any(m["role"] == "assistant" for m in body["messages"][at + 1:])
    data: dict[str, Any] = {"eval": None, "reply": f"answer to {human}", "mood": "calm", "confidence": 0.7,
                            "monologue": f"thought about {human}"}
    if first and human in EVALS:
        data.update(eval=EVALS[human](body), reply=None, monologue=f"acting on {human}")
    if first and "note" in human:
        data["scratchpad"] = {"heading": f"on {human}", "thread": None, "content": f"noted: {human}"}
    return Reply(json.dumps(data))


def steps_elisp(steps: list[tuple[str, str]], home: Path) -> str:
    """Elisp that sends the inputs of STEPS and edits HOME's core template where they say."""
    out = []
    for what, arg in steps:
        if what == "say":
            out.append(f"(amacs-e2e-send {elisp_string(arg)})"
                       f"(princ (format \"AFTER %s %S\\n\" (plist-get (amacs--call-sync 'status nil) :tick) "
                       f"{elisp_string(arg)}))")
        else:
            text = f"---\nname: core\ndescription: the person's core\n---\nYou are AMACS. {arg}\n"
            out.append(f"(progn (make-directory {elisp_string(str(home / 'skills/core'))} t) "
                       f"(with-temp-file {elisp_string(str(home / TEMPLATE))} (insert {elisp_string(text)})))")
    return "\n".join(out)


def rewind_elisp(before: str) -> str:
    """M-x amacs-rewind with its prompts answered: to just before the input BEFORE, yes; then the
    prompt emptied for the steps that follow.  Prints the labels offered, how many, and the tick
    the rewind went to."""
    return f"""
      (with-current-buffer amacs-shell-buffer-name
        (cl-letf (((symbol-function 'completing-read)
                   (lambda (_prompt table &rest _)
                     (princ (format "OFFERED %d %S\\n" (length (all-completions "" table))
                                    (all-completions "" table)))
                     (seq-find (lambda (label) (equal {elisp_string(before)} label))
                               (all-completions "" table))))
                  ((symbol-function 'yes-or-no-p) (lambda (&rest _) t)))
          (princ (format "REWOUND-TO %d\\n" (plist-get (call-interactively #'amacs-rewind) :tick)))
          (amacs-shell--put-at-prompt "")))"""


def chosen_tick(stdout: str) -> int:
    """The tick the rewind went to: the one before the input chosen."""
    found = re.search(r"^REWOUND-TO (\d+)$", stdout, re.M)
    assert found, stdout
    return int(found.group(1))


def bodies(fake, start: int = 0) -> list[dict[str, Any]]:
    return [r["body"] for r in fake.requests[start:] if r["path"].rstrip("/") == "/v1/messages"]


def masked(items: list[dict[str, Any]]) -> list[list[str]]:
    """Request bodies as the comparison of test_rewind takes them: one step, clock masked."""
    return [[json.dumps(unclocked(b), ensure_ascii=False, sort_keys=True, indent=0) for b in items]]


def rest_after(cut: int) -> list[tuple[str, str]]:
    """The steps of SESSION after its first CUT inputs (a template edit before the next input too)."""
    return SESSION[[i for i, s in enumerate(SESSION) if s[0] == "say"][cut - 1] + 1:]


def tick_after(stdout: str, said: str) -> int:
    """The tick the home was at when the (first) turn of the input SAID had ended."""
    found = re.search(r"^AFTER (\d+) " + re.escape(json.dumps(said)) + "$", stdout, re.M)
    assert found, stdout
    return int(found.group(1))


def headless_fork(home: Path, tick: int, dest: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "amacs_server", "fork", str(home), "--tick", str(tick), str(dest)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def emacs(where: Path, fake, steps: str, **kw: Any):
    """A batch Emacs on WHERE's shell running STEPS (elisp), then stopped; its run and the requests it made."""
    first = len(fake.requests)
    run = run_emacs(where, fake.url, f"(setq amacs-max-steps 20) (amacs-e2e-open) {steps} (amacs-e2e-finish)",
                    timeout=120, **kw).check()
    return run, bodies(fake, first)


def test_rewind_and_forks_after_a_full_session_ask_the_same(fake, home, tmp_path):
    """The session in three Emacs runs (a restart between them changes no request): the inputs up to
    CUT2, up to CUT, the rest. Then M-x amacs-rewind to the end of CUT's tick and the rest again; a
    headless fork at that tick and the rest; a fork of the fork at CUT2's tick and everything after."""
    fake.respond_with(answer)
    rest, rest2 = rest_after(CUT), rest_after(CUT2)
    start, _ = emacs(home, fake, steps_elisp(SESSION[:len(SESSION) - len(rest2)], home))
    middle, between = emacs(home, fake, steps_elisp(rest2[:len(rest2) - len(rest)], home))
    last, original = emacs(home, fake, steps_elisp(rest, home))
    original2 = between + original
    every = bodies(fake)
    viewpoint = [b for b in every if who(b)[0] == "viewpoint-critic"]
    assert len(viewpoint) >= 2, len(viewpoint)  # asked twice, before the cut
    # (1) M-x amacs-rewind in place to just before INPUTS[CUT], then the rest again: the same requests.
    run, replay = emacs(home, fake, f"{rewind_elisp(INPUTS[CUT])} {steps_elisp(rest, home)}")
    tick = chosen_tick(run.stdout)
    assert tick == tick_after(middle.stdout, INPUTS[CUT - 1])
    assert any(who(b)[0] == "viewpoint-critic" for b in original)  # the replay asks the viewpoint
    offered = re.search(r"^OFFERED (\d+) ", run.stdout, re.M)
    assert offered and int(offered.group(1)) == len(INPUTS), run.stdout  # every input, by its words
    assert same(masked(replay), masked(original)) is None, same(masked(replay), masked(original))
    assert "rewound" in run.shell and "refs/amacs/abandoned/" in run.shell, run.shell
    # What the session did is in the home: scratchpad notes, the template as edited last.
    assert "noted: note gamma" in (home / "scratchpad.org").read_text()
    assert (home / TEMPLATE).read_text().endswith("Be very brief.\n")
    # (2) A fork at the same tick, made headless with the server stopped, replays the same.
    fork = tmp_path / "fork"
    headless_fork(home, tick, fork)
    assert (fork / TEMPLATE).read_text().endswith("Be brief.\n")  # the template as at the tick
    _, forked = emacs(fork, fake, steps_elisp(rest, fork))
    assert same(masked(forked), masked(original)) is None, same(masked(forked), masked(original))
    # A fork of that fork, at an earlier tick: a note made and evicted, the template edited, scratchpad
    # notes: all replayed, the same requests.
    fork2 = tmp_path / "fork2"
    headless_fork(fork, tick_after(start.stdout, INPUTS[CUT2 - 1]), fork2)
    _, forked2 = emacs(fork2, fake, steps_elisp(rest2, fork2))
    assert any(who(b)[0] == "viewpoint-critic" for b in original2)
    assert same(masked(forked2), masked(original2)) is None, same(masked(forked2), masked(original2))


def test_a_rewind_from_the_shell_interrupts_the_running_turn(fake, home):
    """M-x amacs-rewind while a turn waits on the model: the turn is interrupted, the home is at
    tick 1, and the second input sent again asks as it did the first time."""
    held = threading.Event()

    def holding(body: dict[str, Any]) -> Reply:
        reply = answer(body)
        if newest_human(body)[0] == "a question cut short":
            reply.hold = held
        return reply

    fake.respond_with(holding)
    program = f"""
      (setq amacs-max-steps 20)
      (amacs-e2e-open)
      {steps_elisp(SESSION[:2], home)}
      (amacs-e2e-send-no-wait "a question cut short")
      {pause(1.5)}
      (princ (format "BUSY %s\\n" (with-current-buffer amacs-shell-buffer-name amacs-shell-busy)))
      {rewind_elisp("note the plan")}
      {pause(0.5)}
      (princ "REPLAY\\n")
      (amacs-e2e-send "note the plan")
      (amacs-e2e-finish)"""
    try:
        run = run_emacs(home, fake.url, program, timeout=120)
    finally:
        held.set()
    run.check()
    assert "BUSY t" in run.stdout, run.stdout
    every = bodies(fake)
    cut = [i for i, b in enumerate(every) if newest_human(b)[0] == "a question cut short"]
    assert len(cut) == 1  # asked once, held, never answered
    original = [b for b in every[:cut[0]] if newest_human(b)[0] == "note the plan"]
    replay = [b for b in every[cut[0]:] if newest_human(b)[0] == "note the plan"]
    assert same(masked(replay), masked(original)) is None, same(masked(replay), masked(original))
    assert "rewound" in run.shell and "refs/amacs/abandoned/" in run.shell, run.shell
    after = run.shell.split("amacs> a question cut short")[1]  # the shell says so, in this order
    assert after.index(";; Interrupted.") < after.index(";; rewound ") < after.index("amacs> note the plan"), run.shell
    assert "answer to note the plan" in run.shell.split("The conversation up to there:")[-1]
    chat = (home / "agent-chat.org").read_text()
    assert "a question cut short" not in chat.split("refs/amacs/abandoned/")[-1]


# Inputs whose turns first make a scratchpad note and a memory item ("note the plan") and a thread
# ("note beta"): a fork and a rewind before them hold none of their text.
FIRSTS = [("say", "plain one"), ("say", "plain two"), ("say", "note the plan"), ("say", "note beta"),
          ("say", "last words")]
LATER_TEXTS = ("noted: note the plan", "about the plan", "noted: note beta", "answer to last words",
               "thought about last words")


def held_texts(home: Path, *, git: bool) -> list[str]:
    """LATER_TEXTS that some file of HOME holds (its git's objects inflated too, with GIT); the
    transcripts, logs and (without GIT) memory.db aside."""
    aside = {"transcripts", "logs", ".git"}
    data = b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file()
                    and not aside & set(p.relative_to(home).parts) and (git or p.name != "memory.db"))
    if git:
        data += subprocess.run(["git", "-C", str(home), "cat-file", "--batch-all-objects", "--batch"],
                               capture_output=True, check=True).stdout
    return [text for text in LATER_TEXTS if text.encode() in data]


def test_a_fork_and_a_rewind_before_the_first_note_thread_and_memory_item_hold_none_of_them(fake, home,
                                                                                           tmp_path):
    """The shell's session makes its first scratchpad note, memory item and thread after tick 2. A
    headless fork at tick 2 holds no text of them (its files, memory.db and git objects), and
    replays the same requests; so does M-x amacs-rewind to before "note the plan" (in place: its
    files hold none of them until the replay)."""
    fake.respond_with(answer)
    run, original = emacs(home, fake, steps_elisp(FIRSTS, home))
    tick = tick_after(run.stdout, "plain two")
    rest = FIRSTS[2:]
    cut = next(i for i, b in enumerate(original) if newest_human(b)[0] == "note the plan")
    assert held_texts(home, git=True) == list(LATER_TEXTS)  # the original holds each of them
    fork = tmp_path / "fork"
    headless_fork(home, tick, fork)
    assert held_texts(fork, git=True) == []
    _, forked = emacs(fork, fake, steps_elisp(rest, fork))
    assert same(masked(forked), masked(original[cut:])) is None, same(masked(forked), masked(original[cut:]))
    rewound, _ = emacs(home, fake, rewind_elisp("note the plan"))
    assert chosen_tick(rewound.stdout) == tick
    assert held_texts(home, git=False) == []
    _, replay = emacs(home, fake, steps_elisp(rest, home))
    assert same(masked(replay), masked(original[cut:])) is None, same(masked(replay), masked(original[cut:]))
