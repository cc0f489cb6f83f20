#!/usr/bin/env bash
# Run every benchmark; results print and go to bench/results/*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
for bench in bench/bench_*.py; do
  echo "== $bench"
  .venv/bin/python -W ignore::DeprecationWarning "$bench"
done
