from collections.abc import Iterable
from typing import Any

from . import ValidationError

def best_match(errors: Iterable[ValidationError], key: Any = ...) -> ValidationError | None: ...
