"""The one table of the tools an agent calls from its evals, by the name Emacs calls them.

``methods.py`` publishes each over EPC from here, handing it first the parts of the host its
family takes (:data:`TAKES`, each module's own; ``kit.parts``). Each tool's elisp function,
arguments and docs are declared in ``declared.py``; tests/test_tool_declarations.py checks that
its methods are this table's, and the wrappers and skills against it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import agents, history, mcp, memory, work
from .kit import Takes
from .mcp import agent_tool

# Called (PARTS..., EVAL-ID, ARGS...): they act as the agent the eval EVAL-ID runs for, on the loop thread.
AS_ITS_EVAL: dict[str, Callable[..., Any]] = {**agents.TOOLS, **memory.TOOLS}
# Called (PARTS..., ARGS...) on the loop thread: their answer does not depend on who asks.
ON_THE_LOOP: dict[str, Callable[..., Any]] = {**work.TOOLS, "agents_list": agents.agents_list}
# Called on the EPC thread that received them: an MCP tool call may take seconds (tools/mcp.py),
# a search of the history reads git.
ON_ITS_THREAD: dict[str, Callable[..., Any]] = {"agent_tool": agent_tool, "history_search": history.history_search}
# The PARTS each tool is handed first, as its family's module says (``agent_tool``: the host, then
# the evals and the loop methods.py hands it).
TAKES: dict[str, Takes] = {**dict.fromkeys(agents.TOOLS, agents.TAKES), "agents_list": agents.TAKES,
                           **dict.fromkeys(memory.TOOLS, memory.TAKES), **dict.fromkeys(work.TOOLS, work.TAKES),
                           "history_search": history.TAKES, "agent_tool": mcp.TAKES}


def names() -> frozenset[str]:
    """Every tool's name."""
    return frozenset(AS_ITS_EVAL) | frozenset(ON_THE_LOOP) | frozenset(ON_ITS_THREAD)
