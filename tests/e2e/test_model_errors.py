"""What a model server says when it refuses, through the real stack: its own words reach the
person, the transcript and server.log (trimmed, the key scrubbed); a validation error told as a
500 is not retried as an outage; a window overflow is never a raw 400 on either backend."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ROOT, TEST_KEY, elisp_string, run_emacs
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json, prompt_tokens
from tests.mcp_servers import write_config

pytestmark = pytest.mark.e2e


def session(*texts: str) -> str:
    return "(amacs-e2e-open) " + " ".join(f"(amacs-e2e-send {elisp_string(t)})" for t in texts) + " (amacs-e2e-finish)"


def events(home: Path, kind: str) -> list[dict[str, Any]]:
    return [e for f in sorted((home / "transcripts").glob("*.jsonl")) for line in f.read_text().splitlines()
            if (e := json.loads(line))["event"] == kind]


def test_a_servers_refusal_is_said_in_the_shell_the_transcript_and_server_log(fake: FakeAnthropic, home: Path) -> None:
    """llama-cpp-python behind LiteLLM refused every request with a 500 saying what it refused; the
    shell said "the API failed (500) after retries" and nothing kept the words.  Now: one request
    (a validation error is no outage), and its words, key scrubbed, in all three places."""
    words = ("litellm.InternalServerError: OpenAIException - 1 validation error: {'type': 'string_type', "
             f"'loc': ('body', 'messages', 0, 'content'), 'msg': 'Input should be a valid string'}} (key {TEST_KEY})")
    fake.script(Reply(status=500, message=words), Reply(agent_json("Works now.")))
    run = run_emacs(home, fake.url, session("first try", "second try")).check()
    assert len(fake.requests) == 2 and "Works now." in run.shell
    said = [line for line in run.shell.splitlines() if "refused the request as invalid" in line]
    assert len(said) == 1, run.shell
    assert "'msg': 'Input should be a valid string'" in said[0] and "[redacted ANTHROPIC_API_KEY]" in said[0]
    assert "Your input is saved" in said[0]
    assert TEST_KEY not in run.shell
    [error] = events(home, "model_error")
    assert "Input should be a valid string" in error["data"]["error"] and TEST_KEY not in json.dumps(error)
    log = (home / "logs" / "server.log").read_text()
    assert "Input should be a valid string" in log and TEST_KEY not in log


MANY_TOOLS = {"command": sys.executable, "args": [str(ROOT / "tests" / "mcp_many_tools.py"), "12"]}
RAW = ("(400)", "prompt is too long", "maximum context length", "Requested tokens")


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_window_overflow_after_the_tools_listing_grows_is_never_a_raw_400(home: Path, backend: str) -> None:
    """The newcomer's path: a turn fits the model's window (which its server does not report); then
    mcp.json names a server with many tools, and the next request is past the window.  The turn
    compacts and goes on, or ends in one plain line; the input is kept; no raw 400 is shown."""
    fake = FakeAnthropic().start()
    try:
        env: dict[str, str] = {}
        if backend == "openai":
            fake.report_window = False
            fake.openai_stream_usage = False  # as llama-cpp-python: its calls go unstreamed, a 400 over the window
            env = {"AMACS_BACKEND": "openai", "OPENAI_BASE_URL": f"{fake.url}/v1", "AMACS_MODEL": "smollm2",
                   "ANTHROPIC_API_KEY": ""}
        run_emacs(home, fake.url, session("what is 2+2?"), **env).check()
        first = prompt_tokens(fake.requests[-1]["body"])
        window = first + 300  # the first turn fits; twelve tools' listing (~1,500 tokens) does not
        if backend == "openai":
            fake.n_ctx = window
        else:
            fake.window = window
        write_config(home, {"inventory": MANY_TOOLS})
        run = run_emacs(home, fake.url, session("and now, with the inventory tools?"), timeout=240, **env).check()
        later = run.shell.split("and now, with the inventory tools?", 1)[1]
        assert not [raw for raw in RAW if raw in later], later
        assert "and now, with the inventory tools?" in (home / "agent-chat.org").read_text()
        refused = [r for r in fake.requests if prompt_tokens(r["body"]) > window]
        assert refused and "tool_11" in json.dumps(refused[0]["body"]), "the listing did not grow past the window"
        answered = [e for e in events(home, "parsed") if e.get("tick") == 2]
        failed = [line for line in later.splitlines() if "Model call failed" in line]
        assert answered or [line for line in failed if "too long for" in line and "window" in line
                            and "Your input is saved" in line], later
        if not answered:
            assert len(failed) == 1, later
    finally:
        fake.stop()
