"""Who may end a compulsion, whom a notice reaches, and the person talking to any agent
(agent-world-architecture.md: Compulsions, "only the Compulsion can decide to terminate";
Viewpoints, ``viewpoint.notify(message)`` and role="system" notices of who left;
Interlocutor control, "the user could talk to a Viewpoint or a Compulsion").

Each test drives the real shell in batch Emacs against the fake model and asserts on
the requests the fake received.
"""

import pytest

from amacs_server.persistence.chat_log import ChatLog
from tests.context_items import chat_lines, eval_result, newest_message, request_text, said
from tests.e2e.agent_fakes import (
    calls_by,
    pause,
    run_elisp,
    say,
    send,
    session,
    transcript_events,
    wait_text,
)
from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

REFUSED = ("compulsion-1 (spawn-limiter) is a compulsion watching primary: it obeys no agent, so primary "
           "may not {action} it. Only it ends itself (agent-quit); the person can pause or cancel it from the hub.")


def messages_of(body):
    """(role, text) of every message of request BODY, either API's: OpenAI's system prompt
    (its first message) left out, its later system messages kept."""
    msgs = body["messages"][1:] if "system" not in body else body["messages"]
    return [(m["role"], said(m["content"] if isinstance(m["content"], str) else
                             "\n\n".join(b["text"] for b in m["content"]))) for m in msgs]


def system_prompt(body):
    return body["system"][0]["text"] if "system" in body else body["messages"][0]["content"]


def who(body):
    import re
    match = re.search(r"You are (\S+), a (\w+) \(template (\S+)\)", system_prompt(body))
    return match.groups() if match else ("primary", "primary", "core")


def test_only_a_compulsion_ends_itself_and_the_person_overrules_it_from_the_hub(fake, home):
    """The primary (the agent watched) tries agent-cancel and agent-pause on its compulsion, and the
    person's own roads (the hub's method over EPC, the hub's command): each is an error in its eval
    result, and the compulsion goes on watching.  The person cancels it from the hub
    after confirming; the transcript says who did; it is asked nothing afterwards."""

    def answer(body):
        me, kind, _ = who(body)
        if kind == "compulsion":
            return say("")
        ctx = request_text(body)
        said = [line for line in chat_lines(ctx) if line.startswith("Human: ")]
        if said[-1] == "Human: watch me":
            return run_elisp('(agent-compulsion "spawn-limiter")', monologue="attach") \
                if "attach" not in ctx else say("Watched.", monologue="watched")
        if said[-1] == "Human: drop it":
            for marker, form in (("try-cancel", '(agent-cancel "compulsion-1")'),
                                 ("try-pause", '(agent-pause "compulsion-1")'),
                                 # The person's own roads, from the agent's eval: the hub's method
                                 # over EPC, and the hub's command.
                                 ("try-person", "(amacs--call-sync 'person_agent_control "
                                                '(list "cancel" "compulsion-1" t))'),
                                 ("try-hub", "(progn (require 'amacs-hub) (cl-letf (((symbol-function "
                                             "'y-or-n-p) (lambda (&rest _) t))) "
                                             '(amacs-hub-cancel-agent "compulsion-1")))')):
                if marker not in ctx:
                    return run_elisp(form, monologue=marker)
            return say("It stays.", monologue="stays")
        return say("ok", monologue="ok")

    fake.respond_with(answer)
    run = run_emacs(home, fake.url, session(
        send("watch me"), send("drop it"),
        "(amacs-hub)",
        '(amacs-e2e-wait (lambda () (with-current-buffer "*amacs-hub*" (save-excursion (goto-char (point-min)) '
        '(search-forward "compulsion-1" nil t)))) "the compulsion in the hub")',
        '(with-current-buffer "*amacs-hub*" (goto-char (point-min)) (search-forward "compulsion-1") '
        "(cl-letf (((symbol-function 'y-or-n-p) (lambda (p) (princ (format \"ASKED<<%s>>\\n\" p)) t))) "
        "(call-interactively (key-binding (kbd \"k\")))))",
        pause(1.0),
        send("after"))).check()

    primary = [r["body"] for r in fake.requests if who(r["body"])[0] == "primary"]
    results = [eval_result(request_text(b)) for b in primary if "<last-eval-result>" in newest_message(request_text(b))]
    errors = [r["error"] for r in results if r.get("error")]
    assert len(errors) == 3
    assert REFUSED.format(action="cancel") in errors[0] and REFUSED.format(action="pause") in errors[1]
    assert errors[2].startswith("refused: person_agent_control acts for the person, and primary's eval called it")
    # The hub's command calls without waiting: its refusal is in the result of the eval it ran in.
    assert any(r.startswith("person_agent_control: refused") for r in results[-1].get("refused", [])), results[-1]
    events = transcript_events(home, "compulsion-1")
    assert [e["data"] for e in events if e["event"] == "control_refused"] == [
        {"by": "primary", "action": "cancel"}, {"by": "primary", "action": "pause"}]
    mine = [e["data"] for e in transcript_events(home, "primary") if e["event"] == "control_refused"]
    assert [(d["method"], d["by"]) for d in mine] == [("person_agent_control", "primary")] * 2, mine
    # Refused, it still watched: it was asked before the primary's next model call.
    refused_at = max(i for i, e in enumerate(events) if e["event"] == "control_refused")
    cancelled_at = next(i for i, e in enumerate(events) if e["event"] == "cancelled")
    assert any(e["event"] == "model_request" for e in events[refused_at:cancelled_at])
    # The person was asked, and is the one the transcript names.
    assert ("ASKED<<compulsion-1 is a compulsion watching primary; only it ends itself.  Cancel it anyway? >>"
            in run.stdout)
    assert events[cancelled_at]["data"] == {"reason": "cancelled by the person (hub)"}
    assert not [e for e in events[cancelled_at:] if e["event"] == "model_request"]
    assert any("Human: after" in chat_lines(request_text(b)) for b in primary)


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_notify_one_or_all_and_the_panel_hears_who_joins_and_leaves(fake, home, backend):
    """agent-notify :to shares with one viewpoint, without :to with all; a viewpoint joining or
    leaving is told to the others in the system role (OpenAI: a system message; the Messages API
    has none mid-conversation: a `[system]' line of user text)."""

    def answer(body):
        me, kind, _ = who(body)
        if kind == "viewpoint":
            return say(f"{me} thinks so")
        ctx = request_text(body) if "system" in body else "\n\n".join(t for r, t in messages_of(body) if r == "user")
        steps = [("make", '(list (agent-viewpoint "pro" "debater") (agent-viewpoint "con" "debater"))'),
                 ("one", '(agent-notify "only for pro" :to "pro")'),
                 ("all", '(agent-notify "for everyone")'),
                 ("nobody", '(agent-notify "lost" :to "nobody")'),
                 ("ask", '(agent-wait-for (plist-get (agent-consider "first question") :talk-id) :timeout 30)'),
                 ("drop", '(agent-discard "con")'),
                 ("again", '(agent-wait-for (plist-get (agent-consider "second question") :talk-id) :timeout 30)')]
        for marker, form in steps:
            if f"step {marker}" not in ctx:
                return run_elisp(form, monologue=f"step {marker}")
        return say("Heard them.", monologue="done")

    fake.respond_with(answer)
    extra = ({"ANTHROPIC_API_KEY": "", "AMACS_BACKEND": "openai", "OPENAI_BASE_URL": fake.url + "/v1"}
             if backend == "openai" else {})
    run_emacs(home, fake.url, session(send("convene"), wait_text("Heard them.")), **extra).check()

    def calls(agent):
        return [messages_of(r["body"]) for r in fake.requests if who(r["body"])[0] == agent]

    pro, con = calls("viewpoint-pro"), calls("viewpoint-con")
    assert len(pro) == 2 and len(con) == 1
    if backend == "openai":
        assert pro[-1] == [
            ("system", "con has joined the chat"),
            ("user", "[primary] only for pro\n\n[primary] for everyone\n\n[primary] first question"),
            ("assistant", agent_json("viewpoint-pro thinks so")),
            ("user", "[con] viewpoint-con thinks so"),
            ("system", "con has left the chat"),
            ("user", "[primary] second question")]
        assert con[0] == [("system", "You join a chat with pro"),
                          ("user", "[primary] for everyone\n\n[primary] first question\n\n"
                                   "[pro] viewpoint-pro thinks so")]
    else:
        assert pro[-1] == [
            ("user", "[system] con has joined the chat\n\n[primary] only for pro\n\n[primary] for everyone\n\n"
                     "[primary] first question"),
            ("assistant", agent_json("viewpoint-pro thinks so")),
            ("user", "[con] viewpoint-con thinks so\n\n[system] con has left the chat\n\n"
                     "[primary] second question")]
        assert con[0] == [("user", "[system] You join a chat with pro\n\n[primary] for everyone\n\n"
                                   "[primary] first question\n\n[pro] viewpoint-pro thinks so")]
    # A notice to a viewpoint that does not exist is an error the primary sees, naming the ones there are.
    primary = [r["body"] for r in fake.requests if who(r["body"])[0] == "primary"]
    texts = [t for b in primary for r, t in messages_of(b) if r == "user"]
    assert any("primary has no viewpoint named 'nobody'; its viewpoints: pro, con" in t for t in texts)
    notified = [(e["agent_id"], e["data"]["to"]) for e in transcript_events(home) if e["event"] == "notified"]
    assert notified == [("viewpoint-pro", "pro"), ("viewpoint-pro", "all"), ("viewpoint-con", "all")]


def test_the_person_talks_to_a_viewpoint_and_a_compulsion_from_the_shell(fake, home):
    """@skeptic TEXT and @compulsion-1 TEXT at the prompt: each agent gets TEXT from the person and its
    answer shows in the shell under its name; the primary is not asked; an unknown name is refused."""

    def answer(body):
        me, kind, _ = who(body)
        msgs = messages_of(body)
        if me == "primary":
            ctx = request_text(body)
            if "step made" not in ctx:
                return run_elisp('(list (agent-viewpoint "skeptic" "debater") (agent-compulsion "spawn-limiter"))',
                                 monologue="step made")
            return say("Both are here.", monologue="done")
        if msgs[-1][1] == "[person] why?":
            return say("Because the tests are red.")
        if msgs[-1][1] == "[person] what do you watch?":
            return say("How many tasks the primary spawns.")
        return say("")

    fake.respond_with(answer)
    run = run_emacs(home, fake.url, session(
        send("bring them"), wait_text("Both are here."),
        send("@skeptic why?"), wait_text("Because the tests are red."),
        send("@compulsion-1 what do you watch?"), wait_text("How many tasks the primary spawns."),
        send("@nobody hello"), wait_text("no agent 'nobody'"))).check()
    assert "[viewpoint-skeptic] Because the tests are red." in run.shell
    assert "[compulsion-1] How many tasks the primary spawns." in run.shell
    assert "Not sent: no agent 'nobody'; live: viewpoint-skeptic, compulsion-1" in run.shell
    primary = [request_text(r["body"]) for r in fake.requests if who(r["body"])[0] == "primary"]
    assert not [t for t in primary if "why?" in t or "what do you watch" in t or "nobody" in t]
    person = [(e["agent_id"], e["data"]["content"]) for e in transcript_events(home)
              if e["event"] == "event" and e["data"].get("source") == "person"]
    assert person == [("viewpoint-skeptic", "why?"), ("compulsion-1", "what do you watch?")]
    # What the shell showed is in agent-chat.org, each line naming who said it.
    talk = [line for e in ChatLog(home / "agent-chat.org").read() for line in e.talk]
    assert talk == ["the person to viewpoint-skeptic: why?",
                    "viewpoint-skeptic (debater) to the person: Because the tests are red.",
                    "the person to compulsion-1: what do you watch?",
                    "compulsion-1 (spawn-limiter) to the person: How many tasks the primary spawns."]


def m_x(form):
    """Elisp that runs FORM as the person's M-: does (eval-expression, a command of theirs), the
    error it signals printed as ERR<<...>>."""
    return ("(condition-case err (cl-letf (((symbol-function 'read--expression) (lambda (&rest _) '"
            f"{form}))) (command-execute 'eval-expression)) "
            '(error (princ (format "ERR<<%s>>\\n" (error-message-string err)))))')


def test_what_the_person_does_with_m_colon_is_recorded_as_the_persons(fake, home):
    """A newcomer's M-: of agent-viewpoint, agent-compulsion and agent-cancel was recorded as the
    primary's (``parent_id: "primary"`` and nothing more) and refused as ``primary may not cancel
    it``, though the wire log knew a key of theirs made each call.  Such a call still acts with the
    primary's rights, but the transcript and the words name the person; the agent's own evals stay
    the primary's."""

    def answer(body):
        me, kind, _ = who(body)
        if kind == "compulsion":
            return say("")
        if me == "task-2":  # numbered after compulsion-1
            return Reply(agent_json("late"), delay=5)
        if me.startswith("viewpoint-"):
            return say(f"{me} comments")
        ctx = request_text(body)
        if "own-made" not in ctx:
            return run_elisp('(agent-viewpoint "con" "debater")', monologue="own-made")
        return say("ok", monologue="ok")

    fake.respond_with(answer)
    run = run_emacs(home, fake.url, session(
        send("hello"), wait_text("ok"),
        m_x('(agent-viewpoint "pro" "debater")'),
        m_x('(agent-compulsion "spawn-limiter")'),
        m_x('(agent-cancel "compulsion-1")'),
        m_x('(agent-task "researcher" "dig slowly")'),
        pause(0.5),
        m_x('(agent-cancel "task-2")'),
        m_x('(agent-consider "Is Emacs an operating system?")'),
        wait_text("viewpoint-con (debater) said"))).check()
    starts = {e["agent_id"]: e for e in transcript_events(home) if e["event"] == "agent_start"}
    by = {agent: (start["parent_id"], start["data"].get("started_by")) for agent, start in starts.items()}
    person = "the person (eval-expression)"
    assert by == {"viewpoint-con": ("primary", None), "viewpoint-pro": ("primary", person),
                  "compulsion-1": ("primary", person), "task-2": ("primary", person)}, by
    refused = [e["data"] for e in transcript_events(home, "compulsion-1") if e["event"] == "control_refused"]
    assert refused == [{"by": person, "action": "cancel"}]
    assert ("compulsion-1 (spawn-limiter) is a compulsion watching primary: it obeys no agent, and agent-cancel "
            "acts with primary's rights, even from your eval-expression. Only it ends itself (agent-quit); you can "
            "pause or cancel it from the hub (C-c C-v, then z or k).") in run.stdout
    cancelled = [e["data"] for e in transcript_events(home, "task-2") if e["event"] in ("cancelled", "interrupted")]
    assert {"reason": f"cancelled by {person}"} in cancelled, cancelled
    asked = "\n".join(m for body in calls_by(fake, "viewpoint-pro") for _role, m in messages_of(body))
    assert "[person] Is Emacs an operating system?" in asked and "[primary] Is Emacs an operating system?" not in asked
