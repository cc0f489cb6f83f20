"""The shipped demo model (``amacs_server/demo_model.py``) as the tests' fake serves it.

Tests answer with :func:`answer` through :class:`tests.fake_anthropic.FakeAnthropic`, whose
requests they read back; ``./amacs --demo`` serves the same script from the AMACS server.
"""

from __future__ import annotations

from typing import Any

from amacs_server import demo_model
from amacs_server.demo_model import has_eval_result, last_human
from tests.fake_anthropic import Reply

__all__ = ["answer", "has_eval_result", "last_human"]


def answer(body: dict[str, Any]) -> Reply:
    """The demo model's answer to BODY, as the fake's :class:`Reply`."""
    shipped = demo_model.answer(body)
    return Reply(shipped.text, chunks=shipped.chunks, chunk_delay=shipped.chunk_delay, delay=shipped.delay)
