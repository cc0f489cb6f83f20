"""AMACS's Anthropic backend against LiteLLM's /v1/messages in front of a real model: llama.cpp's
server with SmolLM2-135M (.venv-local, scripts/local-model.sh; see tests/e2e/test_local_model.py).

Between LiteLLM and llama.cpp stands a shim, only where llama-cpp-python (0.3.36) itself refuses
valid OpenAI input, each with a 500:

- a message whose content is a list of text parts (LiteLLM sends every Messages API content so):
  its request validation refuses one for a system or assistant message, and its chat template
  fails on one for a user message ("can only concatenate str (not "list") to str"): the shim
  joins the parts into one string;
- ``response_format: {"type": "json_schema", ...}`` (it takes only ``json_object`` with the schema
  beside it): the shim sends that form, with the same schema.

Everything else goes through as LiteLLM sent it, and back as llama.cpp answered.  The model is
slow (tens of tokens a second on 2 cores), so the tests send as little as they can: one turn
through the whole stack, and calls with a short prompt or one refused before it is read.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from amacs_server.inference.anthropic_backend import AnthropicBackend
from amacs_server.inference.capabilities import too_long
from amacs_server.inference.parse import parse_response
from amacs_server.inference.request import build_request
from amacs_server.inference.retry import InferenceError, RetryPolicy
from amacs_server.state.consciousness import ApiSettings
from tests.e2e.harness import run_emacs
from tests.e2e.test_litellm import KEY, MODEL, litellm
from tests.e2e.test_local_model import (  # noqa: F401
    CONTEXT,
    TURN_TIMEOUT,
    events,
    git_log,
    long_text,
    session,
)

pytestmark = pytest.mark.e2e


def shimmed(body: dict[str, Any]) -> dict[str, Any]:
    """BODY, a chat request, in the forms llama-cpp-python takes (see the module's words)."""
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, list):
            message["content"] = "\n\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        body["response_format"] = {"type": "json_object", "schema": (fmt.get("json_schema") or {}).get("schema")}
    return body


class _Shim(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ShimServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        pass

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        body = shimmed(json.loads(raw or b"{}"))
        self.server.seen.append(body)
        self._forward(json.dumps(body).encode())

    def _forward(self, data: bytes | None) -> None:
        up = urlsplit(self.server.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=TURN_TIMEOUT)
        conn.request(self.command, self.path, data, {"content-type": "application/json"})
        answer = conn.getresponse()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            while piece := answer.read1(65536):
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
        except (http.client.IncompleteRead, ConnectionError):
            pass  # llama.cpp cut its stream (a prompt past its window): cut ours too
        self.wfile.write(b"0\r\n\r\n")
        conn.close()


class _ShimServer(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    seen: list[dict[str, Any]]


@pytest.fixture(scope="module")
def shim(llama: str) -> Iterator[_ShimServer]:
    server = _ShimServer(("127.0.0.1", 0), _Shim)
    server.upstream, server.seen = llama.removesuffix("/v1"), []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def proxy(shim: _ShimServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    host, port = shim.server_address[:2]
    with litellm(tmp_path_factory.mktemp("litellm-local"), f"http://{host}:{port}/v1", "smollm2") as url:
        yield url


def complete(proxy: str, request: dict[str, Any], *, stream: bool) -> tuple[Any, list[str]]:
    said: list[str] = []

    async def go() -> Any:
        model = AnthropicBackend(KEY, proxy, TURN_TIMEOUT, RetryPolicy(attempts=2, base=0.1))
        try:
            return await model.complete(request, (lambda _t: None) if stream else None, stream=stream,
                                        on_status=lambda r: said.append(r.text))
        except InferenceError as err:
            return err
        finally:
            await model.aclose()

    return asyncio.run(go()), said


def test_an_unstreamed_structured_call_to_the_real_model_through_litellm(proxy: str, shim: _ShimServer) -> None:
    """A subagent's kind of call (unstreamed, the reply schema, a temperature the agent moved): the
    model's answer is held to the schema by llama.cpp's grammar and parses; LiteLLM counts its tokens."""
    settings = ApiSettings(max_tokens=200, temperature=0.5)
    request = build_request(MODEL, "You answer in JSON.", [{"role": "user", "content": "Say hello."}], settings)
    result, _ = complete(proxy, request, stream=False)
    assert not isinstance(result, InferenceError), result
    if result.stop_reason != "max_tokens":  # an answer cut at 200 tokens says nothing of the grammar
        parse_response(result.text)
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    sent = shim.seen[-1]
    assert sent["temperature"] == 0.5 and sent["response_format"]["type"] == "json_object"


def test_a_prompt_past_the_real_window_is_read_from_the_refusal_through_litellm(proxy: str) -> None:
    """Past llama.cpp's 8,192 tokens the stream ends with no answer (LiteLLM: end_turn, 0 tokens); AMACS
    asks again unstreamed and hears the window in the 400 (refused before the prompt is read: quick)."""
    request = build_request(MODEL, "You answer in JSON.", [{"role": "user", "content": long_text(600)}],
                            ApiSettings(max_tokens=100))
    result, said = complete(proxy, request, stream=True)
    assert isinstance(result, InferenceError), result
    assert said and "asking again without streaming" in said[0], said
    refusal = too_long(result.detail, result.status)
    assert refusal is not None and refusal.window == CONTEXT, result.detail


def test_a_turn_with_the_real_model_through_litellm(proxy: str, home: Path) -> None:
    """The whole stack: Emacs, the server, LiteLLM, the shim and llama.cpp. LiteLLM reports a window
    of 1,000,000 tokens for the name; the person's AMACS_CONTEXT_WINDOW (8,192) is what the context
    is fitted to. The streamed reply parses (constrained), is committed, and counts its input."""
    run = run_emacs(home, proxy, session("what is 2+2?"), timeout=TURN_TIMEOUT + 120, ANTHROPIC_API_KEY=KEY,
                    AMACS_MODEL=MODEL, AMACS_CONTEXT_WINDOW=str(CONTEXT),
                    AMACS_REQUEST_TIMEOUT=str(TURN_TIMEOUT)).check()
    evs = events(home)
    responses = [e for e in evs if e["event"] == "model_response" and e.get("tick") == 1]
    assert responses, run.shell
    usage = responses[-1]["data"]["usage"]
    assert 1000 < usage["input_tokens"] < CONTEXT and usage["output_tokens"] > 0, usage  # from message_delta
    assert [e for e in evs if e["event"] == "parsed" and e.get("tick") == 1]
    assert any(c.startswith("[TICK 1]") for c in git_log(home))
    assert not [e for e in evs if e["event"] == "model_error"], run.shell
