"""MCP tools from an eval, against servers nobody here wrote (issue: the World's tools).

A real batch Emacs drives the real server; the fake model writes the evals that
call `agent-tool'; the tools are mcp-server-time and mcp-server-git (PyPI) and
@modelcontextprotocol/server-everything (npm), each started by the server from
AMACS_HOME/mcp.json.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.context_items import eval_result, newest_message, request_text
from tests.e2e.agent_fakes import primary_texts, run_elisp, say, send, session, transcript_events, who
from tests.e2e.harness import run_emacs
from tests.mcp_servers import everything_server, git_server, install, time_server, write_config

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", autouse=True)
def servers():
    install()


def scripted(fake, forms, final="done"):
    """The fake primary evaluates FORMS one per step (by marker), then says FINAL."""

    def answer(body):
        if who(body)[1] != "primary":
            return say("")
        ctx = request_text(body)
        for marker, form in forms:
            if f"step {marker}." not in ctx:
                return run_elisp(form, monologue=f"step {marker}.")
        return say(final, monologue="end")

    fake.respond_with(answer)


def results(fake):
    """Each eval result the primary saw, in order."""
    return [eval_result(t) for t in primary_texts(fake) if "<last-eval-result>" in newest_message(t)]


def test_time_and_git_tools_list_call_and_answer_as_elisp(fake, home, tmp_path):
    """The listing is in the system prompt (cached part); a call returns structured content as a
    plist, text as a string; an isError result is an error the agent sees; a bad argument is
    named before any call; the transcript records each call."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("hello\n")
    write_config(home, {"time": time_server(), "git": git_server(repo)})
    forms = [
        ("utc", '(agent-tool "time/get_current_time" :timezone "UTC")'),
        ("field", '(plist-get (agent-tool "time/get_current_time" :timezone "Europe/Paris") :timezone)'),
        ("status", f'(agent-tool "git/git_status" :repo-path "{repo}")'),
        ("bad-zone", '(agent-tool "time/get_current_time" :timezone "Nowhere/Atlantis")'),
        ("bad-arg", '(agent-tool "time/get_current_time" :zone "UTC")'),
        ("missing", '(agent-tool "time/get_current_time")'),
        ("no-tool", '(agent-tool "time/no_such_tool")'),
    ]
    scripted(fake, forms)
    run_emacs(home, fake.url, session(send("use the tools"))).check()

    system = fake.requests[0]["body"]["system"]
    assert system[0].get("cache_control") == {"type": "ephemeral"}
    prompt = system[0]["text"]
    assert "<tools>" in prompt
    assert "time/get_current_time :timezone string — Get current time" in prompt
    assert "git/git_status :repo_path string" in prompt

    seen = results(fake)
    assert len(seen) == len(forms), seen
    utc, field, status, bad_zone, bad_arg, missing, no_tool = seen
    assert utc["success"], utc
    assert utc["result"].startswith('(:timezone "UTC" :datetime "')
    assert ":day-of-week" in utc["result"] and ":is-dst nil" in utc["result"]
    assert field == {**field, "success": True, "result": '"Europe/Paris"'}
    assert status["success"] and "On branch" in status["result"] and "a.txt" in status["result"]
    assert not bad_zone["success"]
    assert bad_zone["error"].startswith("time/get_current_time returned an error: ")
    assert "Invalid timezone" in bad_zone["error"]
    assert not bad_arg["success"]
    assert bad_arg["error"] == "time/get_current_time: no argument :zone; its arguments: :timezone"
    assert "argument :timezone is required" in missing["error"]
    assert "MCP server time has no tool 'no_such_tool'; its tools: get_current_time, convert_time" \
        in no_tool["error"]

    calls = [e["data"] for e in transcript_events(home, "primary") if e["event"] == "tool_call"]
    assert [(c["server"], c["tool"]) for c in calls[:3]] == [
        ("time", "get_current_time"), ("time", "get_current_time"), ("git", "git_status")]
    assert calls[0]["arguments"] == {"timezone": "UTC"} and calls[0]["error"] is None
    assert calls[0]["result_chars"] > 20 and 0 < calls[0]["seconds"] < 20
    assert "Invalid timezone" in calls[3]["error"]
    assert calls[4]["error"].startswith("time/get_current_time: no argument :zone")
    # Their stderr went to the log, not the shell.
    assert (home / "logs" / "mcp-time.log").exists()


def test_everything_server_results_and_timeout(fake, home):
    """The reference server: text, structured content, an image (described, not inlined), and a
    call past the server's timeout given up with an error that says so, the server going on."""
    write_config(home, {"everything": everything_server(timeout=3)})
    forms = [
        ("echo", '(agent-tool "everything/echo" :message "hi there")'),
        ("image", '(agent-tool "everything/get-tiny-image")'),
        ("slow", '(agent-tool "everything/trigger-long-running-operation" :duration 8 :steps 2)'),
        ("after", '(agent-tool "everything/echo" :message "still here")'),
    ]
    scripted(fake, forms)
    run_emacs(home, fake.url, session(send("try everything")), timeout=180).check()
    echo, image, slow, after = results(fake)
    assert echo["success"] and "hi there" in echo["result"], echo
    assert image["success"] and ':mime-type "image/png"' in image["result"] and ":bytes" in image["result"], image
    assert not slow["success"] and "did not answer within 3 s" in slow["error"], slow
    assert after["success"] and "still here" in after["result"], after
