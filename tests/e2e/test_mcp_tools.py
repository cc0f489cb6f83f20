"""MCP tools from an eval, against servers nobody here wrote (issue: the World's tools).

A real batch Emacs drives the real server; the fake model writes the evals that
call `agent-tool'; the tools are mcp-server-time and mcp-server-git (PyPI) and
@modelcontextprotocol/server-everything (npm), each started by the server from
AMACS_HOME/mcp.json.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.context_items import request_text, said
from tests.e2e.agent_fakes import (
    run_elisp,
    say,
    send,
    session,
    transcript_events,
    who,
)
from tests.e2e.conftest import SHOW_HUB, Evals, shown_hub
from tests.e2e.harness import TEST_KEY, run_emacs
from tests.mcp_servers import (
    ROOT,
    everything_server,
    git_server,
    install,
    time_server,
    write_config,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", autouse=True)
def servers():
    install()




def test_time_and_git_tools_list_call_and_answer_as_elisp(fake, evals, home, tmp_path):
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
    evals.script(forms)
    run = run_emacs(home, fake.url, session(send("use the tools"))).check()

    system = fake.requests[0]["body"]["system"]
    assert system[0].get("cache_control") == {"type": "ephemeral"}
    prompt = system[0]["text"]
    assert "<tools>" in prompt
    assert "time/get_current_time :timezone string — Get current time" in prompt
    assert "git/git_status :repo_path string" in prompt

    seen = evals.results()
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
    # Each call is a line of its own under its eval's line (folded: its arguments and result hidden).
    lines = run.shell.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith('▸ eval (agent-tool "time/get_current_time" '
                                                                   ':timezone "UTC")'))
    shown = [line for line in lines[at + 1:] if line.startswith("▸ ")]  # the dump has the hidden details too
    assert shown[0].startswith('▸ tool time/get_current_time → (:timezone "UTC" :datetime "'), lines[at:at + 6]
    assert any(line.startswith('▸ tool time/get_current_time → error: time/get_current_time: no argument')
               for line in lines)


def test_everything_server_results_and_timeout(fake, evals, home):
    """The reference server: text, structured content, an image (described, not inlined), and a
    call past the server's timeout given up with an error that says so, the server going on."""
    write_config(home, {"everything": everything_server(timeout=3, env={"AMACS_TEST_GIVEN": "${HOME}/given"})})
    forms = [
        ("echo", '(agent-tool "everything/echo" :message "hi there")'),
        ("image", '(agent-tool "everything/get-tiny-image")'),
        ("slow", '(agent-tool "everything/trigger-long-running-operation" :duration 8 :steps 2)'),
        ("after", '(agent-tool "everything/echo" :message "still here")'),
        ("weather", '(plist-get (agent-tool "everything/get-structured-content" :location "New York") :conditions)'),
        ("resource", '(agent-tool "everything/get-resource-reference" :resource-type "Text" :resource-id 2)'),
        ("env", '(agent-tool "everything/get-env")'),
    ]
    evals.script(forms)
    run = run_emacs(home, fake.url, session(send("try everything")), timeout=180).check()
    echo, image, slow, after, weather, resource, env = evals.results()
    assert weather["success"] and weather["result"].startswith('"'), weather
    assert resource["success"] and ':type "resource"' in resource["result"] and ':chars' in resource["result"], resource
    # A stdio server gets its env (with ${VAR}) and a safe part of the environment, never the API key.
    user_home = str(home.parent / "user-home")
    assert f"AMACS_TEST_GIVEN\\\":\\\"{user_home}/given" in env["result"].replace(" ", ""), env
    assert "ANTHROPIC_API_KEY" not in env["result"] and TEST_KEY not in env["result"]
    # What the server writes to stderr is in its log, not in the shell.
    said = [line for line in (home / "logs" / "mcp-everything.log").read_text().splitlines()
            if line and not line.startswith("--- ")]
    assert said, "server-everything wrote nothing to stderr"
    assert not any(line in run.shell for line in said), said
    assert echo["success"] and "hi there" in echo["result"], echo
    assert image["success"] and ':mime-type "image/png"' in image["result"] and ":bytes" in image["result"], image
    assert not slow["success"] and "did not answer within 3 s" in slow["error"], slow
    assert after["success"] and "still here" in after["result"], after


def template(home, name, kind, body, **front):
    folder = home / "skills" / name
    folder.mkdir(parents=True, exist_ok=True)
    head = "".join(f"{k}: {v}\n" for k, v in front.items())
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {name}\nkind: {kind}\n{head}---\n{body}\n")


def test_a_subagent_gets_its_templates_tools_never_more_than_its_parents(fake, home, tmp_path):
    """A task whose template says `tools: [time/*]' lists and calls time's tools, is refused git's,
    and may not give its own subagent git's tools or an action it lacks: each error names what
    was refused."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    write_config(home, {"time": time_server(), "git": git_server(repo)})
    template(home, "clock", "task", "Tell the time.", tools="[time/*]", allowed="[eval, task, talk]")
    task_forms = [
        ("t-time", '(agent-tool "time/get_current_time" :timezone "UTC")'),
        ("t-git", f'(agent-tool "git/git_status" :repo-path "{repo}")'),
        ("t-give-git", '(agent-task "clock" "x" :tools \'("git/*"))'),
        ("t-give-action", '(agent-task "clock" "x" :allowed \'("eval" "compulsion"))'),
    ]
    seen_by_task: list[str] = []

    def answer(body):
        me, kind, _t = who(body)
        ctx = request_text(body) if kind == "primary" else "\n".join(said(m["content"]) if isinstance(m["content"], str)
                                                                     else "" for m in body["messages"])
        if kind == "task":
            seen_by_task.append(body["system"][0]["text"])
            for marker, form in task_forms:
                if f"step {marker}." not in ctx:
                    return run_elisp(form, monologue=f"step {marker}.")
            return say("task done")
        if "step spawn." not in ctx:
            return run_elisp('(agent-wait-for (plist-get (agent-task "clock" "what time is it") :talk-id) :timeout 60)',
                             monologue="step spawn.")
        return say("done", monologue="end")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("spawn the clock")), timeout=180).check()

    assert "time/get_current_time :timezone string" in seen_by_task[0]
    assert "git/git_status" not in seen_by_task[0]
    tasks = [b for b in (r["body"] for r in fake.requests) if who(b)[1] == "task"]
    results = [said(b["messages"][-1]["content"]) for b in tasks[1:]]
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in results)
    assert '(:timezone \\"UTC\\"' in text
    assert "task-1 may not call git/git_status: its tools are time/*" in text
    assert "task-1 may not give the tools git/*: a subagent's tools are a subset of its parent's, and task-1 has " \
           "time/*" in text
    assert "task-1 may not give compulsion: a subagent's actions are a subset of its parent's, and task-1 has " \
           "eval, talk, task" in text
    calls = [e for e in transcript_events(home) if e["event"] == "tool_call"]
    assert [(c["agent_id"], c["data"]["tool"], c["data"]["error"] is None) for c in calls] == [
        ("task-1", "get_current_time", True)]  # the refused call never reached a server


def test_a_compulsion_sees_a_tool_call_and_blocks_it(fake, home):  # test_mcp_dataset calls it too
    """A tool call is an action: the compulsion sees it before it runs and its reason is the error."""
    write_config(home, {"time": time_server()})
    template(home, "no-paris", "compulsion", "Block calls about Paris.")
    asked: list[str] = []

    def answer(body):
        _me, kind, _t = who(body)
        if kind == "compulsion":
            last = body["messages"][-1]["content"]
            last = said(last) if isinstance(last, str) else json.dumps(last)
            if "wants to call an MCP tool" in last:
                asked.append(last)
                return say("no calls about Paris" if "Paris" in last else "")
            return say("")
        ctx = request_text(body)
        for marker, form in [("attach", '(agent-compulsion "no-paris")'),
                             ("paris", '(agent-tool "time/get_current_time" :timezone "Europe/Paris")'),
                             ("tokyo", '(agent-tool "time/get_current_time" :timezone "Asia/Tokyo")')]:
            if f"step {marker}." not in ctx:
                return run_elisp(form, monologue=f"step {marker}.")
        return say("done", monologue="end")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("what time")), timeout=180).check()
    _attach, paris, tokyo = Evals(fake).results()
    assert paris["error"] == "blocked by compulsion compulsion-1 (no-paris): no calls about Paris"
    assert tokyo["success"] and '"Asia/Tokyo"' in tokyo["result"]
    assert asked[0].startswith("[before action] The agent wants to call an MCP tool (in its eval):\n"
                               '(agent-tool "time/get_current_time" :timezone "Europe/Paris")')
    calls = [e["data"] for e in transcript_events(home, "primary") if e["event"] == "tool_call"]
    assert [(c["blocked"], c["arguments"]["timezone"]) for c in calls] == [(True, "Europe/Paris"),
                                                                           (False, "Asia/Tokyo")]


def test_a_server_killed_mid_session_is_restarted_once_then_down(fake, evals, home):
    """Killed, the server's next call says it died; the call after is served by a restart; killed
    again, its tools fail with a clear error while it is down.  The hub shows it; no orphans after."""
    write_config(home, {"time": time_server()})
    kill = ("(dolist (pid (split-string (shell-command-to-string "
            "(format \"pgrep -P %s -f mcp-server-time\" (process-id (amacs-server-process))))))"
            " (signal-process (string-to-number pid) 'SIGKILL)) (sleep-for 0.5) 'killed")
    forms = [("first", '(agent-tool "time/get_current_time" :timezone "UTC")'),
             ("kill", kill),
             ("died", '(agent-tool "time/get_current_time" :timezone "UTC")'),
             ("again", '(agent-tool "time/get_current_time" :timezone "UTC")'),
             ("kill2", kill),
             ("died2", '(agent-tool "time/get_current_time" :timezone "UTC")'),
             ("down", '(agent-tool "time/get_current_time" :timezone "UTC")'),
             ("hub", "(plist-get (amacs--call-sync 'hub_state nil) :mcp)"),
             ("pids", '(shell-command-to-string (format "pgrep -P %s" (process-id (amacs-server-process))))')]
    evals.script(forms)
    run = run_emacs(home, fake.url, session(send("go"), SHOW_HUB), timeout=180).check()
    shown = shown_hub(run.stdout)
    assert "MCP servers (1)\n  time           stdio  down        4 calls  get_current_time convert_time\n" \
        "    last error: its connection closed" in shown, shown
    first, _k, died, again, _k2, died2, down, hub, pids = evals.results()
    assert first["success"], first
    assert "MCP server time has stopped (its connection closed at the call to get_current_time)" in died["error"]
    assert again["success"], again
    assert "MCP server time stopped again" in died2["error"] and "so it stays down" in died2["error"], died2
    assert down["error"].startswith("MCP server time is down ("), down
    assert "it was started again once and is down again" in down["error"]
    assert ':name "time"' in hub["result"] and ':state "down"' in hub["result"] and ":restarts 1" in hub["result"]



def test_every_server_stops_with_the_amacs_server(fake, evals, home, tmp_path):
    """Servers of two kinds (Python, Node) run, and one that outlives its stdin (a shell that sleeps
    on after the time server in it ends): when the AMACS server stops, none is left."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    stubborn = {"command": "sh", "args": ["-c", f"{time_server()['command']}; exec sleep 300"]}
    write_config(home, {"time": time_server(), "git": git_server(repo), "everything": everything_server(),
                        "stubborn": stubborn})
    forms = [("all", '(list (agent-tool "time/get_current_time" :timezone "UTC") '
                     f'(agent-tool "git/git_status" :repo-path "{repo}") (agent-tool "everything/echo" :message "x") '
                     '(agent-tool "stubborn/get_current_time" :timezone "UTC"))'),
             ("pids", '(shell-command-to-string (format "pgrep -P %s" (process-id (amacs-server-process))))')]
    evals.script(forms)
    run_emacs(home, fake.url, session(send("go")), timeout=180).check()
    _all, pids = evals.results()
    running = [int(p) for p in re.findall(r"\d+", pids["result"])]
    assert len(running) >= 4, pids
    left = [p for p in running if Path(f"/proc/{p}").exists()
            and "zombie" not in Path(f"/proc/{p}/status").read_text().lower()]
    assert left == [], [Path(f"/proc/{p}/cmdline").read_bytes() for p in left]


def test_mcp_json_is_read_again_when_saved_and_a_bad_entry_is_one_line(fake, evals, home):
    """A bad entry is one line in the shell naming the file and the key, the good server works;
    a server added to the file mid-session is called without a restart; a file that is not
    JSON is one line too, and the servers stay as they were."""
    config = write_config(home, {"time": time_server(), "broken": {"command": 3}})
    added = json.dumps({"mcpServers": {"time": time_server(), "clock": time_server()}})
    forms = [("first", '(agent-tool "time/get_current_time" :timezone "UTC")'),
             ("add", f"(with-temp-file {json.dumps(str(config))} (insert {json.dumps(added)}))"),
             ("added", '(agent-tool "clock/get_current_time" :timezone "UTC")'),
             ("break", f'(with-temp-file {json.dumps(str(config))} (insert "{{not json"))'),
             ("still", '(agent-tool "clock/convert_time" :source-timezone "UTC" :time "12:00" '
                       ':target-timezone "Asia/Tokyo")')]
    evals.script(forms)
    run = run_emacs(home, fake.url, session(send("go")), timeout=180).check()
    first, _add, added_call, _break, still = evals.results()
    assert first["success"] and added_call["success"] and still["success"], evals.results()
    assert '"Asia/Tokyo"' in still["result"]
    bad_entry = [line.removeprefix(";; ") for line in run.shell.splitlines() if "mcpServers.broken" in line]
    assert bad_entry == [f"{config}: mcpServers.broken.command: expected a string, got 3; server 'broken' is left "
                         "out, the others work"], run.shell
    not_json = [line.removeprefix(";; ") for line in run.shell.splitlines() if "not valid JSON" in line]
    assert not_json == [f"{config}: not valid JSON at line 1 column 2 (Expecting property name enclosed in double "
                        "quotes); the servers stay as they were until it is fixed"], run.shell
    # The listing followed the file: the second server's tools were in the prompt after it was added.
    prompts = [r["body"]["system"][0]["text"] for r in fake.requests]
    assert "clock/get_current_time" not in prompts[0] and "clock/get_current_time" in prompts[-1]


def test_servers_start_at_the_first_model_call_or_with_the_server_when_eager(fake, home):
    """Lazy by default: no server process before the agent's first model call; with
    AMACS_MCP_START=eager they start with the AMACS server."""
    write_config(home, {"time": time_server()})
    fake.respond_with(lambda body: say("hi"))
    count = ("(princ (format \"CHILDREN<<%s>>\\n\" (length (split-string (shell-command-to-string "
             "(format \"pgrep -P %s -f mcp-server-time\" (process-id (amacs-server-process))))))))")
    settle = "(let ((end (+ (float-time) 3))) (while (< (float-time) end) (accept-process-output nil 0.1)))"
    lazy = run_emacs(home, fake.url, session(settle, count, send("hello"), count)).check()
    assert re.findall(r"CHILDREN<<(\d+)>>", lazy.stdout) == ["0", "1"]
    children = ("(length (split-string (shell-command-to-string (format \"pgrep -P %s -f mcp-server-time\" "
                "(process-id (amacs-server-process))))))")
    wait = (f"(let ((end (+ (float-time) 20))) (while (and (< (float-time) end) (= 0 {children})) "
            "(accept-process-output nil 0.2)))")
    eager = run_emacs(home, fake.url, session(wait, count), AMACS_MCP_START="eager").check()
    assert re.findall(r"CHILDREN<<(\d+)>>", eager.stdout) == ["1"]


def test_a_listing_from_an_earlier_session_lets_the_server_wait_for_its_first_call(fake, evals, home):
    """The first session starts the server to list its tools and saves the listing; the next
    session's context lists them from mcp-tools.json without starting it, until a tool is called.
    An edited entry is not served from the old listing."""
    write_config(home, {"time": time_server()})
    count = ("(princ (format \"CHILDREN<<%s>>\\n\" (length (split-string (shell-command-to-string "
             "(format \"pgrep -P %s -f mcp-server-time\" (process-id (amacs-server-process))))))))")
    fake.respond_with(lambda body: say("hi"))
    run_emacs(home, fake.url, session(send("hello"))).check()
    saved = json.loads((home / "mcp-tools.json").read_text())
    assert [t["name"] for t in saved["time"]["tools"]] == ["get_current_time", "convert_time"]
    assert "inputSchema" in saved["time"]["tools"][0]

    asked = len(fake.requests)

    def answer(body):
        ctx = request_text(body)
        if "now call it" in ctx and "step call." not in ctx:
            return run_elisp('(agent-tool "time/get_current_time" :timezone "UTC")', monologue="step call.")
        return say("ok")

    fake.respond_with(answer)
    second = run_emacs(home, fake.url, session(send("hello again"), count, send("now call it"), count)).check()
    prompt = fake.requests[asked]["body"]["system"][0]["text"]
    assert "time/get_current_time :timezone string" in prompt  # listed while the server did not run
    assert evals.results()[-1]["success"]
    assert re.findall(r"CHILDREN<<(\d+)>>", second.stdout) == ["0", "1"]  # started by the call

    fake.respond_with(lambda body: say("hi"))
    run_emacs(home, fake.url, session(count)).check()
    write_config(home, {"time": time_server(args=["--local-timezone", "UTC"])})
    third = run_emacs(home, fake.url, session(count, send("hello"), count)).check()
    assert re.findall(r"CHILDREN<<(\d+)>>", third.stdout) == ["0", "1"]  # a changed entry is listed afresh


@pytest.fixture
def everything_http(tmp_path):
    """server-everything over streamable HTTP on a free port: (its URL, the process)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "everything-http.log").open("w")
    proc = subprocess.Popen(["node", everything_server()["args"][0], "streamableHttp"], stdout=log, stderr=log,
                            env={**os.environ, "PORT": str(port)})
    try:
        deadline = time.monotonic() + 30
        while "listening on port" not in (tmp_path / "everything-http.log").read_text():
            assert time.monotonic() < deadline and proc.poll() is None, "server-everything did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_streamable_http_server_with_headers_from_the_environment(fake, evals, home, everything_http, tmp_path):
    """HTTP servers (url, headers with ${VAR}) are called from an eval as stdio ones are; the headers
    reach the server; a value taken from the environment never reaches the agent or the transcript."""
    url, _proc = everything_http
    port = free_port()
    log = (tmp_path / "headers.log").open("w")
    headers = subprocess.Popen([sys.executable, str(ROOT / "tests" / "mcp_header_server.py"), str(port)],
                               stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while "Uvicorn running" not in (tmp_path / "headers.log").read_text():
            assert time.monotonic() < deadline and headers.poll() is None, "the header server did not start"
            time.sleep(0.1)
        write_config(home, {"remote": {"type": "http", "url": url},
                            "hdr": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp",
                                    "headers": {"X-Amacs-Test": "literal-value",
                                                "Authorization": "Bearer ${AMACS_TEST_TOKEN}"}}})
        forms = [("echo", '(agent-tool "remote/echo" :message "over http")'),
                 ("sum", '(agent-tool "remote/get-sum" :a 2 :b 40)'),
                 ("headers", '(agent-tool "hdr/seen_headers")')]
        evals.script(forms)
        run_emacs(home, fake.url, session(send("go")), AMACS_TEST_TOKEN="tok-secret-0123456789").check()
    finally:
        headers.terminate()
        headers.wait(10)
        log.close()
    echo, total, seen = evals.results()
    assert echo["success"] and "over http" in echo["result"], echo
    assert total["success"] and "42" in total["result"], total
    assert seen["result"] == ('(:x-amacs-test "literal-value" :authorization "[redacted mcp.json Authorization]")'), seen
    everything = "\n".join(p.read_text() for p in (home / "transcripts").glob("*.jsonl"))
    assert "tok-secret-0123456789" not in everything
    [status] = [e["data"] for e in transcript_events(home, "primary") if e["event"] == "tool_call"][:1]
    assert status["server"] == "remote" and status["error"] is None


@pytest.mark.parametrize("watched", [False, True], ids=["alone", "watched"])
def test_a_turn_waiting_on_a_tool_server_says_so_and_one_that_does_not_start_is_one_shell_line(fake, home, watched):
    """The header names the server the model call waits on to start (not only `thinking…'); a
    server that cannot start is one line in the shell at its first use, not one per turn.
    WATCHED: a compulsion's call, before the primary's, lists the tools (it waited unsaid)."""
    write_config(home, {"slow": {"command": "sh", "args": ["-c", f"sleep 3; exec {time_server()['command']}"]},
                        "missing": {"command": "/nonexistent/mcp-server-nothing"}})
    fake.respond_with(lambda body: say("" if who(body)[1] == "compulsion" else "ok"))
    shell = "(get-buffer amacs-shell-buffer-name)"
    header = f"(with-current-buffer {shell} (amacs-shell-state-string))"
    program = session(
        '(agent-compulsion "spawn-limiter")' if watched else "",
        '(amacs-e2e-send-no-wait "first")',
        f'(amacs-e2e-wait (lambda () (string-match-p "starting tool server" {header})) "the header to say it")',
        f'(princ (format "HEADER<<%s>>\\n" {header}))',
        '(amacs-e2e-wait (lambda () (not amacs-shell-busy)) "the first turn")',
        send("second"))
    run = run_emacs(home, fake.url, program, timeout=180).check()
    header_seen = re.search(r"HEADER<<(.*?)>>", run.stdout)
    assert header_seen and re.match(r"starting tool servers? .*slow.*…", header_seen.group(1)), run.stdout
    lines = [line for line in run.shell.splitlines() if "MCP server missing" in line]
    assert lines == [";; MCP server missing did not start (command not found: /nonexistent/mcp-server-nothing); "
                     "the agent has none of its tools: fix it, then save mcp.json (any write, even `touch "
                     "mcp.json`) to start it again (logs/mcp-missing.log has its output)"], run.shell
    assert "MCP server slow" not in run.shell, run.shell  # it started within the listing's wait
