"""The shell commands of README.md and docs/ run as written (a newcomer's finding: the MCP example
used ``uvx``, which neither the machine nor ./amacs provides).

Every fenced ``sh`` block says on the line before it whether it runs here:
``<!-- runnable -->`` (run by this test, in the checkout, with a fresh HOME),
``<!-- runnable: slow -->`` (run only with ``AMACS_DOC_SLOW=1``), or
``<!-- not runnable: REASON -->`` (a person's terminal, a paid API, the network; the reason says
which, and where a test covers it).  The relative links between the pages lead to files that exist.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from amacs_server.tools_mcp.config import parse

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"<!--\s*(runnable(?::\s*slow)?|not runnable:\s*(?P<reason>\S.*?))\s*-->")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of its opening fence, from 1
    mark: str | None  # runnable, runnable: slow, not runnable: REASON, or None (unmarked)
    body: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def sh_blocks(page: Path) -> list[Block]:
    """The fenced sh blocks of PAGE, each with the mark on the line before it (blank lines skipped)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out = []
    for n, line in enumerate(lines):
        if line.strip() != "```sh":
            continue
        before = next((lines[i].strip() for i in range(n - 1, -1, -1) if lines[i].strip()), "")
        found = MARK.fullmatch(before)
        end = next(i for i in range(n + 1, len(lines)) if lines[i].strip() == "```")
        out.append(Block(page, n + 1, found.group(1) if found else None, "\n".join(lines[n + 1:end]) + "\n"))
    return out


BLOCKS = [block for page in PAGES for block in sh_blocks(page)]
RUNNABLE = [b for b in BLOCKS if b.mark and b.mark.startswith("runnable")]


def test_every_sh_block_says_whether_it_runs_here():
    unmarked = [b.id for b in BLOCKS if b.mark is None]
    assert not unmarked, f"mark these with <!-- runnable --> or <!-- not runnable: why -->: {unmarked}"
    assert RUNNABLE, "no runnable block left"


def fresh_environment(home: Path) -> dict[str, str]:
    """The caller's environment as a fresh machine's person has it: a HOME of its own, no keys."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_"))}
    env["HOME"] = str(home)
    return env


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_a_runnable_block_runs_as_written(block, tmp_path):
    if block.mark == "runnable: slow" and not os.environ.get("AMACS_DOC_SLOW"):
        pytest.skip("slow: AMACS_DOC_SLOW=1 runs it")
    if "scripts/mcp-test-servers.sh" in block.body and not (ROOT / ".mcp-servers" / "venv" / "bin").is_dir():
        if os.environ.get("CI"):
            pytest.fail("no .mcp-servers: ci-check.sh runs scripts/mcp-test-servers.sh before the tests")
        pytest.skip("installs from PyPI and npm: run scripts/mcp-test-servers.sh (ci-check.sh does)")
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.body], cwd=ROOT, env=fresh_environment(home),
                          capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{block.id} exited {done.returncode}:\n{block.body}\n{done.stdout}\n{done.stderr}"
    mcp = home / ".agent" / "mcp.json"
    if mcp.exists():  # an mcp.json a block wrote: AMACS reads it, and its servers are there to start
        config = parse(mcp.read_text(), mcp, {"HOME": str(home)})
        assert config.servers and not config.problems, (config.problems, mcp.read_text())
        for server in config.servers.values():
            assert server.command and os.access(server.command, os.X_OK), server


def test_the_relative_links_of_the_pages_lead_to_files():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if not re.match(r"[a-z]+:", target) and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_the_mcp_example_names_no_command_this_machine_lacks():
    page = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    assert "uvx" not in page
    example = json.loads(re.search(r"```json\n(\{\n  \"mcpServers\".*?)\n```", page, re.S).group(1))
    assert all(s.get("command", "/").startswith("/path/to/amacs/.mcp-servers/venv/bin/")
               for s in example["mcpServers"].values() if "command" in s), example
