"""AMACS's Anthropic backend against a Messages API server nobody here wrote: LiteLLM's proxy.

``scripts/litellm.sh`` (run by ci-check.sh) installs ``litellm[proxy]`` into
``.venv-litellm``; these tests start it on 127.0.0.1, offline (its local price
list, no telemetry), with ``use_chat_completions_url_for_anthropic_messages``,
in front of the tests' fake OpenAI-compatible server (tests/fake_anthropic.py),
and point AMACS's Anthropic backend (``ANTHROPIC_BASE_URL``) at its
``POST /v1/messages``.  Nothing of LiteLLM is patched: what it sends upstream is
what the fake records.  tests/e2e/test_litellm_local.py puts llama.cpp's server
behind it instead.

Where LiteLLM itself is wrong, the test says so and checks that AMACS copes:
its ``GET /v1/models/claude-sonnet-5-5`` reports its price list's window for the
name (1,000,000 tokens), not the upstream model's; a wrong key is a 400 ("No
connected db."), not a 401.  Its own retries are off (``num_retries: 0``, as
docs/local-models.md advises in front of AMACS), so each of AMACS's attempts is
one upstream call.  Without ``.venv-litellm`` these tests skip, except on CI
(``CI`` set), where they fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from amacs_server.inference.anthropic_backend import AnthropicBackend
from amacs_server.inference.capabilities import CapabilityStore, TooLong, too_long
from amacs_server.inference.catalog import ModelCatalog
from amacs_server.inference.model_call import Ask, Read, Show, Status, model_call
from amacs_server.inference.parse import parse_response
from amacs_server.inference.request import build_request
from amacs_server.inference.retry import InferenceError, RetryPolicy
from amacs_server.local_model import free_port
from amacs_server.state.consciousness import ApiSettings
from tests.e2e.agent_fakes import run_elisp, say, send, session, wait_text
from tests.e2e.harness import ROOT, run_emacs
from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

pytestmark = pytest.mark.e2e

LITELLM_VENV = Path(os.environ.get("AMACS_LITELLM_VENV") or ROOT / ".venv-litellm")
MODEL = "claude-sonnet-5-5"
KEY = "sk-litellm-e2e-master-0123456789"  # the proxy's master key: what AMACS sends as its API key
SYSTEM = "You answer in JSON."
HI = [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]


def litellm_command() -> Path:
    """The proxy's command in .venv-litellm; skip (fail on CI) when it is missing."""
    command = LITELLM_VENV / "bin" / "litellm"
    if not command.exists():
        missing = f"no LiteLLM proxy in {LITELLM_VENV}: run scripts/litellm.sh (ci-check.sh does)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return command


def config(upstream: str, upstream_model: str) -> str:
    """The proxy's config: MODEL -> UPSTREAM's model, through chat/completions, no retries of its own."""
    return (f"model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: openai/{upstream_model}\n"
            f"      api_base: {upstream}\n      api_key: not-needed\n"
            "litellm_settings:\n  use_chat_completions_url_for_anthropic_messages: true\n"
            "  telemetry: false\n  num_retries: 0\n  request_timeout: 600\n"
            f"general_settings:\n  master_key: {KEY}\n")


@contextmanager
def litellm(folder: Path, upstream: str, upstream_model: str) -> Iterator[str]:
    """LiteLLM's proxy on a free port of 127.0.0.1 in front of UPSTREAM; yields its base URL."""
    command = litellm_command()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(config(upstream, upstream_model))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "LITELLM_"))}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False", NO_DOCS="True",
               LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES="True")
    port = free_port()
    log = folder / "litellm.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(command), "--config", str(folder / "config.yaml"), "--host", "127.0.0.1",
                                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=folder)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            assert proc.poll() is None, f"LiteLLM exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() - started < 300, f"LiteLLM did not answer in 300 s:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{url}/health/liveliness", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        print(f"LiteLLM up in {time.monotonic() - started:.1f} s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(upstream: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with litellm(tmp_path_factory.mktemp("litellm"), f"{upstream.url}/v1", "smollm2") as url:
        yield url


@pytest.fixture
def fake(upstream: FakeAnthropic, proxy: str) -> FakeAnthropic:
    """The upstream fake, as new for each test."""
    upstream.reset()
    return upstream


def chats(fake: FakeAnthropic) -> list[dict[str, Any]]:
    """What LiteLLM sent upstream, each a chat-completions body."""
    return [r["body"] for r in fake.requests if r["path"].endswith("/chat/completions")]


def call(proxy: str, request: dict[str, Any], *, stream: bool = True, key: str = KEY,
         retry: RetryPolicy | None = None) -> tuple[Any, list[str], str]:
    """REQUEST through AMACS's Anthropic backend at PROXY: its result (or InferenceError), the retry
    lines it said, and the text it streamed."""
    said: list[str] = []
    shown: list[str] = []

    async def go() -> Any:
        model = AnthropicBackend(key, proxy, 60, retry or RetryPolicy(attempts=3, base=0.05))
        try:
            return await model.complete(request, shown.append if stream else None, stream=stream,
                                        on_status=lambda r: said.append(r.text))
        except InferenceError as err:
            return err
        finally:
            await model.aclose()

    return asyncio.run(go()), said, "".join(shown)


def request(settings: ApiSettings | None = None) -> dict[str, Any]:
    return build_request(MODEL, SYSTEM, HI, settings or ApiSettings(max_tokens=300))


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "unstreamed"])
def test_a_call_streamed_and_not_through_litellm(proxy: str, fake: FakeAnthropic, stream: bool) -> None:
    """The answer's text, its stop reason and its usage, input included (LiteLLM puts a stream's input
    tokens in message_delta, zeros in message_start); sampling moved by the agent reaches the model."""
    fake.script(Reply(agent_json("four"), chunks=5, usage={"input_tokens": 321, "output_tokens": 17}))
    result, said, shown = call(proxy, request(ApiSettings(max_tokens=300, temperature=0.3)), stream=stream)
    assert not isinstance(result, InferenceError), result
    assert parse_response(result.text).reply == "four" and result.stop_reason == "end_turn"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (321, 17)
    assert shown == (result.text if stream else "") and said == []
    [sent] = chats(fake)
    assert sent["temperature"] == 0.3 and "extra_body" not in sent and bool(sent.get("stream")) == stream
    assert sent["messages"][0]["role"] == "system" and SYSTEM in json.dumps(sent["messages"][0])


def test_structured_output_through_litellm(proxy: str, fake: FakeAnthropic) -> None:
    """output_config.format becomes the upstream's response_format json_schema, and an answer held to
    it parses."""
    fake.openai_formats = {"json_schema"}  # the fake holds its answer to the schema it is given
    fake.script(Reply("not JSON at all"))
    result, _, _ = call(proxy, request())
    assert not isinstance(result, InferenceError), result
    parse_response(result.text)
    [sent] = chats(fake)
    assert sent["response_format"]["type"] == "json_schema"
    assert set(sent["response_format"]["json_schema"]["schema"]["properties"]) >= {"reply", "mood", "eval"}


def test_thinking_off_sends_no_reasoning_and_on_is_refused_by_litellm_then_dropped_once(
        proxy: str, fake: FakeAnthropic, tmp_path: Path) -> None:
    """LiteLLM turns thinking into the upstream's reasoning effort, and refuses it (400, naming
    ``reasoning.effort``) for a model its price list does not say reasons: AMACS drops thinking once,
    says so, and asks again; the next call sends none."""
    call(proxy, request(ApiSettings(max_tokens=300)))
    assert "reasoning_effort" not in chats(fake)[0]
    catalog = ModelCatalog(CapabilityStore.open(tmp_path / "caps.json"))
    catalog.use("anthropic", proxy, MODEL, None)
    settings = ApiSettings(max_tokens=2000, thinking=True)
    hi = Hi()

    async def turn() -> None:
        model = AnthropicBackend(KEY, proxy, 60, RetryPolicy(attempts=2, base=0.05))
        try:
            for _ in range(2):
                await hi.made(Ask[str](model, catalog, MODEL, SYSTEM, settings, 0))
        finally:
            await model.aclose()

    asyncio.run(turn())
    said = hi.said
    assert len(said) == 1 and "does not take reasoning_effort" in said[0], said
    assert all("reasoning_effort" not in body for body in chats(fake)) and len(chats(fake)) == 3


class Hi:
    """A call of HI through the one model call, driven as an agent drives it: the lines it would
    show the person kept (SAID), its answer's text taken as it is."""

    def __init__(self) -> None:
        self.said: list[str] = []

    async def made(self, ask: Ask[str]) -> None:
        async for step in model_call(ask):
            if isinstance(step, Show):
                step.messages = HI
            elif isinstance(step, Read):
                step.value = step.text
            elif isinstance(step, Status):
                self.said.append(step.line)


@pytest.mark.parametrize("status", [429, 529])
@pytest.mark.parametrize("retry_after", ["1", None], ids=["retry-after", "no-retry-after"])
def test_429_and_529_with_and_without_retry_after_are_retried(proxy: str, fake: FakeAnthropic, status: int,
                                                               retry_after: str | None) -> None:
    """The upstream is rate limited or overloaded, once: LiteLLM answers AMACS with the same status
    (a 529 as ``overloaded_error``), and AMACS retries once and gets the answer.  LiteLLM (1.108.7)
    drops the upstream's Retry-After: AMACS then waits its own backoff (the policy's, here ~0.1 s)."""
    fake.script(Reply(status=status, retry_after=retry_after, message="busy upstream"), Reply(agent_json("ok")))
    started = time.monotonic()
    result, said, _ = call(proxy, request(), stream=False, retry=RetryPolicy(attempts=3, base=0.2))
    assert not isinstance(result, InferenceError), result
    names = {429: "rate limited (429)", 529: "overloaded (529)"}
    assert len(chats(fake)) == 2 and len(said) == 1 and f"Model API {names[status]}; retrying" in said[0], said
    assert "in 1.0 s" in said[0] or re.search(r"in 0\.\d s", said[0]), said  # the header's wait, else ours
    assert time.monotonic() - started < 30


def test_a_wrong_key_fails_at_once_with_litellms_words(proxy: str, fake: FakeAnthropic) -> None:
    """LiteLLM answers a wrong key with a 400 ("No connected db."), where the API says 401: AMACS cannot
    tell it is the key, but fails at once (no retries, nothing sent upstream) with LiteLLM's words."""
    result, said, _ = call(proxy, request(), key="sk-wrong-key-0123456789")
    assert isinstance(result, InferenceError) and said == [] and chats(fake) == []
    assert result.status in (400, 401) and "\n" not in str(result)
    if result.status == 400:
        assert "No connected db" in str(result), result


def test_a_window_overflow_through_litellm_is_read_and_corrects_its_reported_window(
        proxy: str, fake: FakeAnthropic, tmp_path: Path) -> None:
    """Past an upstream's window, llama-cpp-python cuts its 200 stream; LiteLLM ends the stream
    empty. AMACS asks again unstreamed and hears the window in the 400 LiteLLM passes on; the
    1,000,000 tokens LiteLLM reports for the name (its price list's: wrong) give way to it."""
    fake.n_ctx, fake.window_stream_cut = 3, True  # the request is ~5 of the fake's tokens
    result, said, _ = call(proxy, request())
    assert isinstance(result, InferenceError), result
    assert said and "asking again without streaming" in said[0], said
    assert [bool(b.get("stream")) for b in chats(fake)] == [True, False]
    refusal = too_long(result.detail, result.status)
    assert refusal is not None and refusal.window == 3, result.detail
    catalog = ModelCatalog(CapabilityStore.open(tmp_path / "caps.json"))

    async def ask() -> dict[str, Any] | None:
        model = AnthropicBackend(KEY, proxy, 60)
        try:
            return await model.capabilities(MODEL)
        finally:
            await model.aclose()

    info = asyncio.run(ask())
    assert info is not None and info.get("max_input_tokens") == 1_000_000, info  # LiteLLM's price list's
    catalog.use("anthropic", proxy, MODEL, None)
    from amacs_server.inference.capabilities import from_model_info

    catalog.caps = from_model_info(info)
    assert catalog.window == 1_000_000
    assert catalog.learn_refusal(TooLong(refusal.window, refusal.tokens), 60) is not None
    assert catalog.window == 3


def test_a_turn_with_a_subagent_through_litellm(proxy: str, fake: FakeAnthropic, home: Path) -> None:
    """The whole stack: Emacs, the server, LiteLLM and the upstream. The primary's turn streams; it
    starts a task, whose unstreamed calls go through LiteLLM too; the primary says what it found."""
    def answer(body: dict[str, Any]) -> Reply:
        system, text = json.dumps(body["messages"][0]), json.dumps(body["messages"][1:])
        if re.search(r"You are task-\d+, a task", system):
            return say("Blue.")
        if "Blue." in text:
            return say("The task says: Blue.")
        if "last-eval-result" in text:
            return say("Started the task.")
        return run_elisp('(agent-task "researcher" "Name a colour")')

    fake.respond_with(answer)
    run = run_emacs(home, proxy, session(send("ask a task for a colour"), wait_text("The task says: Blue.")),
                    timeout=300, ANTHROPIC_API_KEY=KEY, AMACS_MODEL=MODEL)
    run.check()
    streamed = [bool(b.get("stream")) for b in chats(fake)]
    assert True in streamed and False in streamed, streamed  # the primary's streamed, the task's not
    events = [json.loads(line) for f in (home / "transcripts").glob("*.jsonl") for line in f.read_text().splitlines()]
    responses = [e for e in events if e["event"] == "model_response"]
    assert responses and all(e["data"]["usage"]["input_tokens"] > 0 for e in responses), responses
    assert not [e for e in events if e["event"] in ("model_error", "parse_error")]


def test_a_judge_through_litellm(proxy: str, fake: FakeAnthropic, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An experiment's judge asks its model unstreamed, with no reply schema, and reads its score."""
    from amacs_server.research.judge import Job, find_judge, judge_one, read_judge

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    fake.script(Reply(json.dumps({"score": 4, "rationale": "clear and right"})))
    judge = read_judge(find_judge("answer-quality"))
    outcome = judge_one(judge, Job("run-1", "Human: 2+2?\nAgent: 4", "anthropic", MODEL, proxy), tmp_path)
    assert outcome.status == "done", outcome
    score = json.loads((tmp_path / "run-1" / "judges" / judge.name / "score.json").read_text())
    assert (score["score"], score["rationale"]) == (4, "clear and right")
    [sent] = chats(fake)
    assert "response_format" not in sent and not sent.get("stream")
