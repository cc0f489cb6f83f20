"""The model's response as one declared pydantic model.

:mod:`.parse` validates a reply with it and generates the reply's JSON schema from it.

Its own module, imported by the first parse or request: pydantic (~100 ms to import) is not
on the server's path to its first hello."""

from __future__ import annotations

from typing import Annotated, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError

__all__ = ["Response", "ValidationError", "explain", "nested_model", "not_blank"]


def _big_int(value: object) -> object:
    """An integer too large for a float (``10**400`` in JSON) as the bound it passes."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return 1.0 if value > 0 else 0.0
    return value


def not_blank(text: str) -> str:
    """TEXT, refused when it is only white space."""
    if not text.strip():
        raise ValueError("must be a non-empty string")
    return text


def nested_model(annotation: object) -> type[BaseModel] | None:
    """The model a field declared as ANNOTATION holds (``Scratchpad | None``: Scratchpad), if any."""
    for kind in (annotation, *get_args(annotation)):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
    return None


# defer_build: the validators are built by the first response, not at import.
class Scratchpad(BaseModel):
    """The response's scratchpad note."""

    model_config = ConfigDict(strict=True, defer_build=True)

    heading: Annotated[str, AfterValidator(not_blank)]
    content: str
    thread: str | None = None


class Response(BaseModel):
    """The response as the core skill asks for it: the fields checked, others ignored."""

    model_config = ConfigDict(strict=True, defer_build=True)  # JSON numbers: an int is a float, but true is not 1

    # In the order the core skill shows them: a constrained model writes them in this order,
    # so the reply streams before the monologue.
    eval: str | None = None
    reply: str | None = None
    mood: Annotated[str, AfterValidator(not_blank)]
    confidence: Annotated[float, BeforeValidator(_big_int)]
    monologue: str
    scratchpad: Scratchpad | None = None
    done: bool | None = None


_WANTED = {"string_type": "must be a string", "float_type": "must be a number", "bool_type": "must be true or false",
           "model_type": "must be an object", "dict_type": "must be an object", "missing": "is missing"}

_NULLABLE = ({name for name, spec in Response.model_fields.items() if not spec.is_required()}
             | {f"scratchpad.{name}" for name, spec in Scratchpad.model_fields.items() if not spec.is_required()})


def explain(err: ValidationError) -> str:
    """What is wrong with the response, one field after another: ``confidence must be a number``."""
    said = []
    for error in err.errors(include_url=False):
        field = ".".join(str(step) for step in error["loc"])
        wanted = _WANTED.get(error["type"]) or error["msg"].removeprefix("Value error, ")
        said.append(f"{field} {wanted}{' or null' if field in _NULLABLE else ''}")
    return "; ".join(said)
