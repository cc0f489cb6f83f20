"""``amacs-server experiment`` end to end (issue 15): real batch Emacs sessions against the fake model.

One spec of 12 runs (2 prompts x 2 variants x 1 model x 3 repetitions), one
turn each, against a zero-latency fake that answers every request; the command
runs as a person runs it, in its own process.  It completes in parallel; killed
halfway and re-run it repeats no finished run and loses none; a total budget
stops new runs and a larger one finishes the rest; the same on a local Ray.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amacs_server.research.runs import transcript_totals
from tests.e2e.harness import ROOT, TEST_KEY
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

pytestmark = pytest.mark.e2e

RUNS = 12
TURNS = 1
SKILL = "---\nname: panel-{name}\ndescription: a viewpoint for the test\n---\nSay what {name} would say.\n"


@pytest.fixture
def model():
    server = FakeAnthropic(default=lambda body: Reply(agent_json("fine"))).start()
    yield server
    server.stop()


@pytest.fixture
def slow_model():
    """A model that takes a second to answer: runs are still going when the test interrupts them
    (at zero latency a run takes under a second and all twelve can end before the C-c)."""
    server = FakeAnthropic(default=lambda body: Reply(agent_json("fine"), delay=1.0)).start()
    yield server
    server.stop()


def write_spec(folder: Path, name: str, parallel: int = 4) -> Path:
    """A 12-run spec in FOLDER, with two variants' skill folders."""
    for variant in ("one", "two"):
        skill = folder / "skills" / variant / f"panel-{variant}"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(SKILL.format(name=variant))
    spec = folder / "experiment.toml"
    spec.write_text(f"""
[experiment]
name = "{name}"
repetitions = 3
parallel = {parallel}
run_budget = 0.5
timeout = 90
max_steps = 3

[[prompts]]
name = "first"
turns = ["{name}: the first question"]

[[prompts]]
name = "second"
turns = ["{name}: the second question"]

[[variants]]
name = "one"
skills = ["skills/one"]

[[variants]]
name = "two"
skills = ["skills/two"]

[[models]]
name = "fake"
model = "claude-sonnet-4-5"
base_url = "${{FAKE_URL}}"
""")
    return spec


def command(spec: Path, runs: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "amacs_server", "experiment", str(spec), "--runs-dir", str(runs), *extra]


def environment(fake: FakeAnthropic) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
    env.update(FAKE_URL=fake.url, ANTHROPIC_API_KEY=TEST_KEY)
    return env


def experiment(fake: FakeAnthropic, spec: Path, runs: Path, *extra: str,
               timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(spec, runs, *extra), env=environment(fake), cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def manifests(runs: Path) -> dict[str, dict]:
    found = {}
    for path in runs.glob("*/manifest.json"):
        try:
            found[path.parent.name] = json.loads(path.read_text())
        except ValueError:
            pass  # being replaced this instant
    return found


def assert_all_done(runs: Path) -> dict[str, dict]:
    found = manifests(runs)
    assert len(found) == RUNS, sorted(found)
    for run_id, manifest in found.items():
        assert manifest["status"] == "done", manifest
        assert manifest["turns_done"] == TURNS and manifest["cost"] > 0, manifest
        home = runs / run_id / "home"
        assert list((home / "transcripts").glob("*.jsonl")), run_id
        assert (home / "agent-chat.org").is_file(), run_id
        variant = manifest["variant"]
        assert (home / "skills" / f"panel-{variant}" / "SKILL.md").is_file(), run_id
    assert (runs / "experiment.toml").is_file()
    return found


def overlapped(found: dict[str, dict]) -> int:
    """The most runs going at one moment."""
    edges = sorted([(m["started_at"], 1) for m in found.values()] + [(m["ended_at"], -1) for m in found.values()])
    most = going = 0
    for _, step in edges:
        going += step
        most = max(most, going)
    return most


def servers_of(runs: Path) -> list[int]:
    """Processes (servers, Emacs) still running with an AMACS home under RUNS, or in a run's folder:
    a server forked by the fork server took its environment after it started (/proc has the first)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (f"AMACS_HOME={runs}".encode() in (proc / "environ").read_bytes()
                    or Path(os.readlink(proc / "cwd")).is_relative_to(runs)):
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def test_experiment_runs_in_parallel(model, tmp_path):
    """12 runs at parallel 4: every manifest done, every home with transcripts, runs overlapping."""
    spec, runs = write_spec(tmp_path, "parallel"), tmp_path / "runs"
    proc = experiment(model, spec, runs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = assert_all_done(runs)
    assert overlapped(found) >= 3, found
    assert len(model.requests) == RUNS * TURNS
    assert "12 of 12 done, 0 failed" in proc.stdout
    # Re-running an experiment that is done runs nothing.
    again = experiment(model, spec, runs)
    assert again.returncode == 0 and "12 done before, 0 to run" in again.stdout, again.stdout
    assert len(model.requests) == RUNS * TURNS


def test_experiment_resumes_after_kill(model, tmp_path):
    """SIGKILL the command halfway; re-run: no finished run repeated, none lost."""
    spec, runs = write_spec(tmp_path, "resume"), tmp_path / "runs"
    proc = subprocess.Popen(command(spec, runs), env=environment(model), cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and sum(m["status"] == "done" for m in manifests(runs).values()) < RUNS // 2:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {k: m for k, m in manifests(runs).items() if m["status"] == "done"}
    assert RUNS // 2 <= len(before) < RUNS, before
    deadline = time.time() + 20  # the servers of the killed sessions see Emacs go and exit
    while servers_of(runs) and time.time() < deadline:
        time.sleep(0.2)
    assert not servers_of(runs)
    requests_before = len(model.requests)
    transcripts = {k: sorted(p.name for p in (runs / k / "home" / "transcripts").glob("*")) for k in before}
    stopped = sum(m["status"] == "running" for m in manifests(runs).values())

    done = experiment(model, spec, runs)
    assert done.returncode == 0, done.stdout + done.stderr
    # runs the kill caught once finished (every turn replied to) are recorded done, not run again
    finished = len(re.findall(r"was stopped (in its teardown|after its last reply)", done.stdout))
    assert f"{len(before) + finished} done before, {RUNS - len(before) - finished} to run" in done.stdout
    if stopped > finished:  # the runs the kill stopped before they finished
        assert f"({stopped - finished} of them again: failed or interrupted before)" in done.stdout, done.stdout
    after = assert_all_done(runs)
    for run_id, manifest in before.items():
        assert after[run_id]["started_at"] == manifest["started_at"], run_id
        assert sorted(p.name for p in (runs / run_id / "home" / "transcripts").glob("*")) == transcripts[run_id]
    # The fake saw requests only from the runs that had not finished.
    assert len(model.requests) - requests_before == (RUNS - len(before) - finished) * TURNS


def test_experiment_killed_as_its_first_emacs_loads_leaves_nothing_running(slow_model, tmp_path):
    """SIGKILL to the command alone the moment its first run's Emacs exists (it still loads the elisp):
    every Emacs it started sees it gone and stops with its server, none waits out its run's timeout
    (an Emacs in a process group of its own, which a kill of the command's group does not reach)."""
    spec, runs = write_spec(tmp_path, "orphans"), tmp_path / "runs"
    proc = subprocess.Popen(command(spec, runs), env=environment(slow_model), cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not servers_of(runs):
        time.sleep(0.01)
    assert servers_of(runs), "no run started"
    proc.kill()
    proc.wait()
    deadline = time.time() + 30
    while servers_of(runs) and time.time() < deadline:
        time.sleep(0.2)
    assert not servers_of(runs)


@pytest.mark.parametrize("group", [True, False], ids=["terminal-c-c", "sigint-to-the-command"])
def test_experiment_interrupted_while_it_starts_says_so_too(slow_model, tmp_path, group):
    """C-c at once, while the experiment's fork server is still starting (it imports the SDKs):
    the same one line and exit 130 as a C-c mid-run, no traceback, and no fork server left."""
    spec, runs = write_spec(tmp_path, "early"), tmp_path / "runs"
    proc = subprocess.Popen(command(spec, runs), env=environment(slow_model), cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    first = proc.stdout.readline()  # "early: 12 runs in ...": printed just before the executor starts
    assert "to run" in first, first
    time.sleep(0.1)
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode == 130, out + err
    assert re.search(r"early: interrupted: 0 of 12 done, 0 failed, 12 to run, \$0\.0000: no model call got an "
                     r"answer .*; run the same command again to resume\.", out), out
    forks = subprocess.run(["pgrep", "-f", "-s", str(proc.pid), "amacs_server.research.forkserver"],
                           capture_output=True, text=True, check=False)
    assert not forks.stdout.strip(), forks.stdout


@pytest.mark.parametrize("group", [True, False], ids=["terminal-c-c", "sigint-to-the-command"])
def test_experiment_interrupted_says_so(slow_model, tmp_path, group):
    """C-c mid-run (SIGINT to the command's process group, as a terminal sends it, or to the command alone):
    exit 130, the runs going say "interrupted (C-c); ...", not a crash; no server left; resume finishes them."""
    spec, runs = write_spec(tmp_path, "interrupt"), tmp_path / "runs"
    # As a terminal starts a command: SIGINT at its default, even when this test runs where it is
    # ignored (a job started in the background inherits that, and Python then never raises
    # KeyboardInterrupt).
    proc = subprocess.Popen(command(spec, runs), env=environment(slow_model), cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline:
        statuses = [m["status"] for m in manifests(runs).values()]
        if statuses.count("done") >= 2 and statuses.count("running") >= 2:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"never two runs done and two running: {[m['status'] for m in manifests(runs).values()]}")
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    found = manifests(runs)
    stopped = {k: m for k, m in found.items() if m["status"] != "done"}
    assert stopped and len(found) < RUNS, found
    # the line counts the runs as the last line does, with every attempt's dollars so far
    done = RUNS - len(stopped) - (RUNS - len(found))
    paid = sum(m["cost"] + m.get("earlier_cost", 0.0) for m in found.values())
    assert re.search(rf"interrupt: interrupted: {done} of {RUNS} done, 0 failed, {len(stopped)} interrupted, "
                     rf"{RUNS - done} to run, \${paid:.4f} .*; run the same command again to resume\.", out), out
    for manifest in stopped.values():
        assert manifest["status"] == "failed", manifest
        assert manifest["error"] == "interrupted (C-c); it runs again when you resume", manifest
        # its record says it was cut: a turn without its reply (one answered whole is let finish, done)
        assert manifest["turns_done"] < len(manifest["turns"]), manifest
    deadline = time.time() + 20
    while servers_of(runs) and time.time() < deadline:
        time.sleep(0.2)
    assert not servers_of(runs)

    done = experiment(slow_model, spec, runs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_all_done(runs)
    for run_id, manifest in stopped.items():  # each interrupted attempt's record kept aside
        kept = json.loads((runs / run_id / "attempts" / "1" / "manifest.json").read_text())
        assert kept["started_at"] == manifest["started_at"] and kept["error"] == manifest["error"], kept
        assert (runs / run_id / "attempts" / "1" / "emacs.log").is_file(), run_id


def test_progress_line_reads_plainly():
    """The progress bar's numbers: number before word, separated: 10 done · 0 running · 0 failed · $0.49."""
    from io import StringIO

    from rich.console import Console

    from amacs_server.research.experiment import counts, execute
    from amacs_server.research.runs import Outcome

    assert counts(10, 0, 0, 0.49) == "10 done · 0 running · 0 failed · $0.49"
    assert counts(3, 4, 1, 0.0018) == "3 done · 4 running · 1 failed · $0.0018"

    class Instant:
        """An executor whose runs end at once, at 4.9 cents each."""

        def __init__(self) -> None:
            self.going: list[str] = []

        def submit(self, run) -> None:
            self.going.append(run.run_id)

        def finished(self, timeout: float) -> list[Outcome]:
            out = [Outcome(run_id=r, status="done", cost=0.049, seconds=1.0, turns_done=1, started_at=0.0,
                           ended_at=1.0) for r in self.going]
            self.going = []
            return out

        def close(self) -> None:
            pass

    class Run:
        def __init__(self, n: int) -> None:
            self.run_id = f"p.v.m.r{n}"

    screen = StringIO()
    console = Console(file=screen, width=160, force_terminal=True, color_system=None)
    outcomes, left, stopped = execute([Run(n) for n in range(10)], Instant(), 4, None, 0.0, 10, "debate", console)
    assert len(outcomes) == 10 and not left and stopped is None
    last = screen.getvalue().replace("\r", "\n").splitlines()
    final = [line for line in last if "debate (10 runs)" in line][-1]
    assert "10 done · 0 running · 0 failed · $0.49" in final, final
    assert "10/10" not in screen.getvalue()


def test_experiment_respects_total_budget(model, tmp_path):
    """A budget below all runs' cost: fewer start, the command says so; a larger one finishes the rest."""
    spec, runs = write_spec(tmp_path, "budget", parallel=2), tmp_path / "runs"
    # 0.0006 a run: the first alone, then two at once while three fit; the runs in flight count at the
    # most a run cost, so it stops at 4 ($0.0024), not 6 as when only finished runs counted (newcomer8 #30)
    stopped = experiment(model, spec, runs, "--budget", "0.0027")
    assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    # said before it starts: the budget bounds the first run only as far as its run_budget does
    assert ("budget: no run's cost is known yet, so the first goes alone, and only the spec's run_budget "
            "($0.5000 a run) bounds what it spends: more than the $0.0027 left of the budget, which it can pass "
            "(C-c stops it)\n") in stopped.stdout, stopped.stdout
    first = manifests(runs)
    assert len(first) == 4 and all(m["status"] == "done" for m in first.values()), first
    spent = sum(m["cost"] for m in first.values())
    assert spent <= 0.0027, spent
    assert (f"Budget spent: ${spent:.4f} of $0.0027 (a run starts only if what is spent, the runs going and "
            "its own, each at the most a run had cost, fit it; until one has ended, one goes at a time); "
            f"{RUNS - 4} runs not started") in stopped.stdout, stopped.stdout

    done = experiment(model, spec, runs, "--budget", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no run's cost is known yet" not in done.stdout, done.stdout  # the done runs' costs are
    after = assert_all_done(runs)
    assert all(after[k]["started_at"] == m["started_at"] for k, m in first.items())
    assert len(model.requests) == RUNS * TURNS


def test_runs_go_in_the_seeded_order_and_durations_start_at_the_first_turn(model, tmp_path):
    """Runs start in the seeded random order across arms (not the grid's), the seed kept in order.json,
    each manifest and the dataset; each run's duration is from its first turn reaching its server to
    its last reply, its process start-up recorded apart (the first run pays Emacs's and the server's)."""
    from amacs_server.research.dataset import load as load_dataset
    from amacs_server.research.spec import load as load_spec
    from amacs_server.research.spec import run_order

    spec, runs = write_spec(tmp_path, "order", parallel=1), tmp_path / "runs"
    proc = experiment(model, spec, runs, "--seed", "7")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "in a random order (seed 7" in proc.stdout
    found = assert_all_done(runs)
    started = [run_id for run_id, _m in sorted(found.items(), key=lambda item: item[1]["started_at"])]
    wanted = [r.run_id for r in run_order(load_spec(spec, {"FAKE_URL": model.url}).runs, 7)]
    assert started == wanted and started != sorted(started, key=lambda r: r.split(".")[1])  # not arm by arm
    assert {m["order_seed"] for m in found.values()} == {7}
    assert sorted(m["position"] for m in found.values()) == list(range(RUNS))
    assert json.loads((runs / "order.json").read_text()) == {"order": "random", "seed": 7}
    for m in found.values():
        assert m["seconds"] == pytest.approx(m["last_reply_at"] - m["first_turn_at"], abs=1e-3)
        waited_from = max(m["emacs_started_at"], m["started_at"])  # a run prepared ahead: from its go
        assert m["startup_seconds"] == pytest.approx(m["first_turn_at"] - waited_from, abs=1e-3)
        assert m["seconds"] < m["wall_seconds"]
    first = found[wanted[0]]  # not prepared ahead: its Emacs and server started inside its wall time
    assert first["wall_seconds"] - first["seconds"] >= 0.8 * first["startup_seconds"] > 0
    con = load_dataset(runs)
    assert con.execute("SELECT DISTINCT order_seed FROM runs").fetchall() == [(7,)]
    con.close()


def test_experiment_on_local_ray(model, tmp_path):
    """The same experiment with --ray: each run a Ray task on a local Ray on 127.0.0.1."""
    pytest.importorskip("ray")
    spec, runs = write_spec(tmp_path, "ray"), tmp_path / "runs"
    proc = experiment(model, spec, runs, "--ray")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "on Ray (local)" in proc.stdout
    found = assert_all_done(runs)
    assert overlapped(found) >= 3, found
    assert len(model.requests) == RUNS * TURNS


def test_experiment_on_local_ray_keeps_its_budget(model, tmp_path):
    """The budget is the same ceiling on Ray (its executor has neither prepared runs nor a C-c's
    finishing, which the rule does not use): at 0.0006 a run, the first alone, then two at once while
    the spent, those going and the next fit, so 4 runs of $0.0027, as on this machine's threads."""
    pytest.importorskip("ray")
    spec, runs = write_spec(tmp_path, "ray-budget", parallel=2), tmp_path / "runs"
    proc = experiment(model, spec, runs, "--ray", "--budget", "0.0027")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "on Ray (local)" in proc.stdout
    found = manifests(runs)
    assert len(found) == 4 and all(m["status"] == "done" for m in found.values()), found
    spent = sum(m["cost"] for m in found.values())
    assert spent <= 0.0027 and f"Budget spent: ${spent:.4f} of $0.0027 (" in proc.stdout, proc.stdout
    first = min(found.values(), key=lambda m: m["started_at"])
    assert all(m["started_at"] >= first["ended_at"] for m in found.values() if m is not first), found  # alone
    assert len(model.requests) == 4 * TURNS


def test_run_that_hangs_is_killed_and_failed(tmp_path):
    """A run past its timeout: Emacs and its server killed, the manifest failed, 'timed out after N s'."""
    import threading

    from amacs_server.research.runs import run_one
    from amacs_server.research.spec import load

    hold = threading.Event()
    fake = FakeAnthropic(default=lambda body: Reply(agent_json("late"), hold=hold)).start()
    try:
        spec = write_spec(tmp_path, "hang")
        # The limit leaves a fresh server time to reach the held model on a loaded machine.
        spec.write_text(spec.read_text().replace("timeout = 90", "timeout = 15").replace("repetitions = 3",
                                                                                       "repetitions = 1"))
        run = load(spec, {"FAKE_URL": fake.url})
        runs = tmp_path / "runs"
        env = {"ANTHROPIC_API_KEY": TEST_KEY}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            outcome = run_one(run.runs[0], runs)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        assert outcome.status == "failed" and outcome.error == "timed out after 15 s", outcome
        manifest = json.loads((runs / outcome.run_id / "manifest.json").read_text())
        assert manifest["status"] == "failed" and manifest["error"] == "timed out after 15 s"
        assert 15 <= manifest["wall_seconds"] < 25  # the time limit is of the wall time
        assert fake.requests, "the model was called (and held)"
        deadline = time.time() + 10
        while servers_of(runs) and time.time() < deadline:
            time.sleep(0.2)
        assert not servers_of(runs)
    finally:
        hold.set()
        fake.stop()


@pytest.mark.parametrize(("change", "message"), [
    (('name = "first"', 'name = "First one"'),
     "prompts[0].name: must be letters a-z, digits and - only, got 'First one'"),
    (('name = "two"', 'name = "one"'), "variants[1].name: 'one' is used twice"),
    (('skills = ["skills/two"]', 'skills = ["skills/three"]'), "variants[1].skills[0]: no folder"),
    (('skills = ["skills/two"]', 'skills = ["skills/two", "skills/lower"]'),
     "variants[1].skills[1]: {tmp}/skills/lower/panel-lower has no SKILL.md (it has skill.md: rename it SKILL.md)"),
    (("${FAKE_URL}", "${NOT_SET_ANYWHERE}"), "models[0].base_url: ${NOT_SET_ANYWHERE} is not set"),
    (("repetitions = 3", "repetitons = 3"), "experiment.repetitons: unknown key; did you mean repetitions?"),
    (("max_steps = 3", "max_step = 3"), "experiment.max_step: unknown key; did you mean max_steps?"),
    (("max_steps = 3", "colour = 3"), "experiment.colour: unknown key; the keys allowed are name, repetitions,"),
    (("repetitions = 3", "repetitions = 0"), "experiment.repetitions: must be greater than or equal to 1, got 0"),
    (("timeout = 90", "timeout = 'x'"), "experiment.timeout: must be a number, got 'x'"),
    (("repetitions = 3", "repetitions = 2.5"), "experiment.repetitions: must be an integer, got 2.5"),
    (('model = "claude', 'backend = "gemini"\nmodel = "claude'),
     "models[0].backend: must be 'anthropic' or 'openai', got 'gemini'"),
    (('turns = ["wrong: the first question"]', 'turns = []'), "prompts[0].turns: must have at least 1 entry"),
])
def test_spec_errors_name_the_key(tmp_path, change, message):
    """A wrong spec: exit 2, one line naming the file and the key, in plain words; nothing run."""
    spec = write_spec(tmp_path, "wrong")
    lower = tmp_path / "skills" / "lower" / "panel-lower"  # skill.md, not SKILL.md: not a skill
    lower.mkdir(parents=True)
    (lower / "skill.md").write_text(SKILL.format(name="lower"))
    spec.write_text(spec.read_text().replace(*change))
    proc = subprocess.run(command(spec, tmp_path / "runs"), env={**os.environ, "FAKE_URL": "http://x"}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = message.replace("{tmp}", str(tmp_path))
    assert str(spec) in proc.stderr and message in proc.stderr, proc.stderr
    assert "Input should" not in proc.stderr and "Extra inputs" not in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


LEAK = "(prog1 (boundp 'amacs-test--left-by-a-run) (defvar amacs-test--left-by-a-run t))"


def test_no_run_inherits_another_runs_emacs_or_server(tmp_path):
    """Three runs one after another (servers forked by the fork server): each run's eval finds the global
    variable an earlier run's eval set unbound (a new Emacs each time), and each server is a process of
    its own that is gone when its run ends."""

    def answer(body: dict) -> Reply:
        seen = json.dumps(body)
        return Reply(agent_json("checked") if "amacs-test--left-by-a-run" in seen else agent_json(None, eval=LEAK))

    fake = FakeAnthropic(default=answer).start()
    try:
        spec = tmp_path / "experiment.toml"
        spec.write_text('[experiment]\nname = "fresh"\nrepetitions = 3\nparallel = 1\ntimeout = 90\nmax_steps = 3\n\n'
                        '[[prompts]]\nname = "leak"\nturns = ["evaluate it"]\n\n'
                        '[[models]]\nname = "fake"\nmodel = "claude-sonnet-4-5"\nbase_url = "${FAKE_URL}"\n')
        runs = tmp_path / "runs"
        proc = experiment(fake, spec, runs)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        found = manifests(runs)
        assert len(found) == 3 and all(m["status"] == "done" for m in found.values()), found
        results = []
        for run_id in found:
            home = runs / run_id / "home"
            for path in (home / "transcripts").glob("*.jsonl"):
                for line in path.read_text().splitlines():
                    event = json.loads(line)
                    if event.get("event") == "eval_result":
                        results.append(event["data"])
        assert len(results) == 3, results
        assert all(r.get("result") == "nil" and r.get("success") for r in results), results
        assert not servers_of(runs)
    finally:
        fake.stop()


def slow_git(folder: Path, then: str) -> dict[str, str]:
    """An environment whose git, moving HEAD (``update-ref``, a commit's last step), first runs THEN:
    a slow disk (``sleep 4``), or the server killed in its last commit (``sleep 1; kill -9 $PPID``)."""
    real = shutil.which("git")
    assert real
    bin_dir = folder / "slow-git"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = update-ref ]; then {then}; fi\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def pending_commit(runs: Path) -> str | None:
    """A run whose session is over (Emacs wrote its result) while its manifest says running: its
    server makes its last commit; None while there is none, or the next run has not started."""
    found = manifests(runs)
    over = [k for k, m in found.items() if m["status"] == "running" and (runs / k / "batch-result.json").exists()]
    return over[0] if over and len(found) >= 2 else None


def to_run(out: str) -> int:
    """How many runs the command's first line says it runs (``N done before, M to run``)."""
    found = re.search(r"(\d+) done before, (\d+) to run", out)
    assert found, out
    return int(found.group(2))


def start_until_a_commit_is_pending(model: FakeAnthropic, tmp_path: Path, name: str,
                                    git: str) -> tuple[Path, Path, subprocess.Popen[str], str]:
    """Start a 12-run experiment NAME at parallel 1, as a terminal starts a command, its git's
    update-ref running GIT first (slow_git), and wait for a run whose last commit is pending: the spec,
    the runs folder, the command's process and that run."""
    spec, runs = write_spec(tmp_path, name, parallel=1), tmp_path / "runs"
    proc = subprocess.Popen(command(spec, runs), env={**environment(model), **slow_git(tmp_path, git)},
                            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    pending = None
    while time.time() < deadline and pending is None:
        pending = pending_commit(runs)
        time.sleep(0.02)
    assert pending is not None, manifests(runs)
    return spec, runs, proc, pending


def test_experiment_killed_in_a_run_s_last_commit_records_it_done_on_resume_not_again(model, tmp_path):
    """At parallel 1 the next run starts once a run's turns are replied to, while its server still makes
    the last commit (git slowed to 4 s here); the command killed then: that run is not done (running).
    Its server finishes the commit; the resume records it done without running it (or paying) again,
    and says so."""
    spec, runs, proc, pending = start_until_a_commit_is_pending(model, tmp_path, "pending", "sleep 4")
    assert not git_heads(runs / pending / "home"), "its commit was made already"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    manifest = manifests(runs)[pending]
    assert manifest["status"] == "running", manifest
    deadline = time.time() + 30  # a killed session's server finishes its slow commit and exits
    while servers_of(runs) and time.time() < deadline:
        time.sleep(0.2)
    assert not servers_of(runs)
    paid = transcript_totals(runs / pending / "home")[0]
    transcripts = {p.name: p.read_bytes() for p in (runs / pending / "home" / "transcripts").glob("*.jsonl")}

    requests_before = len(model.requests)
    done = experiment(model, spec, runs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{pending} was stopped in its teardown, every turn replied to: recorded done" in done.stdout, done.stdout
    after = assert_all_done(runs)
    assert after[pending]["started_at"] == manifest["started_at"], "it ran again"
    assert paid and after[pending]["cost"] == round(paid, 6) and after[pending]["earlier_cost"] == 0, after[pending]
    assert after[pending]["recorded_on_resume"].endswith("its server had made its last commit"), after[pending]
    assert not (runs / pending / "attempts").exists()
    assert {p.name: p.read_bytes() for p in (runs / pending / "home" / "transcripts").glob("*.jsonl")} == transcripts
    assert len(model.requests) - requests_before == to_run(done.stdout) * TURNS


def test_c_c_while_a_run_makes_its_last_commit_lets_it_end_done(model, tmp_path):
    """C-c, as a terminal sends it (SIGINT to the command's process group), while a run whose every turn
    got its reply has its server make the last commit (git slowed to 3 s): the commit is made, the run
    is recorded done (its home's git whole), and the resume neither runs it again nor touches its
    transcripts; the run that was mid-turn is failed as interrupted and runs again."""
    spec, runs, proc, pending = start_until_a_commit_is_pending(model, tmp_path, "teardown", "sleep 3")
    home = runs / pending / "home"
    assert not git_heads(home), "its commit was made already"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    said = re.search(r"C-c: \d runs? whose every turn got its reply ends? first \(the last commit\) and (is|are) "
                     r"recorded done \(C-c again to stop (it|them) now\): (.*)$", err, re.M)
    assert said and pending in said[3].split(", "), err  # the runs it lets end, named
    assert "Traceback" not in err, err
    found = manifests(runs)
    done_before = sum(m["status"] == "done" for m in found.values())
    assert f"teardown: interrupted: {done_before} of {RUNS} done, 0 failed" in out, out
    manifest = found[pending]
    assert manifest["status"] == "done" and manifest["error"] is None, manifest
    assert re.search(rf"^done +{re.escape(pending)}  \$0\.\d+  ", err, re.M), err  # its line, as any run's
    bar = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("teardown (12 runs)")][-1]
    assert f"{done_before} done · 0 running · 0 failed" in bar, bar  # as the last line counts them
    assert manifest["turns_done"] == TURNS and manifest["cost"] > 0, manifest
    assert git_heads(home) and not (home / ".uncommitted-tick").exists(), "its last commit was not made"
    # the run started in its place: stopped mid-turn, unless it too had every turn replied to by then
    others = {k: m for k, m in found.items() if k != pending and m["status"] != "done"}
    for other in others.values():
        assert other["error"] == "interrupted (C-c); it runs again when you resume", other
    transcripts = {p.name: p.read_bytes() for p in (home / "transcripts").glob("*.jsonl")}
    deadline = time.time() + 30
    while servers_of(runs) and time.time() < deadline:
        time.sleep(0.2)
    assert not servers_of(runs)

    requests_before = len(model.requests)
    done = experiment(model, spec, runs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{done_before} done before, {RUNS - done_before} to run" in done.stdout, done.stdout
    after = assert_all_done(runs)
    assert after[pending]["started_at"] == manifest["started_at"], "it ran again"
    assert {p.name: p.read_bytes() for p in (home / "transcripts").glob("*.jsonl")} == transcripts
    assert len(model.requests) - requests_before == (RUNS - done_before) * TURNS


def test_c_c_after_a_run_s_last_reply_before_its_session_ends_lets_it_end_done(tmp_path):
    """C-c (SIGINT to the command's group) once a run's transcripts hold the reply to its every turn, but
    before its Emacs has seen the turn end (here the turn goes on: the reply came with an eval whose next
    step takes 3 s; the newcomer's window was the ~100 ms between the reply and the session's end):
    the run is let end and is done, not failed and run again from nothing, paid twice."""
    answered: list[str] = []

    def answer(body: dict) -> Reply:
        answered.append("x")
        return Reply(agent_json("fine", eval="(+ 1 1)")) if len(answered) == 1 else Reply(agent_json(None), delay=3.0)

    fake = FakeAnthropic(default=answer).start()
    try:
        spec, runs = write_spec(tmp_path, "answered", parallel=1), tmp_path / "runs"
        spec.write_text(spec.read_text().replace("repetitions = 3", "repetitions = 1"))
        proc = subprocess.Popen(command(spec, runs), env=environment(fake), cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.time() + 120
        while time.time() < deadline and len(answered) < 2:
            time.sleep(0.02)
        assert len(answered) >= 2, "the run's second step never asked"
        (going,) = [k for k, m in manifests(runs).items() if m["status"] == "running"]
        assert not (runs / going / "batch-result.json").exists(), "its session is over already"
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        assert "Traceback" not in err, err
        manifest = manifests(runs)[going]
        assert manifest["status"] == "done" and manifest["turns_done"] == 1, manifest
        assert re.search(rf"^done +{re.escape(going)}  ", err, re.M), err
        assert git_heads(runs / going / "home") and not (runs / going / "home" / ".uncommitted-tick").exists()
    finally:
        fake.stop()


@pytest.mark.parametrize("gap", [1.0, 0.03])
def test_c_c_twice_stops_a_run_in_its_last_commit_too(model, tmp_path, gap):
    """A second C-c while a run whose turns were all replied to makes its last commit (git slowed to 60 s)
    does not wait for it: the command ends at once, that run ``stopped`` (not failed: every turn got
    its reply), its line saying what the resume will do (newcomer8 #52: 30 ms after the first, before
    the run looked at its replies, it said "it runs again when you resume"); the resume makes that
    commit and records it done, without running it again."""
    spec, runs, proc, pending = start_until_a_commit_is_pending(model, tmp_path, "twice", "sleep 60")
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(gap)
    assert proc.poll() is None, "it did not wait for the run's last commit"
    os.killpg(proc.pid, signal.SIGINT)
    started = time.time()
    out, err = proc.communicate(timeout=60)
    assert time.time() - started < 10, "it waited for the slow commit"
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err, err
    manifest = manifests(runs)[pending]
    # not a failure: its record, its console line and the last line say what the resume does with it
    assert manifest["status"] == "stopped", (manifest, out, err)
    assert manifest["error"] == "stopped after its last reply (C-c): recorded done when you resume", manifest
    assert re.search(rf"^stopped {re.escape(pending)} .*  stopped after its last reply \(C-c\): recorded done "
                     "when you resume$", err, re.M), err
    assert re.search(r", \d stopped after (its|their) last reply \(recorded done when you resume\)", out), out
    home = runs / pending / "home"
    assert not git_heads(home) and (home / ".uncommitted-tick").exists(), "its last commit was made"
    # Its session was over, every turn replied to: the resume makes the commit its server did not
    # make, from the bytes its last tick ended with, and records it done; it is not paid for twice.
    requests_before = len(model.requests)
    done = experiment(model, spec, runs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{pending} was stopped in its teardown, every turn replied to: recorded done" in done.stdout, done.stdout
    after = assert_all_done(runs)[pending]
    assert after["started_at"] == manifest["started_at"] and after["cost"] == manifest["cost"], after
    assert after["recorded_on_resume"].endswith("its last commit was made on resume"), after
    assert git_heads(home) and not (home / ".uncommitted-tick").exists()
    assert len(model.requests) - requests_before == to_run(done.stdout) * TURNS


def git_heads(home: Path) -> list[str]:
    """The branches HOME's git has (none before its first commit)."""
    heads = home / ".git" / "refs" / "heads"
    packed = home / ".git" / "packed-refs"
    return ([p.name for p in heads.iterdir()] if heads.is_dir() else []) + (
        [line for line in packed.read_text().splitlines() if "refs/heads/" in line] if packed.is_file() else [])


def test_server_killed_in_its_last_commit_fails_the_run(model, tmp_path):
    """The server killed while it makes the last tick's commit (after the reply was shown): the run
    failed, saying its last tick may not be committed; never done."""
    spec, runs = write_spec(tmp_path, "killed-commit", parallel=2), tmp_path / "runs"
    spec.write_text(spec.read_text().replace("repetitions = 3", "repetitions = 1"))
    proc = subprocess.run(command(spec, runs), env={**environment(model), **slow_git(tmp_path, "sleep 1; kill -9 $PPID")},
                          cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = manifests(runs)
    assert len(found) == 4, found
    for manifest in found.values():
        assert manifest["status"] == "failed", manifest
        assert "its last tick may not be committed" in manifest["error"], manifest


def test_experiment_killed_as_a_run_ends_records_that_one_on_resume_and_counts_each_once(model, tmp_path):
    """SIGKILL the command when its second run has ended but is not yet recorded (run.ended@2): the
    next command counts the first done, records the second done (its session ended, its home whole)
    and runs the rest, each once."""
    spec, runs = write_spec(tmp_path, "ended", parallel=1), tmp_path / "runs"
    killed = subprocess.run(command(spec, runs, "--parallel", "1"),
                            env={**environment(model), "AMACS_FAULT_POINT": "run.ended@2"}, cwd=ROOT,
                            capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    before = {k: m for k, m in manifests(runs).items() if m["status"] == "done"}
    assert len(before) == 1, manifests(runs)
    deadline = time.time() + 30  # the sessions going see the command gone and end
    while servers_of(runs) and time.time() < deadline:
        time.sleep(0.2)
    # the second run (and any other whose only turn had ended then: its session over, or its reply's
    # tick ended, its commit made or asked for) ended whole, unrecorded
    whole = [k for k, m in manifests(runs).items() if m["status"] == "running" and primary_tick_ends(runs / k / "home")]
    assert whole, manifests(runs)
    requests_before = len(model.requests)
    done = experiment(model, spec, runs)
    assert done.returncode == 0, done.stdout + done.stderr
    # each recorded done, not run again
    finished = re.findall(r"(\S+) was stopped (?:in its teardown|after its last reply)", done.stdout)
    assert sorted(finished) == sorted(whole), done.stdout
    assert f"{1 + len(finished)} done before, {RUNS - 1 - len(finished)} to run" in done.stdout, done.stdout
    assert_all_done(runs)
    assert len(model.requests) - requests_before == (RUNS - 1 - len(finished)) * TURNS



def emacs_of(folder: Path) -> int | None:
    """The pid of the batch Emacs running in the run folder FOLDER (its cwd), if one is."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip().startswith("emacs") and Path(os.readlink(proc / "cwd")) == folder:
                return int(proc.name)
        except OSError:
            pass
    return None


def primary_tick_ends(home: Path) -> int:
    """How many ticks of the primary HOME's transcripts say ended."""
    return sum(1 for path in (home / "transcripts").glob("*.jsonl") for line in path.read_text().splitlines()
               if '"event": "tick_end"' in line and '"agent_type": "primary"' in line)


@pytest.mark.parametrize("git", ["", "sleep 60"], ids=["committed", "commit-pending"])
def test_experiment_killed_after_a_run_s_last_reply_records_it_done_on_resume_not_again(tmp_path, git):
    """The command killed (kill -9), and the run's Emacs and server with it (as a second C-c kills
    them), once the run's last reply is in its transcripts (its turn over) but before its Emacs saw
    that turn end (newcomer8 #15, #39: held here, stopped the moment the model answered), so it wrote
    no batch-result.json; its server had made the tick's commit, or was still making it (git slowed
    to 60 s).  Every turn had its reply and the last turn had ended: what the session's end adds is
    the shell's text and that commit, so the resume makes the commit, records the run done, its home
    whole, and neither runs it again nor pays for it again."""
    runs = tmp_path / "runs"
    held: list[tuple[str, int]] = []

    def answer(body: dict) -> Reply:
        if not held:  # the first run's only turn (parallel 1: the next is only prepared)
            (going,) = [k for k, m in manifests(runs).items() if m["status"] == "running"]
            emacs = emacs_of(runs / going)
            assert emacs is not None
            os.killpg(emacs, signal.SIGSTOP)  # its own process group: the turn's end is not seen
            held.append((going, emacs))
        return Reply(agent_json("fine"))

    fake = FakeAnthropic(default=answer).start()
    try:
        spec = write_spec(tmp_path, "last-reply", parallel=1)
        slow = slow_git(tmp_path, git) if git else {}
        proc = subprocess.Popen(command(spec, runs), env={**environment(fake), **slow}, cwd=ROOT,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline and not held:
            time.sleep(0.02)
        assert held, "no run asked the model"
        killed, emacs = held[0]
        home = runs / killed / "home"
        while time.time() < deadline and not (primary_tick_ends(home) and (
                (home / ".uncommitted-tick").exists() if git else git_heads(home))):
            time.sleep(0.02)
        assert primary_tick_ends(home) == 1, "its reply's tick never ended"
        server = json.loads((home / "server.json").read_text())["pid"]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        for group in (emacs, os.getpgid(server)):
            os.killpg(group, signal.SIGKILL)
            os.killpg(group, signal.SIGCONT)
        deadline = time.time() + 30  # the run prepared ahead sees the command gone and ends
        while servers_of(runs) and time.time() < deadline:
            time.sleep(0.2)
        assert not servers_of(runs)
        manifest = manifests(runs)[killed]
        assert manifest["status"] == "running", manifest
        assert not (runs / killed / "batch-result.json").exists(), "its Emacs saw its session end"
        assert bool(git_heads(home)) is not bool(git), "its commit"
        paid = transcript_totals(home)[0]
        assert paid, "its last call was not recorded"
        transcripts = {p.name: p.read_bytes() for p in (home / "transcripts").glob("*.jsonl")}

        requests_before = len(fake.requests)
        done = experiment(fake, spec, runs)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (f"{killed} was stopped after its last reply, before its session's end, every turn replied to: "
                "recorded done") in done.stdout, done.stdout
        after = assert_all_done(runs)[killed]
        assert after["started_at"] == manifest["started_at"], "it ran again"
        assert after["cost"] == round(paid, 6) and after["earlier_cost"] == 0, after
        assert after["recorded_on_resume"].startswith("stopped after its last reply, before its session's end"), after
        assert after["recorded_on_resume"].endswith(
            "its last commit was made on resume (no shell.txt: its Emacs was stopped before it wrote the shell's text)"
            if git else "its server had made its last commit (no shell.txt: its Emacs was stopped before it wrote "
            "the shell's text)"), after
        assert not (runs / killed / "attempts").exists()
        assert {p.name: p.read_bytes() for p in (home / "transcripts").glob("*.jsonl")} == transcripts
        assert len(fake.requests) - requests_before == to_run(done.stdout) * TURNS
        assert git_heads(home) and not (home / ".uncommitted-tick").exists()
        status = subprocess.run(["git", "-C", str(home), "status", "--short"], capture_output=True, text=True)
        assert status.returncode == 0 and status.stdout == "", status  # its home whole, as git says it
    finally:
        fake.stop()


def bar_and_last_line(done: subprocess.CompletedProcess[str], name: str) -> tuple[str, str]:
    """The dollars of the progress bar's last state and of the command's last line."""
    bar = [line for line in done.stderr.replace("\r", "\n").splitlines() if line.startswith(f"{name} (")][-1]
    said = re.search(r"^\S+: \d+ of \d+ done, .*?(\$[\d.]+)", done.stdout, re.M)
    found = re.search(r" · (\$[\d.]+)", bar)
    assert said and found, (bar, done.stdout)
    return found.group(1), said.group(1)


def test_the_bar_s_dollars_after_a_kill_count_the_killed_attempts_as_the_last_line_does(tmp_path):
    """kill -9 of the command while a run that has paid for a model call goes on (newcomer8 #14): on
    resume the progress bar's dollars are the last line's, what the killed attempt paid included
    (the bar said $0.45 beside a last line's $0.4997)."""
    answered: list[str] = []
    command_pid: list[int] = []

    def answer(body: dict) -> Reply:
        answered.append("x")
        if len(answered) == 1:  # paid for; the turn goes on
            return Reply(agent_json("fine", eval="(+ 1 1)"))
        if len(answered) == 2:
            os.killpg(command_pid[0], signal.SIGKILL)
            time.sleep(1.0)
        return Reply(agent_json("fine"))

    fake = FakeAnthropic(default=answer).start()
    try:
        spec, runs = write_spec(tmp_path, "bar", parallel=1), tmp_path / "runs"
        spec.write_text(spec.read_text().replace("repetitions = 3", "repetitions = 1"))
        proc = subprocess.Popen(command(spec, runs), env=environment(fake), cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        command_pid.append(proc.pid)
        proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.returncode
        deadline = time.time() + 30
        while servers_of(runs) and time.time() < deadline:
            time.sleep(0.2)
        done = experiment(fake, spec, runs)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "of it by earlier attempts of runs that ran again" in done.stdout, done.stdout
        bar, last = bar_and_last_line(done, "bar")
        assert bar == last, (bar, last)
    finally:
        fake.stop()
