"""A/B of launch -> first answer: main (before) vs the lead's tree (after), gptel beside; rounds interleaved."""
import shutil, statistics, sys, tempfile
from pathlib import Path
sys.path.insert(0, "/work/wt-lead")
import bench.bench_first_answer as bfa
from bench.bench_startup import build_home, loadavg
from bench.bench_transport import TimedFake
from bench.interactive import launch_env

TREES = {"before": Path("/tmp/lead-ab/before"), "after": Path("/work/wt-lead")}
n = int(sys.argv[1])
tmp = Path(tempfile.mkdtemp(prefix="lead-ab-"))
fake = TimedFake(); fake.strict = False; fake.respond_with(bfa.tagged_reply); fake.start()
env = launch_env(ANTHROPIC_API_KEY="sk-ant-bench", ANTHROPIC_BASE_URL=fake.url)
peers = bfa.compile_gptel(bfa.default_gptel(), tmp / "peers")
homes = {}
for name, tree in TREES.items():
    homes[name] = tmp / f"ret-{name}"
    build_home(homes[name], 1000)
    bfa.one_sample("amacs-returning", f"cd {tree} && ./amacs", env, tmp, homes[name])
bfa.wait_warm(tmp, env)
rows = {}
print("load before", loadavg(), flush=True)
for i in range(n):
    for name, tree in TREES.items():
        rows.setdefault(f"{name}-returning", []).append(bfa.one_sample("amacs-returning", f"cd {tree} && ./amacs", env, tmp, homes[name]))
        rows.setdefault(f"{name}-new", []).append(bfa.one_sample("amacs-new", f"cd {tree} && ./amacs", env, tmp, tmp / f"new-{name}-{i}"))
    rows.setdefault("gptel", []).append(bfa.one_sample("gptel", bfa.gptel_command(peers, fake.url), env, tmp, None))
print("load after", loadavg())
def q(xs, p): xs = sorted(xs); return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
for k, rs in rows.items():
    a = [r["answer"] for r in rs if "answer" in r]; pr = [r["prompt"] for r in rs if "prompt" in r]
    print(f"{k:18s} prompt {statistics.median(pr):6.0f} / {q(pr, .9):6.0f}   answer {statistics.median(a):6.0f} / {q(a, .9):6.0f}   n={len(a)}")
fake.stop(); shutil.rmtree(tmp, ignore_errors=True)
