"""A fake model that plays the debate example (experiments/debate/debate.toml).

It answers each request from the request alone (no state), so one fake serves
many runs at once.  The primary decides from what it did in the turn it plays
(its answers since the person's message), not from what its home did before:
a run may start from a fork of a home whose last eval left its result.  Who asks is read from the system prompt (a subagent's says
``You are viewpoint-NAME, a viewpoint (template T)``; the primary's does not):

- the primary, on the person's message: lists its skills
  (``(agent-list-available-skills)``);
- the primary, on that list: starts one viewpoint per ``panel-*`` viewpoint
  skill and asks them the question, waiting for their comments
  (``(agent-wait-for (plist-get (agent-consider Q) :talk-id) :timeout 120)``); on a later turn, with
  the viewpoints already there, it only asks again;
- a viewpoint: a short comment made from its template's ``Stance:`` line, its
  name and the question, and how many comments it has heard (deterministic),
  naming the viewpoints that commented before it;
- the primary, on the consider event: the final reply, quoting every comment.

Usage is reported from the sizes of request and answer, so runs have a cost.

    fake = FakeAnthropic().start(); fake.respond_with(debate_reply)

Run alone (to try the example by hand): ``python -m tests.fake_debate`` prints
its URL; give it to the run as ``ANTHROPIC_BASE_URL`` (any API key will do).
Run so, it also answers as the judge of ``amacs-server judge`` (:func:`judge_reply`).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from tests.context_items import MESSAGE_BREAK, parse_context, request_text, said, text_of
from tests.fake_anthropic import Reply, agent_json, serve

PREFIX = "panel-"  # the viewpoint skills the debate uses (experiments/debate/*/panel-*/SKILL.md)
WAIT_SECONDS = 120
FINAL_MARK = "After hearing the panel"  # the final reply starts with this

_WHO = re.compile(r"You are (\S+), a (\w+) \(template (\S+)\)")
_ARGUMENTS = (
    "the evidence from places that tried it points my way",
    "the people most affected are the ones this choice should serve first",
    "the cost of getting it wrong falls on those with the least say",
    "a trial with a clear measure would settle most of the disagreement",
)


def who(body: dict[str, Any]) -> tuple[str, str, str]:
    """(agent id, type, template) of the agent that made request BODY."""
    system = body.get("system") or ""
    text = system if isinstance(system, str) else "\n".join(b.get("text", "") for b in system)
    match = _WHO.search(text)
    return match.groups() if match else ("primary", "primary", "core")  # type: ignore[return-value]


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    return system if isinstance(system, str) else "\n".join(b.get("text", "") for b in system)


def _usage(body: dict[str, Any], answer: str) -> dict[str, int]:
    """Tokens as about four characters each: non-zero, growing with the context."""
    size = len(_system_text(body)) + sum(len(text_of(m["content"])) for m in body.get("messages", []))
    return {"input_tokens": max(1, size // 4), "output_tokens": max(1, len(answer) // 4),
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _reply(body: dict[str, Any], text: str) -> Reply:
    return Reply(text, usage=_usage(body, text))


def _elisp_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def question_of(message: str) -> str:
    """The question in the person's MESSAGE: the text after ``The question:``, else all of it."""
    _, found, after = message.rpartition("The question:")
    return " ".join((after if found else message).split())


def _items(body: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The primary's context as items (the per-tick sections from its newest tick only)."""
    return parse_context(request_text(body))


def _pending_item(items: dict[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """The chat item of this turn: the last with a human part (its agent part, "" while the turn runs,
    is filled in by the first tick)."""
    for item in reversed(items.get("chat", [])):
        content = item.get("content") or {}
        if isinstance(content, dict) and content.get("human") is not None:
            return item
    return None


def _pending(items: dict[str, list[dict[str, Any]]]) -> str | None:
    """The person's message of this turn."""
    item = _pending_item(items)
    return None if item is None else str(item["content"]["human"])


def _turn_steps(body: dict[str, Any], items: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The primary's answers in the turn it plays, oldest first: those after the tick that brought the
    person's message.  What the home did before (a run started from a fork of it at a tick whose eval
    left its result) is not this turn's doing."""
    item = _pending_item(items)
    if item is None:
        return []
    address = str(item["mem_id"]).replace("<EOT>", "").rpartition(":")[0] + ":"  # any version of it
    messages = body.get("messages", [])
    start = next((i for i, m in enumerate(messages) if m["role"] == "user" and address in text_of(m["content"])),
                 len(messages))
    steps = []
    for message in messages[start:]:
        if message["role"] == "assistant":
            try:
                steps.append(json.loads(text_of(message["content"])))
            except ValueError:
                steps.append({})
    return steps


def _events(items: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [e.get("content", e) if "mem_id" in e else e for e in items.get("events", [])]


def _last_result(items: dict[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    found = items.get("last-eval-result") or []
    return found[0]["content"].get("lastEvalResult") if found else None


def _asked_before(body: dict[str, Any]) -> bool:
    """Whether the primary started its panel earlier in this conversation."""
    return any("(agent-viewpoint " in text_of(m["content"]) for m in body.get("messages", [])
               if m["role"] == "assistant")


def _consider(question: str) -> str:
    return (f"(agent-wait-for (plist-get (agent-consider {_elisp_string(question)}) :talk-id) "
            f":timeout {WAIT_SECONDS})")


def primary_reply(body: dict[str, Any]) -> Reply:
    """The primary's next step in the debate."""
    items = _items(body)
    question = question_of(_pending(items) or "")
    steps = _turn_steps(body, items)
    considered = [e for e in _events(items) if e.get("source") == "consider"]
    if considered and any("(agent-consider " in str(step.get("eval")) for step in steps):
        content = considered[-1].get("content") or {}
        comments = content.get("comments") or []
        heard = " ".join(c.rstrip(".") + "." for c in comments) if comments else "No comments."
        text = (f"{FINAL_MARK} ({len(comments)} viewpoints) on \"{content.get('prompt', question)}\": {heard} "
                "My answer: it depends on the trial, so start small and measure.")
        return _reply(body, agent_json(text, monologue="weighed the panel and answered", confidence=0.7))
    result = _last_result(items) if steps and steps[-1].get("eval") else None
    if result is not None:
        printed = str(result.get("result") or "")
        if "waiting_for" in printed or ":waiting-for" in printed:  # the wait ended with no comments
            return _reply(body, agent_json("The panel did not answer in time.", monologue="gave up waiting"))
        if result.get("success") and PREFIX in printed:
            templates = sorted(set(re.findall(r'"(' + re.escape(PREFIX) + r'[a-z0-9_-]+)"', printed)))
            starts = " ".join(f"(agent-viewpoint {_elisp_string(t.removeprefix(PREFIX))} {_elisp_string(t)})"
                              for t in templates)
            return _reply(body, agent_json(None, eval=f"(progn {starts} {_consider(question)})",
                                           monologue=f"convening {len(templates)} viewpoints"))
        if not result.get("success"):
            return _reply(body, agent_json(f"The debate failed: {result.get('error')}", monologue="failed"))
        return _reply(body, agent_json(f"I found no {PREFIX}* viewpoint skills to debate with.",
                                       monologue="no panel"))
    if _asked_before(body):
        return _reply(body, agent_json(None, eval=_consider(question), monologue="asking the panel again"))
    return _reply(body, agent_json(None, eval="(agent-list-available-skills)", monologue="looking for my panel"))


def viewpoint_reply(body: dict[str, Any], name: str, template: str) -> Reply:
    """A viewpoint's short comment: its template's stance, the question, and what it has heard."""
    system = _system_text(body)
    stance = re.search(r"^Stance:\s*(.+)$", system, re.M)
    heard = [said(text_of(m["content"])) for m in body.get("messages", []) if m["role"] == "user"]
    joined = MESSAGE_BREAK.join(heard)
    asked = re.findall(r"^\[primary\] (.+)$", joined, re.M)
    short = name.removeprefix("viewpoint-")
    # The others of the panel who commented: not the asker, not the room's own notices ("[system]
    # proponent has joined the chat"), not itself.
    others = sorted({speaker for speaker in re.findall(r"^\[([a-z0-9_-]+)\] ", joined, re.M)
                     if speaker not in ("primary", "system", short)})
    question = asked[-1] if asked else "the question"
    digest = hashlib.sha256(f"{name}|{template}|{question}|{len(heard)}".encode()).digest()
    argument = _ARGUMENTS[digest[0] % len(_ARGUMENTS)]
    position = stance.group(1).strip().rstrip(".") if stance else template
    reply = (f"{short.capitalize()} ({position}): on \"{question}\", "
             f"{argument}.")
    if others:
        heard_whom = " and ".join(", ".join(f"the {o}" for o in others).rsplit(", ", 1))
        reply += f" Having heard {heard_whom}, I keep my view."
    return _reply(body, agent_json(reply, monologue=f"{short} commented"))


def debate_reply(body: dict[str, Any]) -> Reply:
    """The answer to any request of a debate run (a responder for ``FakeAnthropic.respond_with``)."""
    agent_id, kind, template = who(body)
    if kind == "viewpoint":
        return viewpoint_reply(body, agent_id, template)
    if kind != "primary":  # a task or compulsion the debate did not ask for: stay quiet
        return _reply(body, agent_json("", monologue="nothing to add"))
    return primary_reply(body)


JUDGE_MARK = "You are a judge of an AMACS experiment"


def judge_reply(body: dict[str, Any]) -> Reply:
    """A scripted judge (``amacs-server judge``): the score counts the viewpoints the final reply quotes.

    answer-quality (it reads the final reply): 2 + the viewpoints quoted, at most 5; viewpoints-used (it
    reads every turn): 5 when the reply quotes every viewpoint that commented, else 1 + those it quotes."""
    text = request_text(body)
    replies = re.findall(r'type="primary"[^>]*>.*?<reply>\n(.*?)\n</reply>', text, re.S)
    final = text.rpartition("<final-reply>")[2] if "<final-reply>" in text else (replies[-1] if replies else "")
    quoted = set(re.findall(r"\[([a-z0-9_-]+)\] ", final)) - {"primary"}
    if "<final-reply>" in text:
        score = min(5, 2 + len(quoted))
    else:
        views = set(re.findall(r'agent="viewpoint-([a-z0-9_-]+)" type="viewpoint"', text))
        score = 5 if views and views <= quoted else 1 + len(quoted & views)
    answer = json.dumps({"score": score, "rationale": f"The reply quotes {len(quoted)} viewpoints: "
                                                      f"{', '.join(sorted(quoted)) or 'none'}."})
    return _reply(body, answer)


def debate_or_judge_reply(body: dict[str, Any]) -> Reply:
    """The debate's answers, and the scripted judge's to a judge's request."""
    return judge_reply(body) if JUDGE_MARK in _system_text(body) else debate_reply(body)


def main(argv: list[str] | None = None) -> None:
    """Serve the debate until interrupted, printing the URL."""
    import argparse

    parser = argparse.ArgumentParser(description="A fake Anthropic API that plays the debate example "
                                                 "(and the judge of amacs-server judge)")
    parser.parse_args(argv)
    serve(debate_or_judge_reply)


if __name__ == "__main__":
    main()


