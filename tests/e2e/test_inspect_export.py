"""An experiment's runs read by the field's own tools: inspect_ai and inspect-scout, nobody here wrote them.

The shipped debate (2 arms x 2 runs) runs against the fake that plays it, a judge scores it, one run is
then recorded as failed, and ``amacs-server export RUNS_DIR --inspect DIR`` writes one inspect log per
arm.  inspect_ai's reader (``.venv-inspect``, scripts/inspect.sh) reads each back without a validation
error, its data-frame functions load them, ``inspect view`` shows the logs, a log's samples and one
transcript in headless Chromium, and the debate's scanner (experiments/debate/scanners.py, a pattern:
no model) finds the pragmatist in the three-views runs only."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cdp import Browser
from tests.e2e.harness import ROOT, TEST_KEY
from tests.e2e.test_report import png_info
from tests.fake_anthropic import FakeAnthropic
from tests.fake_debate import debate_or_judge_reply

pytestmark = pytest.mark.e2e

INSPECT = ROOT / ".venv-inspect" / "bin"
SPEC = ROOT / "experiments" / "debate" / "debate.toml"
FAILED = "cars.two-views.sonnet.r1"
REASON = "timed out after 300 s"
AGAIN = "cars.three-views.sonnet.r0"  # a run that ran again: its earlier attempt paid EARLIER
EARLIER = 0.0125
JUDGED_EARLIER = 0.0042  # what AGAIN's judgement's earlier attempt (asked again) paid


def needs_inspect() -> None:
    if not (INSPECT / "python").exists():
        if os.environ.get("CI"):
            pytest.fail("no .venv-inspect: ci-check.sh runs scripts/inspect.sh before the tests")
        pytest.skip("no .venv-inspect (scripts/inspect.sh installs inspect-ai and inspect-scout)")


def amacs(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "amacs_server", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    """(RUNS_DIR, the export's DIR): the debate run, judged, one run failed, exported."""
    needs_inspect()
    tmp = tmp_path_factory.mktemp("inspect")
    copy = tmp / "debate"
    shutil.copytree(SPEC.parent, copy, ignore=shutil.ignore_patterns("runs"))
    text = (copy / "debate.toml").read_text()
    (copy / "debate.toml").write_text(re.sub(r"(?m)^repetitions = \d+$", "repetitions = 2", text))
    runs = tmp / "runs"
    fake = FakeAnthropic(default=debate_or_judge_reply).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AMACS_"))}
        env.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY=TEST_KEY)
        amacs("experiment", str(copy / "debate.toml"), "--runs-dir", str(runs), "--parallel", "2", env=env)
        amacs("judge", str(runs), "answer-quality", env=env)
    finally:
        fake.stop()
    manifest = runs / FAILED / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "status": "failed", "error": REASON, "failed_turn": 1}))
    again = runs / AGAIN / "manifest.json"
    again.write_text(json.dumps({**json.loads(again.read_text()), "earlier_cost": EARLIER}))
    score = runs / AGAIN / "judges" / "answer-quality" / "score.json"
    score.write_text(json.dumps({**json.loads(score.read_text()), "earlier_cost": JUDGED_EARLIER}))
    out = tmp / "logs"
    said = amacs("export", str(runs), "--inspect", str(out)).stdout
    assert f"2 inspect logs (4 samples, one per run; one log per arm) in {out}" in said
    return runs, out


READ = r"""
import json, sys
from inspect_ai.log import list_eval_logs, read_eval_log
from inspect_ai.analysis import evals_df, samples_df, messages_df, events_df
out = sys.argv[1]
logs = {}
for info in list_eval_logs(out):
    log = read_eval_log(info)  # validates every field: a wrong one raises
    samples = []
    for s in log.samples:
        spans = [e.name for e in s.events if e.event == "span_begin"]
        tools = [e.function for e in s.events if e.event == "tool"]
        models = [e for e in s.events if e.event == "model"]
        usage = next(iter(s.model_usage.values()))
        samples.append({"run_id": s.metadata["run_id"], "id": s.id, "epoch": s.epoch,
                        "roles": [m.role for m in s.messages], "reply": s.messages[-1].text,
                        "scores": {k: v.value for k, v in s.scores.items()},
                        "score_meta": {k: v.metadata for k, v in s.scores.items()}, "spans": spans, "tools": tools,
                        "model_events": len(models), "input_tokens": usage.input_tokens,
                        "total_cost": usage.total_cost, "error": s.error.message if s.error else None})
    logs[log.eval.task] = {"model": log.eval.model, "status": log.status, "samples": samples,
                           "metrics": {s.name: s.metrics["mean"].value for s in log.results.scores}}
frames = {"evals": len(evals_df(out)), "samples": len(samples_df(out)), "messages": len(messages_df(out)),
          "events": len(events_df(out))}
print(json.dumps({"logs": logs, "frames": frames}))
"""


def test_the_export_reads_back_in_inspect_ai_and_its_data_frames(exported):
    runs, out = exported
    done = subprocess.run([str(INSPECT / "python"), "-c", READ, str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    logs = said["logs"]
    assert sorted(logs) == ["debate/cars/three-views/sonnet", "debate/cars/two-views/sonnet"]  # one per arm
    assert said["frames"]["evals"] == 2 and said["frames"]["samples"] == 4
    assert said["frames"]["messages"] >= 8 and said["frames"]["events"] > 20
    con_runs = {p.parent.name: json.loads(p.read_text()) for p in runs.glob("*/manifest.json")}
    for task, log in logs.items():
        assert log["model"] == "anthropic/claude-sonnet-4-5" and log["status"] == "success"
        assert sorted((s["id"], s["epoch"]) for s in log["samples"]) == [("cars", 1), ("cars", 2)]  # epochs: reps
        panel = ["opponent", "proponent"] + (["pragmatist"] if "three-views" in task else [])
        for s in log["samples"]:
            m = con_runs[s["run_id"]]
            assert s["roles"] == ["user", "assistant"] and "After hearing the panel" in s["reply"]
            judged = json.loads((runs / s["run_id"] / "judges" / "answer-quality" / "score.json").read_text())
            assert s["scores"]["answer-quality"] == judged["score"]
            meta = s["score_meta"]["answer-quality"]  # what the judgement cost, its earlier attempts' part apart
            assert meta["cost"] == pytest.approx(judged["cost"]) and meta["judge_model"] == judged["model"]
            assert meta["earlier_cost"] == (JUDGED_EARLIER if s["run_id"] == AGAIN else 0.0)
            assert s["total_cost"] == pytest.approx(m["cost"]) and s["input_tokens"] > 0  # usage, dollars
            names = [n.split(" ")[0] for n in s["spans"]]  # a span per agent, in the order they started
            assert names[0] == "primary" and sorted(names[1:]) == [f"viewpoint-{p}" for p in sorted(panel)]
            assert s["tools"].count("eval") == 2 and s["model_events"] == 1 + len(panel)  # turns, evals
            assert s["error"] == (REASON if s["run_id"] == FAILED else None)  # a failed run: an errored sample
        assert log["metrics"]["answer-quality"] > 0


MONEY = r"""
import json, sys
from inspect_ai.analysis import evals_df, samples_df
samples, evals = samples_df(sys.argv[1]), evals_df(sys.argv[1])
print(json.dumps({"cost": float(samples["metadata_cost"].sum()),
                  "earlier": float(samples["metadata_earlier_cost"].sum()),
                  "by_run": dict(zip(samples["metadata_run_id"], samples["metadata_earlier_cost"])),
                  "logs": [json.loads(m) if isinstance(m, str) else m for m in evals["metadata"]]}))
"""


def test_inspect_says_what_the_runs_cost_as_the_report_does(exported):
    """The newcomer's case: after a run ran again, the report said runs $0.4818 ($0.0322 of it by
    earlier attempts ...) while inspect's samples_df summed to $0.4496, with no earlier_cost anywhere,
    and nothing in the logs said the dollars were list-price estimates of a fake's tokens. Read with
    inspect's own data frames, the samples' cost and earlier_cost add up to the report's runs total,
    and each log says what its arm cost in the experiment's words, where the calls went and where the
    dollars come from."""
    from amacs_server.research.dataset import load
    from amacs_server.research.report import build_report

    runs, out = exported
    done = subprocess.run([str(INSPECT / "python"), "-c", MONEY, str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["by_run"][AGAIN] == EARLIER and said["earlier"] == pytest.approx(EARLIER)
    con = load(runs)
    page = build_report(con, runs, [], None).render("t")
    con.close()
    total = said["cost"] + said["earlier"]
    first = re.search(r"<p>(\d+ runs in .*?)</p>", page)[1]
    assert f"runs ${total:.4f} (all estimated at list prices: the model calls went to " in first, first
    assert f"; ${EARLIER:.4f} of it by earlier attempts of runs that ran again; see Prices)" in first, first
    logs = {m["arm"]: m for m in said["logs"]}
    assert sum(m["cost"] for m in logs.values()) == pytest.approx(total)
    assert sum(m["earlier_cost"] for m in logs.values()) == pytest.approx(EARLIER)
    where = json.loads((runs / AGAIN / "manifest.json").read_text())["endpoint"]
    mine = logs["cars / three-views / sonnet"]
    assert mine["endpoint"] == where and f"estimated: the model calls went to {where}" in mine["price"]
    assert mine["cost_words"] == (f"${mine['cost']:.4f} estimated at list prices (the model calls went to {where}, "
                                  f"not Anthropic's API; ${EARLIER:.4f} of it by earlier attempts of runs that ran "
                                  "again)")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_inspect_view_shows_the_logs_their_samples_and_a_transcript(exported, tmp_path):
    _runs, out = exported
    port = _port()
    view = subprocess.Popen([str(INSPECT / "inspect"), "view", "--log-dir", str(out), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    browser = Browser()
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and view.poll() is None, "inspect view did not start"
                time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/"
        home = browser.visit(url, ["debate/cars/two-views/sonnet", "debate/cars/three-views/sonnet"],
                             tmp_path / "logs.png")
        assert "anthropic/claude-sonnet-4-5" in home
        log = next(p.name for p in out.glob("*three-views*.eval"))
        samples = browser.visit(f"{url}#/logs/{log}/samples/", ["Hold a debate", "answer-quality"],
                                tmp_path / "samples.png")
        assert "cars" in samples
        shot = tmp_path / "transcript.png"
        transcript = browser.visit(f"{url}#/logs/{log}/samples/sample/cars/1/transcript",
                                   ["viewpoint-pragmatist", "viewpoint-proponent", "primary"], shot)
        assert "TRANSCRIPT" in transcript.upper()
        width, height, pixels = png_info(shot)
        assert width >= 1000 and pixels > 10_000
        keep = os.environ.get("AMACS_SCREENSHOTS")  # where a person wants to look at them
        if keep:
            for name in ("logs.png", "samples.png", "transcript.png"):
                shutil.copy(tmp_path / name, Path(keep) / f"inspect-view-{name}")
    finally:
        browser.close()
        view.kill()
        view.wait()


SCAN_RESULTS = r"""
import glob, json, sys
from inspect_scout import scan_results_df
df = scan_results_df(glob.glob(sys.argv[1] + "/scan_id=*")[0]).scanners["panel_named"]
print(json.dumps([[r.transcript_task_set, int(r.transcript_task_repeat), r.label, int(r.value)]
                  for r in df.itertuples()]))
"""


def test_the_debate_scanner_finds_the_pragmatist_in_three_views_runs_only(exported, tmp_path):
    _runs, out = exported
    scans = tmp_path / "scans"
    done = subprocess.run([str(INSPECT / "scout"), "scan", str(ROOT / "experiments" / "debate" / "scanners.py"),
                           "-T", str(out), "--scans", str(scans), "--max-processes", "1", "--display", "plain"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    read = subprocess.run([str(INSPECT / "python"), "-c", SCAN_RESULTS, str(scans)], capture_output=True,
                          text=True, timeout=300)
    assert read.returncode == 0, read.stderr[-3000:]
    rows = json.loads(read.stdout.strip().splitlines()[-1])
    found = {(task, epoch, label): n for task, epoch, label, n in rows}
    assert len({(t, e) for t, e, _l in found}) == 4  # every run scanned
    for (task, _epoch, label), n in found.items():
        if label == "pragmatist":
            assert (n > 0) == ("three-views" in task), (task, n)
        else:
            assert n > 0, (task, label)
