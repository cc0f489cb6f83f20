#!/usr/bin/env python3
"""Write each agent tool's arglist and docstring into its elisp wrapper, from its declaration.

    scripts/tool-wrappers.py           rewrite elisp/amacs-agent.el from tools/declared.py
    scripts/tool-wrappers.py --check   exit 1, saying which, when the file is not as declared

A tool's name, arguments and docs are written once, in ``amacs_server/tools/declared.py``; the
wrapper's body (what it sends, how) stays written by hand in ``elisp/amacs-agent.el``.
tests/test_tool_declarations.py fails when the two differ.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amacs_server.tools.declared import TOOLS  # noqa: E402

AGENT_EL = ROOT / "elisp" / "amacs-agent.el"


def elisp_string(text: str) -> str:
    """TEXT as an elisp docstring literal; a line that opens with a paren is escaped, as checkdoc asks."""
    body = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + re.sub(r"^\(", r"\\(", body, flags=re.M) + '"'


def written(elisp: str) -> str:
    """ELISP with each declared wrapper's arglist and docstring as declared."""
    for tool in TOOLS:
        head = re.compile(rf'^\(defun {re.escape(tool.function)} \([^)]*\)\n  "(?:[^"\\]|\\.)*"', re.M)
        if not head.search(elisp):
            raise SystemExit(f"{AGENT_EL}: no (defun {tool.function} ...) with a docstring")
        elisp = head.sub(lambda _, t=tool: f"(defun {t.function} ({t.args})\n  {elisp_string(t.doc)}", elisp)
    return elisp


def main() -> int:
    now = AGENT_EL.read_text(encoding="utf-8")
    new = written(now)
    if "--check" in sys.argv[1:]:
        if new != now:
            print(f"{AGENT_EL} is not as tools/declared.py declares: run scripts/tool-wrappers.py")
            return 1
        return 0
    if new != now:
        AGENT_EL.write_text(new, encoding="utf-8")
        print(f"wrote {AGENT_EL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
