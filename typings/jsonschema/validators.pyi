from collections.abc import Callable, Iterator
from typing import Any

def extend(validator: type[Any], validators: dict[str, Callable[..., Iterator[Any] | None]]) -> type[Any]: ...
