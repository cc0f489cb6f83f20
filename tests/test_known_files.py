"""Files an agent has read, kept by the World per agent (issue 11).

agent-world-architecture.md, The World: tracking of known_content_files, per agent, with a stamp
to tell a file that changed since ("A possible race condition, and a fix").
"""

import os

from amacs_server.agents.agent import Agent
from amacs_server.agents.world import AgentWorld, Limits
from amacs_server.state.consciousness import EvalResult


def world() -> AgentWorld:
    return AgentWorld(*[None] * 6, Limits())  # type: ignore[arg-type]  # these methods never touch the runtime


def test_the_world_keeps_each_agents_files_with_what_changed_since(tmp_path):
    """Per agent: another agent's read is not this one's; a change on disk shows against the stamp."""
    notes, new, gone = tmp_path / "notes.txt", tmp_path / "new.txt", tmp_path / "gone.txt"
    notes.write_text("one")
    gone.write_text("soon gone")
    w = world()
    head = "Files this agent has read or written in its evals, and whether each changed on disk since:"
    assert w.files_seen.text("primary") == f"{head} none."
    w.files_seen.note("primary", EvalResult(True, files_read=(str(notes), str(gone))))
    w.files_seen.note("primary", EvalResult(True, files_written=(str(new),)))
    w.files_seen.note("task-1", EvalResult(True, files_read=(str(notes),)))
    new.write_text("written by the agent")  # after the stamp, as if outside the eval: changed
    assert w.files_seen.text("primary") == "\n".join([
        head,
        f"- {notes} (read; unchanged since)",
        f"- {gone} (read; unchanged since)",
        f"- {new} (written; changed on disk since)",
    ])
    notes.write_text("one, and more")
    gone.unlink()
    text = w.files_seen.text("primary")
    assert f"- {notes} (read; changed on disk since)" in text and f"- {gone} (read; deleted since)" in text
    # Writing it again refreshes what the agent knows; it stays read, and moves to the end.
    w.files_seen.note("primary", EvalResult(True, files_written=(str(notes),)))
    assert w.files_seen.text("primary").endswith(f"- {notes} (read and written; unchanged since)")
    assert w.files_seen.text("task-1") == f"{head}\n- {notes} (read; changed on disk since)"
    assert w.files_seen.text("task-2") == f"{head} none."


def test_an_agent_that_ends_forgets_its_files(tmp_path):
    """A new agent of the same id (a viewpoint name used again) starts knowing no file."""
    w = world()
    agent = Agent(id="viewpoint-x", type="viewpoint", template="debater", parent="primary", depth=1)
    w.files_seen.note(agent.id, EvalResult(True, files_read=(str(tmp_path),)))
    assert w.files_seen.of(agent.id)
    w._free(agent)
    assert agent.id not in w.files_seen


def test_a_stamp_is_size_and_mtime(tmp_path):
    """Two writes of different length inside one mtime tick still count as a change."""
    path = tmp_path / "f"
    path.write_text("a")
    w = world()
    w.files_seen.note("primary", EvalResult(True, files_read=(str(path),)))
    stat = os.stat(path)
    path.write_text("ab")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "changed on disk since" in w.files_seen.text("primary")


def test_the_primarys_thread_buffers_count_as_files_it_has_read(tmp_path):
    """A file buffer of the active thread is in the primary's context: the World knows it was read."""
    import asyncio

    from amacs_server.config import load_config
    from amacs_server.loop.primary import observe
    from amacs_server.runtime import Runtime
    from amacs_server.tools import work as work_tools
    from tests.test_memory import SilentFace

    notes = tmp_path / "notes.txt"
    notes.write_text("n")

    class Face(SilentFace):
        async def hydrate(self, buffers):
            return [{"name": "notes.txt", "file": str(notes), "content": "n"}]

    rt = Runtime(load_config({"AMACS_HOME": str(tmp_path / "h"), "ANTHROPIC_API_KEY": "k"}), Face())
    try:
        work_tools.thread_create(rt.mind, "work", {"buffers": ["notes.txt"]})
        asyncio.run(observe(rt))
        assert str(notes) in rt.world.files_seen.of("primary")
    finally:
        rt.mind.ltm.close()
