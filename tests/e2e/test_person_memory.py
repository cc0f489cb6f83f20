"""A person's way into the agent's memory: a MemId typed as the person reads it (without the
<EOT>s the agent is given) is taken, the person's calls echo it so, the hub's Memory section
lists the pinned items, RET shows one and its versions, and M-x amacs-memory-search finds them.

A newcomer's ``(agent-memory-mutate "amacs-instance-1:primary:groceries" ...)`` was refused
("must start and end with <EOT>"), every echo showed the sentinels, and nothing in the hub or
the docs showed the memory at all.  The model still reads every address with its <EOT>s."""

import re

import pytest

from tests.context_items import parse_context
from tests.e2e.agent_fakes import primary_texts
from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

PROGRAM = r"""
(defun e2e-text (name) (with-current-buffer name (buffer-substring-no-properties (point-min) (point-max))))
(defun e2e-out (tag value) (princ (format "%s<<%s>>\n" tag value)))
(defvar e2e-renders 0)
(add-hook 'amacs-hub-rendered-hook (lambda () (setq e2e-renders (1+ e2e-renders))))
(defun e2e-render () (let ((n e2e-renders)) (amacs-hub) (amacs-e2e-wait (lambda () (> e2e-renders n)) "the hub")))
(amacs-e2e-open)
(e2e-out "AUTOLOADED" (list (featurep 'amacs-hub) (commandp 'amacs-memory-search) (commandp 'amacs-memory-show)))
(e2e-out "CREATED" (prin1-to-string (agent-memory-create "groceries" "buy oat milk and rye bread" :tags "home")))
(e2e-out "MUTATED" (prin1-to-string (agent-memory-mutate "amacs-instance-1:primary:groceries"
                                                         "buy oat milk, rye bread and coffee")))
(e2e-out "MISSING" (condition-case err (agent-memory-load "amacs-instance-1:primary:groceries:7")
                     (error (error-message-string err))))
(e2e-out "SEARCHED" (prin1-to-string (agent-memory-search "coffee")))
(e2e-render)
(e2e-out "HUB" (e2e-text "*amacs-hub*"))
(set-buffer "*amacs-hub*") (goto-char (point-min)) (search-forward "groceries") (amacs-hub-visit)
(e2e-out "SHOWN" (e2e-text "*amacs-memory*"))
(with-current-buffer "*amacs-memory*" (amacs-memory-previous-version))
(e2e-out "OLDER" (e2e-text "*amacs-memory*"))
(with-current-buffer "*amacs-memory*" (amacs-memory-next-version))
(e2e-out "NEWER" (e2e-text "*amacs-memory*"))
(amacs-memory-search "bread")
(e2e-out "HITS" (e2e-text "*amacs-memory-search*"))
(with-current-buffer "*amacs-memory-search*" (push-button (point)))
(e2e-out "HIT" (e2e-text "*amacs-memory*"))
(amacs-memory-show "<EOT>amacs-instance-1:primary:groceries<EOT>" 1)
(e2e-out "TYPED" (e2e-text "*amacs-memory*"))
(e2e-out "REFUSED" (condition-case err (amacs-memory-show "groceries") (user-error (cadr err))))
(amacs-e2e-send "what is on the list?")
(e2e-render)
(e2e-out "MONOLOGUE" (with-current-buffer "*amacs-hub*" (goto-char (point-min)) (search-forward "Recent monologue\n")
                       (buffer-substring-no-properties (point) (line-end-position))))
(amacs-e2e-finish)
"""


def grab(out, tag):
    found = re.search(rf"{tag}<<(.*?)>>\n", out, re.S)
    assert found, out
    return found.group(1)


def test_a_person_reads_types_and_searches_the_agents_memory_without_its_sentinels(fake, home):
    fake.script(Reply(agent_json("Oat milk, rye bread and coffee.",
                                 monologue="read <EOT>amacs-instance-1:primary:groceries:2<EOT>")))
    run = run_emacs(home, fake.url, PROGRAM).check()
    out = run.stdout
    assert grab(out, "AUTOLOADED") == "(nil t t)"  # M-x finds them before the hub is loaded
    assert grab(out, "CREATED") == '(:mem-id "amacs-instance-1:primary:groceries:1" :version 1 :tier "ram" :kind "note")'
    assert grab(out, "MUTATED") == ('(:mem-id "amacs-instance-1:primary:groceries:2" :version 2 :tier "ram" '
                                    ':kind "note" :previous-version 1)')
    assert '"amacs-instance-1:primary:groceries:7 does not exist; versions 1..2 do"' in grab(out, "MISSING")
    assert '(:mem-id "amacs-instance-1:primary:groceries:2"' in grab(out, "SEARCHED")
    assert "<EOT>" not in out
    assert grab(out, "MONOLOGUE") == "  [1] read amacs-instance-1:primary:groceries:2"  # the agent's words, as the person reads them

    hub = grab(out, "HUB")
    assert re.search(r"Memory: 1 pinned, \d+ versions in long-term memory \(M-x amacs-memory-search\)", hub), hub
    assert re.search(r"  groceries +note +v2 +buy oat milk, rye bread and coffee\n", hub), hub

    shown = grab(out, "SHOWN")
    assert shown.startswith("groceries  version 2 of 2  (note, tags: home)\namacs-instance-1:primary:groceries:2  written ")
    assert shown.endswith("buy oat milk, rye bread and coffee\n")
    assert grab(out, "OLDER").startswith("groceries  version 1 of 2") and "buy oat milk and rye bread\n" in grab(out, "OLDER")
    assert grab(out, "NEWER").startswith("groceries  version 2 of 2")

    hits = grab(out, "HITS")
    assert hits.startswith('1 hit for "bread" in the agent\'s memory'), hits
    assert "amacs-instance-1:primary:groceries:2  (note)\n" in hits and "[bread]" in hits, hits
    assert grab(out, "HIT").startswith("groceries  version 2 of 2")
    assert grab(out, "TYPED").startswith("groceries  version 1 of 2")
    assert "MemId 'groceries' needs AGENT:BRAIN:NAME" in grab(out, "REFUSED")

    # What the model reads keeps the <EOT>s (the spec's MemId); the person's reading added no
    # item to the agent's memory, nor loaded version 1 back.
    request = primary_texts(fake)[-1]
    memory = parse_context(request).get("memory", [])
    assert [item["mem_id"] for item in memory] == ["<EOT>amacs-instance-1:primary:groceries:2<EOT>"], memory
