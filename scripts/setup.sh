#!/usr/bin/env bash
# Install what AMACS needs on Debian when it is missing: Emacs, epc,
# magit-section, git, Python's venv; then .venv with the package (and,
# with --test, its test extras, tmux and package-lint).  Safe to run again: it skips what is there.
set -euo pipefail
case $0 in */*) cd "${0%/*}/..";; *) cd ..;; esac
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

# Already set up, the common case at every ./amacs (which asks first, without this script):
# nothing below was built before what it is built from changed.  Said by modification times
# alone, with no Python or Emacs started (the full check below took ~220 ms of blank terminal
# at every start): scripts/ready.sh.
. scripts/ready.sh
amacs_ready "$extras" && exit 0
ready=".venv/.amacs-ready${extras:+-test}"  # written when this run has ended well

need_apt=()
command -v emacs >/dev/null 2>&1 || need_apt+=(emacs-nox)
ls -d /usr/share/emacs/site-lisp/elpa/epc-* >/dev/null 2>&1 || need_apt+=(elpa-epc)
ls -d /usr/share/emacs/site-lisp/elpa/magit-section-* >/dev/null 2>&1 || need_apt+=(elpa-magit-section)
command -v git >/dev/null 2>&1 || need_apt+=(git)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ -n "$extras" ]; then command -v tmux >/dev/null 2>&1 || need_apt+=(tmux); fi  # tests/tmux
if [ -n "$extras" ]; then command -v chromium >/dev/null 2>&1 || need_apt+=(chromium); fi  # the report, rendered
if [ -n "$extras" ]; then  # ci-check.sh lints elisp/ as a package
  ls -d /usr/share/emacs/site-lisp/elpa/package-lint-[0-9]* >/dev/null 2>&1 || need_apt+=(elpa-package-lint)
fi
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
stamp=".venv/.amacs-installed${extras:+-test}"
# Each package is looked for, not imported: importing the SDKs took ~4 s, a blank
# terminal at every ./amacs (a newcomer's finding, issue 10).  A package that is
# there but broken is said by the server when it starts, in the shell.
modules='"amacs_server", "epc", "anthropic", "aiohttp", "openai", "git", "orgparse", "sexpdata", "mcp"'
[ -n "$extras" ] && modules="$modules"', "pytest", "hypothesis", "ruff", "mypy", "duckdb", "pyarrow", "plotly", "rich", "ray"'
check="import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ($modules)))"
if ! .venv/bin/python -c "$check" >/dev/null 2>&1 || [ pyproject.toml -nt "$stamp" ]; then
  echo "== installing amacs-server${extras} into .venv (a minute or two the first time)"
  scripts/pip-install.sh .venv -e ".${extras}"
  touch "$stamp"
fi

# Byte-compiled elisp for ./amacs, in a folder of its own: loading compiled
# files saves ~0.1 s at each start, and an Emacs that loads elisp/ directly
# never picks up a stale .elc.  Recompiled whenever a source file is newer.
elc=".elc"  # beside elisp/: amacs--root is the folder above the loaded files
if [ ! -d "$elc" ] || [ -n "$(find elisp -maxdepth 1 -name '*.el' -newer "$elc/.stamp" 2>/dev/null)" ] \
   || [ ! -f "$elc/.stamp" ]; then
  rm -rf "$elc"; mkdir -p "$elc"
  cp elisp/*.el "$elc/"
  if emacs -Q --batch --eval "(progn (add-to-list 'package-directory-list \"/usr/share/emacs/site-lisp/elpa\") (package-initialize))" \
       -L "$elc" -f batch-byte-compile "$elc"/*.el >"$elc/compile.log" 2>&1; then
    # The sources stay beside the .elc files: native compilation looks for them
    # (without, each load warns in a *Warnings* window); the newer .elc loads.
    touch "$elc/.stamp"
  else
    echo "== byte-compiling elisp failed (see $elc/compile.log); ./amacs loads the source" >&2
    rm -rf "$elc"
  fi
fi

# The server's bytecode, written ahead: Python never writes it when
# PYTHONDONTWRITEBYTECODE is set (as on this project's CI machines), and then
# compiles every module of amacs_server again at each start (~65 ms of the
# ~230 ms before the port line, issue 10).  Python recompiles a stale file
# in memory, so this only has to run when a source changed.
if [ -n "$(find amacs_server -name '*.py' -newer .venv/.amacs-bytecode 2>/dev/null)" ] \
   || [ ! -f .venv/.amacs-bytecode ]; then
  .venv/bin/python -m compileall -q amacs_server >/dev/null && touch .venv/.amacs-bytecode
fi
touch "$ready"
