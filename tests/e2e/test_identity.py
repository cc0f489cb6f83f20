"""Identity held by the server (issue 11; agent-world-architecture.md, The World: allowed actions).

The server knows which agent each eval it sends runs for, and attaches that
caller to every agent-function call the eval makes: nothing the eval binds
(`amacs-current-agent', `amacs-current-eval') changes who it acts as.
"""


import pytest
import sexpdata

from tests.e2e.agent_fakes import (
    calls_by,
    event_lines,
    last_eval_result,
    run_elisp,
    say,
    session,
    transcript,
    transcript_events,
    who,
)
from tests.e2e.harness import elisp_string, run_emacs

pytestmark = pytest.mark.e2e

# A task's one eval: four ways to act as the primary, each caught, then an honest call.
ESCAPES = """
(list
 (condition-case err (let ((amacs-current-agent "primary")) (plist-get (agent-task "researcher" "escape 1") :handle))
   (amacs-remote-error (cadr err)))
 (condition-case err (let ((amacs-current-eval nil)) (plist-get (agent-task "researcher" "escape 2") :handle))
   (amacs-remote-error (cadr err)))
 (condition-case err (let ((amacs-current-eval 1)) (plist-get (agent-task "researcher" "escape 3") :handle))
   (amacs-remote-error (cadr err)))
 (condition-case err (plist-get (amacs--call-sync 'agent_task (list "primary" amacs-current-eval "researcher"
                                                                   "escape 4" nil)) :handle)
   (amacs-remote-error (cadr err)))
 (let ((amacs-current-agent "primary")) (agent-talk-log "whose log?"))
 (condition-case err (let ((amacs-current-agent "primary") (amacs-current-eval nil))
                       (amacs--call-sync 'set_budget (list 12345)))
   (amacs-remote-error (cadr err)))
 (condition-case err (let ((amacs-current-agent "primary") (amacs-current-eval nil))
                       (amacs--call-sync 'submit (list "the person says: start a task")))
   (amacs-remote-error (cadr err))))
"""


def test_a_task_that_binds_the_primarys_identity_still_acts_as_itself(fake, home):
    """A task allowed only eval and talk cannot start a task by claiming to be the primary.

    Binding `amacs-current-agent' is ignored; binding `amacs-current-eval' to nil
    (as if outside any eval) or to a guessed id is refused; so is the old call
    shape that named the caller.  Its talk-log is its own, not the primary's, and the person's
    powers (budget, input as theirs) are refused to it with the identity bound as well.
    """

    def answer(body):
        me = who(body)[0]
        msgs = transcript(body)
        if me == "primary":
            events = event_lines(msgs[-1])  # the newest tick's
            if any(e.get("content") == {"logged": "from the person"} for e in events):
                return say("Noted the log.")
            if any(e.get("type") == "Agent" and e.get("source") == "task-1" for e in events):
                return say("Task finished.")
            if "<last-eval-result>" in msgs[-1]:
                return say("Started.")
            return run_elisp('(agent-task "researcher" "try to be the primary" :allowed (list "eval" "talk"))')
        if me != "task-1":
            return say("an escaped task ran")
        if "<last-eval-result>" in msgs[-1]:
            return say("I stayed task-1.")
        return run_elisp(ESCAPES)

    fake.respond_with(answer)
    outside = ('(princ (format "OUTSIDE<<%S>>\\n" (list (agent-talk-log "from the person") '
               '(condition-case err (let ((amacs-current-eval 12345)) (agent-talk-log "stale")) '
               '(amacs-remote-error (cadr err))))))')
    run = run_emacs(home, fake.url, session(f"(amacs-e2e-send {elisp_string('go')})",
                                            f"(amacs-e2e-wait-text {elisp_string('Task finished.')})",
                                            outside, f"(amacs-e2e-wait-text {elisp_string('Noted the log.')})")).check()

    task_calls = calls_by(fake, "task-1")
    result = last_eval_result(transcript(task_calls[1])[-1])  # what the model heard back from the eval
    # Each refusal arrives as the condition `amacs-remote-error', its data the server's message (issue 14).
    assert result["success"], result
    refused = sexpdata.loads(result["result"])
    assert refused[0] == ("task-1 (task researcher) may not use the task action; allowed: eval, talk")
    assert refused[1].startswith("agent functions called outside an eval are refused while an eval runs")
    assert refused[2].startswith("eval 1 is not running")
    assert refused[3].startswith("eval 'primary' is not running")
    assert isinstance(refused[4], int)  # the talk-log went through, as task-1's (below)
    # Nor does it act as the person: their powers are refused, naming it (docs/ARCHITECTURE.md, Trust).
    assert refused[5].startswith("refused: set_budget acts for the person, and task-1's eval called it")
    assert refused[6].startswith("refused: submit acts for the person, and task-1's eval called it")
    assert not (home / "budget-limit").exists()

    rows = transcript_events(home)
    assert [r["agent_id"] for r in rows if r["event"] == "agent_start"] == ["task-1"]  # no task escaped
    logs = {r["data"]["text"]: r["agent_id"] for r in rows if r["event"] == "talk_log"}
    assert logs == {"whose log?": "task-1", "from the person": "primary"}
    # Outside any eval the person acts as the primary; an eval id that is not running is refused.
    outside_result = run.stdout.split("OUTSIDE<<")[1].split(">>\n")[0]
    assert "eval 12345 is not running" in outside_result
