"""Threads (RFC v4 §5) and skills (§6, IMP-023) in process."""

import os
import time

import pytest

from amacs_server.skills import SkillError, SkillLibrary, parse_frontmatter
from amacs_server.threads import MAX_OPEN, ThreadBook, ThreadError


def test_at_most_three_open_threads_and_the_fourth_is_refused():
    book = ThreadBook()
    for i in range(MAX_OPEN):
        book.create(f"t{i}", "c", None, tick=1)
    assert book.active == "t0"  # the first thread becomes active; later ones wait
    with pytest.raises(ThreadError, match="at most 3 threads may be open"):
        book.create("t3", "c", None, tick=1)
    book.complete("t1", {"output": "ok"}, "lesson")
    book.create("t3", "c", None, tick=2)  # room again
    assert list(book.open) == ["t0", "t2", "t3"]


def test_switch_complete_and_buffers():
    book = ThreadBook()
    book.create("rust-debugging", "Fix ownership error", ["src/main.rs"], tick=1)
    book.create("blog", "Write", None, tick=1)
    book.switch("blog")
    assert [t.id for t in book.pending()] == ["rust-debugging"]
    book.add_buffer("rust-debugging", "src/lib.rs")
    assert book.open["rust-debugging"].buffers == ("src/main.rs", "src/lib.rs")
    book.remove_buffer("rust-debugging", "src/main.rs")
    with pytest.raises(ThreadError, match="is not a buffer"):
        book.remove_buffer("rust-debugging", "nope.rs")
    done = book.complete("blog", None, "Short posts are read")
    assert done.status == "completed" and book.active is None
    with pytest.raises(ThreadError, match="no open thread 'blog'"):
        book.switch("blog")
    with pytest.raises(ThreadError, match="not a thread id"):
        book.create("Bad Id", None, None, tick=1)


def write_skill(root, name, body, kind="skill", description="d"):
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\nkind: {kind}\n---\n{body}\n")


def test_personal_skills_override_builtin_and_edits_show(tmp_path):
    builtin, personal = tmp_path / "builtin", tmp_path / "home"
    write_skill(builtin, "rust", "built-in rust")
    write_skill(builtin, "org", "built-in org")
    write_skill(personal, "rust", "my rust")
    lib = SkillLibrary(builtin, personal)
    assert [s.name for s in lib.available()] == ["org", "rust"]
    assert lib.get("rust").body == "my rust"
    path = personal / "rust" / "SKILL.md"
    path.write_text("---\nname: rust\ndescription: d\nkind: skill\n---\nmy rust, edited\n")
    later = time.time() + 2
    os.utime(path, (later, later))
    assert lib.get("rust").body == "my rust, edited"
    with pytest.raises(SkillError, match="no skill named 'go'"):
        lib.get("go")


def test_frontmatter():
    fields, body = parse_frontmatter("---\nname: x\ndescription: \"A: b\"\nkind: task\n---\nBody\n")
    assert fields == {"name": "x", "description": "A: b", "kind": "task"} and body == "Body\n"


def test_builtin_skills_are_well_formed():
    from amacs_server.config import load_config

    cfg = load_config({"AMACS_HOME": "/nonexistent"})
    lib = SkillLibrary(cfg.skills_dir, cfg.home / "skills")
    skills = {s.name: s for s in lib.available()}
    assert skills["core"].kind == "core" and "Response format" in skills["core"].body
    assert all(s.description for s in skills.values())


def test_judges_are_a_kind_of_their_own_and_not_listed_for_agents():
    from amacs_server.config import load_config

    cfg = load_config({"AMACS_HOME": "/nonexistent"})
    lib = SkillLibrary(cfg.skills_dir, cfg.home / "skills")
    kinds = {s.name: s.kind for s in lib.available()}
    assert kinds["answer-quality"] == "judge" and kinds["viewpoints-used"] == "judge"
    listed = {s.name for s in lib.for_agents()}
    assert "answer-quality" not in listed and "core" not in listed
    assert {"debater", "planning-mode"} <= listed


def test_a_skill_is_read_without_a_thread_and_binds_nothing():
    from types import SimpleNamespace

    from amacs_server.config import load_config
    from amacs_server.tools.kit import ToolError
    from amacs_server.tools.work import TOOLS

    cfg = load_config({"AMACS_HOME": "/nonexistent"})
    skills = SkillLibrary(cfg.skills_dir, cfg.home / "skills")
    threads = ThreadBook()
    mind = SimpleNamespace(skills=skills, threads=threads)
    read = TOOLS["skill_read"](mind, "memory")
    assert read["name"] == "memory" and read["kind"] == "skill"
    assert "(agent-memory-create" in read["text"] and not read["text"].startswith("---")
    assert threads.active is None and not threads.open  # no thread was needed, none was made
    with pytest.raises(ToolError, match="no skill named"):
        TOOLS["skill_read"](mind, "no-such-skill")
