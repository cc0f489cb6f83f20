"""What the agent changed, shown after the turn, and the permission setting by kind.

A newcomer's finding: what the agent does happens in hidden buffers, with no diff, no list of
what changed, and no permission prompt unless `amacs-eval-confirm' asks about every eval.
Through batch Emacs and the real server: an eval edits a buffer and writes a file; the turn
ends with one ``▸ changed`` line naming both with their line counts; RET on it shows the diff
in diff-mode and offers to undo the buffer's change, which puts the buffer back.  With
`amacs-eval-confirm' set to ``writes`` the next such eval asks about the file write only (not
the buffer edit), the refusal reaches the agent as an error, and the transcript records it.
"""

import json
import re

import pytest

from tests.e2e.agent_fakes import send, session
from tests.e2e.harness import elisp_string, run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e


def edit_and_write(path, text):
    return ('(progn (with-current-buffer "notes" (goto-char (point-max)) (insert "- one more\\n")) '
            f'(with-temp-file {elisp_string(str(path))} (insert {elisp_string(text)})) "edited")')


def printed(stdout, name):
    match = re.search(rf"^{name} (.*)$", stdout, re.M)
    assert match, stdout
    return json.loads(match.group(1))


def test_the_turn_lists_what_its_evals_changed_shows_the_diff_undoes_and_asks_only_before_writes(
        fake, home, tmp_path):
    target = tmp_path / "x.py"
    target.write_text("a\nb\nc\n")
    fake.script(Reply(agent_json(None, eval=edit_and_write(target, "a\nB\nc\nd\ne\n"))),
                Reply(agent_json("Edited.")),
                Reply(agent_json(None, eval=edit_and_write(target, "overwritten\n"))),
                Reply(agent_json("Seen.")))
    as_json = "(json-encode {})"
    program = session(
        "(require 'json)",
        "(defvar e2e-answer t) (defvar e2e-prompts nil)",
        "(advice-add 'y-or-n-p :override (lambda (prompt) (push prompt e2e-prompts) e2e-answer))",
        '(with-current-buffer (get-buffer-create "notes") (insert "- first\\n"))',
        send("edit them"),
        # RET on the changed line: the diff, then the offer to undo the buffer's change (yes).
        "(with-current-buffer amacs-shell-buffer-name (goto-char (point-min)) (search-forward \"▸ changed:\")"
        " (amacs-shell-return))",
        "(princ (format \"DIFF %s\\n\" " + as_json.format(
            "(with-current-buffer \"*amacs-changes*\" (list (symbol-name major-mode) (buffer-string)))") + "))",
        "(princ (format \"NOTES %s\\n\" " + as_json.format('(with-current-buffer "notes" (buffer-string))') + "))",
        "(princ (format \"PROMPTS1 %s\\n\" " + as_json.format("(reverse e2e-prompts)") + "))",
        "(setq e2e-prompts nil e2e-answer nil amacs-eval-confirm 'writes)",
        send("again"),
        "(princ (format \"PROMPTS2 %s\\n\" " + as_json.format("(reverse e2e-prompts)") + "))",
        "(princ (format \"NOTES2 %s\\n\" " + as_json.format('(with-current-buffer "notes" (buffer-string))') + "))")
    run = run_emacs(home, fake.url, program, HOME=str(tmp_path)).check()

    line = next(x for x in run.shell.splitlines() if x.startswith("▸ changed:"))
    assert line == "▸ changed: notes (buffer, +1 line), ~/x.py (file, +3 −1)", run.shell
    mode, diff = printed(run.stdout, "DIFF")
    assert mode == "diff-mode"
    assert "+- one more" in diff and "-b\n+B" in diff and "+++ b/~/x.py" in diff, diff
    assert printed(run.stdout, "NOTES") == "- first\n"  # undone
    assert printed(run.stdout, "PROMPTS1") == ["Undo the agent's change to buffer notes (+1 line)? "]

    # The middle setting: the buffer edit goes unasked, the file write is asked about and refused.
    prompts = printed(run.stdout, "PROMPTS2")
    assert len(prompts) == 1 and "primary's eval wants to write ~/x.py" in prompts[0], prompts
    assert printed(run.stdout, "NOTES2") == "- first\n- one more\n"
    assert target.read_text() == "a\nB\nc\nd\ne\n"
    results = re.findall(r"<last-eval-result>(.*?)</last-eval-result>", fake.user_texts()[-1], re.S)
    events = [json.loads(x) for f in (home / "transcripts").glob("*.jsonl") for x in f.read_text().splitlines()]
    decided = [e["data"]["eval_result"]["person_decisions"] for e in events
               if e["event"] == "tick_end" and "person_decisions" in e["data"]["eval_result"]]
    assert decided == [[{"action": "write", "target": "~/x.py", "allowed": False}]], decided
    assert "The person declined to let this eval write ~/x.py" in results[-1], results[-1]
    assert '"personDecisions": [{"action": "write", "target": "~/x.py", "allowed": false}]' in results[-1], results[-1]
    assert "▸ changed: notes (buffer, +1 line)" in run.shell.split("again", 1)[1]
