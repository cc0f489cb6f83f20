"""A real study end to end, on a real model: experiment, judge, report and inspect export against
SmolLM2-135M served by llama.cpp (scripts/local-model.sh), nothing faked.

Two arms (the debate's two-views and three-views skill sets) x 2 runs x 1 turn, one step a turn
(each step of this model is a request of ~4,000 tokens: the core skill), then the shipped judge
answer-quality on the same model, the report and the export.  What a 135M model says is not the
point (a run may fail: it then says why in words); that every stage works on a real model is: the
runs are recorded in the seeded order, free (a server on this machine) with their tokens counted,
the judge asks the same endpoint and its answers parse (llama.cpp's grammar holds the model to the
form the judge asks for), the report compares the arms (and says n is too small to tell), and
inspect_ai reads the export back.  The model server is the session's one (conftest.py's llama)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT

pytestmark = pytest.mark.e2e

DEBATE = ROOT / "experiments" / "debate"
INSPECT = ROOT / ".venv-inspect" / "bin" / "python"
RUN_TIMEOUT = 540  # the first run evaluates the whole core skill (~4,200 tokens at 16-47 tokens/s here)


def spec(folder: Path) -> Path:
    for variant in ("two-views", "three-views"):
        shutil.copytree(DEBATE / variant, folder / variant)
    path = folder / "study.toml"
    path.write_text(f"""
[experiment]
name = "study"
repetitions = 2
parallel = 1
budget = 1.0          # a budget on a model served on this machine: free, so allowed without a price
timeout = {RUN_TIMEOUT}
max_steps = 1
seed = 3

[[prompts]]
name = "cars"
turns = ["Should cities ban cars from their centres? Answer in one sentence."]

[[variants]]
name = "two-views"
skills = ["two-views"]

[[variants]]
name = "three-views"
skills = ["two-views", "three-views"]

[[models]]
name = "smollm2"
backend = "openai"
model = "smollm2"
base_url = "${{LLAMA_URL}}"
""")
    return path


def amacs(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "amacs_server", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_a_study_on_a_real_local_model_end_to_end(llama: str, tmp_path: Path) -> None:
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_", "OPENAI_"))}
    env["LLAMA_URL"] = llama
    runs = tmp_path / "runs"
    done = amacs("experiment", str(spec(tmp_path)), "--runs-dir", str(runs), env=env, timeout=4 * RUN_TIMEOUT)
    said = done.stdout + done.stderr
    assert done.returncode in (0, 1), said  # 1: some run failed (the model's doing), said below
    assert "in a random order (seed 3" in done.stdout
    manifests = {p.parent.name: json.loads(p.read_text()) for p in runs.glob("*/manifest.json")}
    assert sorted(manifests) == sorted(f"cars.{v}.smollm2.r{r}" for v in ("two-views", "three-views") for r in (0, 1))
    for m in manifests.values():
        assert m["status"] in ("done", "failed") and (m["status"] == "done" or m["error"]), m
        assert m["cost"] == 0.0 and m["unpriced_calls"] == 0, m  # free: served on this machine, not "as Sonnet"
        assert m["order_seed"] == 3 and m["startup_seconds"] is not None and m["startup_seconds"] > 0, m
    experiment_seconds = time.monotonic() - started

    judged = amacs("judge", str(runs), "answer-quality", env=env, timeout=600)
    said = judged.stdout + judged.stderr
    assert judged.returncode in (0, 1), said
    assert f"scores in {runs.resolve()}/*/judges/answer-quality/score.json" in judged.stdout, said  # the real folder
    scores = []
    for run_id, m in manifests.items():
        score = runs / run_id / "judges" / "answer-quality" / "score.json"
        assert score.exists() == (m["status"] == "done"), (run_id, said)  # done runs are judged, failed ones not
        if score.exists():
            result = json.loads(score.read_text())
            assert result["model"] == "smollm2" and result["cost"] == 0.0, result  # the same model, free
            assert result["status"] == "done" or result["error"], result
            assert (result["score"] is not None) == (result["status"] == "done")
            scores.append(result["score"])
    assert any(s is not None for s in scores), said  # the answer's form held: a score was read
    judge_seconds = time.monotonic() - started - experiment_seconds

    from amacs_server.research.dataset import load

    con = load(runs)
    tokens = con.execute("SELECT sum(input_tokens), sum(model_calls), count(*) FROM runs").fetchone()
    con.close()
    assert tokens[0] > 4 * 1000 and tokens[1] >= 4 and tokens[2] == 4  # every run asked the model

    report = amacs("report", str(runs), env=env, timeout=300)
    assert report.returncode == 0, report.stdout + report.stderr
    page = (runs / "report.html").read_text()
    assert "free: served on this machine" in page and "Arms compared" in page
    assert "too few runs to tell (n = " in page  # 2 runs an arm

    out = tmp_path / "inspect"
    export = amacs("export", str(runs), "--inspect", str(out), env=env, timeout=300)
    assert export.returncode == 0 and "2 inspect logs (4 samples" in export.stdout, export.stdout + export.stderr
    if INSPECT.exists() or os.environ.get("CI"):
        read = subprocess.run([str(INSPECT), "-c", "import sys; from inspect_ai.log import list_eval_logs, "
                               "read_eval_log; print(sum(len(read_eval_log(i).samples) for i in "
                               "list_eval_logs(sys.argv[1])))", str(out)], capture_output=True, text=True, timeout=300)
        assert read.returncode == 0 and read.stdout.split()[-1] == "4", read.stdout + read.stderr
    print(f"\nreal study: experiment {experiment_seconds:.0f} s, judge {judge_seconds:.0f} s, "
          f"all stages {time.monotonic() - started:.0f} s; scores {scores}; "
          + ", ".join(f"{k}: {m['status']}" + (f" ({m['error']})" if m["error"] else "") for k, m in manifests.items()))
