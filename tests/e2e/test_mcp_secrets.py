"""What mcp.json gives its servers stays secret: a grep of everything the server wrote or sent.

A secret token and a database URL with a password reach a tool server through
mcp.json's env (``${VAR}``).  The server quotes them in a tool's description, a
result, an error, its stderr and a stray stdout line; the agent's eval reads them
with getenv from the person's Emacs.  None of it is in any file of the home, any git
object, any log or any request the model got: each is a ``[redacted ...]`` mark.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.e2e.agent_fakes import run_elisp, say, send, session, who
from tests.e2e.harness import run_emacs
from tests.mcp_servers import hostile_server, write_config

pytestmark = pytest.mark.e2e

TOKEN = "tok-0f9e8d7c6b5a4f3e2d1c"
PASSWORD = "Pw-9x8y7z6w"
DATABASE_URL = f"postgres://app:{PASSWORD}@db.example:5432/app"


def planted(data: bytes) -> list[str]:
    """Which secrets DATA holds (the token, the URL's password), even in part."""
    return [name for name, value in (("token", TOKEN), ("password", PASSWORD), ("token's half", TOKEN[:12]))
            if value.encode() in data]


def test_no_secret_of_mcp_json_in_any_file_git_object_log_or_request(fake, home):
    write_config(home, {"leaky": hostile_server("leaky", env={"SECRET_TOKEN": "${SECRET_TOKEN}",
                                                             "DATABASE_URL": "${DATABASE_URL}"})})
    forms = [("whoami", '(agent-tool "leaky/whoami")'),
             ("getenv", '(list (getenv "SECRET_TOKEN") (getenv "DATABASE_URL"))'),
             ("fail", '(agent-tool "leaky/fail")'),
             ("note", '(format "token=%s" (getenv "SECRET_TOKEN"))')]

    def answer(body):
        if who(body)[1] != "primary":
            return say("")
        text = json.dumps(body)
        for marker, form in forms:
            if f"step {marker}." not in text:
                return run_elisp(form, monologue=f"step {marker}.")
        return say("done", monologue="end", scratchpad={"heading": "seen", "content": text[-300:]})

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("go")), timeout=180,
              SECRET_TOKEN=TOKEN, DATABASE_URL=DATABASE_URL).check()

    bodies = [json.dumps(r["body"], ensure_ascii=False) for r in fake.requests]
    assert any("[redacted mcp.json" in b for b in bodies), bodies[-1][-2000:]
    for i, body in enumerate(bodies):
        assert not planted(body.encode()), f"request {i} holds {planted(body.encode())}"
    system = json.dumps(fake.requests[-1]["body"].get("system", ""))
    assert "leaky/whoami" in system and "[redacted mcp.json" in system  # the listing, its description scrubbed

    for root, _dirs, files in os.walk(home):
        for file in files:
            path = os.path.join(root, file)
            with open(path, "rb") as f:
                assert not planted(f.read()), f"{path} holds {planted(open(path, 'rb').read())}"
    logs = home / "logs"
    assert (logs / "mcp-leaky.log").exists() and "[redacted mcp.json" in (logs / "mcp-leaky.log").read_text()
    assert "not JSON-RPC" in (logs / "server.log").read_text()

    git = ["git", "-C", str(home)]
    history = subprocess.run([*git, "log", "-p", "--all"], capture_output=True, check=True).stdout
    assert history and not planted(history)
    objects = subprocess.run([*git, "cat-file", "--batch-all-objects", "--batch"], capture_output=True,
                             check=True).stdout
    assert objects and not planted(objects)
