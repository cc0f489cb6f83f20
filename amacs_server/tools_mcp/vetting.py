"""Each tool of a server's listing checked on its own: one no client can take is left out.

The server's other tools are kept.

The SDK checks a ``tools/list`` answer whole, against the protocol's schema, before any code of the
hub sees it: one tool with a schema that is not an object's, a number for a name or a name that
writes lines of its own would take every tool of its server down.  :class:`Vetted` is a transport
around the server's own (the SDK's ``Transport``): it notes the ids of the ``tools/list`` requests
going out and, in each answer coming in, keeps the tools :func:`problem` finds nothing wrong with,
handing each one it takes out to a callback.  What the SDK then checks holds only good tools.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,127}")  # a tool's or an argument's, in the listing
NAME_RULE = "letters, digits, '_', '-', '.', '/', at most 128"


def problem(tool: object, version: str | None, listing: dict[str, Any] | None = None) -> str | None:
    """Why TOOL (one entry of a listing, as JSON) cannot be listed, in a few words; None when it can.

    A tool can be listed when it fits the protocol's VERSION (when known) as the one tool of
    LISTING (the answer it came in, whose other fields the protocol checks too), its name and
    every argument's name are names (they are written into the prompt), and its input schema is a
    JSON Schema (its arguments are checked against it before each call)."""
    if not isinstance(tool, dict):
        return "it is not an object"
    if version is not None:
        wrong = _unfit({**(listing or {}), "tools": [tool]}, version)
        if wrong is not None:
            return wrong
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict):
        return "its inputSchema is not an object"
    props = schema.get("properties")
    names = [tool.get("name"), *(props if isinstance(props, dict) else ())]
    bad = next((n for n in names if not isinstance(n, str) or not SAFE_NAME.fullmatch(n)), None)
    if bad is not None:
        return f"{bad!r} is not a name ({NAME_RULE})"
    return _not_a_schema(schema)


def _unfit(listing: dict[str, Any], version: str) -> str | None:
    """Where LISTING (an answer to tools/list) does not fit the protocol's VERSION, as the SDK
    checks it."""
    from mcp_types import methods
    from pydantic import ValidationError

    try:
        methods.validate_server_result("tools/list", version, listing)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"][2:] if p != "tool") or "it"  # past ("tools", 0)
        return f"{where}: {first['msg']} (MCP {version})"
    except (KeyError, ValueError):  # a version this SDK does not know: it checks nothing either
        return None
    except RecursionError:
        return "it is nested too deep"
    return None


def _not_a_schema(schema: dict[str, Any]) -> str | None:
    """What makes SCHEMA no JSON Schema (checked against its dialect's meta-schema), or None.

    Formats are not checked: a ``pattern`` Python's ``re`` cannot read may still be one the
    linear engine runs (calls.py), or the server checks."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    dialect = schema.get("$schema")
    kind: type[Any] = validator_for(schema, default=Draft202012Validator) if isinstance(dialect, str) \
        else Draft202012Validator
    try:
        error = best_match(kind(kind.META_SCHEMA).iter_errors(schema))
    except RecursionError:
        return "its inputSchema is nested too deep"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"its inputSchema is no JSON Schema{' at ' + where if where else ''}: {error.message[:200]}"


def tool_name(tool: object) -> str:
    """TOOL's name for a line about it: its name when it is a string, else the value, quoted."""
    name = tool.get("name") if isinstance(tool, dict) else tool
    return repr(name)[:140]


class Vetted:
    """A transport around INNER whose ``tools/list`` answers hold only the tools :func:`problem`
    passes; each tool left out is handed to LEFT_OUT (its name, quoted, and why).

    ``version`` is the protocol version the connection agreed on, set once it did (None: the
    protocol's own check is left to the SDK, names and schemas are still checked)."""

    def __init__(self, inner: Any, left_out: Callable[[str, str], None]) -> None:
        self.inner = inner
        self.left_out = left_out
        self.version: str | None = None
        self.asked: set[Any] = set()  # ids of the tools/list requests not yet answered

    async def __aenter__(self) -> tuple[_Reading, _Writing]:
        read, write = await self.inner.__aenter__()
        return _Reading(read, self), _Writing(write, self)

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)

    def sent(self, item: Any) -> None:
        """Note ITEM's id when it asks for tools."""
        from mcp_types import JSONRPCRequest

        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCRequest) and message.method == "tools/list":
            self.asked.add(message.id)

    def received(self, item: Any) -> Any:
        """ITEM, with the tools no client can take out of it when it answers a tools/list."""
        from mcp_types import JSONRPCError, JSONRPCResponse

        message = getattr(item, "message", None)
        if not isinstance(message, JSONRPCResponse | JSONRPCError) or message.id not in self.asked:
            return item
        self.asked.discard(message.id)
        if isinstance(message, JSONRPCResponse):
            message.result = self._vet(message.result)
        return item

    def _vet(self, result: dict[str, Any]) -> dict[str, Any]:
        """RESULT (a tools/list answer) with only the tools a client can take."""
        tools = result.get("tools")
        # A listing wrong besides its tools is left whole to the SDK, which refuses it in a line.
        if not isinstance(tools, list) or (self.version is not None
                                           and _unfit({**result, "tools": []}, self.version) is not None):
            return result
        kept = []
        for tool in tools:
            why = problem(tool, self.version, result)
            if why is None:
                kept.append(tool)
            else:
                self.left_out(tool_name(tool), why)
        return {**result, "tools": kept}


class _Around:
    """A stream of a :class:`Vetted` transport: the inner stream's, closed and entered as it is."""

    def __init__(self, inner: Any, vetted: Vetted) -> None:
        self.inner, self.vetted = inner, vetted

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Any:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)


class _Reading(_Around):
    """The read stream of a :class:`Vetted` transport."""

    @property
    def last_context(self) -> Any:
        """The sender's context the inner stream kept for its last message, if it keeps one."""
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> Any:
        return self.vetted.received(await self.inner.receive())

    def __aiter__(self) -> _Reading:
        return self

    async def __anext__(self) -> Any:
        return self.vetted.received(await self.inner.__anext__())


class _Writing(_Around):
    """The write stream of a :class:`Vetted` transport."""

    async def send(self, item: Any, /) -> None:
        self.vetted.sent(item)
        await self.inner.send(item)
