"""Arguments from Emacs, validated once, at the boundary.

Every method Emacs may call declares its arguments' types in its signature,
and :func:`checked` validates what arrives against them (already plain Python:
see :func:`~amacs_server.text.lisp.from_lisp`), strictly, with pydantic:
no ``"3"`` for 3 and no ``t`` for 1.  A wrong call is refused with one line
that names the method and the argument, as the agent sees it in its eval's
error: ``agent-task: PROMPT must be a string, got 3``.  Inside, functions
trust their types and check only their own rules.

An options plist is an :class:`Options` model whose fields are the keywords it
allows; an unknown keyword is refused by name, with the ones allowed.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic_core import ErrorDetails

from .errors import Refused

F = TypeVar("F", bound=Callable[..., Any])
# defer_build: a model's validator is built when it first validates, not when its
# class is made at import (start-up: ~4 ms a model before the port line).
STRICT = ConfigDict(strict=True, extra="forbid", frozen=True, arbitrary_types_allowed=True, defer_build=True)


class Options(BaseModel):
    """An options plist (``(:timeout 5 :tags ("a"))``): the fields are the keywords allowed."""

    model_config = STRICT

    @model_validator(mode="before")
    @classmethod
    def _known_keywords(cls, data: object) -> object:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(cls.model_fields))
            if unknown:
                raise ValueError(f"has unknown option(s) {_keywords(unknown)}; allowed: {_keywords(cls.model_fields)}")
        return data


def _keywords(names: Iterable[str]) -> str:
    return ", ".join(":" + name.replace("_", "-") for name in names)


def _non_nil(value: object) -> bool:
    return value is not None and value is not False


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


Flag = Annotated[bool, BeforeValidator(_non_nil)]
"""An elisp truth value: anything but nil is true."""

Text = Annotated[str, AfterValidator(_not_blank)]
"""A string with something in it besides white space."""


def _one_or_many(value: object) -> object:
    return [value] if isinstance(value, str) else value


Strings = Annotated[list[Text], BeforeValidator(_one_or_many)]
"""A string, or a list of strings: read as the list."""


def checked(context: int = 0, name: str | None = None) -> Callable[[F], F]:
    """Validate a method's arguments from Emacs against its signature before it runs.

    The first CONTEXT parameters (the runtime, the caller, ...) are the server's
    own, passed through unchecked; the rest are what Emacs sent.  Refusals name
    the method NAME (by default the function's name, in kebab case)."""

    def wrap(fn: F) -> F:
        spec = _signature(fn, context, name)

        @functools.wraps(fn)
        def method(*args: Any) -> Any:
            return fn(*args[:context], *spec.check(args[context:]))

        method._amacs_signature = spec  # type: ignore[attr-defined]  # for prepare
        return method  # type: ignore[return-value]

    return wrap


# One signature (and so one argument model) per definition, whatever closure it was made as:
# the methods are made afresh for each runtime (methods.publish), and a fork of the warm server
# finds the models its parent built (:func:`build_models`).
_SIGNATURES: dict[tuple[Any, ...], _Signature] = {}


def _signature(fn: Callable[..., Any], context: int, name: str | None) -> _Signature:
    """The :class:`_Signature` of FN's definition: its code and defaults and those of the function it
    wraps (one decorator's wrapper has one code for every tool it wraps: ``kit.refusals``), its
    name, CONTEXT and NAME."""
    inner = inspect.unwrap(fn)
    key = (fn.__code__, fn.__defaults__, inner.__code__, inner.__defaults__, fn.__qualname__, fn.__name__,
           context, name)
    try:
        found = _SIGNATURES.get(key)
    except TypeError:  # an unhashable default: a signature of its own
        return _Signature(fn, context, name)
    if found is None:
        found = _SIGNATURES.setdefault(key, _Signature(fn, context, name))
    return found


def build_models() -> None:
    """Build the argument model of every method defined so far (made by :func:`checked`).

    The warm server does it before it forks (``research.forkserver.preload``): a person's
    first input is then validated with no model made (submit's took 3-9 ms of a fork's CPU
    after RET, profiled in tmux at load 11)."""
    for spec in list(_SIGNATURES.values()):
        spec.model.model_rebuild()


def prepare(method: Callable[..., Any]) -> None:
    """Build the validator of METHOD (made by :func:`checked`) now, not at its first call.

    ``__main__`` builds hello's while Emacs connects, after the port line."""
    spec = getattr(method, "_amacs_signature", None)
    if isinstance(spec, _Signature):
        spec.model.model_rebuild()


class _Signature:
    """The arguments a method takes from Emacs, as one pydantic model made on first use."""

    def __init__(self, fn: Callable[..., Any], context: int, name: str | None) -> None:
        params = list(inspect.signature(fn).parameters.values())[context:]
        kinds = {inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD}
        if any(p.kind not in kinds or p.name.startswith("_") for p in params):  # pydantic: _name is private
            raise TypeError(f"{fn.__qualname__}: only positional parameters, not _named, can come from Emacs")
        self.method = name or fn.__name__.replace("_", "-")
        self.names = [p.name for p in params]
        self._fields: dict[str, Any] = {
            p.name: (p.annotation, ... if p.default is inspect.Parameter.empty else p.default) for p in params}
        self._module = fn.__module__
        self._qualname = fn.__qualname__

    @functools.cached_property
    def model(self) -> type[BaseModel]:
        # Annotations are strings (PEP 563); pydantic resolves them in the method's module.
        return create_model(f"{self._qualname}.arguments", __config__=STRICT, __module__=self._module,
                            **self._fields)

    def check(self, args: Sequence[Any]) -> list[Any]:
        """ARGS as the method's declared types, or :class:`Refused` saying what is wrong."""
        if len(args) > len(self.names):
            names = " ".join(n.upper().replace("_", "-") for n in self.names) or "no arguments"
            raise Refused(f"{self.method} takes {names}; got {len(args)} argument(s)")
        try:
            valid = self.model.model_validate(dict(zip(self.names, args, strict=False)))
        except ValidationError as err:
            raise Refused(f"{self.method}: {explain(err)}") from None
        return [getattr(valid, name) for name in self.names]


_TYPES = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
          "bool_type": "t or nil", "list_type": "a list", "dict_type": "a plist", "model_type": "a plist",
          "model_attributes_type": "a plist", "int_from_float": "an integer"}


def explain(err: ValidationError) -> str:
    """ERR as one line for the person or the agent: each wrong argument, what it must be, what came."""
    said: dict[str, list[ErrorDetails]] = {}
    for error in err.errors(include_url=False):
        said.setdefault(_where(error), []).append(error)
    return "; ".join(_sentence(where, errors) for where, errors in said.items())


def _where(error: ErrorDetails) -> str:
    """The argument an error is about: PROMPT, or :timeout in OPTS, or the item of a list."""
    head, *rest = error["loc"]
    parts = [str(head).upper().replace("_", "-")]
    for step in rest:
        if isinstance(step, int):
            parts.append(f"item {step}")
        elif step.isidentifier():  # a keyword of an options plist (not a union member's tag)
            keyword = f":{step.replace('_', '-')}"
            parts = [keyword] if len(parts) == 1 else [*parts, keyword]
    return " ".join(parts)


def _sentence(where: str, errors: list[ErrorDetails]) -> str:
    first = errors[0]
    if first["type"] == "missing":
        return f"{where} is required"
    if first["type"] == "value_error":  # our own rule: its message says it all
        return f"{where} {first['msg'].removeprefix('Value error, ')}"
    return f"{where} {must_be(errors)}"


def must_be(errors: list[ErrorDetails]) -> str:
    """What a value must be and what came, from its ERRORS (a union's several): ``must be a string, got 3``.

    The one wording of a wrong value: Emacs's arguments here, an experiment's spec too."""
    wanted = " or ".join(dict.fromkeys(_TYPES.get(e["type"]) or _rule(e) for e in errors))
    return f"must be {wanted}, got {shown(errors[0]['input'])}"


def _rule(error: ErrorDetails) -> str:
    """What a constraint asks, from pydantic's message ("Input should be less than 5")."""
    return error["msg"].removeprefix("Input should be ")


def shown(value: object) -> str:
    """VALUE as a message shows it: its repr, cut at 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"
