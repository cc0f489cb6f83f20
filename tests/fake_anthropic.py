"""A fake Anthropic Messages API: real HTTP on 127.0.0.1, JSON and SSE streaming.

Tests script the replies and read back every request.  The real ``anthropic``
SDK talks to it through ``ANTHROPIC_BASE_URL``; nothing in the SDK is patched.

    fake = FakeAnthropic().start()
    fake.script(Reply(json.dumps({...})), Reply(status=529))
    ... ANTHROPIC_BASE_URL=fake.url ...
    fake.requests[0]["body"]["messages"]

Run alone (for benchmarks or by hand): ``python -m tests.fake_anthropic``
prints its URL and answers every request with a valid agent response.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from amacs_server.demo_model import SseWriter, split

DEFAULT_TEXT = json.dumps(
    {"reply": "ok", "mood": "calm", "confidence": 0.5, "monologue": "answered", "eval": None}
)


@dataclass
class Reply:
    """One scripted answer.

    ``text`` is the assistant's text; ``status`` other than 200 sends an API
    error of that status; ``delay`` waits before the headers; ``chunks`` splits
    the streamed text into that many deltas with ``chunk_delay`` between them;
    ``hold`` blocks the answer until the event is set (a hung model);
    ``stream_error`` (an API error type, e.g. ``overloaded_error``) breaks a
    stream off after half its deltas with an SSE ``error`` event, as the API
    does when it is overloaded mid-answer.  ``cut`` breaks a stream off after half
    its deltas: ``"end"`` ends the HTTP body there (no ``message_stop``),
    ``"reset"`` resets the connection (TCP RST).  ``retry_after`` is the header
    sent with a 429 or 529 (None: none).  ``thinking`` is the thinking text, sent before the
    text when the request asked for thinking (Anthropic: a signed thinking block; OpenAI
    protocol: ``reasoning_content`` deltas).  ``message`` is an error's own words (None:
    "scripted failure").  ``usage_at`` is where a stream counts its tokens: ``"start"`` as the
    API (input in ``message_start``, output in ``message_delta``), ``"delta"`` as LiteLLM (all
    of them in ``message_delta``, none in ``message_start``).
    """

    text: str = DEFAULT_TEXT
    status: int = 200
    delay: float = 0.0
    chunks: int = 1
    chunk_delay: float = 0.0
    usage: dict[str, int] = field(
        default_factory=lambda: {
            "input_tokens": 100,
            "output_tokens": 20,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    )
    hold: threading.Event | None = None
    stream_error: str | None = None
    cut: str | None = None
    retry_after: str | None = "0"
    thinking: str | None = None  # streamed first (a thinking block, or reasoning_content) when asked for
    stop: str | None = None  # why the answer ended, as sent (None: "end_turn", OpenAI's "stop")
    message: str | None = None
    usage_at: str = "start"


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class _Handler(SseWriter):  # HTTP/1.1, no Nagle (no 40 ms delayed-ACK stalls), JSON or SSE answers
    server: _Server

    def do_POST(self) -> None:
        try:
            self._post()
        except (BrokenPipeError, ConnectionResetError):
            # The client went away mid-answer (a test killed it, or the server closed its request).
            self.server.fake.cut_off.append(time.monotonic())

    def do_GET(self) -> None:
        """The Models API (``models.retrieve``: GET /v1/models/{id}), the OpenAI listing
        (GET /v1/models) and llama.cpp's ``/props``."""
        fake = self.server.fake
        route = self.path.split("?")[0].rstrip("/")
        fake.gets.append(route)
        if route.startswith("/v1/models/"):
            if fake.models_delay:
                time.sleep(fake.models_delay)
            info = fake.models.get(route.removeprefix("/v1/models/"))
            if info is None:
                self._send_json(404, _error_body(404, f"model: {route.removeprefix('/v1/models/')}"))
            else:
                self._send_json(200, info)
        elif route == "/v1/models":
            data = [{"id": mid, "object": "model", "owned_by": "fake", "created": 0,
                     **({"meta": {"n_ctx_train": fake.n_ctx}} if fake.n_ctx and fake.report_window else {})}
                    for mid in fake.models or {"fake": {}}]
            self._send_json(200, {"object": "list", "data": data})
        elif route == "/props" and fake.n_ctx and fake.report_window:
            self._send_json(200, {"default_generation_settings": {"n_ctx": fake.n_ctx}})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def _post(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send_json(400, _error_body(400, "body is not JSON"))
            return
        fake = self.server.fake
        record = {
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
            "time": time.time(),
        }
        route = self.path.rstrip("/")
        if route not in ("/v1/messages", "/v1/chat/completions"):
            self._send_json(404, _error_body(404, f"no route {self.path}"))
            return
        if not (self.headers.get("x-api-key") or self.headers.get("authorization")):
            fake.record(record)
            self._send_json(401, _error_body(401, "missing x-api-key or authorization header"))
            return
        refusal = fake.refusal(route, body)
        if refusal is None and route == "/v1/messages" and fake.strict:
            invalid = sdk_refusal(body)
            refusal = None if invalid is None else (400, _error_body(400, invalid))
        if refusal is not None:
            fake.record(record)
            status, payload = refusal
            self._send_json(status, payload)
            return
        if route == "/v1/chat/completions" and is_usage_probe(body):
            fake.probes.append(record)  # a server answers it whatever the script says next
            self._answer_chat(body, Reply("ok"))
            return
        reply = fake.next_reply(body)
        fake.record(record)
        if route == "/v1/messages":
            reply = fake.constrained(body, reply)
        if reply.hold is not None:
            reply.hold.wait(300)
        if reply.delay:
            self._sleep_watching(reply.delay)
        if route == "/v1/chat/completions":
            self._answer_chat(body, reply)
        elif reply.status != 200:
            self._send_json(reply.status, _error_body(reply.status, reply.message or "scripted failure"),
                            retry_after=reply.retry_after)
        elif body.get("stream"):
            self._send_stream(body, reply)
        else:
            self._send_json(200, _message(body, reply, reply.text))

    def _sleep_watching(self, seconds: float) -> None:
        """Sleep SECONDS before answering, as a slow model does; a client that closes its
        connection meanwhile ends the answer (ConnectionResetError), as a real server notices."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
            if readable:
                if not self.connection.recv(1, socket.MSG_PEEK):
                    raise ConnectionResetError("the client closed the connection before the answer")
                time.sleep(min(left, 0.05))  # bytes of a next request: not a close

    def _answer_chat(self, body: dict[str, Any], reply: Reply) -> None:
        """The OpenAI chat-completions protocol, JSON or streamed (with usage when asked)."""
        if reply.status != 200:
            self._send_json(reply.status, {"error": {"message": reply.message or "scripted failure",
                                                     "type": "server_error"}}, retry_after=reply.retry_after)
            return
        fake = self.server.fake
        reply = fake.constrained_chat(body, reply)
        usage = {"prompt_tokens": reply.usage["input_tokens"], "completion_tokens": reply.usage["output_tokens"],
                 "total_tokens": reply.usage["input_tokens"] + reply.usage["output_tokens"]}
        base = {"id": "chatcmpl-fake", "created": 0, "model": body.get("model", "fake")}
        thinks = reply.thinking if body.get("reasoning_effort") else None
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply.text, **({"reasoning_content": thinks} if thinks else {})}
            self._send_json(200, {**base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "finish_reason": reply.stop or "stop"}]})
            return
        self._start_stream(cache_control=False)
        chunk = {**base, "object": "chat.completion.chunk"}
        too_long = fake.chat_too_long(body)
        if too_long is not None and fake.window_stream_cut:  # llama-cpp-python: 200, a first chunk, then cut
            self._chunk(("data: " + json.dumps({**chunk, "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
                + "\n\n").encode())
            self._chunk(b"")
            return
        if too_long is not None:  # llama.cpp: 200 OK, then the error inside the stream
            self._chunk(("data: " + json.dumps({"error": {"message": too_long, "type": "server_error"}})
                         + "\n\n").encode())
            self._chunk(b"")
            return
        if thinks:
            self._chunk(("data: " + json.dumps({**chunk, "choices": [
                {"index": 0, "delta": {"reasoning_content": thinks}, "finish_reason": None}]}) + "\n\n").encode())
        for piece in _split(reply.text, reply.chunks):
            self._chunk(("data: " + json.dumps({**chunk, "choices": [
                {"index": 0, "delta": {"content": piece}, "finish_reason": None}]}) + "\n\n").encode())
            if reply.chunk_delay:
                time.sleep(reply.chunk_delay)
        self._chunk(("data: " + json.dumps({**chunk, "choices": [
            {"index": 0, "delta": {}, "finish_reason": reply.stop or "stop"}]}) + "\n\n").encode())
        if (body.get("stream_options") or {}).get("include_usage") and fake.openai_stream_usage:
            self._chunk(("data: " + json.dumps({**chunk, "choices": [], "usage": usage}) + "\n\n").encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None, *,
                   retry_after: str | None = "0") -> None:
        throttled = (status == 529 or status == 429) and retry_after is not None
        super()._send_json(status, payload, {"request-id": "req_fake", **(headers or {}),
                                             **({"retry-after": retry_after} if throttled else {})})

    def _send_stream(self, body: dict[str, Any], reply: Reply) -> None:
        self._start_stream()
        start = _message(body, reply, "")
        start["usage"] = ({k: 0 for k in reply.usage} if reply.usage_at == "delta"
                          else dict(reply.usage, output_tokens=1))
        self._event("message_start", {"type": "message_start", "message": start})
        index = 0
        if reply.thinking and body.get("thinking", {}).get("type") in ("adaptive", "enabled"):
            self._event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                "type": "thinking", "thinking": "", "signature": ""}})
            for piece in _split(reply.thinking, max(1, reply.chunks)):
                self._event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                    "type": "thinking_delta", "thinking": piece}})
            self._event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                "type": "signature_delta", "signature": signature(reply.thinking)}})
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
            index = 1
        self._event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        )
        sent = 0
        pieces = _split(reply.text, reply.chunks)
        for n, piece in enumerate(pieces):
            if reply.stream_error is not None and n == len(pieces) // 2:
                self._event("error", {"type": "error", "error": {"type": reply.stream_error,
                                                                  "message": "scripted mid-stream failure"}})
                self._chunk(b"")
                return
            if reply.cut is not None and n == len(pieces) // 2 and n > 0:
                self._break_off(reply.cut)
                return
            at = time.time()  # before the write: the reader may be scheduled before the writer returns
            self._event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
            )
            sent += len(piece)
            self.server.fake.chunk_log.append((at, sent))
            if reply.chunk_delay:
                time.sleep(reply.chunk_delay)
        self._event("content_block_stop", {"type": "content_block_stop", "index": index})
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop or "end_turn", "stop_sequence": None},
                "usage": (dict(reply.usage) if reply.usage_at == "delta"
                          else {"output_tokens": reply.usage.get("output_tokens", 0)}),
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        self._chunk(b"")


    def _break_off(self, how: str) -> None:
        """End the stream mid-answer: the body ends (``end``) or the connection resets (``reset``)."""
        if how == "end":
            self._chunk(b"")
            return
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()  # with linger 0: a TCP RST, as a dropped connection
        self.close_connection = True


_split = split


def _message(body: dict[str, Any], reply: Reply, text: str) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": [{"type": "text", "text": text}],
        "stop_reason": reply.stop or "end_turn",
        "stop_sequence": None,
        "usage": dict(reply.usage),
    }


def is_usage_probe(body: dict[str, Any]) -> bool:
    """BODY is the one-token streamed call that asks whether a server's streams count tokens."""
    return (body.get("max_tokens") == 1 and body.get("stream") is True
            and body.get("messages") == [{"role": "user", "content": "hi"}])


def _error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a pool of 50 opens 50 connections at once
    fake: FakeAnthropic


class FakeAnthropic:
    """The fake API server; scripted replies are served in order, then the default."""

    def __init__(self, default: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque()
        self._default = default or (lambda _body: Reply())
        self.requests: list[dict[str, Any]] = []
        # AMACS's one-token question whether streams carry usage (OpenAIBackend): kept apart
        # from the turns' requests, and answered without taking a scripted reply.
        self.probes: list[dict[str, Any]] = []
        self.cut_off: list[float] = []  # when a client closed its connection mid-answer (time.monotonic())
        self.chunk_log: list[tuple[float, int]] = []  # (wall time its write began, characters sent) per streamed delta
        # The Models API: model id -> its ModelInfo (model_info()); a model named here is held to
        # what it says it accepts (400 otherwise), and its replies follow a schema asked for.
        self.models: dict[str, dict[str, Any]] = {}
        self.gets: list[str] = []  # the GET routes asked, in order
        self.models_delay = 0.0  # seconds the Models API takes to answer (a slow network)
        self.window: int | None = None  # the Messages API window of a model not in `models' (not reported)
        # The OpenAI protocol, as a local server speaks it: parameters it refuses (400), the
        # response_format types it takes (None: all), its context window (n_ctx; None: none)
        # and whether it reports it (/v1/models meta, /props); over the window, llama.cpp's
        # error inside a 200 stream (window_error_in_stream) or its 400.
        self.openai_refuses: set[str] = set()
        self.openai_formats: set[str] | None = None
        self.n_ctx: int | None = None
        self.report_window = True
        self.window_error_in_stream = True
        self.window_stream_cut = False  # over the window, a 200 stream cut after its first chunk
        # Every Messages API request held to the SDK's own request types, unknown keys refused
        # at every level with the API's 400 (sdk_refusal): what the real API does.
        self.strict = True
        self.validation_as_500 = False  # a refused request field answered 500, as llama-cpp-python does
        # Whether a stream ends with its usage when asked (stream_options.include_usage): False as
        # llama-cpp-python's server (0.3.36), which counts tokens only in answers not streamed.
        self.openai_stream_usage = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def reset(self) -> None:
        """Forget every request and script, and serve as a new fake does (one fake for many tests)."""
        fresh = FakeAnthropic.__new__(FakeAnthropic)
        kept = {"_server", "_lock", "_thread"}
        with self._lock:
            self._script.clear()
        FakeAnthropic.__init__(fresh)  # a fresh fake's settings; its own server is closed unused
        fresh._server.server_close()
        for name, value in vars(fresh).items():
            if name not in kept:
                setattr(self, name, value)

    @property
    def url(self) -> str:
        """Base URL to give the SDK (``ANTHROPIC_BASE_URL``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeAnthropic:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def script(self, *replies: Reply) -> None:
        """Queue REPLIES to be served in order."""
        with self._lock:
            self._script.extend(replies)

    def respond_with(self, default: Callable[[dict[str, Any]], Reply]) -> None:
        """Answer requests past the script with DEFAULT(request body)."""
        self._default = default

    def next_reply(self, body: dict[str, Any]) -> Reply:
        """The next scripted reply, else the default for BODY."""
        with self._lock:
            if self._script:
                return self._script.popleft()
        return self._default(body)

    def refusal(self, route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """The 400 (or 422) the API answers BODY with, as it does, or None: what a model named in
        :attr:`models` does not accept, a prompt over its window; on the OpenAI protocol, a
        parameter in :attr:`openai_refuses` or a response_format type it does not take."""
        if route == "/v1/chat/completions":
            for param in sorted(self.openai_refuses):
                if param in body:
                    return 400, {"error": {"message": f"Unrecognized request argument supplied: {param}",
                                           "type": "invalid_request_error", "param": param, "code": None}}
            kind = (body.get("response_format") or {}).get("type")
            if kind is not None and self.openai_formats is not None and kind not in self.openai_formats:
                expected = " or ".join(f"'{f}'" for f in sorted(self.openai_formats))
                if self.validation_as_500:  # llama-cpp-python: its handler makes it an internal error
                    return 500, {"error": {"message": "1 validation error:\n  {'type': 'literal_error', 'loc': "
                                                      f"('body', 'response_format', 'type'), 'msg': \"Input should "
                                                      f"be {expected}\"}}", "type": "internal_server_error",
                                           "param": None, "code": None}}
                return 422, {"detail": [{"type": "literal_error", "loc": ["body", "response_format", "type"],
                                         "msg": f"Input should be {expected}"}]}
            message = self.chat_too_long(body)
            if message is not None and not (body.get("stream") and (self.window_error_in_stream
                                                                    or self.window_stream_cut)):
                # llama-cpp-python's words for it (its error formatter)
                return 400, {"error": {"message": f"This model's maximum context length is {self.n_ctx} tokens. "
                                                  f"However, you requested {prompt_tokens(body)} tokens",
                                       "type": "invalid_request_error", "param": "messages",
                                       "code": "context_length_exceeded"}}
            return None
        info = self.models.get(str(body.get("model")))
        if info is None:
            tokens = prompt_tokens(body)
            if self.window is not None and tokens > self.window:
                return 400, _error_body(400, f"prompt is too long: {tokens} tokens > {self.window} maximum")
            return None
        caps = info["capabilities"]
        most = info.get("max_tokens")
        if isinstance(most, int) and isinstance(body.get("max_tokens"), int) and body["max_tokens"] > most:
            return 400, _error_body(400, f"max_tokens: {body['max_tokens']} > {most}, which is the maximum "
                                         f"allowed number of output tokens for {body.get('model')}")
        thinking = (body.get("thinking") or {}).get("type")
        if thinking in ("adaptive", "enabled", "disabled") and not caps["thinking"]["types"][thinking]["supported"]:
            return 400, _error_body(400, f"thinking.type: '{thinking}' is not supported for this model")
        output = body.get("output_config") or {}
        effort = output.get("effort")
        if effort is not None and not (caps["effort"]["supported"] and caps["effort"][effort]["supported"]):
            return 400, _error_body(400, f"output_config.effort: effort '{effort}' is not supported by this model")
        if "format" in output and not caps["structured_outputs"]["supported"]:
            return 400, _error_body(400, "output_config.format: structured outputs are not supported by this model")
        for message in body.get("messages") or ():
            for block in message["content"] if isinstance(message.get("content"), list) else ():
                if block.get("type") == "thinking" and block.get("signature") != signature(block.get("thinking", "")):
                    return 400, _error_body(400, "Invalid `signature` in `thinking` block")
        tokens = prompt_tokens(body)
        if info.get("max_input_tokens") and tokens > info["max_input_tokens"]:
            return 400, _error_body(400, f"prompt is too long: {tokens} tokens > {info['max_input_tokens']} maximum")
        return None

    def chat_too_long(self, body: dict[str, Any]) -> str | None:
        """llama.cpp's words when BODY's prompt is over :attr:`n_ctx`, or None."""
        tokens = prompt_tokens(body)
        if self.n_ctx is not None and tokens > self.n_ctx:
            return f"Requested tokens ({tokens}) exceed context window of {self.n_ctx}"
        return None

    def constrained(self, body: dict[str, Any], reply: Reply) -> Reply:
        """REPLY as a model held to ``output_config.format`` gives it: its text when that follows
        the schema, else the text made into a valid response (constrained decoding cannot fail)."""
        fmt = (body.get("output_config") or {}).get("format")
        if fmt is None or str(body.get("model")) not in self.models:
            return reply
        return _follow(fmt["schema"], reply)

    def constrained_chat(self, body: dict[str, Any], reply: Reply) -> Reply:
        """REPLY held to the chat request's ``response_format`` schema, when the fake serves one."""
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema")
        if schema is None or self.openai_formats is None:
            return reply
        return _follow(schema, reply)

    def record(self, request: dict[str, Any]) -> None:
        """Keep REQUEST for the test to inspect."""
        with self._lock:
            self.requests.append(request)

    def wait_for_requests(self, count: int, timeout: float = 30.0) -> bool:
        """Wait until COUNT requests have arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return True
            time.sleep(0.01)
        return False

    def api_key_of(self, index: int) -> str | None:
        """The key request INDEX carried, from whichever header the SDK used."""
        headers = self.requests[index]["headers"]
        if "x-api-key" in headers:
            return headers["x-api-key"]
        auth = headers.get("authorization", "")
        return auth.removeprefix("Bearer ") or None

    def user_texts(self) -> list[str]:
        """The context of each request: its user messages, oldest first, joined as the server
        joins a conversation (``MESSAGE_BREAK``).  The newest tick is at the end."""
        from amacs_server.context.assemble import MESSAGE_BREAK

        out = []
        for req in self.requests:
            texts = []
            for message in req["body"]["messages"]:
                if message["role"] != "user":
                    continue
                content = message["content"]
                texts.append(content if isinstance(content, str) else "\n\n".join(b["text"] for b in content))
            out.append(MESSAGE_BREAK.join(texts))
        return out


# -- the SDK's request types, with unknown keys refused at every level --------------------

# The sampling fields the API takes that the SDK (2.x) has no parameters for: sent through
# ``extra_body``, merged into the body's top level.
API_SAMPLING = {"temperature": float, "top_p": float, "top_k": int}

_ADAPTERS: dict[Any, Any] = {}


def _adapter(tp: Any) -> Any:
    from pydantic import TypeAdapter

    if tp not in _ADAPTERS:
        _ADAPTERS[tp] = TypeAdapter(tp)
    return _ADAPTERS[tp]


def extra_keys(value: Any, tp: Any, where: str = "") -> str | None:
    """Where VALUE has a key TP's TypedDicts do not declare, as the API says it (``PATH: Extra
    inputs are not permitted``), or where no alternative of a union takes it; None: none."""
    import collections.abc
    import types
    import typing

    import typing_extensions
    from pydantic import BaseModel, ValidationError

    origin = typing_extensions.get_origin(tp)
    if origin in (typing.Required, typing.NotRequired, typing.Annotated, typing_extensions.Required,
                  typing_extensions.NotRequired, typing_extensions.Annotated):
        return extra_keys(value, typing_extensions.get_args(tp)[0], where)
    if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(value, dict):
        # A response type the SDK also takes as a request block (its models allow extra keys).
        hints = {field.alias or name: field.annotation for name, field in tp.model_fields.items()}
    elif typing_extensions.is_typeddict(tp) and isinstance(value, dict):
        hints = typing_extensions.get_type_hints(tp)
    else:
        hints = None
    if hints is not None:
        for key in value:
            if key not in hints:
                return f"{where}.{key}".lstrip(".") + ": Extra inputs are not permitted"
        for key, item in value.items():
            found = extra_keys(item, hints[key], f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    if origin in (typing.Union, types.UnionType):
        failures = []
        for alternative in typing.get_args(tp):
            try:
                _adapter(alternative).validate_python(value)
            except ValidationError as err:
                failures.append(str(err).splitlines()[0])
                continue
            found = extra_keys(value, alternative, where)
            if found is None:
                return None
            failures.append(found)
        return f"{where or 'body'}: no form of it is valid ({'; '.join(failures)})"
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence) and isinstance(value, list):
        for n, item in enumerate(value):
            found = extra_keys(item, typing.get_args(tp)[0], f"{where}.{n}")
            if found:
                return found
    return None


def sdk_refusal(body: dict[str, Any]) -> str | None:
    """The API's words refusing BODY, a Messages API request, or None when the SDK's own request
    type (``MessageCreateParamsStreaming`` or ``...NonStreaming``, by its ``stream``) takes it: every
    value of its type, no key it does not declare at any level (:data:`API_SAMPLING` aside)."""
    from anthropic.types.message_create_params import (
        MessageCreateParamsNonStreaming,
        MessageCreateParamsStreaming,
    )
    from pydantic import ValidationError

    tp = MessageCreateParamsStreaming if body.get("stream") else MessageCreateParamsNonStreaming
    params = {k: v for k, v in body.items() if k not in API_SAMPLING}
    for key, kind in API_SAMPLING.items():
        if key in body and not (isinstance(body[key], kind | int) and not isinstance(body[key], bool)):
            return f"{key}: Input should be a valid number"
    try:
        valid = _adapter(tp).validate_python(params)
        list(valid["messages"])  # an Iterable field validates as it is iterated
    except ValidationError as err:
        first = err.errors()[0]
        return f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
    return extra_keys(params, tp)


def signature(thinking: str) -> str:
    """The fake's signature of a thinking text (the API's is opaque; this one is checkable)."""
    import hashlib

    return "sig-" + hashlib.sha256(thinking.encode()).hexdigest()[:16]


def prompt_tokens(body: dict[str, Any]) -> int:
    """The fake's token count of a request's prompt: 4 characters a token."""
    def size(content: Any) -> int:
        if isinstance(content, str):
            return len(content)
        if isinstance(content, list):
            return sum(len(b.get("text") or b.get("thinking") or "") for b in content if isinstance(b, dict))
        return 0

    chars = size(body.get("system")) + sum(size(m.get("content")) for m in body.get("messages") or ())
    return chars // 4


def _follow(schema: dict[str, Any], reply: Reply) -> Reply:
    import jsonschema

    made = {"eval": None, "reply": None, "mood": "constrained", "confidence": 0.5,
            "monologue": "the text, held to the schema", "scratchpad": None, "done": None}
    try:
        data = json.loads(reply.text)
    except ValueError:
        data = {"reply": reply.text[:200] or "ok"}  # not JSON: what a constrained model would have said
    if not isinstance(data, dict):
        data = {"reply": str(data)}
    made.update({k: v for k, v in data.items() if k in made})  # the fields the schema has, each present
    try:
        jsonschema.validate(made, schema)
    except jsonschema.ValidationError:
        made = {**made, "reply": str(made["reply"]), "mood": str(made["mood"] or "constrained"),
                "confidence": 0.5, "scratchpad": None, "done": None, "eval": None}
        jsonschema.validate(made, schema)
    return Reply(**{**reply.__dict__, "text": json.dumps(made, ensure_ascii=False)})


def model_info(model_id: str, *, adaptive: bool = True, enabled: bool = False, structured: bool = True,
               effort: bool = True, max_input_tokens: int = 200_000, max_tokens: int = 64_000) -> dict[str, Any]:
    """A Models API answer (``ModelInfo``) for MODEL_ID with these capabilities, every key present."""
    def yes(value: bool) -> dict[str, bool]:
        return {"supported": value}

    thinks = adaptive or enabled
    return {
        "type": "model", "id": model_id, "display_name": model_id, "created_at": "2026-01-01T00:00:00Z",
        "lifecycle": "active", "max_input_tokens": max_input_tokens, "max_tokens": max_tokens,
        "capabilities": {
            "batch": yes(True), "citations": yes(True), "code_execution": yes(False),
            "context_management": {"supported": False, "clear_thinking_20251015": None,
                                   "clear_tool_uses_20250919": None, "compact_20260112": None},
            "effort": {"supported": effort, "low": yes(effort), "medium": yes(effort), "high": yes(effort),
                       "max": yes(effort), "xhigh": yes(False)},
            "image_input": yes(True), "pdf_input": yes(True),
            "server_tools": {"supported": False, "code_execution": yes(False), "web_search": yes(False)},
            "structured_outputs": yes(structured),
            "thinking": {"supported": thinks, "types": {"adaptive": yes(adaptive), "enabled": yes(enabled),
                                                         "disabled": yes(True), "between_tools": yes(False)}},
        },
    }


def agent_json(reply: str | None = None, *, eval: str | None = None, mood: str = "focused",  # noqa: A002
               confidence: float = 0.8, monologue: str = "thinking") -> str:
    """A valid agent response as JSON text."""
    return json.dumps(
        {"eval": eval, "reply": reply, "mood": mood, "confidence": confidence, "monologue": monologue},
        ensure_ascii=False,
    )


def main(argv: list[str] | None = None) -> None:
    """Serve until interrupted, printing the URL; ``--delay S`` answers each request after S seconds."""
    import argparse

    parser = argparse.ArgumentParser(description="A fake Anthropic Messages API on 127.0.0.1")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args(argv)
    serve(lambda _body: Reply(delay=args.delay))


# A request of the shape the server sends (a system block, cached content blocks, a reply schema).
WARM_UP = {"model": "claude-sonnet-4-5", "max_tokens": 16,
           "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
           "messages": [{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}},
                                                     {"type": "text", "text": "r"}]},
                        {"role": "assistant", "content": "a"},
                        {"role": "user", "content": [{"type": "text", "text": "q"}]}],
           "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}


def warm_up() -> None:
    """Build the request checks (:func:`sdk_refusal`: the SDK's types as pydantic adapters, ~1-3 s
    of CPU) before the first request: otherwise the first requests a fresh fake answers wait for
    them, and an experiment's first runs (or a judge's first judgements) took seconds where the rest
    took a fraction of one: a difference of the fake's, not of the runs."""
    for stream in (True, False):
        sdk_refusal({**WARM_UP, "stream": stream})


def serve(default: Callable[[dict[str, Any]], Reply]) -> None:
    """Answer every request with DEFAULT until interrupted, the URL printed first (for a person), once
    the fake answers at once (:func:`warm_up`)."""
    warm_up()
    fake = FakeAnthropic(default=default).start()
    print(fake.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
