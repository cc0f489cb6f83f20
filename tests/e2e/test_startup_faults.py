"""Start-up faults (issue 12, items 3 and 4): real batch Emacs, real server, the fake model.

A damaged file is recovered from the history the home keeps and the person is
told; a home that cannot be written is explained in one line, the server is
started a bounded number of times, and the typed input is kept.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.e2e.harness import DRIVER, ROOT, EmacsRun, emacs_env, run_emacs
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

pytestmark = pytest.mark.e2e

USAGE = {"input_tokens": 100_000, "output_tokens": 1_000}
TURN = "(amacs-e2e-open) (amacs-e2e-send \"and now?\") (amacs-e2e-finish)"


@pytest.fixture(scope="module")
def lived_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home after two turns that cost money: its files, git history, memory and transcripts."""
    fake = FakeAnthropic().start()
    try:
        fake.script(Reply(agent_json("One."), usage=USAGE), Reply(agent_json("Two."), usage=USAGE))
        home = tmp_path_factory.mktemp("lived") / "agent"
        run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-send \"first\") (amacs-e2e-send \"second\") "
                                  "(amacs-e2e-finish)").check()
    finally:
        fake.stop()
    return home


def spent(home: Path) -> float:
    match = re.search(r"\(cost-so-far \. ([0-9.e-]+)\)", (home / "consciousness.el").read_text())
    assert match, (home / "consciousness.el").read_text()
    return float(match.group(1))


def copy_home(lived_in: Path, tmp_path: Path) -> Path:
    home = tmp_path / "agent"
    shutil.copytree(lived_in, home)
    return home


def test_damaged_consciousness_is_restored_from_git_and_the_money_spent_kept(lived_in, tmp_path, fake):
    home = copy_home(lived_in, tmp_path)
    before = spent(home)
    assert before > 0.5
    (home / "consciousness.el").write_text("((identity . \"amacs-instance-1\")\n (current-tick . 2")  # cut short
    fake.script(Reply(agent_json("Three."), usage=USAGE))
    run = run_emacs(home, fake.url, TURN).check()
    note = next(line for line in run.shell.splitlines() if "consciousness.el could not be read" in line)
    assert "moved to consciousness.el.corrupt-" in note and "restored from git (commit" in note
    assert f"The money spent so far stays counted: ${before:.4f} (from git)." in note
    assert "Three." in run.shell
    assert spent(home) > before + 0.3  # the old spending plus this turn's: never reset
    aside = list(home.glob("consciousness.el.corrupt-*"))
    assert len(aside) == 1 and "(current-tick . 2" in aside[0].read_text()
    assert "tick 2" in note  # the last good commit
    committed = subprocess.run(["git", "show", "HEAD:consciousness.el"], cwd=home, capture_output=True,
                               text=True, check=True).stdout
    assert "(current-tick . 3)" in committed


def test_damaged_memory_db_is_moved_aside_and_rebuilt(lived_in, tmp_path, fake):
    home = copy_home(lived_in, tmp_path)
    (home / "memory.db").write_bytes(b"\x00garbage, not SQLite" * 100)
    fake.script(Reply(agent_json("Rebuilt."), usage=USAGE))
    run = run_emacs(home, fake.url, TURN).check()
    assert re.search(r";; memory\.db was damaged \(file is not a database\); it was moved to "
                     r"memory\.db\.corrupt-\S+ and rebuilt", run.shell), run.shell
    assert "Rebuilt." in run.shell
    db = sqlite3.connect(home / "memory.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        chats = {b.rsplit(":", 1)[1] for (b,) in db.execute("SELECT base FROM items WHERE base LIKE '%:chat.%'")}
        assert chats == {"chat.1", "chat.2", "chat.3"}  # the old ticks, from the org file
    finally:
        db.close()
    # The model sees the earlier exchanges too.
    assert "second" in str(fake.requests[-1]["body"]["messages"]) and "Two." in str(fake.requests[-1]["body"])


def test_damaged_inner_pages_of_memory_db_are_noticed_at_start(lived_in, tmp_path, fake):
    home = copy_home(lived_in, tmp_path)
    db_path = home / "memory.db"
    size = db_path.stat().st_size
    assert size >= 8 * 4096
    with db_path.open("r+b") as fh:  # garbage over pages in the middle; the header is intact
        fh.seek((size // 4096 // 2) * 4096)
        fh.write(b"\xde\xad\xbe\xef" * 2048)
    fake.script(Reply(agent_json("Noticed."), usage=USAGE))
    run = run_emacs(home, fake.url, TURN).check()
    note = next(line for line in run.shell.splitlines() if "memory.db was damaged" in line)
    assert re.search(r"and the \d+ item versions still readable in it", note), note
    assert "Noticed." in run.shell
    db = sqlite3.connect(db_path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()


def test_bytes_that_are_not_utf8_in_the_chat_log_are_read_with_replacement(lived_in, tmp_path, fake):
    home = copy_home(lived_in, tmp_path)
    chat = home / "agent-chat.org"
    data = chat.read_bytes()
    chat.write_bytes(data.replace(b"Two.", b"Tw\xff\xfe."))
    fake.script(Reply(agent_json("Still here."), usage=USAGE))
    run = run_emacs(home, fake.url, TURN).check()
    notes = [line for line in run.shell.splitlines() if "not UTF-8" in line]
    assert len(notes) == 1 and notes[0].startswith(";; agent-chat.org has bytes that are not UTF-8")
    assert "Still here." in run.shell
    assert "Tw\ufffd\ufffd." in str(fake.requests[-1]["body"]["messages"])
    assert chat.read_bytes().startswith(data.replace(b"Two.", b"Tw\xff\xfe."))  # left as it was, then appended


# -- a home the server cannot write ------------------------------------------------------------


def _namespaces_work() -> str | None:
    """None when this machine lets us mount in a user namespace, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1) here"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>&1 || "
                           "mount -t tmpfs -o size=64k tmpfs /tmp 2>&1"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"cannot mount in a user namespace here: {(done.stderr or done.stdout).strip()}"
    return None


NO_NAMESPACES = _namespaces_work()

# Type before the server is up, wait until Emacs gives up, then bring the input back with M-p.
UNWRITABLE = r"""
(setq amacs--retry-base 0.2)
(setq amacs-server-command
      (list "sh" "-c" (format "echo x >> %s; exec %s -m amacs_server"
                              (getenv "AMACS_E2E_STARTS") (getenv "AMACS_E2E_PYTHON"))))
(amacs-shell)
(amacs-e2e-send-no-wait "my precious input")
(amacs-e2e-wait-text "Stopped trying")
(accept-process-output nil 1.5)
(with-current-buffer amacs-shell-buffer-name
  (goto-char (point-max))
  (comint-previous-input 1)
  (princ (format "INPUT<<%s>>\n" (buffer-substring-no-properties amacs-shell--prompt-start (point-max))))
  (princ (format "BUSY<<%s>> STATE<<%s>>\n" amacs-shell-busy (amacs-shell-state))))
(amacs-e2e-finish)
"""


def run_in_namespace(setup: str, home: Path, base_url: str, program: str, starts: Path) -> EmacsRun:
    """Batch Emacs with the driver, in a mount namespace prepared by the shell commands SETUP."""
    env = emacs_env(home, base_url, AMACS_E2E_STARTS=str(starts))
    out = Path(env["AMACS_E2E_OUT"])
    emacs = " ".join(["exec emacs -Q --batch -l", str(DRIVER), "--eval", _sh_quote(f"(progn {program})")])
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", f"set -e; {setup}; {emacs}"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    shell = out.read_text(encoding="utf-8") if out.exists() else ""
    return EmacsRun(proc.returncode, proc.stdout, proc.stderr, shell)


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def check_unwritable(run: EmacsRun, starts: Path, reason: str) -> None:
    run.check()
    lines = run.shell.splitlines()
    said = [line for line in lines if "did not start:" in line]
    assert len(said) == 1 and reason in said[0], run.shell  # explained once
    assert "then send again (or M-x amacs-restart)" in said[0]
    assert "exited abnormally" not in run.shell
    count = len(starts.read_text().split())
    assert count == 3, f"{count} starts"  # amacs-start-attempts, and no more after giving up
    assert any("Stopped trying: the AMACS server did not start in 3 attempts" in line for line in lines)
    assert "Not sent: the AMACS server could not start. M-p brings it back." in run.shell
    assert "INPUT<<amacs> my precious input>>" in run.stdout, run.stdout
    assert "BUSY<<nil>> STATE<<stopped>>" in run.stdout


@pytest.mark.skipif(NO_NAMESPACES is not None, reason=str(NO_NAMESPACES))
def test_read_only_home_is_explained_once_not_restarted_for_ever_and_the_input_kept(lived_in, tmp_path, fake):
    home = copy_home(lived_in, tmp_path)
    starts = tmp_path / "starts"
    starts.touch()
    setup = f"mount --bind {home} {home}; mount -o remount,ro,bind {home}"
    run = run_in_namespace(setup, home, fake.url, UNWRITABLE, starts)
    check_unwritable(run, starts, f"the AMACS home {home} is on a read-only file system")
    assert not fake.requests


@pytest.mark.skipif(NO_NAMESPACES is not None, reason=str(NO_NAMESPACES))
def test_full_disk_is_explained_once_not_restarted_for_ever_and_the_input_kept(lived_in, tmp_path, fake):
    home = copy_home(lived_in, tmp_path)
    starts = tmp_path / "starts"
    starts.touch()
    # A small tmpfs over the home holding its files, then filled to the last byte.
    setup = (f"cp -a {home} {tmp_path}/copy; mount -t tmpfs -o size=1m tmpfs {home}; "
             f"cp -a {tmp_path}/copy/. {home}/; "
             f"(dd if=/dev/zero of={home}/filler bs=4k 2>/dev/null || true)")
    run = run_in_namespace(setup, home, fake.url, UNWRITABLE, starts)
    check_unwritable(run, starts, f"the disk holding the AMACS home {home} is full")
    assert not fake.requests


def test_a_failure_after_the_port_line_is_explained_once_and_the_input_kept(tmp_path, fake):
    """The server prints its port before it builds its runtime; a runtime that cannot be built
    (here memory.db is a folder) is said on the next line, which Emacs shows as it shows a
    failure before the port: once, however many starts it tries, and the typed input is kept."""
    home = tmp_path / "agent"
    (home / "memory.db").mkdir(parents=True)
    program = ("(setq amacs--retry-base 0.2) (amacs-shell) (amacs-e2e-send-no-wait \"my precious input\") "
               "(amacs-e2e-wait-text \"Stopped trying\") (amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program).check()
    said = [line for line in run.shell.splitlines() if "did not start:" in line]
    assert len(said) == 1, run.shell
    assert f"cannot open {home / 'memory.db'}" in said[0]
    assert "exited abnormally" not in run.shell
    assert "Stopped trying: the AMACS server did not start in 3 attempts. Fix what it said" in run.shell
    assert "Not sent: the AMACS server could not start. M-p brings it back." in run.shell
    assert not fake.requests
