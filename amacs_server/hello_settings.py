"""Hello's settings as one declared model.

It judges every value :func:`~amacs_server.hello.plainly_valid` does not plainly accept, and says what is wrong in the words every method's refusal uses."""

from __future__ import annotations

from typing import Literal

from pydantic import NonNegativeFloat, PositiveFloat, PositiveInt

from .arguments import Options, checked


class PriceRow(Options):
    """One row of `amacs-price-table': a model's dollars per million tokens."""

    model: str
    input: NonNegativeFloat
    output: NonNegativeFloat
    cache_write: NonNegativeFloat
    cache_read: NonNegativeFloat


class Settings(Options):
    """What Emacs says at hello: its `amacs-max-steps', `amacs-price-table' and `amacs-eval-timeout'."""

    max_steps: PositiveInt | None = None
    prices: list[PriceRow] | None = None
    eval_timeout: PositiveFloat | None = None
    read_before_write: Literal["on", "off"] | None = None


@checked(name="hello")
def _validated(settings: Settings | None) -> Settings | None:
    return settings


def validated(raw: object) -> Settings | None:
    """RAW as :class:`Settings` (None: Emacs said none), or :class:`~amacs_server.errors.Refused`:
    ``hello: :prices item 0 ...``."""
    return _validated(raw)  # type: ignore[arg-type]  # what Emacs sent: checked validates it
