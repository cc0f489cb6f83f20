"""A/B of launch -> first answer: before (main c4cc5ed) vs after (fa7: the ask first), gptel beside; rounds interleaved.

As the lead's lead-ab.py (2026-11-29e), with each tree's own warm server waited for before the rounds."""
import shutil, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "/work/wt-fa")
import bench.bench_first_answer as bfa
from bench.bench_first_cpu import tree_python
from bench.bench_startup import build_home, loadavg
from bench.bench_transport import TimedFake
from bench.interactive import launch_env

TREES = {"before": Path("/tmp/fa7-ab/before"), "after": Path("/tmp/fa7-ab/after2")}
n = int(sys.argv[1])
tmp = Path(tempfile.mkdtemp(prefix="fa7-ab-"))
fake = TimedFake(); fake.strict = False; fake.respond_with(bfa.tagged_reply); fake.start()
env = launch_env(ANTHROPIC_API_KEY="sk-ant-bench", ANTHROPIC_BASE_URL=fake.url, AMACS_WARM_DIR=str(tmp / "warm"))
(tmp / "warm").mkdir(mode=0o700)
peers = bfa.compile_gptel(bfa.default_gptel(), tmp / "peers")
homes = {}
for name, tree in TREES.items():
    homes[name] = tmp / f"ret-{name}"
    build_home(homes[name], 1000)
    bfa.one_sample("amacs-returning", f"cd {tree} && ./amacs", env, tmp, homes[name])  # starts its warm server
for name, tree in TREES.items():
    sock = tmp / "warm" / (tree_python(tree, "import warm_launch; print(warm_launch.stamp())") + ".sock")
    while not sock.exists():
        time.sleep(0.1)
rows = {}
print("load before", loadavg(), flush=True)
kinds = [(name, kind) for name in TREES for kind in ("returning", "new")] + [("peer", "gptel")]
for i in range(n):
    for name, kind in kinds if i % 2 == 0 else kinds[::-1]:
        if kind == "gptel":
            row = bfa.one_sample("gptel", bfa.gptel_command(peers, fake.url), env, tmp, None)
        else:
            home = homes[name] if kind == "returning" else tmp / f"new-{name}-{i}"
            row = bfa.one_sample(f"amacs-{kind}", f"cd {TREES[name]} && ./amacs", env, tmp, home)
        rows.setdefault(f"{name}-{kind}", []).append(row)
print("load after", loadavg())
def q(xs, p): xs = sorted(xs); return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
for k, rs in rows.items():
    a = [r["answer"] for r in rs if "answer" in r]; pr = [r["prompt"] for r in rs if "prompt" in r]
    print(f"{k:18s} prompt {statistics.median(pr):6.0f} / {q(pr, .9):6.0f}   answer {statistics.median(a):6.0f} / {q(a, .9):6.0f}   n={len(a)}")
fake.stop(); shutil.rmtree(tmp, ignore_errors=True)
