"""Hello: Emacs's settings read and applied, and the status it answers with.

Emacs sends its defcustoms (`amacs-max-steps', `amacs-price-table', `amacs-eval-timeout') with
every hello, and again (the method ``settings``) before the person's next input when one of them
changed since; a wrong one refuses the hello (or the call) with what is wrong, before any is applied.  Settings
that are plainly valid (the defaults always are) are read here, by hand; anything else is
judged by the declared model in :mod:`.hello_settings` (pydantic), which accepts it or says
what is wrong.  So pydantic (~100 ms to import) is not on the path to the first hello, and the
one declaration still decides every value the hand check does not plainly accept."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import views
from .inference.pricing import Price

if TYPE_CHECKING:
    from .runtime import Runtime
    from .transport.emacs_face import EmacsFace
    from .transport.server import AmacsEPCServer

_KEYS = frozenset({"max_steps", "prices", "eval_timeout", "read_before_write"})
_ROW = ("model", "input", "output", "cache_write", "cache_read")


@dataclass(frozen=True)
class HelloSettings:
    """The settings of one hello, valid; None: Emacs did not say."""

    max_steps: int | None = None
    prices: dict[str, Price] | None = None
    eval_timeout: float | None = None
    read_before_write: bool | None = None  # the person's `amacs-read-before-write'


def read_settings(raw: object) -> HelloSettings:
    """RAW (the hello's settings plist, as :func:`~amacs_server.text.lisp.from_lisp` made it) as
    :class:`HelloSettings`, or :class:`~amacs_server.errors.Refused` saying what is wrong."""
    plain = plainly_valid(raw)
    if plain is not None:
        return plain
    return checked_settings(raw)


def checked_settings(raw: object) -> HelloSettings:
    """RAW judged by the declared model (:mod:`.hello_settings`, pydantic, imported now): as
    :class:`HelloSettings`, or :class:`~amacs_server.errors.Refused` saying what is wrong."""
    from .hello_settings import validated

    settings = validated(raw)
    if settings is None:
        return HelloSettings()
    prices = None if settings.prices is None else {
        p.model: Price(float(p.input), float(p.output), float(p.cache_write), float(p.cache_read))
        for p in settings.prices}
    timeout = None if settings.eval_timeout is None else float(settings.eval_timeout)
    guard = None if settings.read_before_write is None else settings.read_before_write == "on"
    return HelloSettings(settings.max_steps, prices, timeout, guard)


def _number(value: object) -> bool:
    """A plain elisp number: a float that is finite, an integer a float holds exactly (not t)."""
    if type(value) is float:
        return math.isfinite(value)
    return type(value) is int and abs(value) <= _EXACT


_EXACT = 2**53


def plainly_valid(raw: object) -> HelloSettings | None:
    """RAW as settings when each value is plainly of its declared type and range; None when it is
    not plain (wrong, or unusual), and the declared model must decide."""
    if raw is None:
        return HelloSettings()
    if type(raw) is not dict or not set(raw) <= _KEYS:
        return None
    steps, timeout, prices = raw.get("max_steps"), raw.get("eval_timeout"), raw.get("prices")
    guard = raw.get("read_before_write")
    if guard not in (None, "on", "off"):
        return None
    if steps is not None and not (type(steps) is int and steps > 0):
        return None
    if timeout is not None and not (_number(timeout) and timeout > 0):
        return None
    table: dict[str, Price] | None = None
    if prices is not None:
        if type(prices) is not list:
            return None
        table = {}
        for row in prices:
            if type(row) is not dict or set(row) != set(_ROW) or type(row["model"]) is not str:
                return None
            numbers = [row[key] for key in _ROW[1:]]
            if not all(_number(n) and n >= 0 for n in numbers):
                return None
            table[row["model"]] = Price(*(float(n) for n in numbers))
    return HelloSettings(steps, table, None if timeout is None else float(timeout),
                         None if guard is None else guard == "on")


def greet(server: AmacsEPCServer, rt: Runtime, face: EmacsFace) -> None:
    """Answer SERVER's hello for RT: apply the settings, say the status; and stop RT's work for an
    Emacs that goes away."""

    def apply(raw: object, at_hello: bool = False) -> None:
        settings = read_settings(raw)
        if settings.max_steps:
            rt.settings.max_steps = settings.max_steps
        if settings.prices is not None:
            # the prices given at start (AMACS_PRICES), Emacs's `amacs-price-table' over them
            rt.ledger.prices = {**{m: Price(*p) for m, p in rt.config.prices.items()}, **settings.prices}
        if settings.eval_timeout:
            rt.settings.eval_timeout = face.eval_timeout = settings.eval_timeout
        if settings.read_before_write is not None:  # on for good once on: only a new hello turns it off
            face.read_before_write = settings.read_before_write or (face.read_before_write and not at_hello)

    def hello(raw: object) -> dict[str, Any]:
        apply(raw, at_hello=True)
        return views.status(rt)

    rt.emacs_settings = apply  # the method `settings' (methods.py), a person's power, applies them so

    def emacs_gone() -> None:
        rt.turns.call_in_loop(rt.turns.emacs_gone)  # first: the turn and the subagents stop, no more model calls
        face.fail_all("Emacs disconnected during the eval")

    server.on_hello = hello
    server.on_emacs_gone = emacs_gone


__all__ = ["HelloSettings", "checked_settings", "greet", "plainly_valid", "read_settings"]
