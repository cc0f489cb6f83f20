"""Inference settings: the default model, prices, the request shape."""

import asyncio
import random

from anthropic._data import DEPRECATED_MODELS

from amacs_server.config import DEFAULT_MODEL, load_config
from amacs_server.inference.anthropic_backend import build_request
from amacs_server.inference.pricing import Usage, cost, price_for
from amacs_server.inference.retry import Retrying, RetryPolicy, retried
from amacs_server.state.consciousness import ApiSettings


def test_default_model_is_not_deprecated_by_the_sdk():
    assert DEFAULT_MODEL not in DEPRECATED_MODELS


def test_config_from_environment(tmp_path):
    c = load_config({"AMACS_HOME": str(tmp_path), "AMACS_MODEL": "claude-haiku-4-5", "ANTHROPIC_API_KEY": "sk-x"})
    assert (c.home, c.model, c.has_credentials) == (tmp_path, "claude-haiku-4-5", True)
    assert "sk-x" not in repr(c)
    assert not load_config({"AMACS_HOME": str(tmp_path)}).has_credentials


def test_cost_by_hand():
    usage = Usage(input_tokens=1000, output_tokens=200, cache_read_tokens=5000, cache_write_tokens=2000)
    # Sonnet: 3 in, 15 out, 0.30 cache read, 3.75 cache write, per million tokens.
    assert abs(cost("claude-sonnet-4-5", usage) - (3000 + 3000 + 1500 + 7500) / 1e6) < 1e-12
    assert price_for("claude-haiku-4-5-20251001") == price_for("claude-haiku-4-5")
    assert price_for("claude-opus-5-5") == price_for("claude-opus-4-5")  # by family


def test_request_caches_the_system_prompt_and_sends_sampling_only_when_changed():
    req = build_request("m", "SYSTEM", [{"role": "user", "content": "x"}], ApiSettings())
    assert req["system"] == [{"type": "text", "text": "SYSTEM", "cache_control": {"type": "ephemeral"}}]
    assert "extra_body" not in req and "thinking" not in req
    req = build_request("m", "S", [], ApiSettings(temperature=0.2))
    assert req["extra_body"] == {"temperature": 0.2}
    req = build_request("m", "S", [], ApiSettings(thinking=True, max_tokens=8192))
    assert req["thinking"]["type"] == "enabled" and req["max_tokens"] > req["thinking"]["budget_tokens"]


def test_dollars_never_misstate_a_limit_under_a_cent() -> None:
    """A $0.003 budget limit was said as "$0.00" (a newcomer's finding); whole cents stay as they were."""
    from amacs_server.inference.pricing import dollars

    assert dollars(0.003) == "$0.0030"
    assert dollars(0.02) == "$0.02"
    assert dollars(5) == "$5.00"
    assert dollars(12.345) == "$12.35"


def test_the_waits_between_retries_only_grow():
    """The retry line's waits never shrink: a newcomer saw 0.8 s, then 0.3 s, then 2.6 s (full
    jitter); and each stays within the attempt's backoff, its cap, or the server's Retry-After."""
    policy = RetryPolicy(attempts=6, base=0.5, cap=3.0)
    for seed in range(300):
        random.seed(seed)
        waits, wait = [], 0.0
        for attempt in range(1, policy.attempts):
            wait = policy.delay(attempt, None, wait)
            waits.append(wait)
        assert waits == sorted(waits), (seed, waits)
        assert all(w <= min(policy.cap, policy.base * 2 ** (n - 1)) for n, w in enumerate(waits, 1)), waits
    assert policy.delay(3, 0.2, 1.5) == 0.2  # the server's Retry-After is kept as it said

    said: list[Retrying] = []

    async def failing():
        raise ConnectionError("gone")
        yield  # an answer's pieces, none before it fails

    async def retrying() -> None:
        async for piece in retried(failing, fast, (ConnectionError,), (), lambda e: "connection failed", str):
            said.append(piece)

    fast = RetryPolicy(attempts=5, base=0.02)
    for seed in range(20):
        random.seed(seed)
        said.clear()
        try:
            asyncio.run(retrying())
        except Exception:  # noqa: BLE001 - the last attempt's failure
            pass
        seconds = [r.seconds for r in said]
        assert len(seconds) == 4 and seconds == sorted(seconds), (seed, seconds)
