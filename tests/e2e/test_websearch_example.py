"""The spec's websearch example, shipped (skills websearch, digest, combine), end to end.

A local site served over HTTP; the search MCP server in tests/ indexes it; the fake
model plays each agent as its template says: the websearch task searches, starts a
digest task per result and waits, the digests fetch their page, a combine task
combines them, and the answer reaches the primary.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import sys
import threading

import pytest

from tests.context_items import request_text, said
from tests.e2e.agent_fakes import run_elisp, say, send, session, transcript_events, who
from tests.e2e.harness import run_emacs
from tests.mcp_servers import ROOT, write_config

pytestmark = pytest.mark.e2e
SITE = ROOT / "tests" / "site"


@pytest.fixture
def site():
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def messages(body):
    return "\n".join(said(m["content"]) if isinstance(m["content"], str) else json.dumps(m["content"])
                     for m in body["messages"])


def test_websearch_searches_digests_each_result_and_combines(fake, home, site):
    write_config(home, {"search": {"command": sys.executable, "args": [str(ROOT / "tests" / "mcp_search_server.py"),
                                                                      site]}})
    systems = {}

    def answer(body):
        me, kind, template = who(body)
        systems.setdefault(template, body["system"][0]["text"])
        text = messages(body)
        if kind == "primary":
            if "step ask." not in request_text(body):
                return run_elisp('(agent-wait-for (plist-get (agent-task "websearch" "What is Emacs Lisp used for?") '
                                 ':talk-id) :timeout 120)', monologue="step ask.")
            return say("done", monologue="end")
        if template == "websearch":
            if "step search." not in text:
                return run_elisp('(agent-tool "search/search" :query "Emacs Lisp" :max-results 3)',
                                 monologue="step search.")
            if "step digest." not in text:
                found = re.findall(r'"(http://127\.0\.0\.1:\d+/\w+\.html)\\\\?"', text)
                urls = list(dict.fromkeys(found))
                prompts = " ".join(json.dumps(u) for u in urls)
                return run_elisp(f"(agent-wait-for (mapcar (lambda (u) (plist-get (agent-task \"digest\" u) :talk-id)) "
                                 f"(list {prompts})) :timeout 120)", monologue="step digest.")
            if "step combine." not in text:
                digests = re.findall(r"DIGEST\[[^\]]+\]", text)
                prompt = json.dumps("What is Emacs Lisp used for?\n" + "\n".join(dict.fromkeys(digests)))
                return run_elisp(f'(agent-wait-for (plist-get (agent-task "combine" {prompt}) :talk-id) :timeout 120)',
                                 monologue="step combine.")
            combined = re.findall(r"COMBINED\[[^\]]+\]", text)
            return say(combined[-1] if combined else "no combine answer")
        if template == "digest":
            url = re.search(r"http://127\.0\.0\.1:\d+/\w+\.html", said(body["messages"][0]["content"])).group(0)
            if "step fetch." not in text:
                return run_elisp(f'(plist-get (agent-tool "search/fetch" :url "{url}") :result)',
                                 monologue="step fetch.")
            page = re.search(r"lastEvalResult.*?\"result\": \"\\\\\"(.{0,40})", text)
            return say(f"DIGEST[{url} says: {page.group(1) if page else '?'}]")
        if template == "combine":
            n = len(set(re.findall(r"DIGEST\[(http[^ ]+)", text)))
            return say(f"COMBINED[{n} pages agree Emacs Lisp extends Emacs]")
        return say("")

    fake.respond_with(answer)
    run_emacs(home, fake.url, session(send("search the web")), timeout=240).check()

    # Each template saw the tools it may use, and only those.
    assert "search/search :query string :max_results? integer" in systems["websearch"]
    assert "search/fetch :url string" in systems["websearch"]
    assert "search/fetch :url string" in systems["digest"] and "search/search" not in systems["digest"]
    assert "<tools>" not in systems["combine"]
    events = transcript_events(home)
    calls = [(e["agent_id"], e["data"]["tool"]) for e in events if e["event"] == "tool_call"]
    assert calls[0] == ("task-1", "search")
    assert sorted(t for _a, t in calls[1:]) == ["fetch", "fetch", "fetch"]
    assert all(e["data"]["error"] is None for e in events if e["event"] == "tool_call")
    ends = {e["agent_id"]: e["data"] for e in events if e["event"] == "agent_end"}
    assert [e["template"] for e in ends.values()].count("digest") == 3
    # The answer came back to the primary: three pages digested from the site and combined.
    primary = [request_text(r["body"]) for r in fake.requests if who(r["body"])[0] == "primary"]
    assert "COMBINED[3 pages agree Emacs Lisp extends Emacs]" in primary[-1]
    # One connection to the search server served the task and its three digests.
    starts = [line for line in (home / "logs" / "mcp-search.log").read_text().splitlines() if " starting search" in line]
    assert len(starts) == 1, starts
    assert "Bread" not in json.dumps([r["body"] for r in fake.requests if who(r["body"])[2] == "combine"])
