"""Threads, skills and buffers end to end (issue 4; RFC v4 §5, §5.2, §6; IMP-023; EPIC-007)."""

import subprocess

import pytest

from tests.context_items import eval_result, name_of, parse_context, state
from tests.e2e.harness import elisp_string, run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e


def evals(*forms, reply="done"):
    return [Reply(agent_json(None, eval=f)) for f in forms] + [Reply(agent_json(reply))]


def session(text, setup=""):
    return (f"(setq amacs-max-steps 15) {setup} (amacs-e2e-open) "
            f"(amacs-e2e-send {elisp_string(text)}) (amacs-e2e-finish)")


def threads(ctx):
    return [(i["content"]["id"], i["content"]["buffers"]) for i in parse_context(ctx).get("threads", [])]


def test_thread_api_changes_the_next_context_and_a_fourth_is_refused(fake, home):
    """RFC §5.1 from eval: create, switch, add/remove buffers, complete; at most 3 open."""
    fake.script(*evals(
        '(agent-create-thread "rust-debugging" :concern "Fix ownership error" :buffers \'("notes.txt"))',
        '(agent-create-thread "blog-update" :concern "Write about lifetimes")',
        '(agent-create-thread "config-cleanup" :concern "Refactor settings")',
        '(agent-create-thread "fourth" :concern "one too many")',
        '(agent-switch-thread "blog-update")',
        '(agent-thread-add-buffer "rust-debugging" "src/lib.rs")',
        '(agent-thread-remove-buffer "rust-debugging" "notes.txt")',
        '(agent-complete-thread "config-cleanup" :evidence \'(:output "Tests pass") '
        ':learned "Use static for returned refs")',
        '(agent-memory-search "returned refs")',
    ))
    run_emacs(home, fake.url, session("organize the work")).check()
    ctx = fake.user_texts()
    assert threads(ctx[1]) == [("rust-debugging", ["notes.txt"])]
    assert state(ctx[1], "active_thread") == "rust-debugging"
    assert ':thread "rust-debugging"' in eval_result(ctx[1])["result"]
    assert [t for t, _ in threads(ctx[3])] == ["rust-debugging", "blog-update", "config-cleanup"]
    refused = eval_result(ctx[4])
    assert not refused["success"] and refused["error"].startswith("at most 3 threads may be open")
    assert [t for t, _ in threads(ctx[5])][0] == "blog-update"  # the active thread comes first
    assert state(ctx[5], "active_thread") == "blog-update"
    assert state(ctx[5], "pending_threads") == [
        {"id": "rust-debugging", "concern": "Fix ownership error"},
        {"id": "config-cleanup", "concern": "Refactor settings"}]
    assert dict(threads(ctx[7]))["rust-debugging"] == ["src/lib.rs"]
    assert "config-cleanup" not in dict(threads(ctx[8]))
    assert [p["id"] for p in state(ctx[8], "pending_threads")] == ["rust-debugging"]
    found = eval_result(ctx[9])["result"]
    assert found.startswith('((:mem-id "<EOT>amacs-instance-1:primary:thread.config-cleanup:') and "[returned]" in found
    log = subprocess.run(["git", "-C", str(home), "log", "--format=%s"], capture_output=True, text=True).stdout
    assert "[TICK 6][blog-update]" in log and "[TICK 2][rust-debugging]" in log


def test_skill_shows_only_while_its_thread_is_active_and_edits_show_next_tick(fake, home):
    """RFC §6 / IMP-023: bound skills load with their thread; a SKILL.md edit needs no restart."""
    skill = home / "skills" / "rust-mode" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: rust-mode\ndescription: Rust help\nkind: skill\n---\nRust tips v1\n")
    new_text = "---\nname: rust-mode\ndescription: Rust help\nkind: skill\n---\nRust tips v2\n"
    fake.script(*evals(
        '(agent-create-thread "a" :concern "A")',
        '(agent-create-thread "b" :concern "B")',
        '(agent-bind-skill-to-thread "rust-mode")',
        '(agent-list-available-skills)',
        f'(with-temp-file {elisp_string(str(skill))} (insert {elisp_string(new_text)}))',
        '(agent-switch-thread "b")',
        '(agent-switch-thread "a")',
        '(agent-unbind-skill-from-thread "rust-mode" "a")',
    ))
    run_emacs(home, fake.url, session("use skills")).check()
    ctx = fake.user_texts()

    def skills(text):
        return [(name_of(i), i["body"]) for i in parse_context(text).get("skills", [])]

    assert skills(ctx[2]) == []
    assert skills(ctx[3]) == [("skill.rust-mode", "Rust tips v1")]
    listing = eval_result(ctx[4])["result"]
    assert '(:name "rust-mode" :description "Rust help" :kind "skill")' in listing
    assert ':name "elisp-editing"' in listing and ':name "core"' not in listing
    assert skills(ctx[5]) == [("skill.rust-mode", "Rust tips v2")]
    assert skills(ctx[6]) == []  # thread b is active: a's skill is not shown
    assert skills(ctx[7]) == [("skill.rust-mode", "Rust tips v2")]
    assert skills(ctx[8]) == []
    # The stable base carries its own cache breakpoint, and so does the newest tick (issue 10).
    users = [m for m in fake.requests[3]["body"]["messages"] if m["role"] == "user"]
    base = users[0]["content"][0]
    assert base["cache_control"] == {"type": "ephemeral"} and "<threads>" in base["text"]
    assert "<agent-consciousness>" not in base["text"]  # the stable part only
    assert users[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "<agent-consciousness>" in users[-1]["content"][-1]["text"]  # the volatile part comes last


def test_buffers_of_the_active_thread_are_hydrated_and_problems_reported(fake, home, tmp_path):
    """RFC §5.2: a real file buffer's text reaches the context; a killed buffer or a huge file is reported."""
    src = tmp_path / "hello.py"
    src.write_text("def hello():\n    return 'world'\n")
    big = tmp_path / "big.log"
    big.write_text("x" * 5000)
    fake.script(*evals(
        f'(agent-create-thread "code" :buffers (list {elisp_string(str(src))} "*notes*" {elisp_string(str(big))}))',
        '(kill-buffer "*notes*")',
    ))
    setup = ('(setq amacs-buffer-max-file-bytes 1000) '
             '(with-current-buffer (get-buffer-create "*notes*") (insert "remember the milk"))')
    run_emacs(home, fake.url, session("look at my code", setup=setup)).check()
    ctx = fake.user_texts()
    first = {i["name"]: i for i in parse_context(ctx[1])["buffers"]}
    assert first[str(src)]["mode"] == "python-mode"
    assert first[str(src)]["content"] == "def hello():\n    return 'world'"
    assert first["*notes*"]["content"] == "remember the milk"
    assert first[str(big)]["error"] == "file too large: 5000 bytes (amacs-buffer-max-file-bytes is 1000)"
    assert f"=== {src} (python-mode) ===" in ctx[1]
    after = {i["name"]: i for i in parse_context(ctx[2])["buffers"]}
    assert after["*notes*"]["error"] == "no such buffer or file (it may have been killed)"
    assert after[str(src)]["version"] == first[str(src)]["version"]  # unchanged text, same version
    assert "<buffers>" not in ctx[0]  # no thread yet, nothing to hydrate


def test_a_skill_the_core_skill_names_is_read_with_no_thread(fake, home):
    """The core skill names skills to read on need; agent-read-skill returns one's text from a real
    eval with no thread open (test_threads_skills checks that it opens and binds none)."""
    fake.script(*evals('(agent-read-skill "subagents")', '(agent-read-skill "no-such-skill")'))
    run_emacs(home, fake.url, session("what can you start?")).check()
    ctx = fake.user_texts()
    read = eval_result(ctx[1])
    assert read["success"] and '(agent-task \\"researcher\\"' in read["result"], read
    assert ':name "subagents"' in read["result"] and ':kind "skill"' in read["result"]
    assert "no skill named 'no-such-skill'" in eval_result(ctx[2])["error"]
