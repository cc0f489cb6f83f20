"""MCP tool call overhead: from the eval to the result in the agent's hands, against a direct
``mcp`` client call to the same server program in the same run.

The agent's path: a real batch Emacs, connected to the real server, evaluates a form
(written by the fake model) that calls ``(agent-tool "time/get_current_time" :timezone
"UTC")`` N times and times each call in elisp with ``float-time``: EPC to the server,
the caller's check on the agents' loop, the schema check, the compulsions' turn (none
here), the call on the World's connection to mcp-server-time, the transcript record,
the result converted to elisp and back over EPC.  The direct path: the SDK's ``Client``
over stdio to another mcp-server-time process, the same call N times, timed in Python.
A third series calls through the World's hub alone (McpHub.call: no Emacs, no EPC,
no checks), to see where the time goes.  The three alternate, ROUNDS times each, in the same run on the same machine (a shared
machine's load moves between minutes: alternating spreads it over both); the load and
each round's medians are reported.

    .venv/bin/python bench/bench_tools.py                 # N = 100 calls, 3 rounds of each
    .venv/bin/python bench/bench_tools.py -n 300 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import save, summary  # noqa: E402
from tests.e2e.agent_fakes import run_elisp, say, send, session  # noqa: E402
from tests.e2e.harness import run_emacs  # noqa: E402
from tests.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.mcp_servers import TIME, install, write_config  # noqa: E402


def through_the_agent(n: int) -> list[float]:
    """Seconds of each of N agent-tool calls, timed in the eval."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "agent"
        out = Path(tmp) / "times.el"
        write_config(home, {"time": {"command": str(TIME)}})
        form = (f'(progn (agent-tool "time/get_current_time" :timezone "UTC") '  # one to warm up, not counted
                f'(let (times) (dotimes (_ {n}) (let ((start (float-time))) '
                f'(agent-tool "time/get_current_time" :timezone "UTC") (push (- (float-time) start) times))) '
                f'(with-temp-file {json.dumps(str(out))} (insert (json-encode times))) (length times)))')
        fake = FakeAnthropic().start()
        try:
            fake.script(run_elisp(form), say("measured"))
            run_emacs(home, fake.url, session(send("measure"), setup="(setq amacs-max-steps 5 amacs-eval-timeout 600)"),
                      timeout=900).check()
        finally:
            fake.stop()
        return [float(x) for x in json.loads(out.read_text())]


def through_the_hub(n: int) -> list[float]:
    """Seconds of each of N calls through the World's hub alone (McpHub.call from this thread:
    the hop to the hub's loop and back, no Emacs, no EPC, no checks)."""
    from amacs_server.tools_mcp.hub import McpHub

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        write_config(home, {"time": {"command": str(TIME)}})
        hub = McpHub(home / "mcp.json", home / "logs", {})
        try:
            hub.tool("time", "get_current_time")
            hub.call("time", "get_current_time", {"timezone": "UTC"})
            times = []
            for _ in range(n):
                start = time.perf_counter()
                hub.call("time", "get_current_time", {"timezone": "UTC"})
                times.append(time.perf_counter() - start)
            return times
        finally:
            hub.stop()


async def direct(n: int) -> list[float]:
    """Seconds of each of N calls from the SDK's own client to another mcp-server-time."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    times = []
    with open(os.devnull, "w") as errlog:
        async with Client(stdio_client(StdioServerParameters(command=str(TIME)), errlog=errlog)) as client:
            await client.call_tool("get_current_time", {"timezone": "UTC"})
            for _ in range(n):
                start = time.perf_counter()
                await client.call_tool("get_current_time", {"timezone": "UTC"})
                times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    install()
    load_before = os.getloadavg()
    agent: list[float] = []
    sdk: list[float] = []
    hub: list[float] = []
    rounds = []
    for _ in range(args.rounds):
        a_round = [t * 1000 for t in through_the_agent(args.n)]
        d_round = [t * 1000 for t in asyncio.run(direct(args.n))]
        h_round = [t * 1000 for t in through_the_hub(args.n)]
        agent += a_round
        sdk += d_round
        hub += h_round
        rounds.append({"agent_median_ms": summary(a_round)["median_ms"],
                       "direct_median_ms": summary(d_round)["median_ms"],
                       "hub_median_ms": summary(h_round)["median_ms"], "load_1min": round(os.getloadavg()[0], 2)})
    a, d = summary(agent), summary(sdk)
    save("tools", {
        "agent_tool_ms": a, "direct_sdk_ms": d, "hub_call_ms": summary(hub), "rounds": rounds,
        "overhead_median_ms": round(a["median_ms"] - d["median_ms"], 3),
        "overhead_p90_ms": round(a["p90_ms"] - d["p90_ms"], 3),
        "load": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()],
                 "cpus": os.cpu_count()},
    })


if __name__ == "__main__":
    main()
