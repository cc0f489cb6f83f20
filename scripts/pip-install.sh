#!/usr/bin/env bash
# pip install ARGS... into the venv VENV, quietly: only errors (and pip's warnings) are printed.
#: a package with no pyproject.toml (epc) is built as a wheel, not installed by the
# legacy `setup.py install`, which pip before 23.1 (Debian 12's) announced on the first ./amacs in
# three lines of DEPRECATION that stayed on the terminal.
set -euo pipefail
venv=$1; shift
exec "$venv/bin/pip" install -q --disable-pip-version-check --use-pep517 "$@"
