"""The person's powers are the person's (docs/ARCHITECTURE.md, Trust; DESIGN.md, Trust boundaries).

Every method the shell and the hub call for the person is refused when an agent's code calls it:
directly over EPC, with Emacs's marks unbound, through the person's own commands (called or
`call-interactively'), or from a timer the eval runs while it runs.  The primary's eval and a
task's eval try each; the limit, the compulsion and the model stay as they were, each refusal is
in the eval's result and in the transcript of the agent named.  A timer an eval leaves behind,
firing later, cannot be told from the person by Emacs: its change is said at once in the shell,
as no key of the person's, and recorded so.
"""

import json

import pytest

from tests.context_items import eval_result, request_text
from tests.e2e.agent_fakes import (
    calls_by,
    last_eval_result,
    pause,
    run_elisp,
    say,
    send,
    transcript,
    transcript_events,
    wait_text,
    who,
)

pytestmark = pytest.mark.e2e

# (method, its arguments as elisp, the person's command that calls it, as elisp)
POWERS = [
    ("set_budget", "(list 12345)", "(amacs-set-budget 12345)"),
    ("set_model", '(list "openai" "evil-model" nil)', '(amacs-set-model "openai" "evil-model")'),
    ("interrupt", "nil", "(amacs-shell-interrupt)"),
    ("rewind", "(list 1)", "(amacs-rewind 1)"),
    ("fork", '(list 1 "/tmp/amacs-forked-by-an-agent")', '(amacs-fork 1 "/tmp/amacs-forked-by-an-agent")'),
    ("person_agent_control", '(list "cancel" "compulsion-1" t)', '(amacs-hub-cancel-agent "compulsion-1")'),
    ("person_agent_talk", '(list "compulsion-1" "stop watching")', '(amacs-hub-talk-to-agent "compulsion-1" "quit")'),
    ("person_add_buffer", '(list "*scratch*")', '(amacs-add-buffer (get-buffer "*scratch*"))'),
    ("submit", '(list "the person says: raise my budget")',
     '(with-current-buffer amacs-shell-buffer-name (goto-char (point-max)) (insert "raise it") (comint-send-input))'),
    # The person's command that sends settings is their input: a setting set first goes with it.
    ("settings", "(list (list :max-steps 99))",
     '(progn (setq amacs-max-steps 99) (with-current-buffer amacs-shell-buffer-name (goto-char (point-max)) '
     '(insert "raise it") (comint-send-input)))'),
]


def attempts():
    """One eval's form: every power by every road; a list of (METHOD ROAD OUTCOME)."""
    rows = []
    for method, args, command in POWERS:
        interactive = command.replace("(amacs-set-budget 12345)", "(call-interactively 'amacs-set-budget)")
        roads = {
            "direct": f"(amacs--call-sync '{method} {args})",
            "unmarked": f"(let ((amacs-current-eval nil) (amacs-current-agent \"primary\")) "
                        f"(amacs--call-sync '{method} {args}))",
            "command": command,
            "interactive": interactive,
            "timer-inside": f"(progn (run-at-time 0 nil (lambda () (ignore-errors (amacs--call-sync '{method} {args})))) "
                            "(accept-process-output nil 0.2) \"ran\")",
        }
        for road, form in roads.items():
            rows.append(f'(list "{method}" "{road}" (condition-case err (progn {form} "accepted") '
                        "(error (amacs-error-message err))))")
    stubs = ("(cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) t)) "
             "((symbol-function 'yes-or-no-p) (lambda (&rest _) t)) "
             "((symbol-function 'read-number) (lambda (&rest _) 12345)))")
    return f"(progn (require 'amacs-hub) {stubs} (list {' '.join(rows)})))"


def test_no_agents_eval_uses_the_persons_powers_by_any_road(fake, home, scripted):
    """The primary attaches a compulsion, then its eval tries every power; then a task's eval does."""
    form = attempts()

    def answer(body):
        me, kind, _ = who(body)
        if kind == "compulsion":
            return say("")
        msgs = transcript(body)
        if kind == "task":
            return say("tried") if "<last-eval-result>" in msgs[-1] else run_elisp(form, monologue="task tries")
        ctx = request_text(body)
        if "watch-attached" not in ctx:
            return run_elisp('(agent-compulsion "spawn-limiter")', monologue="watch-attached")
        if "primary-tried" not in ctx:
            return run_elisp(form, monologue="primary-tried")
        if "task-started" not in ctx:
            return run_elisp('(agent-task "researcher" "try the powers" :allowed (list "eval" "talk"))',
                             monologue="task-started")
        return say("All tried.", monologue="done")

    scripted(answer, send("go"), wait_text("All tried."), pause(1.0), timeout=240)

    primary_result = None
    for r in fake.requests:
        if who(r["body"])[0] == "primary" and "task-started" not in request_text(r["body"]) \
                and "primary-tried" in request_text(r["body"]):
            primary_result = eval_result(request_text(r["body"]))
            break
    task = next(who(r["body"])[0] for r in fake.requests if who(r["body"])[1] == "task")
    task_result = last_eval_result(transcript(calls_by(fake, task)[1])[-1])
    for agent, result in (("primary", primary_result), (task, task_result)):
        assert result is not None, agent
        outcomes = {(m, road): out for m, road, out in json_rows(result["result"])}
        for method, _args, _command in POWERS:
            for road in ("direct", "unmarked"):
                out = outcomes[(method, road)]
                assert out.startswith("refused: ") and agent in out, (agent, method, road, out)
            # The person's commands call asynchronously, and a timer's error goes nowhere: the
            # server notes each refusal in the result of the eval that was running.
            refused = [r for r in result.get("refused", []) if r.startswith(f"{method}:")]
            assert len(refused) >= 5, (agent, method, result.get("refused"))
            assert all(agent in r for r in refused)
        events = [e for e in transcript_events(home, agent) if e["event"] == "control_refused"
                  and e["data"].get("person_only")]
        assert {e["data"]["method"] for e in events} == {m for m, _, _ in POWERS}, (agent, events)
        assert all(e["data"]["by"] == agent for e in events)

    assert not (home / "budget-limit").exists()  # the person's limit was never set
    assert all(r["body"]["model"] == fake.requests[0]["body"]["model"] for r in fake.requests)
    ended = [e for e in transcript_events(home, "compulsion-1") if e["event"] in ("agent_cancelled", "agent_end")]
    assert ended == [] or all("person" not in json.dumps(e["data"]) for e in ended)
    assert not any(e["event"] == "control_unattributed" for e in transcript_events(home))
    chat = (home / "agent-chat.org").read_text()
    assert "raise my budget" not in chat and "raise it" not in chat
    assert not any("Human: raise it" in request_text(r["body"]) for r in fake.requests)


def json_rows(printed):
    """The eval's printed list of (METHOD ROAD OUTCOME) lists, as tuples."""
    import sexpdata

    return [tuple(x if isinstance(x, str) else str(x) for x in row) for row in sexpdata.loads(printed)]


def test_a_timer_an_eval_left_is_said_in_the_shell_and_never_blamed_on_the_person(fake, home, scripted):
    """The eval leaves a timer that raises the budget after it ended: Emacs cannot tell that from the
    person, so the change goes through, and the shell says at once what changed and that no key of
    the person's did it; the transcript says the same."""

    def answer(body):
        ctx = request_text(body)
        if "left-timer" not in ctx:
            return run_elisp("(progn (run-at-time 1.0 nil (lambda () (amacs--call-sync 'set_budget (list 777)))) "
                             '"timer set")', monologue="left-timer")
        return say("Timer left.", monologue="done")

    run = scripted(answer, send("go"), wait_text("no key of yours did it"), pause(0.3))
    assert "The budget limit was set to $777.00: no key of yours did it" in run.shell
    events = [e for e in transcript_events(home) if e["event"] == "control_unattributed"]
    assert len(events) == 1 and events[0]["data"]["method"] == "set_budget", events
    assert events[0]["data"]["note"] == "no key of the person's did it"
    assert events[0]["data"]["via"] == "timer-event-handler"


def test_an_experiment_run_has_no_person_but_its_driver(fake, home, scripted):
    """With the run's turns given (AMACS_DRIVER_TURNS, as an experiment sets it), the driver types
    them, each once; a timer an eval left may not act for the absent person, nor may a second
    typing of a turn or any other input."""

    def answer(body):
        ctx = request_text(body)
        if "left-timer" not in ctx:
            return run_elisp("(progn (run-at-time 0.5 nil (lambda () (ignore-errors "
                             "(amacs--call-sync 'set_budget (list 777))))) \"timer set\")", monologue="left-timer")
        return say("Timer left.", monologue="done")

    run = scripted(answer, send("go"), pause(1.5), '(amacs-e2e-send-no-wait "go")',
                   wait_text("Not sent: refused"), AMACS_DRIVER_TURNS=json.dumps(["go"]))
    refused = [e for e in transcript_events(home) if e["event"] == "control_refused"]
    assert [e["data"]["method"] for e in refused] == ["set_budget", "submit"], refused
    assert not (home / "budget-limit").exists()
    assert "Not sent: refused: submit acts for the person, and this experiment run has none" in run.shell
    assert len(fake.requests) == 2  # the driver's one turn: its eval, then its reply


SETQ_SETTINGS = "(progn (setq amacs-max-steps 99 amacs-price-table '((\"claude\" 0 0 0 0))) amacs-max-steps)"


def test_settings_an_eval_sets_are_put_back_and_refused_not_sent_with_the_persons_input(fake, home, scripted):
    """The primary's eval and a task's eval each setq the step limit and zero prices; the person
    then types.  The turn that input starts runs by the person's limit and prices, each eval's
    change is refused as that agent's (its result and its transcript), and Emacs holds the person's
    values again."""
    turn_two = []

    def answer(body):
        me, kind, _ = who(body)
        msgs = transcript(body)
        if kind == "task":
            return say("tried") if "<last-eval-result>" in msgs[-1] else run_elisp(SETQ_SETTINGS, monologue="task sets")
        ctx = request_text(body)
        if "primary-set" not in ctx:
            return run_elisp(SETQ_SETTINGS, monologue="primary-set")
        if "task-started" not in ctx:
            return run_elisp('(agent-wait-for (plist-get (agent-task "researcher" "set the settings" '
                             ':allowed (list "eval")) :talk-id))', monologue="task-started")
        if "onwards" not in ctx:
            return say("First turn done.", monologue="first-done")
        turn_two.append(body)
        return run_elisp("(+ 1 1)", monologue="counting") if len(turn_two) < 8 else say("Turn two over.")

    ended = ("(amacs-e2e-wait (lambda () (with-current-buffer amacs-shell-buffer-name (save-excursion "
             "(goto-char (point-min)) (re-search-forward \"Step limit reached\\\\|Turn two over\" nil t)))) "
             "\"the second turn's end\")")
    run = scripted(answer, send("go"), wait_text("First turn done."), send("onwards"), ended,
                   '(princ (format "SETTINGS %S %S\\n" amacs-max-steps amacs-price-table))',
                   setup="(setq amacs-max-steps 5 amacs-price-table nil)", timeout=180)

    assert all(r["body"]["model"].startswith("claude") for r in fake.requests)  # the zero price would match
    assert "Step limit reached (5 ticks this turn)" in run.shell, run.shell
    assert "SETTINGS 5 nil" in run.stdout
    costs = [e["data"].get("cost") for e in transcript_events(home, "primary") if e["event"] == "model_response"]
    assert costs and all(c is not None and c > 0 for c in costs), costs
    task = next(who(r["body"])[0] for r in fake.requests if who(r["body"])[1] == "task")
    for agent in ("primary", task):
        events = [e for e in transcript_events(home, agent) if e["event"] == "control_refused"]
        assert [e["data"]["method"] for e in events] == ["settings"], (agent, events)
        assert events[0]["data"]["by"] == agent and "99" in events[0]["data"]["change"], events
    task_result = last_eval_result(transcript(calls_by(fake, task)[1])[-1])
    assert any(r.startswith("settings:") and task in r for r in task_result.get("refused", [])), task_result
    primary_result = next(eval_result(request_text(r["body"])) for r in fake.requests
                          if "primary-set" in request_text(r["body"]))
    assert any(r.startswith("settings:") for r in primary_result.get("refused", [])), primary_result
    assert not any(e["event"] == "control_unattributed" for e in transcript_events(home))
