"""Research at scale (docs/ARCHITECTURE.md, Research): many headless runs, one dataset, a report.

``amacs-server experiment SPEC`` runs a grid of headless sessions, each in
``RUNS_DIR/<run-id>/`` (its ``manifest.json`` and its AMACS ``home/``);
``amacs-server dataset RUNS_DIR`` loads them into DuckDB and Parquet;
``amacs-server report RUNS_DIR`` draws them as one self-contained HTML page.
"""
