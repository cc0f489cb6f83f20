"""The ``amacs-server`` command line: which command runs.

``python -m amacs_server [--headless] [--home DIR]`` serves (:mod:`amacs_server.serve`);
``amacs-server COMMAND ...`` runs one of the commands: rewind, fork and ticks (``persistence.history``),
transcripts, and research's experiment, dataset, report, judge and export.
"""

from __future__ import annotations

import gc

if __name__ == "__main__":
    # No cyclic garbage collection while the server starts (RuntimeBuilder enables it once
    # the runtime is built; the other commands at once): what its imports make lives as long
    # as the process, and the collections that walked it were ~20 ms of the ~190 ms of CPU
    # to hello.
    gc.disable()

import importlib
import os
import sys
from collections.abc import Callable

# The commands other than serving (``amacs-server COMMAND ...``) -> the module whose main runs it.
COMMANDS = {"rewind": ".persistence.history", "fork": ".persistence.history", "ticks": ".persistence.history",
            "transcripts": ".transcripts",
            **{name: f".research.{name}" for name in ("experiment", "dataset", "report", "judge", "export")}}
# What pyproject's research and cluster extras bring; a command missing one says how to add it.
RESEARCH_MODULES = frozenset({"duckdb", "pyarrow", "plotly", "rich", "ray"})


def main(argv: list[str] | None = None) -> int:
    """Run the server until Emacs goes away (or forever, headless); or return a home to a tick, fork
    it, summarize transcripts, run an experiment, load its runs as a dataset, draw its report."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        from .serve import main as serve

        return serve(argv)
    gc.enable()  # disabled for the server's start (top of this file); these are not it
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as the server does
    if argv[0] in ("rewind", "fork", "ticks"):  # return a home to a tick, copy it at one, list them
        history: Callable[[list[str]], int] = importlib.import_module(COMMANDS[argv[0]], __package__).main
        return history(argv)
    try:  # research at scale: each command says in one line what it needs and lacks
        command: Callable[[list[str]], int] = importlib.import_module(COMMANDS[argv[0]], __package__).main
        return command(argv[1:])
    except ModuleNotFoundError as err:
        missing = (err.name or "").partition(".")[0]
        if missing not in RESEARCH_MODULES:
            raise
        print(f"amacs-server {argv[0]}: needs the research extras ({missing} is not installed): "
              "in the checkout, .venv/bin/pip install -e '.[research]' (pipx: pipx install "
              "'amacs-server[research]')", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
