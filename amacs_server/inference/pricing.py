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


# List prices, per million tokens, for the models whose prices we know.  A model
# not listed is priced by its family (opus, sonnet, haiku) from the newest
# listed member, else as Sonnet.
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
FREE = Price(0.0, 0.0, 0.0, 0.0)  # a model run on this machine


FAMILY_PRICES: dict[str, Price] = {
    "opus": PRICES["claude-opus-4-5"],
    "sonnet": PRICES["claude-sonnet-4-5"],
    "haiku": PRICES["claude-haiku-4-5"],
}


def price_for(model: str, table: dict[str, Price] | None = None) -> Price:
    """The price of MODEL: from TABLE (the person's, by longest prefix) if it has one, else an
    exact entry, the longest listed prefix, its family, else Sonnet's."""
    if table:
        own = [name for name in table if model.startswith(name)]
        if own:
            return table[max(own, key=len)]
    if model in PRICES:
        return PRICES[model]
    matches = [name for name in PRICES if model.startswith(name)]
    if matches:
        return PRICES[max(matches, key=len)]
    family = next((f for f in FAMILY_PRICES if f in model), None)
    return FAMILY_PRICES[family] if family else DEFAULT_PRICE


def cost(model: str, usage: Usage, table: dict[str, Price] | None = None) -> float:
    """Dollars for USAGE on MODEL (prices from TABLE first, when given)."""
    p = price_for(model, table)
    return (
        usage.input_tokens * p.input
        + usage.output_tokens * p.output
        + usage.cache_write_tokens * p.cache_write
        + usage.cache_read_tokens * p.cache_read
    ) / 1_000_000


@dataclass
class Tally:
    """Usage and dollars added up (a tick's, or the session's)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float = 0.0

    def add(self, usage: Usage, dollars: float) -> None:
        """Count one call."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.cost += dollars

    def to_dict(self) -> dict[str, float | int]:
        """JSON/plist-ready, cost rounded to a millionth of a dollar."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens, "cache_write_tokens": self.cache_write_tokens,
                "cost": round(self.cost, 6)}


def dollars(amount: float) -> str:
    """AMOUNT as a person reads it: to the cent, or to a hundredth of a cent when cents would
    misstate it (a $0.003 limit said as "$0.00" told a newcomer the wrong limit)."""
    return f"${amount:.2f}" if round(amount, 2) == amount or amount >= 1 else f"${amount:.4f}"
