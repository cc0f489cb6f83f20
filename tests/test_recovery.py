"""Issue 12, items 3 and 4: start-up checks, and recovery from the history the home keeps."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from amacs_server import views
from amacs_server.files import deferred_sync
from amacs_server.memory.active import RAM_WINDOW
from amacs_server.memory.items import Kind, MemoryItem, Tier
from amacs_server.memory.ltm import LongTermMemory, check_database
from amacs_server.memory.memid import MemId
from amacs_server.persistence.chat_log import ChatLog
from amacs_server.persistence.git_repo import HomeRepo
from amacs_server.persistence.monologue import MonologueLog
from amacs_server.persistence.recovery import (
    StartupError,
    check_home,
    decode_utf8,
    explain_os_error,
    load_consciousness,
    parse_consciousness,
    spent_in_transcripts,
)
from amacs_server.state.consciousness import Consciousness
from tests.test_memory import put_all, silent_runtime

ROOT = Path(__file__).resolve().parents[1]


def committed_consciousness(home: Path, spends: list[float]) -> HomeRepo:
    """A home whose git history has one consciousness.el per figure of SPENDS (ticks 1, 2, ...)."""
    home.mkdir(parents=True, exist_ok=True)
    repo = HomeRepo(home)
    for tick, dollars in enumerate(spends, 1):
        c = Consciousness(current_tick=tick)
        c.budget.cost_so_far = dollars
        (home / "consciousness.el").write_text(c.to_elisp())
        repo.commit([home / "consciousness.el"], f"tick {tick}")
    return repo


# -- consciousness.el ------------------------------------------------------------------


def test_a_file_that_lost_its_budget_is_not_read_as_money_never_spent():
    whole = Consciousness()
    whole.budget.cost_so_far = 3.5
    c, has_spent = parse_consciousness(whole.to_elisp())
    assert c.budget.cost_so_far == 3.5 and has_spent
    c, has_spent = parse_consciousness('((identity . "x") (current-tick . 4))')  # reads: no money in it
    assert c.current_tick == 4 and not has_spent
    with pytest.raises(ValueError):
        parse_consciousness("((identity . ")


def test_a_hand_written_file_keeps_its_fields_and_the_money_spent_from_git(tmp_path):
    """A person writes a few fields by hand (no budget): kept as written, not moved aside; the
    money spent is git's, and the person is told."""
    home = tmp_path / "home"
    committed_consciousness(home, [0.25, 0.5])
    (home / "consciousness.el").write_text("((chat-context-depth . 3))\n")
    rt = silent_runtime(home)
    try:
        assert rt.mind.consciousness.chat_context_depth == 3 and rt.mind.consciousness.budget.cost_so_far == 0.5
        assert not list(home.glob("consciousness.el.corrupt-*"))
        notice = views.status(rt)["notice"]
        assert isinstance(notice, str) and "no record of the money spent" in notice and "$0.5000" in notice
    finally:
        rt.stop()


def test_a_hand_written_file_in_a_fresh_home_is_read_without_a_word(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "consciousness.el").write_text("((chat-context-depth . 3))\n")
    rt = silent_runtime(home)
    try:
        assert rt.mind.consciousness.chat_context_depth == 3 and views.status(rt)["notice"] is None
    finally:
        rt.stop()


def test_damaged_consciousness_is_moved_aside_and_restored_from_the_last_good_commit(tmp_path):
    home = tmp_path / "home"
    repo = committed_consciousness(home, [0.5, 1.25])
    (home / "consciousness.el").write_text("garbage (((")
    repo.commit([home / "consciousness.el"], "tick 3, damaged")  # the newest commit does not read either
    c, note = load_consciousness(home, repo)
    assert c.current_tick == 2 and c.budget.cost_so_far == 1.25
    assert note is not None and "restored from git" in note and "tick 2" in note
    assert "$1.2500 (from git)" in note
    aside = list(home.glob("consciousness.el.corrupt-*"))
    assert [p.read_text() for p in aside] == ["garbage ((("]
    assert not (home / "consciousness.el").exists()  # the runtime writes the restored one


def test_the_money_spent_is_the_largest_any_record_gives(tmp_path):
    home = tmp_path / "home"
    repo = committed_consciousness(home, [1.0])
    # The damaged file still shows a later figure; the transcripts record more still.
    (home / "consciousness.el").write_text("((budget . ((cost-so-far . 2.5) (budget-limit . 5.0)))\n (mood . \"")
    folder = home / "transcripts"
    folder.mkdir()
    lines = [{"event": "model_response", "data": {"cost": 1.5}}, {"event": "model_request", "data": {"cost": 9}},
             {"event": "model_response", "data": {"cost": 1.5}}]
    (folder / "a.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\nnot json \"model_response\"\n")
    assert spent_in_transcripts(folder) == 3.0
    c, note = load_consciousness(home, repo)
    assert c.budget.cost_so_far == 3.0 and note is not None and "(from the transcripts)" in note
    (folder / "a.jsonl").unlink()
    (home / "consciousness.el").write_text("((budget . ((cost-so-far . 2.5) (budget-limit . 5.0)))\n (mood . \"")
    c, note = load_consciousness(home, repo)
    assert c.budget.cost_so_far == 2.5 and note is not None and "(from the damaged file)" in note


def test_without_git_or_any_record_it_says_so_loudly(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "consciousness.el").write_bytes(b"\xff\xfe(")
    c, note = load_consciousness(home, HomeRepo(home))
    assert c.budget.cost_so_far == 0 and c.current_tick == 0
    assert note is not None and "git holds no version that reads" in note
    assert "No record of the money spent was found" in note


def test_a_missing_consciousness_is_a_new_home_not_a_recovery(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    c, note = load_consciousness(home, HomeRepo(home))
    assert note is None and c.current_tick == 0


def test_runtime_rewrites_the_restored_file_and_says_so_at_hello(tmp_path):
    home = tmp_path / "home"
    committed_consciousness(home, [0.75])
    (home / "consciousness.el").write_text("((identity")
    rt = silent_runtime(home)
    try:
        assert rt.mind.consciousness.budget.cost_so_far == 0.75
        assert parse_consciousness((home / "consciousness.el").read_text())[0].budget.cost_so_far == 0.75
        notice = views.status(rt)["notice"]
        assert isinstance(notice, str) and notice.startswith("consciousness.el could not be read")
    finally:
        rt.stop()


# -- memory.db ----------------------------------------------------------------------------


def items(n: int) -> list[MemoryItem]:
    return [MemoryItem(MemId.from_base(f"a:primary:note.{i}", 1), Tier.RAM, Kind.NOTE,
                       {"text": f"note number {i} " + "words " * 200}, 0) for i in range(n)]


def damage_middle(path: Path) -> None:
    """Overwrite the middle one of the pages that hold the items' rows."""
    db = sqlite3.connect(path)
    try:
        pages = [n for (n,) in db.execute("SELECT pageno FROM dbstat WHERE name = 'items' AND pagetype = 'leaf' "
                                          "ORDER BY pageno")]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()
    with path.open("r+b") as fh:
        fh.seek((pages[len(pages) // 2] - 1) * size)
        fh.write(b"\xde\xad\xbe\xef" * (size // 4))


def test_integrity_check_finds_damage_anywhere_and_only_damage(tmp_path):
    path = tmp_path / "memory.db"
    assert check_database(path) is None and not path.exists()  # absent: nothing to check, nothing made
    ltm = LongTermMemory(path)
    put_all(ltm, items(300))
    ltm.close()
    assert check_database(path) is None
    damage_middle(path)
    assert check_database(path)  # what is wrong, in SQLite's words
    path.write_bytes(b"not a database at all" * 100)
    assert check_database(path) == "file is not a database"


def test_salvage_keeps_the_rows_on_sound_pages(tmp_path):
    old = tmp_path / "old.db"
    ltm = LongTermMemory(old)
    put_all(ltm, items(300))
    ltm.set_active("primary", "a:primary:note.1", "pinned", 1)
    ltm.close()
    damage_middle(old)
    new = LongTermMemory(tmp_path / "new.db")
    kept = new.salvage_from(old)
    assert 0 < kept < 300
    assert new.count() == kept
    assert new.search("number", limit=5)  # the FTS index is whole again
    new.close()
    assert check_database(tmp_path / "new.db") is None


def org_home(home: Path, ticks: int) -> None:
    home.mkdir(parents=True)
    chat, mono = ChatLog(home / "agent-chat.org"), MonologueLog(home / "monologue.org")
    with deferred_sync():
        for t in range(1, ticks + 1):
            chat.write_human(t, "2026-01-01T00:00:00Z", f"question {t}")
            chat.write_agent(t, "2026-01-01T00:00:00Z", f"answer {t}", with_heading=False)
            mono.append(t, "2026-01-01T00:00:00Z", f"thought {t}")


def test_runtime_rebuilds_a_damaged_memory_db_from_the_whole_org_history(tmp_path):
    home = tmp_path / "home"
    org_home(home, 150)  # more ticks than RAM keeps (RAM_WINDOW): all of them go back into LTM
    (home / "memory.db").write_bytes(b"\x00" * 5000)
    rt = silent_runtime(home)
    try:
        assert rt.mind.consciousness.current_tick == 150
        bases = {b for (b,) in rt.mind.ltm.db.execute("SELECT base FROM items")}
        assert {f"amacs-instance-1:primary:chat.{t}" for t in range(1, 151)} <= bases
        assert {f"amacs-instance-1:primary:monologue.{t}" for t in range(1, 151)} <= bases
        assert len(rt.mind.memory.chat) <= RAM_WINDOW  # RAM still holds only its window
        assert rt.mind.ltm.search("question", limit=3)
        assert any(n.startswith("memory.db was damaged") for n in rt.startup_notes)
        aside = list(home.glob("memory.db.corrupt-*"))
        assert len(aside) == 1 and aside[0].read_bytes() == b"\x00" * 5000
    finally:
        rt.stop()


def test_a_sound_home_starts_with_no_notes(tmp_path):
    home = tmp_path / "home"
    org_home(home, 3)
    for _ in range(2):
        rt = silent_runtime(home)
        try:
            assert rt.startup_notes == [] and views.status(rt)["notice"] is None
        finally:
            rt.stop()
    assert not list(home.glob("*.corrupt-*"))


# -- org files that are not UTF-8 -------------------------------------------------------------


def test_bytes_that_are_not_utf8_read_as_replacement_and_are_told_once(tmp_path):
    assert decode_utf8("é".encode()) == ("é", None)
    assert decode_utf8(b"ok \xff ok") == ("ok \ufffd ok", 3)
    home = tmp_path / "home"
    org_home(home, 3)
    chat = home / "agent-chat.org"
    chat.write_bytes(chat.read_bytes().replace(b"answer 2", b"answer \xc3\x28"))
    mono = home / "monologue.org"
    mono.write_bytes(mono.read_bytes() + b"- [TICK 4][2026-01-01T00:00:00Z] \xff\n")
    rt = silent_runtime(home)
    try:
        assert [e.agent for e in rt.mind.chat_log.read()][1] == "answer \ufffd("
        notes = [n for n in rt.startup_notes if "not UTF-8" in n]
        assert len(notes) == 2
        assert notes[0].startswith("agent-chat.org has bytes") and notes[1].startswith("monologue.org has bytes")
    finally:
        rt.stop()


# -- a home that cannot be written --------------------------------------------------------------


def test_each_os_error_says_which_file_what_is_wrong_and_what_to_do(tmp_path):
    full = explain_os_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    assert f"the disk holding the AMACS home {tmp_path} is full" in full and "Free some space" in full
    ro = explain_os_error(OSError(errno.EROFS, "Read-only file system", str(tmp_path / "x")), tmp_path)
    assert "read-only file system" in ro and str(tmp_path / "x") in ro and "AMACS_HOME" in ro
    denied = explain_os_error(PermissionError(errno.EACCES, "Permission denied", "f"), tmp_path)
    assert "not writable by you" in denied and "chmod" in denied
    for line in (full, ro, denied):
        assert "\n" not in line and line.endswith("then send again (or M-x amacs-restart)")


def test_check_home_refuses_a_home_it_cannot_write(tmp_path):
    check_home(tmp_path / "new")  # made, probed, left clean
    assert list((tmp_path / "new").iterdir()) == []
    (tmp_path / "file").write_text("")
    with pytest.raises(StartupError, match="could not write"):
        check_home(tmp_path / "file" / "home")  # its parent is a file


def _start_server(home):
    """Run the server (python -m amacs_server) on HOME with no AMACS_/ANTHROPIC_ settings of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_"))}
    env.update(AMACS_HOME=str(home), AMACS_TOKEN="t" * 64)
    return subprocess.run([sys.executable, "-m", "amacs_server"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_a_log_that_cannot_be_opened_is_one_clear_line_not_a_traceback(tmp_path):
    """Was an uncaught OSError in __main__._redirect_stderr: Emacs saw only 'exited abnormally'."""
    home = tmp_path / "home"
    (home / "logs" / "server.log").mkdir(parents=True)  # a folder where the log goes
    done = _start_server(home)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("AMACS server error: could not write ")
    assert str(home / "logs" / "server.log") in lines[0] and "Traceback" not in done.stderr


def test_a_start_up_failure_past_the_log_is_one_line_too(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "memory.db").mkdir()  # not a file at all: neither damage to repair nor a file to move aside
    done = _start_server(home)
    assert done.returncode == 1
    # The port comes first (the runtime is built after it); the reason is the next line, alone.
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[0].isdigit(), lines
    assert lines[1].startswith(f"AMACS server error: cannot open {home / 'memory.db'}")
    assert "start-up failed" in (home / "logs" / "server.log").read_text()


def test_memory_db_damage_check_runs_beside_reading_the_org_files(tmp_path):
    """The check is started before the org files are read and joined when the database opens."""
    home = tmp_path / "home"
    org_home(home, 2)
    ltm = LongTermMemory(home / "memory.db")
    put_all(ltm, items(50))
    ltm.close()
    with sqlite3.connect(home / "memory.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    rt = silent_runtime(home)
    try:
        assert rt.startup_notes == [] and rt.mind.ltm.count() >= 50
    finally:
        rt.stop()


@pytest.mark.parametrize(("left", "set_aside"), [(("config",), True), (("config", "HEAD"), True),
                                                (("config", "HEAD", "objects/", "refs/"), False)])
def test_a_git_repository_whose_set_up_was_cut_short_is_made_again_at_the_next_commit(tmp_path, left, set_aside):
    """Was: Emacs exiting while the first commit made the repository left a .git that every later
    tick failed to open ("cannot set up the git repository"), committing nothing, for good."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "consciousness.el").write_text("(tick 1)")
    dot = home / ".git"
    dot.mkdir()
    for name in left:
        if name.endswith("/"):
            (dot / name).mkdir()
        else:
            (dot / name).write_text("ref: refs/heads/master\n" if name == "HEAD" else "[core]\n")
    HomeRepo(home).commit([home / "consciousness.el"], "tick 1")
    log = subprocess.run(["git", "-C", str(home), "log", "--format=%s"], capture_output=True, text=True, check=True)
    assert log.stdout.strip() == "tick 1"
    aside = [p.name for p in (home / "logs").iterdir()] if (home / "logs").exists() else []
    assert [n.startswith("git-half-made-") for n in aside] == ([True] if set_aside else [])


def test_a_git_repository_with_objects_is_never_set_aside(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(home)], check=True)
    (home / "a").write_text("a")
    subprocess.run(["git", "-C", str(home), "add", "a"], check=True)
    (home / ".git" / "HEAD").unlink()  # damaged, yet it holds an object: left for a person to look at
    with pytest.raises(Exception, match="cannot set up the git repository"):
        HomeRepo(home).commit([home / "a"], "x")
    assert (home / ".git" / "objects").is_dir() and not (home / "logs").exists()


def test_the_skills_files_the_homes_gitignore_leaves_out_are_not_committed(tmp_path):
    """Was: everything under skills/ was committed regardless of .gitignore (a fork made inside
    skills/ put its memory.db and transcripts in HOME's history)."""
    from amacs_server.persistence.history import skill_files

    home = tmp_path / "home"
    (home / "skills" / "mine" / "cache").mkdir(parents=True)
    (home / "skills" / "mine" / "SKILL.md").write_text("a skill")
    (home / "skills" / "mine" / "cache" / "big.bin").write_text("x")
    (home / "skills" / "mine" / "memory.db").write_text("db")
    subprocess.run(["git", "init", "-q", str(home)], check=True)
    (home / ".gitignore").write_text("memory.db*\nskills/*/cache/\n")
    assert skill_files(home) == [home / "skills" / "mine" / "SKILL.md"]
    (home / ".gitignore").write_text("memory.db*\n")  # edited: asked again
    assert skill_files(home) == sorted([home / "skills" / "mine" / "SKILL.md",
                                        home / "skills" / "mine" / "cache" / "big.bin"])
