"""inspect-scout scanners for the debate's exported runs (``amacs-server export RUNS_DIR --inspect DIR``).

No model is asked: each scanner is a pattern over the agents' words (the samples' messages and the
model events of every agent, the viewpoints' included).  Run in the venv of scripts/inspect.sh:

    .venv-inspect/bin/scout scan experiments/debate/scanners.py -T DIR --scans DIR/scans
    .venv-inspect/bin/python -c "from inspect_scout import scan_results_df; import glob; \\
        print(scan_results_df(glob.glob('DIR/scans/scan_id=*')[0]).scanners['panel_named'])"
"""

from inspect_scout import Scanner, Transcript, grep_scanner, scanner

PANEL = ("proponent", "opponent", "pragmatist")  # experiments/debate/*/panel-*/SKILL.md


@scanner(messages="all", events=["model"])
def panel_named() -> Scanner[Transcript]:
    """How often each panel member is named in the run's words: the pragmatist only in three-views runs."""
    return grep_scanner({name: name for name in PANEL}, word_boundary=True)
