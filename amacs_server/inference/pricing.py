"""Dollar cost of a model call from the API's usage figures."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """Token counts reported by the API for one call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float


# Published list prices, per million tokens.  A model not listed costs as Sonnet.
PRICES: dict[str, Price] = {
    "claude-opus-4": Price(15.0, 75.0, 18.75, 1.50),
    "claude-opus-4-1": Price(15.0, 75.0, 18.75, 1.50),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-sonnet-4": Price(3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4-5": Price(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.10),
    "claude-3-5-haiku": Price(0.80, 4.0, 1.0, 0.08),
}
DEFAULT_PRICE = PRICES["claude-sonnet-4-5"]


def price_for(model: str) -> Price:
    """The price of MODEL: an exact entry, else the longest listed prefix, else Sonnet's."""
    if model in PRICES:
        return PRICES[model]
    matches = [name for name in PRICES if model.startswith(name)]
    return PRICES[max(matches, key=len)] if matches else DEFAULT_PRICE


def cost(model: str, usage: Usage) -> float:
    """Dollars for USAGE on MODEL."""
    p = price_for(model)
    return (
        usage.input_tokens * p.input
        + usage.output_tokens * p.output
        + usage.cache_write_tokens * p.cache_write
        + usage.cache_read_tokens * p.cache_read
    ) / 1_000_000
