"""The hub (RFC v4 §9.2, EPIC-006) in batch Emacs against the real server (issue 4)."""

import json
import re

import pytest

from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

PROGRAM = r"""
(setq amacs-max-steps 10)
(with-current-buffer (get-buffer-create "*notes*") (insert "n"))
(defvar e2e-renders 0)
(add-hook 'amacs-hub-rendered-hook (lambda () (setq e2e-renders (1+ e2e-renders))))
(defun e2e-hub-text () (with-current-buffer "*amacs-hub*" (buffer-substring-no-properties (point-min) (point-max))))
(defun e2e-after-render (fn what)
  (let ((n e2e-renders)) (funcall fn) (amacs-e2e-wait (lambda () (> e2e-renders n)) what)))
(defun e2e-at (text) (set-buffer "*amacs-hub*") (goto-char (point-min)) (search-forward text) (beginning-of-line))
(amacs-e2e-open)
(amacs-e2e-send "set up")
(e2e-after-render #'amacs-hub "the hub")
(princ (format "HUB1<<%s>>\n" (e2e-hub-text)))
(defvar e2e-asked nil)
(e2e-at "  b [pending]")
(cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (push prompt e2e-asked) nil)))
  (amacs-hub-visit))
(princ (format "DECLINED<<%s>>\n" (e2e-hub-text)))
(e2e-at "  b [pending]")
(cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (push prompt e2e-asked) t)))
  (e2e-after-render #'amacs-hub-visit "a refresh after switching"))
(princ (format "ASKED<<%S>>\n" (reverse e2e-asked)))
(princ (format "HUB2<<%s>>\n" (e2e-hub-text)))
(e2e-at "Recent commits") (forward-line 1) (amacs-hub-visit)
(princ (format "COMMIT<<%s>>\n" (with-current-buffer "*amacs-commit*" (buffer-substring-no-properties (point-min) (point-max)))))
(e2e-at "buffer: *notes*") (amacs-hub-visit)
(princ (format "VISITED<<%s>>\n" (buffer-name (window-buffer (selected-window)))))
(e2e-at "Threads (") (magit-section-toggle (magit-current-section))
(princ (format "HIDDEN<<%s>>\n" (oref (magit-current-section) hidden)))
(princ (format "KEYS<<%S %S %S %S>>\n" (lookup-key amacs-hub-mode-map (kbd "RET")) (lookup-key amacs-hub-mode-map (kbd "g"))
               (lookup-key amacs-hub-mode-map (kbd "c")) (lookup-key amacs-hub-mode-map (kbd "TAB"))))
(pop-to-buffer "*amacs-hub*") ; a hidden hub is only marked stale; shown, it redraws each tick
(e2e-after-render (lambda () (amacs-e2e-send "again")) "a refresh after the next tick")
(princ (format "HUB3<<%s>>\n" (e2e-hub-text)))
(amacs-e2e-finish)
"""


def grab(stdout, label):
    return re.search(rf"{label}<<(.*?)>>\n", stdout, re.S).group(1)


def test_hub_renders_sections_and_acts_on_keys(fake, home):
    reply = json.loads(agent_json("Set up."))
    reply["scratchpad"] = {"heading": "Plan", "thread": None, "content": "x"}
    fake.script(
        Reply(agent_json(None, eval='(agent-create-thread "a" :concern "First" :buffers \'("*notes*"))')),
        Reply(agent_json(None, eval='(agent-create-thread "b" :concern "Second")')),
        Reply(agent_json(None, eval='(agent-bind-skill-to-thread "org-notes" "a")', monologue="bound a skill")),
        Reply(json.dumps(reply)),
        Reply(agent_json("Again.", mood="pleased")),
    )
    run = run_emacs(home, fake.url, PROGRAM).check()
    hub = grab(run.stdout, "HUB1")
    for expected in ("amacs-instance-1  tick 4  mood focused (0.80)", "budget: $0.0024 of $5.00 (low pressure)",
                     "session: 400 in, 80 out, cache 0 read / 0 written: $0.0024",
                     "Threads (2)", "  a [active] First", "    buffer: *notes*", "    skill:  org-notes",
                     "  b [pending] Second", "Recent monologue", "[3] bound a skill", "Scratchpad", "[4] Plan",
                     "Last eval result", 'tick 3 ok: (:thread "a"', "Recent commits", "[TICK 4][a][focused]",
                     "Chat log: "):
        assert expected in hub, expected
    # RET on a thread switches the agent's work only once the person says yes to it.
    assert "  b [pending] Second" in grab(run.stdout, "DECLINED")
    assert grab(run.stdout, "ASKED") == '("Make the agent work on thread b (it works on a now)? " ' \
                                        '"Make the agent work on thread b (it works on a now)? ")'
    assert "  b [active] Second" in grab(run.stdout, "HUB2")
    assert grab(run.stdout, "COMMIT").startswith("commit ") and "[TICK 4][a][focused]" in grab(run.stdout, "COMMIT")
    assert grab(run.stdout, "VISITED") == "*notes*"
    assert grab(run.stdout, "HIDDEN") == "t"
    assert grab(run.stdout, "KEYS") == "amacs-hub-visit amacs-hub-refresh amacs-open-chat-log magit-section-toggle"
    assert "tick 5  mood pleased" in grab(run.stdout, "HUB3")  # redrawn after the tick, from server state
    assert "[TICK 5][b][pleased]" in grab(run.stdout, "HUB3")
