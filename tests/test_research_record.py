"""The research record is true: what a researcher reads in the report and the dataset is what
happened (the cost of judging, the reference arm and why, what a duration counts).

Found by a newcomer: after ``amacs-server judge`` the report still said ``10 runs ... $0.4571 in
all``, the runs' dollars alone; the judging's ``$0.0445`` was nowhere in the headline."""

import json
import re
from pathlib import Path

from amacs_server.research.dataset import judging_cost, load, summary_text
from amacs_server.research.report import build_report
from tests.research_fakes import write_runs


def judged(runs_dir: Path, judge: str, costs: list[float | None], status: str = "done") -> None:
    """Score.json files of JUDGE for the first len(COSTS) runs, each with its cost."""
    for folder, cost in zip(sorted(p.parent for p in runs_dir.glob("*/manifest.json")), costs, strict=False):
        out = folder / "judges" / judge
        out.mkdir(parents=True)
        (out / "score.json").write_text(json.dumps({
            "run_id": folder.name, "judge": judge, "model": "claude-sonnet-4-5", "scale_low": 1, "scale_high": 5,
            "input": "final", "status": status, "score": 4 if status == "done" else None, "rationale": "r",
            "cost": cost, "error": None if status == "done" else "score never parsed", "seconds": 0.01}))


def headline(page: str) -> str:
    return re.search(r"<p>(\d+ runs in .*?)</p>", page)[1]


def test_the_headline_says_what_judging_cost_beside_the_runs_and_sums_both(tmp_path):
    write_runs(tmp_path, 4, errors=False)
    con = load(tmp_path)
    runs_cost = con.execute("SELECT sum(cost) FROM runs").fetchone()[0]
    before = headline(build_report(con, tmp_path, [], None).render("t"))
    assert before.endswith(f"; ${runs_cost:.4f} in all.") and "judging" not in before
    con.close()
    judged(tmp_path, "viewpoints-used", [0.01, 0.02, 0.005, 0.0045])
    judged(tmp_path, "answer-quality", [0.003], status="failed")  # a failed judgement's call was paid too
    con = load(tmp_path)
    dollars, *rest = judging_cost(con)
    assert round(dollars, 8) == 0.0425 and rest == [5, ["answer-quality", "viewpoints-used"], 0]
    # the runs' own dollars are not changed by judging them (a judge's calls are not in the run's home)
    assert con.execute("SELECT sum(cost) FROM runs").fetchone()[0] == runs_cost
    said = headline(build_report(con, tmp_path, [], None).render("t"))
    assert said.endswith(f"; runs ${runs_cost:.4f}, judging $0.0425 (2 judges: answer-quality, viewpoints-used, "
                         f"5 judgements), ${runs_cost + 0.0425:.4f} in all."), said
    text = summary_text(con, tmp_path, 0.1)
    assert (f"cost: runs ${runs_cost:.4f}, judging $0.0425 (2 judges: answer-quality, viewpoints-used, "
            f"5 judgements), ${runs_cost + 0.0425:.4f} in all") in text, text


def test_a_judgement_of_a_model_with_no_price_is_said_unknown(tmp_path):
    write_runs(tmp_path, 2, errors=False)
    judged(tmp_path, "viewpoints-used", [0.01, None])
    said = headline(build_report(load(tmp_path), tmp_path, [], None).render("t"))
    assert "judging $0.0100 (1 judge: viewpoints-used, 2 judgements; 1 of a model with no price, " \
           "their cost unknown)" in said, said
