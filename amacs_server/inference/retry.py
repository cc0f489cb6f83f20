"""Retrying model calls that failed for reasons worth retrying, with backoff and jitter."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import AmacsError

T = TypeVar("T")


@dataclass(frozen=True)
class Retrying:
    """A model call failed and is tried again: TEXT says so to people, the rest is for programs."""

    text: str
    seconds: float  # until the next attempt
    attempt: int  # the next attempt's number, from 2
    attempts: int  # how many there are at most


StatusSink = Callable[[Retrying], None]


class InferenceError(AmacsError, RuntimeError):
    """The model could not be called; the message says what to fix.

    ``status`` is the HTTP status the endpoint answered (None: none, or mid-stream) and
    ``detail`` the endpoint's own words: what a caller reads to adapt the request (a
    parameter the model refuses, a context too long)."""

    def __init__(self, message: str, status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail or message


def _failure(err: Exception, explain: Callable[[Exception], str]) -> InferenceError:
    status = getattr(err, "status_code", None)
    body = getattr(err, "body", None)
    detail = " ".join(str(part) for part in (getattr(err, "message", None) or err, body or "") if part)
    return InferenceError(explain(err), status if isinstance(status, int) else None, detail)


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


def retry_after(err: Exception) -> float | None:
    """The server's Retry-After in seconds, if it sent one."""
    response = getattr(err, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def with_retries(call: Callable[[], Awaitable[T]], policy: RetryPolicy,
                       retryable: tuple[type[Exception], ...], fatal: tuple[type[Exception], ...],
                       short: Callable[[Exception], str], explain: Callable[[Exception], str],
                       on_status: StatusSink | None) -> T:
    """Run CALL; retry RETRYABLE failures, announcing each in one line; FATAL ones fail at once."""
    wait = 0.0
    for attempt in range(1, policy.attempts + 1):
        try:
            return await call()
        except retryable as err:
            if attempt == policy.attempts:
                raise _failure(err, explain) from err
            wait = policy.delay(attempt, retry_after(err), wait)
            if on_status is not None:
                when = f"in {wait:.1f} s" if wait >= 0.05 else "now"  # not "in 0.0 s"
                on_status(Retrying(f"Model API {short(err)}; retrying {when} "
                                   f"(attempt {attempt + 1} of {policy.attempts})",
                                   round(wait, 1), attempt + 1, policy.attempts))
            await asyncio.sleep(wait)
        except fatal as err:
            raise _failure(err, explain) from err
    raise AssertionError("unreachable")
