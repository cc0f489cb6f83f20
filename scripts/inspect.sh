#!/usr/bin/env bash
# Install the research tools of the field that read AMACS's exported runs:
# inspect-ai (its log reader, data frames and `inspect view') and inspect-scout
# (transcript scanners), from PyPI, into a venv of their own: .venv-inspect in
# the checkout, or DIR.
#
#   scripts/inspect.sh [DIR]
#
# Their own venv, not the test extras: amacs-server writes inspect's log format
# itself (amacs-server export RUNS_DIR --inspect DIR needs only the research
# extras), so these are readers nobody here wrote, as a researcher has them;
# and they bring ~80 packages (textual, s3fs, pandas, ...) whose pins would
# move the server's own dependencies under its tests.
# Every version is pinned (scripts/inspect-constraints.txt, a pip freeze of a working venv):
# unpinned, pip backtracked through boto3's releases one download at a time for minutes.
# The last line printed is `inspect: DIR/bin/inspect'.  Safe to run again: with
# both there it only prints that line.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-inspect}"
started=$(date +%s)
have() { "$venv/bin/python" -c 'import inspect_ai, inspect_scout, pandas' >/dev/null 2>&1; }
if ! have; then
  [ -x "$venv/bin/python" ] || { echo "== creating $venv"; python3 -m venv "$venv"; }
  echo "== installing inspect-ai and inspect-scout into $venv"
  "$venv/bin/pip" install --disable-pip-version-check --progress-bar off -c scripts/inspect-constraints.txt \
    'inspect-ai>=0.3.285,<0.4' 'inspect-scout>=0.6.1,<0.7' pandas pyarrow 2>&1 \
    | grep -v -e '^WARNING: Location' -e '^Requirement already satisfied' || true
  have || { echo "inspect.sh: the install failed (pip's output is above)" >&2; exit 1; }
  echo "== installed in $(( $(date +%s) - started )) s"
fi
echo "inspect: $(cd "$venv/bin" && pwd)/inspect"
