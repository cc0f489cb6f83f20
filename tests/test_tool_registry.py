"""Every tool is named in the same places: a tool added in one and not the others fails here.

An agent's tool is a server function in the one registry (``tools/registry.py``, from each
family's TOOLS), published as an EPC method from it (``methods.publish``),
called by an elisp wrapper (``elisp/amacs-agent.el``: ``agent-*`` through ``amacs--agent-call``
or ``amacs--call-sync``), and shown called in the core skill or a skill it names (``tests/test_core_skill.py``
checks that last step for every ``agent-*`` function).
"""

from __future__ import annotations

import inspect
import re
import threading
from pathlib import Path

from amacs_server import methods
from amacs_server.tools import registry, work
from amacs_server.tools.kit import ToolHost
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
        rt.mind.ltm.close()


def test_every_method_an_elisp_wrapper_calls_is_published(tmp_path):
    calls = elisp_calls()
    assert len(calls) >= 30  # the pattern still finds them
    missing = sorted(calls - published(tmp_path))
    assert missing == [], f"amacs-agent.el calls methods the server does not publish: {missing}"


# What amacs-agent.el calls that is not an agent's tool: the person's methods an eval may use too.
SHARED_WITH_THE_PERSON = {"consciousness", "set_consciousness"}


def test_every_tool_in_the_registry_has_an_elisp_wrapper():
    missing = sorted(registry.names() - elisp_calls())
    assert missing == [], f"no function in amacs-agent.el calls: {missing}"


def test_every_elisp_wrapper_calls_a_tool_of_the_registry():
    unknown = sorted(elisp_calls() - registry.names() - SHARED_WITH_THE_PERSON)
    assert unknown == [], f"amacs-agent.el calls methods tools/registry.py does not list: {unknown}"


def test_every_tool_in_the_registry_is_published(tmp_path):
    missing = sorted(registry.names() - published(tmp_path))
    assert missing == [], f"tools/registry.py lists tools methods.py does not publish: {missing}"


def _leading(fn: object, n: int) -> list[str]:
    """The types of FN's first N parameters, as written."""
    return [str(p.annotation) for p in list(inspect.signature(fn).parameters.values())[:n]]  # type: ignore[arg-type]


def _part_type(part: str) -> str:
    """The type of PART as the ToolHost declares it (``host``: the host whole)."""
    return "ToolHost" if part == "host" else str(inspect.signature(getattr(ToolHost, part).fget).return_annotation)


def test_each_tool_takes_first_the_parts_its_family_says():
    """The table hands each tool the parts registry.TAKES names (from its module's TAKES): the
    tool's first parameters are of those parts' types, so a declaration cannot say one part
    while the tool reads another."""
    tools = {**registry.AS_ITS_EVAL, **registry.ON_THE_LOOP, **registry.ON_ITS_THREAD}
    assert set(registry.TAKES) == set(tools)
    wrong = {name: _leading(fn, len(takes)) for name, fn in tools.items()
             if _leading(fn, len(takes := registry.TAKES[name])) != [_part_type(p) for p in takes]}
    assert wrong == {}, f"tools whose first parameters are not the parts registry.TAKES hands them: {wrong}"
    assert _leading(work.person_add_buffer, 2) == [_part_type(p) for p in work.PERSON_TAKES]
    assert {_part_type(p) for p in ("mind", "world", "transcript")} == {"Mind", "AgentWorld", "Transcript"}
