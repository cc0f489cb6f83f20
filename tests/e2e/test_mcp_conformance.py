"""The MCP conformance suite (@modelcontextprotocol/conformance) run against AMACS's MCP client.

In scope, and passing: ``initialize``, ``tools_call`` and ``sse-retry`` (streamable
HTTP: a stream closed by the server is resumed after its ``retry``, with
Last-Event-ID).  Out of scope (docs/mcp.md): ``elicitation-*`` (a server
asking the person for a form in the middle of a call: AMACS declines) and
``auth/*`` (OAuth flows: AMACS sends the headers mcp.json gives, e.g. a bearer
token from ${VAR}).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.mcp_servers import CONFORMANCE, ROOT, install

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", autouse=True)
def servers():
    install()


@pytest.mark.parametrize("scenario", ["initialize", "tools_call", "sse-retry"])
def test_the_core_client_scenarios_pass(scenario, tmp_path):
    client = f"{sys.executable} {ROOT / 'tests' / 'mcp_conformance_client.py'}"
    run = subprocess.run([str(CONFORMANCE), "client", "--command", client, "--scenario", scenario,
                          "-o", str(tmp_path)], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    assert "OVERALL: PASSED" in said and " 0 failed" in said


def test_elicitation_is_declined_so_its_scenario_fails_as_documented(tmp_path):
    """Out of scope, and said so: the suite's elicitation scenario fails, with the server told
    that elicitation is not supported (the call is not left hanging)."""
    client = f"{sys.executable} {ROOT / 'tests' / 'mcp_conformance_client.py'}"
    run = subprocess.run([str(CONFORMANCE), "client", "--command", client, "--scenario",
                          "elicitation-sep1034-client-defaults", "-o", str(tmp_path)],
                         capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert run.returncode != 0
    assert "Elicitation not supported" in run.stdout + run.stderr
