"""Every tool is named in the same places: a tool added in one and not the others fails here.

An agent's tool is a server function in a registry (``tools/agents.py`` TOOLS for agents and
talk, ``tools/memory.py`` TOOLS for memory), published as an EPC method (``methods.publish``),
called by an elisp wrapper (``elisp/amacs-agent.el``: ``agent-*`` through ``amacs--agent-call``
or ``amacs--call-sync``), and shown called in the core skill (``tests/test_core_skill.py``
checks that last step for every ``agent-*`` function).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from amacs_server import methods
from amacs_server.tools import agents as agent_tools
from amacs_server.tools import memory as memory_tools
from tests.test_arguments import NoEvals, Recorder
from tests.test_memory import silent_runtime

ROOT = Path(__file__).resolve().parents[1]
AGENT_EL = (ROOT / "elisp" / "amacs-agent.el").read_text(encoding="utf-8")


def elisp_calls() -> set[str]:
    """The server methods the agent's elisp wrappers call."""
    return set(re.findall(r"\(amacs--(?:agent-call|call-sync) '([a-z_]+)", AGENT_EL))


def published(tmp_path: Path) -> set[str]:
    rt = silent_runtime(tmp_path / "home")
    loop = threading.Thread(target=rt.loop.run_forever, daemon=True)
    loop.start()
    server = Recorder()
    try:
        methods.publish(server, rt, NoEvals())  # type: ignore[arg-type]
        return set(server.methods)
    finally:
        rt.loop.call_soon_threadsafe(rt.loop.stop)
        loop.join(5)
        rt.ltm.close()


def test_every_method_an_elisp_wrapper_calls_is_published(tmp_path):
    calls = elisp_calls()
    assert len(calls) >= 30  # the pattern still finds them
    missing = sorted(calls - published(tmp_path))
    assert missing == [], f"amacs-agent.el calls methods the server does not publish: {missing}"


def test_every_tool_in_a_registry_has_an_elisp_wrapper():
    registered = set(agent_tools.TOOLS) | set(memory_tools.TOOLS) | {"agents_list", "agent_tool"}
    missing = sorted(registered - elisp_calls())
    assert missing == [], f"no agent-* function in amacs-agent.el calls: {missing}"
