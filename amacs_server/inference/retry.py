"""Retrying model calls that failed for reasons worth retrying, with backoff and jitter."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import re
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import AmacsError
from ..scrub import Scrubber

log = logging.getLogger("amacs")

T = TypeVar("T")


@dataclass(frozen=True)
class Retrying:
    """A model call failed and is tried again: TEXT says so to people, the rest is for programs."""

    text: str
    seconds: float  # until the next attempt
    attempt: int  # the next attempt's number, from 2
    attempts: int  # how many there are at most


class InferenceError(AmacsError, RuntimeError):
    """The model could not be called; the message says what to fix.

    ``status`` is the HTTP status the endpoint answered (None: none, or mid-stream) and
    ``detail`` the endpoint's own words: what a caller reads to adapt the request (a
    parameter the model refuses, a context too long)."""

    def __init__(self, message: str, status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail or message


class InvalidRequest(AmacsError):
    """The server refused the request as invalid but said so with a 500 (llama-cpp-python
    reports its request validation errors as internal errors, and a proxy in front of it
    passes them on): not worth retrying as is."""

    status_code = 422

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# A 500's words that say the request did not validate (pydantic's, FastAPI's, OpenAI's), not an outage.
VALIDATION_WORDS = ("validation error", "extra inputs are not permitted", "extra_forbidden", "input should be",
                    "field required", "unrecognized request argument", "invalid_request_error")
WORDS_MAX = 300  # characters of a server's own words kept in the line that says why a call failed


def server_words(err: Exception, scrub: Scrubber | None = None) -> str:
    """What the server said of ERR, in one trimmed line: its error's message (Anthropic's and
    OpenAI's ``error.message``, FastAPI's ``detail``), else the SDK's message; SCRUB's secrets
    replaced, at most WORDS_MAX characters, without trailing dots (a line adds its own)."""
    body: Any = getattr(err, "body", None)
    said: Any = None
    if isinstance(body, dict):
        inner = body.get("error")
        said = inner.get("message") if isinstance(inner, dict) else inner
        if said is None and "detail" in body:
            detail = body["detail"]
            said = "; ".join(f"{'.'.join(str(p) for p in d.get('loc') or ())}: {d.get('msg')}"
                             if isinstance(d, dict) else str(d) for d in detail) \
                if isinstance(detail, list) else detail
    if not said:
        said = getattr(err, "message", None) or str(err)
    text = " ".join(str(said).split())
    if scrub is not None:
        text = scrub.text(text)
    if len(text) > WORDS_MAX:
        text = text[:WORDS_MAX - 1].rstrip() + "…"
    return re.sub(r"[.\s]+$", "", text) or "(no words)"


def validation_refusal(err: Exception) -> InvalidRequest | None:
    """ERR, a 500, as the request refusal it is when its words say the request did not validate."""
    said = server_words(err)
    raw = f"{said} {getattr(err, 'body', '')}".lower()
    return InvalidRequest(said) if any(word in raw for word in VALIDATION_WORDS) else None


def _failure(err: Exception, explain: Callable[[Exception], str]) -> InferenceError:
    status = getattr(err, "status_code", None)
    body = getattr(err, "body", None)
    detail = " ".join(str(part) for part in (getattr(err, "message", None) or err, body or "") if part)
    failure = InferenceError(explain(err), status if isinstance(status, int) else None, detail)
    log.warning("model call failed (%s): %s", status if isinstance(status, int) else type(err).__name__, failure)
    return failure


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for the failures worth retrying (429, 5xx and 529, time-outs, lost connections)."""

    attempts: int = 5
    base: float = 0.5
    cap: float = 20.0

    def delay(self, attempt: int, retry_after: float | None, previous: float = 0.0) -> float:
        """Seconds before retry ATTEMPT (1-based): RETRY_AFTER when the server sent one; else
        exponential with equal jitter (between half and all of BASE * 2**(ATTEMPT-1), capped),
        never shorter than PREVIOUS, the wait before the attempt before: the waits only grow."""
        if retry_after is not None:
            return min(self.cap, max(0.0, retry_after))
        ceiling = min(self.cap, self.base * 2 ** (attempt - 1))
        return min(self.cap, max(previous, random.uniform(ceiling / 2, ceiling)))


# One agent's turn (the primary's, a subagent's run) retries at most TURN_RETRIES times and
# waits at most TURN_WAIT seconds in all between its calls' attempts, however many calls it makes:
# behind a proxy that retries each call itself, an outage costs a bounded number of calls.
TURN_RETRIES = 8
TURN_WAIT = 120.0


@dataclass
class TurnRetries:
    """The retries one turn may still make, and the seconds it may still wait for them."""

    retries: int = TURN_RETRIES
    seconds: float = TURN_WAIT


_TURN: contextvars.ContextVar[TurnRetries | None] = contextvars.ContextVar("amacs_turn_retries", default=None)


def new_turn() -> TurnRetries:
    """A turn begins in the running task: its calls share a fresh :class:`TurnRetries`."""
    budget = TurnRetries()
    _TURN.set(budget)
    return budget


def retry_after(err: Exception) -> float | None:
    """The server's Retry-After in seconds, if it sent one."""
    response = getattr(err, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def retried(attempt: Callable[[], AsyncGenerator[T, None]], policy: RetryPolicy,
                  retryable: tuple[type[Exception], ...], fatal: tuple[type[Exception], ...],
                  short: Callable[[Exception], str], explain: Callable[[Exception], str]) -> AsyncGenerator[T | Retrying, None]:
    """What each ATTEMPT yields, as it comes; a RETRYABLE failure is retried with backoff, and each
    retry yielded as a :class:`Retrying` (its one line) before the wait; FATAL ones fail at once."""
    wait = 0.0
    for number in range(1, policy.attempts + 1):
        try:
            async with aclosing(attempt()) as items:
                async for item in items:
                    yield item
            return
        except retryable as err:
            if number == policy.attempts:
                raise _failure(err, explain) from err
            wait = policy.delay(number, retry_after(err), wait)
            turn = _TURN.get()
            if turn is not None:
                if turn.retries <= 0 or turn.seconds < wait:
                    raise _failure(err, lambda e: f"{explain(e)} (this turn's retries are spent: "
                                                  f"{TURN_RETRIES} retries or {TURN_WAIT:.0f} s of waiting)") from err
                turn.retries -= 1
                turn.seconds -= wait
            log.info("model call failed (%s), retrying in %.1f s: %s", short(err), wait, server_words(err))
            when = f"in {wait:.1f} s" if wait >= 0.05 else "now"  # not "in 0.0 s"
            yield Retrying(f"Model API {short(err)}; retrying {when} (attempt {number + 1} of {policy.attempts})",
                           round(wait, 1), number + 1, policy.attempts)
            await asyncio.sleep(wait)
        except fatal as err:
            raise _failure(err, explain) from err
