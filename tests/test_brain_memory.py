"""Per-brain memory, in process (issue 11; memid-active-memory.md, Phase 2: "RAM store keyed by
MemId, scoped per brain", "LTM shared across brains"; Phase 3: memory tools).

Each agent's memory tools act in its own RAM, whose MemIds carry its brain
(``<EOT>amacs-instance-1:task-1:NAME:1<EOT>``); long-term memory is shared:
any brain searches and loads any item, only its own brain writes it.  End to
end: tests/e2e/test_brain_memory.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from amacs_server.agents.agent import Agent
from amacs_server.agents.subagent import show_memory, system_prompt
from amacs_server.memory.active import ActiveMemory, MemoryRefused
from amacs_server.memory.memid import MemId, MemIdError
from amacs_server.runtime import Runtime
from amacs_server.tools import memory as tools
from amacs_server.tools.agents import acting_as_its_eval
from amacs_server.tools.kit import ToolError
from tests.test_memory import silent_runtime

ME = "amacs-instance-1"


class Evals:
    """The server's record of running evals: eval 1 is the primary's, 2 task-1's, 3 task-2's."""

    running = {1: "primary", 2: "task-1", 3: "task-2"}

    def agent_of_eval(self, eval_id: int) -> str | None:
        return self.running.get(eval_id)

    def evals_outstanding(self) -> bool:
        return True


@pytest.fixture
def rt(tmp_path: Any) -> Any:
    runtime = silent_runtime(tmp_path / "home")
    for n in (1, 2):
        add_task(runtime, f"task-{n}")
    yield runtime
    runtime.mind.ltm.close()


def add_task(rt: Runtime, agent_id: str) -> Agent:
    agent = Agent(id=agent_id, type="task", template="researcher", parent="primary", depth=1)
    rt.world.agents[agent_id] = agent
    return agent


def call(rt: Runtime, eval_id: int, tool: str, *args: Any) -> Any:
    """TOOL as Emacs calls it from eval EVAL_ID (methods.py registers it so)."""
    return acting_as_its_eval(Evals(), tools.TOOLS[tool])(rt, eval_id, *args)


def test_a_subagents_memid_carries_its_own_brain() -> None:
    """The brain name <identity>:<agent-id> is the MemId's AGENT:BRAIN; no field holds a colon."""
    m = MemId.parse(f"<EOT>{ME}:task-3:notes:1<EOT>")
    assert (m.agent, m.brain, m.name, m.version, m.base) == (ME, "task-3", "notes", 1, f"{ME}:task-3:notes")
    long_viewpoint = "viewpoint-" + "devils-advocate-for-every-security-question"
    assert MemId(ME, long_viewpoint, "x").brain == long_viewpoint  # a viewpoint id fits (BRAIN up to 64)
    with pytest.raises(MemIdError, match="longer than 64"):
        MemId(ME, "t" * 65, "x")


def test_an_id_that_cannot_name_a_brain_is_refused_with_the_reason(tmp_path: Any) -> None:
    from amacs_server.memory.ltm import LongTermMemory

    ltm = LongTermMemory(tmp_path / "memory.db")
    with pytest.raises(MemoryRefused, match="cannot name a memory brain.*has 'Ü' at 10"):
        ActiveMemory.for_subagent(ltm, ME, "viewpoint-Ünïcode")
    assert ActiveMemory.for_subagent(ltm, ME, "viewpoint-ok").prefix == f"{ME}:viewpoint-ok"


def test_a_tasks_item_is_in_its_own_ram_not_the_primarys(rt: Runtime) -> None:
    made = call(rt, 2, "memory_create", "finding", "the heron nests in the pine", None)
    assert made == {"mem_id": f"<EOT>{ME}:task-1:finding:1<EOT>", "version": 1, "tier": "ram", "kind": "note"}
    task = rt.world.agents["task-1"].memory
    assert task is not None and [i.mem_id.format() for i in task.memory_items()] == [made["mem_id"]]
    assert rt.mind.memory.pinned == {} and rt.world.agents["task-2"].memory is None
    snap = rt.mind.memory.snapshot(rt.mind.consciousness)
    assert all("finding" not in i.mem_id.base for i in snap.all_items())
    # The primary's own calls keep today's addresses.
    mine = call(rt, 1, "memory_create", "plan", "ship it", None)
    assert mine["mem_id"] == f"<EOT>{ME}:primary:plan:1<EOT>"
    assert list(rt.mind.memory.pinned) == [f"{ME}:primary:plan"] and list(task.pinned) == [f"{ME}:task-1:finding"]


def test_two_tasks_may_use_the_same_name(rt: Runtime) -> None:
    one = call(rt, 2, "memory_create", "notes", "one", None)
    two = call(rt, 3, "memory_create", "notes", "two", None)
    assert (one["mem_id"], two["mem_id"]) == (f"<EOT>{ME}:task-1:notes:1<EOT>", f"<EOT>{ME}:task-2:notes:1<EOT>")


def test_ltm_is_shared_search_and_load_reach_every_brain(rt: Runtime) -> None:
    call(rt, 2, "memory_create", "finding", "the heron nests in the pine", None)
    call(rt, 1, "memory_create", "plan", "ask the heron expert", None)
    for eval_id in (1, 2, 3):  # every agent finds both, the primary's and the task's
        found = {h["mem_id"] for h in call(rt, eval_id, "memory_search", "heron", None)}
        assert found == {f"<EOT>{ME}:task-1:finding:1<EOT>", f"<EOT>{ME}:primary:plan:1<EOT>"}
    loaded = call(rt, 1, "memory_load", f"<EOT>{ME}:task-1:finding<EOT>", None)
    assert (loaded["mem_id"], loaded["content"]) == (f"<EOT>{ME}:task-1:finding:1<EOT>", "the heron nests in the pine")
    assert list(rt.mind.memory.pinned) == [f"{ME}:primary:plan", f"{ME}:task-1:finding"]  # in the primary's RAM
    with pytest.raises(ToolError, match="belongs to another brain"):
        call(rt, 1, "memory_mutate", f"<EOT>{ME}:task-1:finding<EOT>", "forged")  # only its own brain writes it
    with pytest.raises(ToolError, match="another brain, outside amacs-instance-1"):
        call(rt, 2, "memory_load", "<EOT>someone-else:primary:x<EOT>", None)


def test_a_task_cannot_write_the_primarys_memory_or_consciousness(rt: Runtime) -> None:
    call(rt, 1, "memory_create", "plan", "v1", None)
    mood = rt.mind.consciousness.mood
    for target in (f"<EOT>{ME}:primary:plan<EOT>", f"<EOT>{ME}:primary:mood<EOT>"):
        with pytest.raises(ToolError, match="belongs to another brain"):
            call(rt, 2, "memory_mutate", target, "hijacked")
    with pytest.raises(ToolError, match="not in active memory"):
        call(rt, 2, "memory_evict", f"<EOT>{ME}:primary:plan<EOT>")
    assert rt.mind.consciousness.mood == mood and rt.mind.memory.pinned[f"{ME}:primary:plan"].content == "v1"
    with pytest.raises(ToolError, match="no memory item"):  # a task has no consciousness fields
        call(rt, 2, "memory_mutate", f"<EOT>{ME}:task-1:mood<EOT>", "happy")


def test_a_task_mutates_and_evicts_in_its_own_brain(rt: Runtime) -> None:
    made = call(rt, 2, "memory_create", "finding", "pine", None)
    changed = call(rt, 2, "memory_mutate", made["mem_id"], "tall pine")
    assert (changed["mem_id"], changed["previous_version"]) == (f"<EOT>{ME}:task-1:finding:2<EOT>", 1)
    handle = call(rt, 2, "memory_evict", f"<EOT>{ME}:task-1:finding<EOT>")
    assert handle["handle"]["preview"] == "tall pine"
    task = rt.world.agents["task-1"].memory
    assert task is not None and [i.kind.value for i in task.memory_items()] == ["handle"]
    with pytest.raises(ToolError, match="exists already"):
        call(rt, 2, "memory_create", "finding", "again", None)


def test_a_later_agent_of_the_same_id_starts_empty_and_continues_the_names_versions(rt: Runtime) -> None:
    """Ids repeat across server runs: the new task-1's RAM is empty; reusing a name of the old
    one's continues its versions (every MemId still names one content)."""
    call(rt, 2, "memory_create", "finding", "old run", None)
    add_task(rt, "task-1")  # the next run's task-1
    again = call(rt, 2, "memory_create", "finding", "new run", None)
    assert (again["mem_id"], again["previous_version"]) == (f"<EOT>{ME}:task-1:finding:2<EOT>", 1)
    task = rt.world.agents["task-1"].memory
    assert task is not None and [i.content for i in task.memory_items()] == ["new run"]
    assert rt.mind.ltm.active_set("task-1") == [(f"{ME}:task-1:finding", "pinned", 2)]


def test_a_subagents_request_shows_what_changed_in_its_memory_once(rt: Runtime) -> None:
    """Appended to its newest message as a <memory> section of items; the system prompt holds still."""
    agent = rt.world.agents["task-1"]
    agent.tell("do the job")
    system = system_prompt(rt.world, agent)
    show_memory(agent)
    assert [(m["role"], m["content"]) for m in agent.messages] == [("user", "do the job")]  # no memory: nothing said
    made = call(rt, 2, "memory_create", "finding", "pine", None)
    show_memory(agent)
    text = agent.messages[-1]["content"]
    assert text.startswith("do the job\n\n<memory>\n") and f'"mem_id": "{made["mem_id"]}"' in text
    agent.messages.append({"role": "assistant", "content": "{}"})
    agent.tell("<last-eval-result>...</last-eval-result>")
    show_memory(agent)
    assert "<memory>" not in agent.messages[-1]["content"]  # unchanged: not repeated
    call(rt, 2, "memory_create", "second", "oak", None)
    show_memory(agent)
    newest = agent.messages[-1]["content"]
    assert "second" in newest and "finding" not in newest  # only what is new
    assert system_prompt(rt.world, agent) == system
    assert f"<EOT>{ME}:task-1:NAME:VERSION<EOT>" in system


def test_a_summary_is_kept_as_a_summary_and_a_vector_search_falls_back_to_keywords(rt: Runtime) -> None:
    """memid spec, memory.create kinds and memory.search modes: :kind "summary" is stored and
    loaded as a summary; :mode "vector" has no index here, so it is keyword search, said so."""
    made = call(rt, 1, "memory_create", "gist", "the heron left the pine", {"kind": "summary"})
    assert made["kind"] == "summary"
    assert call(rt, 1, "memory_load", made["mem_id"], None)["kind"] == "summary"
    found = call(rt, 1, "memory_search", "heron", {"mode": "vector"})
    assert found["mode"] == "keyword" and "vector search has no index" in found["fallback"]
    assert [h["mem_id"] for h in found["hits"]] == [made["mem_id"]]
    with pytest.raises(ToolError, match="unknown search mode"):
        call(rt, 1, "memory_search", "heron", {"mode": "psychic"})


def test_a_viewpoint_whose_id_cannot_name_a_brain_is_refused_with_the_reason(tmp_path):
    """A viewpoint's id (viewpoint-NAME) names its memory brain, at most 64 characters: a name of
    54 gets its own RAM; one of 55 is refused as data, saying why, and nothing is started (it would
    have had no RAM, and what it is told would have reached it as plain text)."""
    from amacs_server.agents.agent import AgentError
    from amacs_server.agents.kinds import PRIMARY
    from amacs_server.tools.agents import agent_viewpoint

    rt = silent_runtime(tmp_path / "home")
    try:
        fits = "a" * 54
        handle = rt.world.viewpoint(PRIMARY, fits, "debater")["handle"]
        assert rt.world.agents[handle].memory is not None
        long = "b" * 55
        with pytest.raises(AgentError, match=r"a viewpoint name is at most 54 characters .* has 55"):
            rt.world.viewpoint(PRIMARY, long, "debater")
        with pytest.raises(ToolError, match="at most 54 characters"):  # the agent's function: data, not a crash
            agent_viewpoint(rt.world, PRIMARY, None, long, "debater")
        assert f"viewpoint-{long}" not in rt.world.agents
        assert [a.id for a in rt.world.viewpoints_of(PRIMARY)] == [handle]
    finally:
        rt.mind.ltm.close()


def test_any_agent_whose_id_cannot_name_a_brain_is_not_started(tmp_path, monkeypatch):
    """Past the viewpoint's own check (an agent id the World makes some other way), the World
    refuses to start an agent its memory cannot hold, rather than let it read plain text."""
    from amacs_server.agents import world as world_module
    from amacs_server.agents.agent import AgentError
    from amacs_server.agents.kinds import PRIMARY
    from amacs_server.memory.memid import _Part

    rt = silent_runtime(tmp_path / "home")
    try:
        monkeypatch.setattr(world_module, "BRAIN", _Part("brain", "[a-z]", "[a-z0-9_-]", 200), raising=False)  # past it
        with pytest.raises(AgentError, match=r"viewpoint-c+ was not started: the agent id .* cannot name a memory brain"):
            rt.world.viewpoint(PRIMARY, "c" * 60, "debater")
        assert rt.world.viewpoints_of(PRIMARY) == []
    finally:
        rt.mind.ltm.close()
