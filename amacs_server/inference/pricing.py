"""Dollar cost of a model call from the API's usage figures: known, or said to be unknown.

A model's price is the person's (their price table, or an experiment's ``[[models]]``
``price``), else a listed one (:data:`PRICES`, by exact name, longest prefix, or an
Anthropic model's family), else nothing when the model is served on this machine
(:func:`is_local`: free, and said so), else unknown: its cost is None, never a guess.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit


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


# List prices, per million tokens, for the models whose prices we know.  An Anthropic
# model not listed (claude-...) is priced by its family (opus, sonnet, haiku) from the
# newest listed member; any other model not listed has no known price.
PRICES: dict[str, Price] = {
    "claude-opus-4": Price(15.0, 75.0, 18.75, 1.50),
    "claude-opus-4-1": Price(15.0, 75.0, 18.75, 1.50),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-sonnet-4": Price(3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4-5": Price(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.10),
    "claude-3-5-haiku": Price(0.80, 4.0, 1.0, 0.08),
}
FREE = Price(0.0, 0.0, 0.0, 0.0)  # a model run on this machine


FAMILY_PRICES: dict[str, Price] = {
    "opus": PRICES["claude-opus-4-5"],
    "sonnet": PRICES["claude-sonnet-4-5"],
    "haiku": PRICES["claude-haiku-4-5"],
}


def is_local(base_url: str | None) -> bool:
    """Whether BASE_URL names a server on this machine (a loopback address: 127.0.0.1, ::1; or
    localhost): its calls cost nothing, unless the person prices its model."""
    if not base_url:
        return False
    try:
        host = urlsplit(base_url if "//" in base_url else f"//{base_url}").hostname
        return host == "localhost" or (host is not None and ipaddress.ip_address(host).is_loopback)
    except ValueError:  # not a URL, or a host name (not an address)
        return False


# The providers' own APIs, by backend: the host their SDKs call when given no base URL, and whose it is.
PROVIDERS: dict[str, tuple[str, str]] = {"anthropic": ("api.anthropic.com", "Anthropic"),
                                         "openai": ("api.openai.com", "OpenAI")}


def endpoint_host(backend: str, base_url: str | None) -> str:
    """The host (and port) BACKEND's calls go to: BASE_URL's (never its user and password), else its
    provider's own API's."""
    netloc = urlsplit(base_url if "//" in base_url else f"//{base_url}").netloc if base_url else ""
    return netloc.rpartition("@")[2] or PROVIDERS.get(backend, ("", ""))[0]


def providers_own(host: str | None) -> bool:
    """Whether HOST is a provider's own API: the one whose bill its list prices are."""
    return host in {own for own, _name in PROVIDERS.values()}


def list_priced_elsewhere(backend: str, model: str, host: str | None,
                          table: dict[str, Price] | None = None) -> str | None:
    """Where MODEL ran, in words (``127.0.0.1:35029, not Anthropic's API``), when its dollars are list
    prices for the tokens a server other than its provider's API reported (a fake, a proxy, a model of
    one's own under a listed name): an estimate, not that provider's bill.  None when they are the list
    prices of the provider's own API, the person's price (TABLE's), free, unknown, or HOST is unknown."""
    if host is None or providers_own(host) or listed_price(model) is None:
        return None
    if table and listed_price(model, table) is not listed_price(model):
        return None  # the person's own price: theirs to mean what they bill
    return f"{host}, not {PROVIDERS.get(backend, ('', backend))[1]}'s API"


def listed_price(model: str, table: dict[str, Price] | None = None) -> Price | None:
    """The price of MODEL that someone said: TABLE's (the person's, by longest prefix), else an exact
    listed entry, the longest listed prefix, or an Anthropic model's family; None: nobody said."""
    for prices in (table or {}, PRICES):
        own = [name for name in prices if model.startswith(name)]
        if own:
            return prices[model] if model in prices else prices[max(own, key=len)]
    if model.startswith("claude"):
        family = next((f for f in FAMILY_PRICES if f in model), None)
        if family:
            return FAMILY_PRICES[family]
    return None


def price_for(model: str, table: dict[str, Price] | None = None, local: bool = False) -> Price | None:
    """The price of MODEL: :func:`listed_price`, else free when it is served on this machine (LOCAL),
    else None: unknown (its cost is recorded as unknown, never guessed)."""
    said = listed_price(model, table)
    if said is not None:
        return said
    return FREE if local else None


def price_words(model: str, table: dict[str, Price] | None = None, local: bool = False) -> str:
    """Where MODEL's price comes from, for a person: ``listed``, ``yours``, ``free (this machine)``, ``unknown``."""
    if table and listed_price(model, table) is not listed_price(model):
        return "yours"
    if listed_price(model) is not None:
        return "listed"
    return "free (served on this machine)" if local else "unknown (no price listed or given)"


def cost(model: str, usage: Usage, table: dict[str, Price] | None = None, local: bool = False) -> float | None:
    """Dollars for USAGE on MODEL (prices from TABLE first, when given; free when LOCAL and not
    priced); None when MODEL's price is unknown."""
    p = price_for(model, table, local)
    if p is None:
        return None
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
    cost: float = 0.0  # of the calls whose price is known
    unpriced_calls: int = 0  # calls of a model whose price is unknown: their tokens count, their dollars not

    def add(self, usage: Usage, dollars: float | None) -> None:
        """Count one call (DOLLARS None: its price is unknown)."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        if dollars is None:
            self.unpriced_calls += 1
        else:
            self.cost += dollars

    def to_dict(self) -> dict[str, float | int]:
        """JSON/plist-ready, cost rounded to a millionth of a dollar."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens, "cache_write_tokens": self.cache_write_tokens,
                "cost": round(self.cost, 6), "unpriced_calls": self.unpriced_calls}


def dollars(amount: float) -> str:
    """AMOUNT as a person reads it: to the cent, or to a hundredth of a cent when cents would
    misstate it (a $0.003 limit said as "$0.00" told a newcomer the wrong limit)."""
    return f"${amount:.2f}" if round(amount, 2) == amount or amount >= 1 else f"${amount:.4f}"
