"""``(agent-tool "SERVER/TOOL" :arg value ...)`` as the server runs it, for the eval that calls it.

In order: who calls (the server's record of the eval, never Emacs's word); whether
that agent and every agent above it may use the tool; the tool's schema (the
server is started if it was not) and the arguments checked against it; the
compulsions of the caller, which see the call as an action and may block it; the
call itself, on the World's one connection to that server.  Every call, refused,
blocked, failed or answered, is written to the caller's transcript with its
server, tool, arguments, seconds, result size and error; a result too long for
the agent is kept whole in a file, which takes its name once the call is
recorded (a kill between the two is said at the next start).

It runs on the EPC call's own thread: a tool call may take seconds, and the
agents' loop goes on meanwhile (the compulsions run on it).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

from .. import faults
from ..errors import AmacsError
from ..records import ToolCall
from ..tools_mcp import calls
from ..tools_mcp.hub import McpError
from .agents import Evals, caller_of
from .kit import Takes, ToolHost

TAKES: Takes = ("host",)  # the World, the mind's home, the transcript, the loop, the run's id
COMPULSION_WAIT = 600.0  # seconds the compulsions may take to let a call through or block it


class Blocked(McpError):
    """A compulsion blocked the call; its reason is the message."""


def form_of(full_name: str, arguments: dict[str, Any]) -> str:
    """The call as the compulsions see it: elisp, its arguments as JSON values."""
    args = " ".join(f":{k} {json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return f"(agent-tool {json.dumps(full_name)}{' ' + args if args else ''})"


def agent_tool(rt: ToolHost, evals: Evals, on_loop: Callable[[Callable[[], str]], str],
               eval_id: object, name: object, raw_args: object = None) -> Any:
    """Call the MCP tool NAME (``SERVER/TOOL``) with RAW_ARGS for the agent whose eval EVAL_ID is."""
    world = rt.world
    hub = world.tools
    server, tool_name = calls.split_name(name)
    full = f"{server}/{tool_name}"

    def who() -> str:
        caller = caller_of(evals, eval_id)
        if not world.may_use_tool(caller, full):
            raise McpError(f"{caller} may not call {full}: its tools are {world.tool_grant(caller)}, and a "
                           "subagent's tools are also limited by its parent's")
        return caller

    caller = on_loop(who)
    started = time.monotonic()
    arguments: dict[str, Any] = {}
    record: dict[str, Any] = {"server": server, "tool": tool_name}

    def entry(error: str | None, chars: int = 0, blocked: bool = False) -> dict[str, Any]:
        data = {**record, "arguments": arguments, "seconds": round(time.monotonic() - started, 4),
                "result_chars": chars, "error": error, "blocked": blocked}
        if hub is not None:
            data = hub.scrub(data)
        return data

    try:
        if hub is None:
            raise McpError("this server has no MCP tools")
        tool = hub.tool(server, tool_name)
        arguments = calls.arguments(raw_args, tool.input_schema or {}, full)
        future = asyncio.run_coroutine_threadsafe(world.before_action(caller, form_of(full, arguments), "tool"),
                                                  rt.turns.loop)
        reason = future.result(COMPULSION_WAIT)
        if reason is not None:
            raise Blocked(reason)
        # What mcp.json took from the environment (${VAR}: keys, tokens) never reaches the agent.
        faults.point("tool.call")
        answer = hub.call(server, tool_name, arguments)
        faults.point("tool.answered")
        value = hub.scrub(calls.result(answer, full))
        # A result longer than the bound goes to the agent cut, the rest in a private file.
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{rt.run_id}-{secrets.token_hex(3)}-{server}-{tool_name}"[:120])
        folder = rt.mind.home / "transcripts" / "results"
        value, chars = calls.bounded(value, folder, stem)
        faults.point("tool.kept")
    except AmacsError as err:
        failed = entry(str(err), blocked=isinstance(err, Blocked))
        rt.turns.call_in_loop(lambda: rt.transcript.write(ToolCall(**failed), agent=world.identity(caller)))
        said = hub.scrub(str(err)) if hub is not None else str(err)
        if said != str(err):
            raise McpError(said) from None
        raise
    done = entry(None, chars)

    def recorded() -> str:
        rt.transcript.write(ToolCall(**done), agent=world.identity(caller))
        return ""

    on_loop(recorded)  # recorded before the result file takes its name and the agent is given it
    calls.recorded(folder, stem)
    return value
