"""The home's git history tells the whole story (issue 13; EPIC-002): eval -> result -> reply.

Each tick's commit message carries, after its one-line subject, the form the
agent evaluated and its result or error; the reply is in agent-chat.org (in
the tick's commit, or an earlier one when the commit worker ran behind: a
commit takes the files as they are when it is made).  Batch Emacs, the real server, the fake model API.
"""

import subprocess

import pytest

from tests.e2e.harness import elisp_string, run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

FORM = '(progn\n  (message "counting")\n  (+ 2 2))'


def git(home, *args):
    return subprocess.run(["git", "-C", str(home), *args], capture_output=True, text=True, check=True).stdout


def test_git_log_p_shows_each_eval_form_its_result_and_the_reply(fake, home):
    fake.script(
        Reply(agent_json(None, eval=FORM, monologue="Counting in elisp")),
        Reply(agent_json(None, eval="(car 1)", monologue="Trying car")),
        Reply(agent_json(None, eval="(make-string 3000 ?x)", monologue="A long one")),
        Reply(agent_json("It is 4.", monologue="Answered")),
    )
    run_emacs(home, fake.url, f"(amacs-e2e-open) (amacs-e2e-send {elisp_string('what is 2+2?')}) "
                              "(amacs-e2e-finish)").check()

    history = git(home, "log", "-p", "--reverse")
    form_at = history.index("    [TICK 1][no-thread][focused] «what is 2+2?» — Counting in elisp\n    \n"
                            f"    eval: {FORM.replace(chr(10), chr(10) + '    ')}\n    result: 4\n")
    error_at = history.index("    [TICK 2][no-thread][focused] eval (car 1) — Trying car\n    \n"
                             "    eval: (car 1)\n    error: Wrong type argument: listp, 1\n")
    assert form_at < error_at < history.index("    [TICK 4][no-thread][focused] reply: It is 4. — Answered\n")
    assert "\n+It is 4.\n" in history  # the reply, in agent-chat.org
    # A long result is cut in the message (the transcript has it whole).
    assert '    result: "' + "x" * 999 + "… [2,002 more characters]\n" in history
    # The subjects stay one line each and read as the story: the input that began a tick, else
    # what it did (its eval, its reply), then the monologue; a tick without an eval has no body.
    assert git(home, "log", "--format=%s").splitlines() == [
        "[TICK 4][no-thread][focused] reply: It is 4. — Answered",
        "[TICK 3][no-thread][focused] eval (make-string 3000 ?x) — A long one",
        "[TICK 2][no-thread][focused] eval (car 1) — Trying car",
        "[TICK 1][no-thread][focused] «what is 2+2?» — Counting in elisp"]
    assert git(home, "log", "-1", "--format=%b").strip() == ""
    assert git(home, "log", "-1", "--skip=1", "--format=%B").startswith(
        "[TICK 3][no-thread][focused] eval (make-string 3000 ?x) — A long one\n\neval: (make-string 3000 ?x)\n"
        "result: \"xxx")
