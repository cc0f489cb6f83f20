"""Hello's settings as one declared model: it judges every value :func:`~amacs_server.hello.plainly_valid`
does not plainly accept, and says what is wrong in the words every method's refusal uses."""

from __future__ import annotations

from pydantic import NonNegativeFloat, PositiveFloat, PositiveInt

from .arguments import Options, checked
from .hello import HelloSettings
from .inference.pricing import Price


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


@checked(name="hello")
def _validated(settings: Settings | None) -> Settings | None:
    return settings


def checked_settings(raw: object) -> HelloSettings:
    """RAW as :class:`HelloSettings`, or :class:`~amacs_server.errors.Refused`: ``hello: :prices item 0 ...``."""
    settings = _validated(raw)  # type: ignore[arg-type]  # what Emacs sent: checked validates it
    if settings is None:
        return HelloSettings()
    prices = None if settings.prices is None else {
        p.model: Price(float(p.input), float(p.output), float(p.cache_write), float(p.cache_read))
        for p in settings.prices}
    timeout = None if settings.eval_timeout is None else float(settings.eval_timeout)
    return HelloSettings(settings.max_steps, prices, timeout)
