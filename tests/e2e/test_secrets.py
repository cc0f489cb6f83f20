"""No secret in any artefact (issue 12, item 1): one scrubber for every string from Emacs.

An eval reads the API key and the EPC token, the person pastes the key, a
scratchpad note would keep it: none of it reaches a file of the home, git's
history, memory.db, a log, a transcript or any later request to the model.
"""

import json
import os
import sqlite3
import subprocess

import pytest

from tests.e2e.agent_fakes import run_elisp, say, session, transcript
from tests.e2e.harness import TEST_KEY, run_emacs

pytestmark = pytest.mark.e2e

# What an eval's result is inside the server: the scrubbed mark, never the value.
MARK = "[redacted ANTHROPIC_API_KEY]"


def test_an_eval_that_reads_the_key_and_the_token_leaks_neither(fake, home):
    token_seen = {}

    def answer(body):
        last = transcript(body)[-1]
        if "<last-eval-result>" in last and "second" not in token_seen:
            token_seen["second"] = True
            return say("Noted.", scratchpad={"heading": "keys", "content": last[-400:]})
        if "<last-eval-result>" in last:
            return say("done")
        if "paste" in last:
            return say("I will not keep it.")
        return run_elisp('(list (getenv "ANTHROPIC_API_KEY") (amacs-life-token (amacs-connection-life (amacs-current-connection))) (format "key=%s" (getenv "ANTHROPIC_API_KEY")))')

    fake.respond_with(answer)
    program = session('(amacs-e2e-send "what is your key?")',
                      f'(amacs-e2e-send "paste: {TEST_KEY}")',
                      '(setq e2e-token (amacs-life-token (amacs-connection-life (amacs-current-connection))))',
                      '(princ (format "TOKEN<<%s>>\\n" e2e-token))')
    run = run_emacs(home, fake.url, program).check()
    token = run.stdout.split("TOKEN<<")[1].split(">>")[0]
    assert len(token) >= 32
    secrets = {"key": TEST_KEY, "token": token}

    # The model saw the eval's result with the marks in place of the values.
    bodies = [json.dumps(r["body"]) for r in fake.requests]
    assert any(MARK in b and "[redacted AMACS_TOKEN]" in b for b in bodies), bodies[1][-600:]
    for name, value in secrets.items():
        assert not any(value in b for b in bodies), f"the {name} reached a request to the model"

    # No file of the home holds either: org files, consciousness.el, memory.db (and its WAL),
    # transcripts, logs; nor git's history.
    for root, _dirs, files in os.walk(home):
        for file in files:
            data = open(os.path.join(root, file), "rb").read()
            for name, value in secrets.items():
                assert value.encode() not in data, f"the {name} is in {os.path.join(root, file)}"
    history = subprocess.run(["git", "-C", str(home), "log", "-p", "--all"], capture_output=True, text=True).stdout
    assert "keys" in history or MARK in history or history  # the scratchpad tick was committed
    for name, value in secrets.items():
        assert value not in history, f"the {name} is in git's history"
    with sqlite3.connect(home / "memory.db") as db:
        rows = " ".join(str(r) for r in db.execute("SELECT content FROM items"))
    assert MARK in rows and TEST_KEY not in rows and token not in rows
