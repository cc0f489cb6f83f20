# The part of jsonschema (a dependency of the mcp SDK) that amacs_server uses.
from collections.abc import Iterator, Sequence
from typing import Any

class ValidationError(Exception):
    message: str
    validator: str
    path: Sequence[str | int]
    absolute_path: Sequence[str | int]

class Draft202012Validator:
    META_SCHEMA: dict[str, Any]
    def __init__(self, schema: dict[str, Any]) -> None: ...
    def iter_errors(self, instance: Any) -> Iterator[ValidationError]: ...
