"""The spec's named compulsions, shipped as skills, run end to end with a scripted model.

agent-world-architecture.md: planning_mode, TodoReminder and have_read_files_watcher "will
all be implemented as Compulsions"; steel man reasoning; a Compulsion "to spot ... Viewpoints
who argue too long without getting anywhere, and tell the convening agent to close the
discussion"; one that "watches out for cases where the user repeatedly corrects ... 'You
should consider creating a compulsion to watch out for this.'"  (have-read-files-watcher:
tests/e2e/test_file_compulsions.py; spawn-limiter: tests/e2e/test_agents.py.)

The fake plays each compulsion by its template's rules; every test asserts that the shipped
template is the compulsion's system prompt, and on what the primary's model then receives.
"""

import json

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

BEFORE_CALL = "[before model call] The last result was:\n"
PERSON = BEFORE_CALL + "The person said: "
EVAL_ASKED = "[before action] The agent wants to evaluate:\n"
REPLY_ASKED = "[before action] The agent wants to reply to its interlocutor:\n"


def pending(ctx):
    """The person's newest line in the primary's context TEXT."""
    return [line for line in chat_lines(ctx) if line.startswith("Human: ")][-1]


def next_step(ctx, steps):
    """The first (marker, form) of STEPS not yet taken (its monologue is not in CTX), as an eval; else None."""
    for marker, form in steps:
        if f"step:{marker}" not in ctx:
            return run_elisp(form, monologue=f"step:{marker}")
    return None


def seen(text, ctx):
    """Whether TEXT is in the context CTX, where it is a JSON string (quotes escaped)."""
    return json.dumps(text)[1:-1] in ctx


def compulsion_prompts(fake, heading):
    """The system prompts of the compulsions that called the model: each has the shipped HEADING."""
    prompts = {r["body"]["system"][0]["text"] for r in fake.requests if who(r["body"])[1] == "compulsion"}
    assert prompts and all(heading in p for p in prompts), heading
    return prompts


def eval_errors(fake):
    return [eval_result(t).get("error") for t in primary_texts(fake) if "<last-eval-result>" in newest_message(t)]


def test_planning_mode_blocks_edits_until_the_person_approves_the_plan(fake, home):
    work = home.parent / "work"
    work.mkdir(parents=True)
    notes = work / "notes.txt"
    notes.write_text("old notes")
    write = f'(with-temp-file {elisp_string(str(notes))} (insert "new notes"))'
    plan_note = ("Planning mode: look around as you need, change nothing yet. Then reply to the person with a "
                 "numbered plan (which files and buffers you will change, and how) and ask them to approve it.")
    blocked = ("Planning mode: this eval changes things (writes notes.txt). Show the person your plan and wait "
               "for their approval first.")

    def compulsion(msgs):
        last = msgs[-1]
        if last.startswith(PERSON):
            planned = any(m.startswith(REPLY_ASKED + "1. ") for m in msgs[:-1])
            if planned and last.removeprefix(PERSON) in ("yes", "go ahead"):
                return run_elisp("(agent-quit)")
            return say(plan_note)
        if last.startswith(EVAL_ASKED) and "with-temp-file" in last:
            return say(blocked)
        return say("")

    def answer(body):
        if who(body)[1] == "compulsion":
            return compulsion(transcript(body))
        ctx = request_text(body)
        turn = pending(ctx)
        if turn == "Human: plan first":
            return next_step(ctx, [("attach", '(agent-compulsion "planning-mode")')]) or say("Planning mode is on.")
        if turn == "Human: rewrite the notes":
            return next_step(ctx, [("look", f"(file-exists-p {elisp_string(str(notes))})"), ("try-write", write)]) \
                or say("1. Replace the text of notes.txt with the new notes. Approve?", monologue="plan")
        return next_step(ctx, [("write-now", write)]) or say("Rewritten.", monologue="done")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("plan first"), send("rewrite the notes"), send("yes"))).check()

    compulsion_prompts(fake, "# Planning mode")
    texts = primary_texts(fake)
    turn2 = [t for t in texts if pending(t) == "Human: rewrite the notes"]
    assert seen(plan_note, newest_message(turn2[0]))  # told before its first model call of the turn
    # Reading went; the write was refused with the reason; after "yes" the compulsion quit and it went.
    errors = eval_errors(fake)
    assert [e for e in errors if e] == [f"blocked by compulsion compulsion-1 (planning-mode): {blocked}"]
    assert notes.read_text() == "new notes"
    quit_event = [e for e in transcript_events(home, "compulsion-1") if e["event"] == "agent_end"]
    assert quit_event and quit_event[0]["data"]["state"] == "quit"


def test_todo_reminder_after_three_evals_without_a_todo_list(fake, home):
    reminder = 'Keep a short todo list (agent-memory-create "todo" ...) and tick items off as you go.'

    def compulsion(msgs):
        last = msgs[-1]
        if last.startswith(BEFORE_CALL) and not last.startswith(PERSON):
            turn = msgs[max((i for i, m in enumerate(msgs) if m.startswith(PERSON)), default=0):]
            evals = [m for m in turn if m.startswith(EVAL_ASKED)]
            if len(evals) >= 3 and not any('(agent-memory-create "todo"' in m for m in evals):
                return say(reminder)
        return say("")

    def answer(body):
        if who(body)[1] == "compulsion":
            return compulsion(transcript(body))
        ctx = request_text(body)
        if pending(ctx) == "Human: remind me":
            return next_step(ctx, [("attach", '(agent-compulsion "todo-reminder")')]) or say("Reminders on.")
        steps = [(f"step {i}", f"(+ {i} {i})") for i in (1, 2, 3)]
        if seen(reminder, newest_message(ctx)):
            steps.insert(3, ("todo", '(agent-memory-create "todo" "1. sums [x]  2. report [ ]")'))
        return next_step(ctx, steps + [("step 4", "(+ 4 4)")]) or say("Summed.", monologue="done")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("remind me"), send("sum things"))).check()

    compulsion_prompts(fake, "# Todo reminder")
    texts = [t for t in primary_texts(fake) if pending(t) == "Human: sum things"]
    reminded = [i for i, t in enumerate(texts) if seen(reminder, newest_message(t))]
    assert reminded == [3]  # after the third eval, once; not after the todo list was written
    assert "step:todo" in texts[4] and eval_result(texts[4])["success"]


def test_steel_man_starts_a_viewpoint_for_the_persons_side_before_answering(fake, home):
    reminder = ("Before disagreeing, set up a viewpoint that argues the person's side as well as it can "
                "(agent-viewpoint), and consider your reply with it.")

    def compulsion(msgs):
        last = msgs[-1]
        if last.startswith(PERSON) and "I'm sure" in last:
            return say(reminder)
        return say("")

    def answer(body):
        me, kind, _ = who(body)
        if kind == "compulsion":
            return compulsion(transcript(body))
        if kind == "viewpoint":
            return say("Friday gives the weekend as a buffer, and the fixes are small.")
        ctx = request_text(body)
        if pending(ctx) == "Human: keep me honest":
            return next_step(ctx, [("attach", '(agent-compulsion "steel-man")')]) or say("I will.")
        if seen(reminder, ctx):
            return next_step(ctx, [
                ("steel", '(agent-viewpoint "persons-side" "debater")'),
                ("ask", '(agent-wait-for (plist-get (agent-consider "Argue for shipping on Friday.") :talk-id) '
                        ':timeout 30)')]) or say("I still think Monday, though Friday's buffer is a fair point.",
                                                 monologue="answer")
        return say("Monday.", monologue="disagree blindly")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("keep me honest"), send("We ship on Friday, I'm sure."))).check()

    compulsion_prompts(fake, "# Steel-man reminder")
    texts = [t for t in primary_texts(fake) if pending(t) == "Human: We ship on Friday, I'm sure."]
    assert seen(reminder, newest_message(texts[0]))
    # The viewpoint for the person's side was started and heard before the primary answered.
    view = [r["body"] for r in fake.requests if who(r["body"])[0] == "viewpoint-persons-side"]
    assert view and transcript(view[0])[-1] == "[primary] Argue for shipping on Friday."
    assert "Friday gives the weekend as a buffer" in texts[-1]
    assert "disagree blindly" not in "".join(texts)


def test_debate_closer_tells_the_agent_to_close_a_circular_debate_and_it_discards_the_viewpoints(fake, home):
    note = ("The discussion goes in circles (both repeat their first claims). Close it: agent-discard each "
            "viewpoint and answer with what you have.")

    def compulsion(msgs):
        last = msgs[-1]
        if not last.startswith(BEFORE_CALL) or last.startswith(PERSON):
            return say("")
        events = json.loads(last.removeprefix(BEFORE_CALL)).get("events", [])
        rounds = [m for m in msgs if '"source": "consider"' in m]
        comments = [e["content"]["comments"] for e in events if e["source"] == "consider"]
        if comments and len(rounds) >= 2:
            seen = [c for m in rounds[:-1] for e in json.loads(m.removeprefix(BEFORE_CALL))["events"]
                    if e["source"] == "consider" for c in e["content"]["comments"]]
            if set(comments[0]) <= set(seen):
                return say(note)
        return say("")

    def answer(body):
        me, kind, _ = who(body)
        if kind == "compulsion":
            return compulsion(transcript(body))
        if kind == "viewpoint":
            return say("Tabs." if me == "viewpoint-tabs" else "Spaces.")
        ctx = request_text(body)
        if pending(ctx) == "Human: watch our debates":
            return next_step(ctx, [("attach", '(agent-compulsion "debate-closer")')]) or say("Watching.")
        consider = '(agent-wait-for (plist-get (agent-consider "Tabs or spaces?") :talk-id) :timeout 30)'
        steps = [("panel", '(list (agent-viewpoint "tabs" "debater") (agent-viewpoint "spaces" "debater"))')]
        if seen(note, newest_message(ctx)):
            return next_step(ctx, [("close", '(list (agent-discard "tabs") (agent-discard "spaces"))')]) \
                or say("They agree to disagree: pick one per project.")
        if "step:close" in ctx:
            return say("They agree to disagree: pick one per project.", monologue="answer")
        return next_step(ctx, steps + [(f"round {i}", consider) for i in (1, 2, 3, 4, 5)]) \
            or say("No end to it.", monologue="gave up")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("watch our debates"), send("tabs or spaces?"))).check()

    compulsion_prompts(fake, "# Debate closer")
    texts = [t for t in primary_texts(fake) if pending(t) == "Human: tabs or spaces?"]
    told = [i for i, t in enumerate(texts) if seen(note, newest_message(t))]
    assert len(told) == 1  # after the second round repeated the first
    assert "step:round 2" in texts[told[0]] and "step:round 3" not in texts[told[0]]
    # It saw the comments: the result it was shown carried the consider event.
    asked = [transcript(r["body"])[-1] for r in fake.requests if who(r["body"])[1] == "compulsion"]
    assert any('"comments": ["[tabs] Tabs.", "[spaces] Spaces."]' in a for a in asked)
    ended = {e["agent_id"]: e["data"]["state"] for e in transcript_events(home) if e["event"] == "agent_end"}
    assert ended == {"viewpoint-tabs": "discarded", "viewpoint-spaces": "discarded"}
    assert "step:round 3" not in "".join(texts) and "gave up" not in "".join(texts)


def test_correction_watcher_suggests_a_compulsion_and_the_new_one_blocks_the_mistake(fake, home):
    skill = home / "skills" / "no-spaces" / "SKILL.md"
    suggestion = ("The person has corrected you about indenting with spaces 2 times. You should consider creating "
                  "a compulsion to watch out for this: write a compulsion skill that blocks it and attach it "
                  "with agent-compulsion.")
    rule = "---\nname: no-spaces\ndescription: Blocks indenting with spaces.\nkind: compulsion\n---\n# No spaces\n" \
           "Block any eval that indents with spaces; reply: Indent with tabs: the person asked twice.\n"
    block = "Indent with tabs: the person asked twice."

    def watcher(msgs):
        last = msgs[-1]
        if not last.startswith(PERSON):
            return say("")
        corrections = [m for m in msgs if m.startswith(PERSON) and "tabs, not spaces" in m]
        return say(suggestion if len(corrections) >= 2 and "tabs, not spaces" in last else "")

    def answer(body):
        me, kind, template = who(body)
        if kind == "compulsion":
            if template == "correction-watcher":
                return watcher(transcript(body))
            last = transcript(body)[-1]
            return say(block if last.startswith(EVAL_ASKED) and '(insert "    ' in last else "")
        ctx = request_text(body)
        turn = pending(ctx)
        if turn == "Human: watch my corrections":
            return next_step(ctx, [("attach", '(agent-compulsion "correction-watcher")')]) or say("Watching.")
        indent = '(with-temp-buffer (insert "    x") (buffer-string))'
        if seen(suggestion, newest_message(ctx)) or "step:learn" in ctx:
            learn = [("learn", f"(progn (make-directory {elisp_string(str(skill.parent))} t) "
                               f"(with-temp-file {elisp_string(str(skill))} (insert {elisp_string(rule)})) "
                               '(agent-compulsion "no-spaces"))')]
            if "step:retry" not in ctx:
                return next_step(ctx, learn + [("retry", indent)])
        if turn == "Human: indent it":
            return next_step(ctx, [("indent", indent)]) or say("Indented with spaces.", monologue="spaces")
        if "step:retry" in ctx:
            return say("Understood: tabs from now on.", monologue="tabs")
        return next_step(ctx, [(f"again {ctx.count('tabs, not spaces')}", indent)]) or say("Fixed.")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("watch my corrections"), send("indent it"),
                                      send("No: tabs, not spaces."), send("Again: tabs, not spaces!"))).check()

    watch = {r["body"]["system"][0]["text"] for r in fake.requests if who(r["body"])[2] == "correction-watcher"}
    assert watch and all("# Correction watcher" in p for p in watch)
    texts = primary_texts(fake)
    told = [t for t in texts if seen(suggestion, newest_message(t))]
    assert len(told) == 1 and pending(told[0]) == "Human: Again: tabs, not spaces!"
    # The agent wrote the skill and attached it; the new compulsion blocked the spaces next time.
    assert skill.read_text() == rule
    new = [e for e in transcript_events(home) if e["event"] == "agent_start" and e["template"] == "no-spaces"]
    assert len(new) == 1
    errors = [e for e in eval_errors(fake) if e]
    assert errors == [f"blocked by compulsion {new[0]['agent_id']} (no-spaces): {block}"]
