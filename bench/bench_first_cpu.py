"""The CPU of launch -> first answer: the forked server's and Emacs's, per step (not wall time).

Under CPU contention the first answer comes as late as its processes' CPU lets it: this bench
counts that CPU.  Each sample is ``./amacs`` in a fresh terminal, as :mod:`bench.bench_first_answer`
runs it (the question typed as soon as the prompt shows, the zero-latency fake, its 400-word reply),
against a warm server this bench starts itself with :mod:`bench.first_cpu_probe` installed: each
server it forks stamps its CPU (getrusage, every thread, since the fork) and the wall time at its
steps (fork, port line, runtime built, hello answered, submit, the model request, the reply sent,
turn-done), and the asking Emacs's CPU at the fork.  At the prompt and at the answer on screen:
Emacs's CPU, the shell's (./amacs and what it ran), the fork's (with the git it waited for), the
warm server's share, and all of them (``all_*``); 10 ms ticks of ``/proc``.  ``gptel``: the same
for ``emacs -nw -Q`` with gptel (its curl processes are Emacs's waited-for children).

Kinds: ``returning`` (a home of ``--ticks`` ticks, as bench_first_answer's), ``new`` (a fresh home
each sample), ``gptel`` (bench_first_answer's).  ``--tree NAME=PATH`` (repeatable): checkouts to
compare, each with its ``.venv`` and ``.elc`` (default: this one); rounds interleave trees and kinds,
each other round reversed.  ``--emacs-probe``: Emacs loads ``bench/first_cpu_probe.el`` first, which
appends its own stamps (``get-internal-run-time`` at each library loaded, the warm server asked,
hello, RET, each batch of events) to ``$AMACS_EMACS_PROBE``.  ``AMACS_CPU_PROFILE=DIR``: each fork's
steps profiled (cProfile, thread time) into DIR.

    .venv/bin/python bench/bench_first_cpu.py [N] [--ticks 1000] [--tree before=/tmp/b --tree after=.]
        [--kind returning|new|gptel ...] [--emacs-probe]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_first_answer import (  # noqa: E402
    LAST_WORD,
    PROMPTS,
    QUESTIONS,
    compile_gptel,
    gptel_command,
    tagged_reply,
)
from bench.bench_gptel import default_gptel  # noqa: E402
from bench.bench_startup import build_home, loadavg  # noqa: E402
from bench.bench_transport import TimedFake  # noqa: E402
from bench.common import save, server_pid, summary, wait_gone  # noqa: E402
from bench.interactive import Launch, launch_env  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
# The steps reported, as the probe names them (a prefix of its point), in order.
STEPS = (("fork", "fork"), ("emacs_at_fork", "emacs at fork"), ("port", "log serving on"), ("built", "runtime built"), ("hello", "log answered hello"),
         ("submit", "call submit"), ("request", "http POST"), ("reply", "reply sent"), ("done", "turn-done"))


def proc_cpu(pid: int, waited: bool = False) -> float:
    """Process PID's CPU so far (user + system, threads ended too; WAITED: with its children it
    waited for) in ms; 10 ms ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return sum(int(f) for f in fields[11:15 if waited else 13]) * 1000 / TICK


def tree_cpu(pid: int) -> float:
    """The CPU of PID and every process under it, with the children each waited for, in ms."""
    total, todo = 0.0, [pid]
    while todo:
        at = todo.pop()
        try:
            total += proc_cpu(at, waited=True)
        except OSError:
            continue
        todo.extend(children(at))
    return total


def children(pid: int) -> list[int]:
    """The pids whose parent is PID."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return found


def pane_pid(launch: Launch) -> int:
    """The pid of the terminal's shell."""
    return int(subprocess.run([*launch._tmux, "display", "-p", "-t", "b", "#{pane_pid}"], capture_output=True,
                              text=True, check=True).stdout.strip())


def emacs_in(launch: Launch) -> int | None:
    """The Emacs the terminal's shell started (under ./amacs), if it runs."""
    todo = [pane_pid(launch)]
    while todo:
        pid = todo.pop()
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "emacs":
                return pid
        except OSError:
            continue
        todo.extend(children(pid))
    return None


def tree_python(tree: Path, code: str) -> str:
    """What CODE prints, run by TREE's Python with ``-S`` and its amacs_server folder on the path
    (as ./amacs runs warm_launch.py)."""
    return subprocess.run([str(tree / ".venv" / "bin" / "python"), "-S", "-c",
                           f"import sys; sys.path.insert(0, {str(tree / 'amacs_server')!r}); {code}"],
                          capture_output=True, text=True, check=True).stdout.strip()


def start_warm(tree: Path, directory: Path, probe: Path, log: Path) -> subprocess.Popen[bytes]:
    """TREE's warm server in DIRECTORY with the probe installed, listening (as start_warm starts it)."""
    key = tree_python(tree, "import warm_launch; print(warm_launch.stamp())")
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); sys.path.insert(0, {str(tree)!r}); "
            "import first_cpu_probe; first_cpu_probe.install(); first_cpu_probe.install_profiles(); first_cpu_probe.install_turn_profiles(); from amacs_server.warm import main; sys.exit(main())")
    env = {**launch_env(), "AMACS_WARM_DIR": str(directory), "AMACS_WARM_DELAY": "0", "AMACS_CPU_PROBE": str(probe),
           **({"AMACS_CPU_PROFILE": os.environ["AMACS_CPU_PROFILE"]} if os.environ.get("AMACS_CPU_PROFILE") else {})}
    with open(log, "ab") as out:
        proc = subprocess.Popen([str(tree / ".venv" / "bin" / "python"), "-c", code, str(directory), key],
                                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=tree)
    deadline = time.monotonic() + 120
    while not (directory / f"{key}.sock").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{tree}'s warm server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return proc


def stamps(probe: Path, since: float, until: float) -> dict[str, tuple[float, float]]:
    """The first stamp of each point of the one server forked between SINCE and UNTIL: (CPU ms, wall)."""
    lines = [json.loads(line) for line in probe.read_text().splitlines() if line.strip()]
    forks = [r["pid"] for r in lines if r["point"] == "fork" and since <= r["wall"] <= until]
    if len(forks) != 1:
        raise RuntimeError(f"{len(forks)} servers forked in the sample")
    seen: dict[str, tuple[float, float]] = {}
    for row in lines:
        if row["pid"] == forks[0]:
            seen.setdefault(row["point"], (row["cpu"], row["wall"]))
            if row["point"] == "fork":
                seen["emacs at fork"] = (row.get("asker_cpu") or float("nan"), row["wall"])
    return seen


def fork_pid(probe: Path, since: float) -> int | None:
    """The server forked since SINCE, by the probe's stamps."""
    for line in probe.read_text().splitlines():
        row = json.loads(line)
        if row["point"] == "fork" and row["wall"] >= since:
            return int(row["pid"])
    return None


def one(command: str, kind: str, env: dict[str, str], tmp: Path, home: Path | None, probe: Path,
        warm: int | None) -> dict[str, float]:
    """One launch of COMMAND: Emacs's CPU and the whole launch's at prompt and answer (the
    terminal's processes, the server forked for it, the warm server's share); for AMACS, the
    server's CPU at its steps."""
    user_home = tmp / "user-home"
    shutil.rmtree(user_home, ignore_errors=True)
    user_home.mkdir(parents=True)
    env = {**env, "HOME": str(user_home), **({"AMACS_HOME": str(home)} if home else {})}
    number = next(QUESTIONS)
    question, last_word = f"ask{number}q", f"{LAST_WORD}x{number}"
    prompt = PROMPTS["gptel" if kind == "gptel" else "amacs"]
    seen: dict[str, float] = {}
    since, warm_before = time.time(), proc_cpu(warm) if warm else 0.0

    def cpu(mark: str, launch: Launch) -> None:
        emacs = emacs_in(launch)
        seen[f"emacs_{mark}"] = proc_cpu(emacs, waited=True) if emacs else float("nan")
        total = tree_cpu(pane_pid(launch))
        seen[f"shell_{mark}"] = total - seen[f"emacs_{mark}"]  # the shell, ./amacs and what it ran
        if warm:
            server = fork_pid(probe, since)
            seen[f"fork_{mark}"] = proc_cpu(server, waited=True) if server else 0.0  # with its git
            seen[f"warm_{mark}"] = proc_cpu(warm) - warm_before
            total += seen[f"fork_{mark}"] + seen[f"warm_{mark}"]
        seen[f"all_{mark}"] = total

    try:
        with Launch(command, env) as launch:
            for now, screen in launch.screens(60, what=f"{kind}'s answer"):
                ret = time.time() - now / 1000  # RET, on the clock the probe's stamps use
                if "prompt" not in seen and prompt.search(screen):
                    seen["prompt"] = now
                    launch.keys(question, literal=True)
                    launch.keys(*(["C-c", "Enter"] if kind == "gptel" else ["Enter"]))
                    cpu("prompt", launch)  # after the keys: a look at /proc takes a while
                if "prompt" in seen and last_word in screen:
                    seen["answer"] = now
                    cpu("answer", launch)
                    break
    finally:
        if home:
            wait_gone(server_pid(home))
    if warm:
        server = stamps(probe, since, time.time())
        for name, prefix in STEPS:
            hits = [at for point, at in server.items() if point.startswith(prefix)]
            seen[f"server_{name}"] = hits[0][0] if hits else float("nan")
            seen[f"wall_{name}"] = (hits[0][1] - ret) * 1000 if hits else float("nan")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=7)
    parser.add_argument("--ticks", type=int, default=1000)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH, a checkout to measure")
    parser.add_argument("--kind", action="append", choices=("returning", "new", "gptel"))
    parser.add_argument("--gptel", type=Path, default=default_gptel())
    parser.add_argument("--emacs-probe", action="store_true", help="stamps of Emacs's CPU (bench/first_cpu_probe.el) "
                        "into $AMACS_EMACS_PROBE")
    args = parser.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.tree)} or {"here": ROOT}
    kinds = args.kind or ["returning", "new", "gptel"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-first-cpu-"))
    warm_dir = tmp / "warm"
    warm_dir.mkdir(mode=0o700)
    probe = tmp / "probe.jsonl"
    probe.touch()
    for tree in trees.values():
        subprocess.run([str(tree / "scripts" / "setup.sh")], cwd=tree, check=True, capture_output=True)
    fake = TimedFake()
    fake.strict = False
    fake.respond_with(tagged_reply)
    fake.start()
    wrapper = tmp / "bin" / "emacs"  # Emacs with the probe loaded first (after the options that must lead)
    wrapper.parent.mkdir()
    wrapper.write_text('#!/bin/bash\nargs=(); while [ "$1" = -nw ] || [ "$1" = -Q ]; do args+=("$1"); shift; done\n'
                       f'exec {shutil.which("emacs")} "${{args[@]}}" -l {ROOT / "bench" / "first_cpu_probe.el"} "$@"\n')
    wrapper.chmod(0o755)
    emacs_probe = Path(os.environ.get("AMACS_EMACS_PROBE", tmp / "emacs-probe.tsv"))
    peers = compile_gptel(args.gptel, tmp / "peers") if "gptel" in kinds else None
    env = launch_env(ANTHROPIC_API_KEY="sk-ant-bench", ANTHROPIC_BASE_URL=fake.url, AMACS_WARM_DIR=str(warm_dir))
    if args.emacs_probe:
        env.update(PATH=f"{wrapper.parent}:{env['PATH']}", AMACS_EMACS_PROBE=str(emacs_probe))
    warms = {name: start_warm(tree, warm_dir, probe, tmp / f"warm-{name}.log") for name, tree in trees.items()}
    rows: dict[str, list[dict[str, float]]] = {}
    try:
        homes = {}
        for name, tree in trees.items():
            homes[name] = tmp / f"returning-{name}"
            if "returning" in kinds:
                build_home(homes[name], args.ticks)
                one(f"cd {tree} && ./amacs", "returning", env, tmp, homes[name], probe,
                    warms[name].pid)  # its git repo, memory.db
        load_before = loadavg()
        print("load before", load_before, flush=True)
        order = [(name, kind) for name in trees for kind in kinds if kind != "gptel"]
        order += [("peer", "gptel")] if "gptel" in kinds else []
        for i in range(args.n):
            for name, kind in order if i % 2 == 0 else order[::-1]:
                if kind == "gptel":
                    assert peers is not None
                    row = one(gptel_command(peers, fake.url), kind, env, tmp, None, probe, None)
                else:
                    home = homes[name] if kind == "returning" else tmp / f"new-{name}-{i}"
                    row = one(f"cd {trees[name]} && ./amacs", kind, env, tmp, home, probe, warms[name].pid)
                rows.setdefault(f"{name}-{kind}", []).append(row)
                print(f"{name}-{kind}", {k: (round(v) if v == v else None) for k, v in row.items()}, flush=True)
        load_after = loadavg()
        marks = ["prompt", "answer", "emacs_prompt", "emacs_answer", "shell_answer", "fork_prompt", "fork_answer",
                 "warm_answer", "all_prompt", "all_answer", *(f"server_{s}" for s, _ in STEPS),
                 *(f"wall_{s}" for s, _ in STEPS)]
        # Medians of CPU (server_*, emacs_*, shell_*, fork_*, warm_*, all_*) and wall (prompt, answer, wall_*):
        # marks the sample does not have (gptel's server) are NaN.
        result: dict[str, Any] = {"load_before": load_before, "load_after": load_after, "cpus": os.cpu_count(),
                                  "ticks": args.ticks, "trees": {k: str(v) for k, v in trees.items()}}
        for key, samples in rows.items():
            result[key] = {mark: summary([s[mark] for s in samples if s.get(mark, float("nan")) == s.get(mark)])
                           for mark in marks if any(s.get(mark, float("nan")) == s.get(mark) for s in samples)}
        save("first_cpu", result)
        print(f"\nmedian / p90 (ms; server_*: the fork's CPU at that step, wall_*: when, after RET; emacs_*: "
              f"Emacs's CPU; all_*: every process's; n={args.n}; load {load_before} -> {load_after})")
        print(f"{'':22s}" + "".join(f"{key:>18s}" for key in rows))
        for mark in marks:
            cells = [f"{result[key][mark]['median_ms']:7.0f} /{result[key][mark]['p90_ms']:6.0f}"
                     if mark in result[key] else "-" for key in rows]
            print(f"{mark:22s}" + "".join(f"{c:>18s}" for c in cells))
    finally:
        fake.stop()
        for proc in warms.values():
            proc.terminate()
            proc.wait(10)
        if os.environ.get("AMACS_CPU_PROBE_KEEP"):  # every stamp of every fork
            shutil.copy(probe, os.environ["AMACS_CPU_PROBE_KEEP"])
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
