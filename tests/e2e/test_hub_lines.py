"""The hub's lines as a newcomer read them: "Last eval result (none)" right after a rewind to a
tick that had one; "6 steps" without saying since when; long lines cut with a bare "$" (a
terminal's mark of a cut line, read as part of a price)."""

import re

import pytest

from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

PROGRAM = r"""
(defun e2e-hub-text () (with-current-buffer "*amacs-hub*" (buffer-substring-no-properties (point-min) (point-max))))
(defvar e2e-renders 0)
(add-hook 'amacs-hub-rendered-hook (lambda () (setq e2e-renders (1+ e2e-renders))))
(defun e2e-render () (let ((n e2e-renders)) (amacs-hub) (amacs-e2e-wait (lambda () (> e2e-renders n)) "the hub")))
(amacs-e2e-open)
(amacs-e2e-send "count")
(amacs-e2e-send "chat")
(amacs-rewind 2)
(e2e-render)
(princ (format "HUB<<%s>>\n" (e2e-hub-text)))
(princ (format "GLYPH<<%s>>\n" (with-current-buffer "*amacs-hub*"
                                  (char-to-string (glyph-char (display-table-slot buffer-display-table 'truncation))))))
(amacs-e2e-finish)
"""


def test_the_hubs_last_eval_after_a_rewind_its_labelled_steps_and_no_bare_dollar(fake, home):
    fake.script(Reply(agent_json(None, eval="(+ 1 1)")), Reply(agent_json("Two.")), Reply(agent_json("Chatted.")))
    run = run_emacs(home, fake.url, PROGRAM).check()
    hub = re.search(r"HUB<<(.*?)>>\n", run.stdout, re.S).group(1)
    assert "Last eval result\n  tick 1 ok: 2" in hub, hub  # the rewound mind's last eval, not "(none)"
    assert re.search(r"Agents \(1\): steps \(model calls\) and cost since this server started", hub), hub
    assert re.search(r"GLYPH<<…>>", run.stdout), run.stdout
