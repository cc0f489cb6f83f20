#!/usr/bin/env bash
# Every check of AMACS, on a fresh Debian machine or a used one:
# installs what is missing, then byte-compile (warnings are errors),
# checkdoc, ERT, ruff, pytest (unit and end-to-end).  Non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)

need_apt=()
command -v emacs >/dev/null 2>&1 || need_apt+=(emacs-nox)
[ -d /usr/share/emacs/site-lisp/elpa/epc-0.1.1 ] || ls -d /usr/share/emacs/site-lisp/elpa/epc-* >/dev/null 2>&1 || need_apt+=(elpa-epc)
ls -d /usr/share/emacs/site-lisp/elpa/magit-section-* >/dev/null 2>&1 || need_apt+=(elpa-magit-section)
command -v git >/dev/null 2>&1 || need_apt+=(git)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if ((${#need_apt[@]})); then
  echo "== installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import amacs_server, pytest, hypothesis, ruff' >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.amacs-installed ]; then
  echo "== installing the package with its test extras"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
  touch .venv/.amacs-installed
fi

EMACS_SETUP=(--eval "(progn (add-to-list 'package-directory-list \"/usr/share/emacs/site-lisp/elpa\") (package-initialize))")

echo "== byte-compile elisp/ (warnings are errors)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp elisp/*.el "$tmp/"
emacs -Q --batch "${EMACS_SETUP[@]}" -L "$tmp" \
  --eval "(setq byte-compile-error-on-warn t)" -f batch-byte-compile "$tmp"/*.el

echo "== checkdoc"
emacs -Q --batch -l elisp/build/checkdoc-batch.el elisp/*.el

echo "== ERT"
emacs -Q --batch "${EMACS_SETUP[@]}" -L elisp -L elisp/test \
  --eval "(setq load-prefer-newer t)" \
  -l elisp/test/amacs-test.el -f ert-run-tests-batch-and-exit

echo "== ruff"
.venv/bin/ruff check amacs_server tests bench

echo "== pytest (unit and end-to-end)"
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
