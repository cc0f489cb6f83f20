import subprocess, sys, os, time, json, glob, signal, re
ROOT = sys.argv[1]; trials = [float(x) for x in sys.argv[2:]]
fake = subprocess.Popen([ROOT + "/.venv/bin/python", "-m", "tests.fake_debate"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
url = fake.stdout.readline().strip()
env = {**os.environ, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "fake-key-long-enough"}
bad = 0; total_stopped = 0
for i, x in enumerate(trials):
    runs = f"/tmp/lead-race/runs-{os.getpid()}-{i}"
    p = subprocess.Popen([ROOT + "/.venv/bin/amacs-server", "experiment", ROOT + "/experiments/debate/debate.toml", "--runs-dir", runs, "--parallel", "2"],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    n = 0
    for line in p.stdout:
        if re.search(r"^\s*done\s", line):
            n += 1
            if n == 2:
                time.sleep(x); os.killpg(p.pid, signal.SIGINT); break
    p.communicate(timeout=120)
    for m in glob.glob(runs + "/*/manifest.json"):
        d = json.load(open(m))
        if d["status"] != "done":
            total_stopped += 1
            if d.get("turns_done", 0) >= len(d["turns"]):
                bad += 1; print("RACE", x, d["run_id"], d["turns_done"], d.get("error"))
    print("trial", x, "rc", p.returncode, flush=True)
fake.terminate()
print("stopped", total_stopped, "race hits", bad)
