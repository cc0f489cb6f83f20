"""Helpers for fake-model answers that depend on which agent is asking (tests only)."""

import json
import re

from tests.context_items import request_text, said, text_of
from tests.e2e.harness import elisp_string, run_emacs
from tests.fake_anthropic import Reply, agent_json


def session(*steps, setup="(setq amacs-max-steps 20)"):
    """An e2e program: open the shell, run STEPS (elisp forms), finish."""
    return f"{setup} (amacs-e2e-open) {' '.join(steps)} (amacs-e2e-finish)"


def scripted_run(fake, home):
    """The scripted-model set-up of an e2e test (the fixture ``scripted``):
    ``run(answer, *steps, timeout=120, setup=None, **env)``.

    The fake model answers each request with ANSWER (a function of the request's body), and a
    batch Emacs on HOME runs a shell session of STEPS (send, wait_text, pause...; SETUP as
    :func:`session` takes it), with ENV added to its environment; returns the run, checked."""

    def run(answer, *steps, timeout=120, setup=None, **env):
        fake.respond_with(answer)
        program = session(*steps) if setup is None else session(*steps, setup=setup)
        return run_emacs(home, fake.url, program, timeout=timeout, **env).check()

    return run


def send(text):
    return f"(amacs-e2e-send {elisp_string(text)})"


def wait_text(text):
    return f"(amacs-e2e-wait-text {elisp_string(text)})"


def pause(seconds):
    """Elisp that lets Emacs run (process output, timers) for SECONDS."""
    return f"(let ((end (+ (float-time) {seconds}))) (while (< (float-time) end) (accept-process-output nil 0.05)))"


def calls_by(fake, agent_id):
    """The request bodies AGENT_ID sent to the fake model."""
    return [r["body"] for r in fake.requests if who(r["body"])[0] == agent_id]


def transcript_events(home, agent_id=None):
    """The events of every transcript under HOME (of AGENT_ID only, if given), as dicts."""
    rows = [json.loads(x) for f in (home / "transcripts").glob("*.jsonl") for x in f.read_text().splitlines()]
    return [r for r in rows if agent_id is None or r["agent_id"] == agent_id]


def who(body):
    """(agent id, type, template) of the agent that made request BODY."""
    match = re.search(r"You are (\S+), a (\w+) \(template (\S+)\)", body["system"][0]["text"])
    return match.groups() if match else ("primary", "primary", "core")


def transcript(body):
    """Every message of the request as text, oldest first (a subagent's received items as what was said)."""
    return [said(text_of(m["content"])) for m in body["messages"]]


def event_lines(text):
    """The events in a context or subagent message, as dicts."""
    block = re.search(r"<events>\n(.*?)\n</events>", text, re.S)
    if not block:
        return []
    out = []
    for line in block.group(1).splitlines():
        item = json.loads(line)
        out.append(item.get("content", item) if "mem_id" in item else item)
    return out


def last_eval_result(message):
    """The lastEvalResult in the <last-eval-result> block of MESSAGE (a subagent's message)."""
    block = re.search(r"<last-eval-result>\n(.*?)\n</last-eval-result>", message, re.S)
    assert block, message
    return json.loads(block.group(1))["lastEvalResult"]


def say(reply, **kw):
    return Reply(agent_json(reply, **kw))


def run_elisp(form, **kw):
    return Reply(agent_json(None, eval=form, **kw))


def primary_texts(fake):
    """The contexts of the primary's requests only, in order."""
    return [request_text(r["body"]) for r in fake.requests if who(r["body"])[0] == "primary"]
