"""The one boundary where Python values and Emacs Lisp values are converted.

Python ``None``, ``False`` and ``[]`` all become elisp
``nil``; elisp ``nil`` arrives as ``[]``; plists arrive as flat lists of
``Symbol``s.  Every conversion in either direction goes through this module.
"""

from __future__ import annotations

import math
from typing import Any

from sexpdata import String, Symbol, dumps, loads

from ..errors import AmacsError

LispValue = Any


class LispFormatError(AmacsError, ValueError):
    """Raised when Lisp data does not have the shape the caller expects."""


def kebab(name: str) -> str:
    """Return NAME with underscores as dashes: ``eval_timeout`` -> ``eval-timeout``."""
    return name.replace("_", "-")


def camel(name: str) -> str:
    """Translate a kebab-case name to camelCase: ``last-eval-result`` -> ``lastEvalResult``.

    The single kebab -> camel translation of the project: elisp names are kebab-case,
    the JSON the model reads and writes is camelCase.
    """
    head, *rest = name.replace("_", "-").split("-")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(value: Any) -> Any:
    """Return VALUE with every dict key translated by :func:`camel`, recursively."""
    if isinstance(value, dict):
        return {camel(str(k)): camel_keys(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [camel_keys(v) for v in value]
    return value


def from_lisp(value: LispValue) -> Any:
    """Convert a value decoded from Emacs into plain Python.

    ``nil`` (``[]``) becomes ``None``; ``t`` becomes ``True``; symbols become their
    names; a list whose first element is a keyword symbol is read as a plist and
    becomes a dict with snake_case keys.
    """
    if isinstance(value, list):
        if not value:
            return None
        if _is_plist(value):
            return plist_to_dict(value)
        return [from_lisp(v) for v in value]
    if isinstance(value, Symbol):
        name = value.value()
        return True if name == "t" else name
    return value


def list_from_lisp(value: LispValue) -> list[Any]:
    """Convert an elisp list (where ``nil`` means the empty list) into a Python list."""
    if value is None or value == []:
        return []
    if not isinstance(value, list):
        raise LispFormatError(f"expected a list, got {value!r}")
    return [from_lisp(v) for v in value]


def _is_plist(value: list[Any]) -> bool:
    return (
        len(value) % 2 == 0
        and isinstance(value[0], Symbol)
        and value[0].value().startswith(":")
        and all(isinstance(k, Symbol) and k.value().startswith(":") for k in value[::2])
    )


def plist_to_dict(value: LispValue) -> dict[str, Any]:
    """Read an elisp plist (``(:a 1 :b-c nil)``) as ``{"a": 1, "b_c": None}``."""
    if value is None or value == []:
        return {}
    if not isinstance(value, list) or len(value) % 2:
        raise LispFormatError(f"expected a plist, got {value!r}")
    out: dict[str, Any] = {}
    for key, val in zip(value[::2], value[1::2], strict=True):
        if not (isinstance(key, Symbol) and key.value().startswith(":")):
            raise LispFormatError(f"plist key must be a keyword, got {key!r}")
        out[key.value()[1:].replace("-", "_")] = from_lisp(val)
    return out


def to_lisp(value: Any) -> LispValue:
    """Convert plain Python into values sexpdata encodes as the elisp we mean.

    dicts become plists with keyword keys (snake_case -> kebab-case), ``None`` and
    ``False`` become ``nil``, ``True`` becomes ``t``.  Non-finite floats have no
    elisp reader syntax that EPC accepts, so they are refused.
    """
    if value is None or value is False:
        return []
    if value is True:
        return Symbol("t")
    if isinstance(value, dict):
        out: list[Any] = []
        for key, val in value.items():
            out.append(Symbol(":" + kebab(str(key))))
            out.append(to_lisp(val))
        return out
    if isinstance(value, list | tuple):
        return [to_lisp(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise LispFormatError(f"cannot send non-finite float {value!r} to Emacs")
    if isinstance(value, str | int | float | Symbol):
        return value
    raise LispFormatError(f"cannot send {type(value).__name__} to Emacs: {value!r}")


def lisp_dumps(value: LispValue) -> str:
    """VALUE (as :func:`to_lisp` gives it) printed as elisp, as ``sexpdata.dumps`` prints it.

    Strings, symbols, whole and float numbers and lists are printed here; anything else by
    sexpdata, whose generic dispatch costs ~60 us a message whatever its size (~8 here)."""
    kind = type(value)
    if kind is str or kind is String:
        return '"' + String.quote(value) + '"'
    if kind is Symbol:
        return Symbol.quote(value)
    if kind is list or kind is tuple:
        return "(" + " ".join([lisp_dumps(v) for v in value]) + ")"
    if kind is int or kind is float:
        return str(value)
    return dumps(value)


def encode_message(name: str, *args: LispValue) -> bytes:
    """One EPC message, ``(NAME ARGS...)``: its length in six hex digits, the form, a newline."""
    data = lisp_dumps([Symbol(name), *args]).encode("utf-8")
    return b"%06x" % (len(data) + 1) + data + b"\n"


def alist_dumps(mapping: dict[str, Any], indent: int = 0) -> str:
    """Print MAPPING as a readable elisp alist, one pair per line.

    Nested dicts become nested alists; ``None``/``False`` print as ``nil``;
    values that are symbols are given as :class:`sexpdata.Symbol`.
    """
    pad = " " * (indent + 1)
    lines = []
    for key, val in mapping.items():
        if isinstance(val, dict):
            inner = alist_dumps(val, indent + len(kebab(key)) + 5)
            lines.append(f"({kebab(key)} . {inner})")
        else:
            lines.append(f"({kebab(key)} . {_atom_dumps(val)})")
    return "(" + ("\n" + pad).join(lines) + ")"


def _atom_dumps(value: Any) -> str:
    if value is None or value is False:
        return "nil"
    if value is True:
        return "t"
    if isinstance(value, float) and not math.isfinite(value):
        raise LispFormatError(f"cannot print non-finite float {value!r}")
    return dumps(to_lisp(value))


def alist_loads(text: str) -> dict[str, Any]:
    """Read an elisp alist printed by :func:`alist_dumps` back into a dict."""
    try:
        data = loads(text)
    except Exception as err:  # sexpdata raises several types for bad input
        raise LispFormatError(f"not readable as elisp: {err}") from err
    return _alist_to_dict(data)


def _alist_to_dict(data: Any) -> dict[str, Any]:
    if data == []:
        return {}
    if not isinstance(data, list):
        raise LispFormatError(f"expected an alist, got {data!r}")
    out: dict[str, Any] = {}
    for pair in data:
        if not (isinstance(pair, list) and len(pair) >= 2 and _is_key(pair[0])):
            raise LispFormatError(f"expected (key . value), got {pair!r}")
        key = _key_name(pair[0]).replace("-", "_")
        if len(pair) == 3 and pair[1] == Symbol("."):
            out[key] = _alist_value(pair[2])
        else:  # (key . (a b)) prints as (key a b); a nested alist prints this way
            rest = pair[1:]
            out[key] = _alist_to_dict(rest) if _looks_like_alist(rest) else [
                _alist_value(v) for v in rest
            ]
    return out


def _is_key(value: Any) -> bool:
    """Symbols are keys; the reader turns the symbols ``t`` and ``nil`` into True and []."""
    return isinstance(value, Symbol) or value is True or value == []


def _key_name(value: Symbol | bool | list[Any]) -> str:
    """The name of a key :func:`_is_key` accepted."""
    if isinstance(value, Symbol):
        return value.value()
    return "t" if value is True else "nil"


def _looks_like_alist(items: list[Any]) -> bool:
    return bool(items) and all(
        isinstance(p, list) and len(p) >= 2 and _is_key(p[0]) and p[0] != [] for p in items
    )


def _alist_value(value: Any) -> Any:
    if value == []:
        return None
    if isinstance(value, Symbol):
        name = value.value()
        return True if name == "t" else name
    if isinstance(value, list) and _looks_like_alist(value):
        return _alist_to_dict(value)
    if isinstance(value, list):
        return [_alist_value(v) for v in value]
    return value
