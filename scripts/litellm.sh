#!/usr/bin/env bash
# Install the LiteLLM proxy (PyPI's litellm[proxy]), a Messages API server
# nobody here wrote, into a venv of its own: .venv-litellm in the checkout,
# or DIR.  tests/e2e/test_litellm*.py start it in front of an OpenAI-compatible
# server and point AMACS's Anthropic backend at its POST /v1/messages.
#
#   scripts/litellm.sh [DIR]
#
# Every version is pinned (scripts/litellm-constraints.txt, a pip freeze of a working venv), as
# scripts/inspect.sh's are: a fresh clone's CI installs what was tested.
# The last line printed is `litellm: VERSION'.  Safe to run again: with the
# package there it only prints that line.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-litellm}"
started=$(date +%s)
have() { "$venv/bin/python" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ("litellm", "uvicorn", "fastapi", "backoff", "yaml")))' \
  >/dev/null 2>&1; }
if ! have; then
  [ -x "$venv/bin/python" ] || { echo "== creating $venv"; python3 -m venv "$venv"; }
  echo "== installing litellm[proxy] into $venv"
  "$venv/bin/pip" install --disable-pip-version-check --progress-bar off -c scripts/litellm-constraints.txt \
    'litellm[proxy]' 2>&1 | grep -v -e '^WARNING: Location' -e '^Requirement already satisfied' || true
  have || { echo "litellm.sh: the install failed (pip's output is above)" >&2; exit 1; }
  echo "== installed in $(( $(date +%s) - started )) s"
fi
echo "litellm: $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))')"
