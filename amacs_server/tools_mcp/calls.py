"""A tool call as the agent writes it and gets it back: names, arguments, results, listings.

The agent writes ``(agent-tool "SERVER/TOOL" :arg value ...)``.  Its keywords are
matched to the tool's input schema (``:max-results`` finds ``max_results`` or
``maxResults``), elisp's ``nil`` becomes what the schema's type expects (false,
an empty list or object), and the arguments are checked against the schema
before the call, with an error that names the argument.

A result comes back as elisp data: structured content as a plist; text as a
string; an image, audio or resource described by its MIME type and size (its
bytes never reach the context); an ``isError`` result as an error.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .hub import McpError

CUT_BY_GUARD = "[cut: the server's answer is "  # how guard.py's stand-in for a too long answer begins
MAX_RESULT_CHARS = 1 << 20  # of a tool's result to the agent; the rest waits in a file
TOOL_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*)/(\S+)")
DESCRIPTION_CHARS = 120  # of a tool's description in the listing
ALL_TOOLS = ("*",)


def split_name(name: object) -> tuple[str, str]:
    """SERVER and TOOL of ``"SERVER/TOOL"``, or an McpError showing the shape."""
    match = TOOL_NAME.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise McpError(f"agent-tool takes \"SERVER/TOOL\" first, e.g. (agent-tool \"time/get_current_time\" "
                       f":timezone \"UTC\"); got {name!r}")
    return match.group(1), match.group(2)


def _normal(name: str) -> str:
    return re.sub(r"[-_]", "", name).lower()


def arguments(raw: object, schema: dict[str, Any], tool: str) -> dict[str, Any]:
    """RAW (the plist after the name, read as a dict at the boundary) as the tool's JSON
    arguments, checked against SCHEMA."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise McpError(f"{tool}: arguments are a plist, :name value ...; got {raw!r}")
    props: dict[str, Any] = schema.get("properties") or {}
    by_normal = {_normal(p): p for p in props}
    out: dict[str, Any] = {}
    for given, value in raw.items():
        name = given if given in props else by_normal.get(_normal(given))
        if name is None:
            if props or schema.get("additionalProperties") is False:
                known = ", ".join(f":{p}" for p in props) or "none"
                raise McpError(f"{tool}: no argument :{given.replace('_', '-')}; its arguments: {known}")
            name = given
        out[name] = _value(value, props.get(name) or {})
    problems = sorted(_validator()(schema).iter_errors(out), key=lambda e: list(e.path))
    if problems:
        first = problems[0]
        where = ".".join(str(p) for p in first.path)
        if first.validator == "required":
            missing = [p for p in schema.get("required", []) if p not in out]
            raise McpError(f"{tool}: argument :{missing[0] if missing else where} is required ({first.message})")
        raise McpError(f"{tool}: argument :{where or '?'} {first.message}")
    return out


@functools.cache
def _validator() -> Any:
    """Draft 2020-12 whose ``pattern`` never backtracks: a server's schema is not trusted.

    Python's ``re`` took 33 s, holding every thread of the server, to find that 44 characters do
    not match ``^(\\w+\\s?)*$``.  Patterns run on pydantic-core's Rust engine, in linear time; one
    that engine cannot run (a lookaround, a backreference) is not checked here, and the server
    checks its own arguments."""
    # jsonschema takes ~60 ms to import: at the first MCP call, not at the server's start.
    from jsonschema import Draft202012Validator, ValidationError
    from jsonschema.validators import extend

    def pattern(_validator: Any, wanted: Any, instance: Any, _schema: Any) -> Iterator[ValidationError]:
        if not isinstance(instance, str) or not isinstance(wanted, str):
            return
        check = _pattern(wanted)
        if check is not None and not check(instance):
            yield ValidationError(f"{instance[:60]!r} does not match {wanted!r}")

    return extend(Draft202012Validator, {"pattern": pattern})


@functools.lru_cache(maxsize=256)
def _pattern(wanted: str) -> Callable[[str], bool] | None:
    """Whether a text has a match of WANTED (searched, as JSON Schema says), in linear time; None
    when the linear engine cannot run WANTED."""
    from pydantic_core import SchemaError, SchemaValidator, ValidationError, core_schema

    try:
        validator = SchemaValidator(core_schema.str_schema(pattern=wanted, regex_engine="rust-regex"))
    except SchemaError:
        return None

    def matches(text: str) -> bool:
        try:
            validator.validate_python(text)
        except ValidationError:
            return False
        return True

    return matches


def _value(value: Any, schema: dict[str, Any]) -> Any:
    """VALUE as SCHEMA's type wants it: elisp's one nil is false, [] or {} as the schema says."""
    kind = schema.get("type")
    if value is None:
        return {"boolean": False, "array": [], "object": {}}.get(kind if isinstance(kind, str) else "", None)
    if value is True and kind == "string":
        return "t"
    if kind == "array" and not isinstance(value, list):
        return [value]
    return value


def result(value: Any, tool: str) -> Any:
    """A ``CallToolResult`` as elisp data, or an McpError for an ``isError`` result."""
    blocks = [_block(b) for b in value.content]
    if len(blocks) == 1 and isinstance(blocks[0], str) and blocks[0].startswith(CUT_BY_GUARD):
        return blocks[0]  # an answer too long to send, cut by the guard: a result, not an error
    if value.is_error:
        text = " ".join(b if isinstance(b, str) else json.dumps(b) for b in blocks) or "(no message)"
        raise McpError(f"{tool} returned an error: {text}")
    if value.structured_content is not None:
        return value.structured_content
    if all(isinstance(b, str) for b in blocks):
        return "\n".join(blocks)
    return blocks[0] if len(blocks) == 1 else blocks


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except ValueError:
        return len(data) * 3 // 4


def _block(block: Any) -> Any:
    kind = getattr(block, "type", None)
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return {"type": kind, "mime_type": block.mime_type, "bytes": _size(block.data)}
    if kind == "resource":
        res = block.resource
        text = getattr(res, "text", None)
        out = {"type": "resource", "uri": str(res.uri), "mime_type": getattr(res, "mime_type", None)}
        if text is not None:
            return {**out, "chars": len(text), "text": text}
        return {**out, "bytes": _size(getattr(res, "blob", ""))}
    if kind == "resource_link":
        return {"type": "resource-link", "uri": str(block.uri), "name": block.name,
                "mime_type": getattr(block, "mime_type", None)}
    return {"type": str(kind)}


def size(value: Any) -> int:
    """How long VALUE is as JSON text (the transcript's result size)."""
    if isinstance(value, str):  # a text's length, without a copy of a big one
        return len(value) + 2
    return len(json.dumps(value, ensure_ascii=False, default=str))


def bounded(value: Any, folder: Path, stem: str, limit: int = MAX_RESULT_CHARS) -> tuple[Any, int]:
    """VALUE and its size, or, when it is longer than LIMIT characters as text, a line saying how
    long it was and the file in FOLDER (``STEM.txt`` or ``.json``, private) that holds it whole,
    then its first LIMIT characters: what goes to the agent, and over EPC, stays small.  The file
    is named with :data:`UNRECORDED` after it until :func:`recorded` (the call is in the
    transcript): a server stopped in between leaves it so, and the next start says so
    (:func:`unrecorded`)."""
    text = value if isinstance(value, str) else None
    whole = len(text) if text is not None else size(value)
    if whole <= limit:
        return value, whole
    if text is None:
        text = json.dumps(value, ensure_ascii=False, default=str)
    path = folder / f"{stem}.{'txt' if isinstance(value, str) else 'json'}"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path.with_name(path.name + UNRECORDED), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as out:
            out.write(text)
        where = (f"the whole result is in {path} (read it with insert-file-contents, a part at a time: "
                 "its BEG and END)")
    except OSError as err:
        where = f"the rest could not be kept ({err.strerror or err})"
    # The note first: an eval's printed result is cut again (amacs-eval-result-max-chars).
    note = f"[cut: the first {limit} of {whole} characters follow; {where}]\n"
    return note + text[:limit], whole


# The suffix of a kept result's file until its call is recorded in the transcript.
UNRECORDED = ".unrecorded"


def recorded(folder: Path, stem: str) -> None:
    """The file :func:`bounded` kept STEM's result in (if it kept one) under its own name: its
    call is in the transcript, and the agent is given the result next."""
    for path in (folder / f"{stem}.txt{UNRECORDED}", folder / f"{stem}.json{UNRECORDED}"):
        try:
            os.replace(path, path.with_name(path.name.removesuffix(UNRECORDED)))
        except FileNotFoundError:
            continue


def unrecorded(folder: Path) -> list[str]:
    """The results in FOLDER kept by tool calls a server stopped in before it recorded them (the
    agent was never given them): each moved to its own name, and said in one line for the
    person (at start)."""
    try:
        left = sorted(p for p in folder.iterdir() if p.name.endswith(UNRECORDED))
    except OSError:
        return []
    said = []
    for path in left:
        whole = path.with_name(path.name.removesuffix(UNRECORDED))
        try:
            os.replace(path, whole)
            size = whole.stat().st_size
        except OSError:
            continue
        said.append(f"a tool call's result ({size} bytes) is kept in {whole}: the server stopped before it "
                    "recorded the call, and the agent was never given it")
    return said


# -- who may use what ---------------------------------------------------------------------


def patterns(raw: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """A ``tools:`` value (``[time/*, git/git_status]``, or a list) as patterns; a bare
    server name means all its tools.  None stays None (not given)."""
    if raw is None:
        return None
    items = re.split(r"[\s,\[\]]+", raw) if isinstance(raw, str) else list(raw)
    return tuple(p if "/" in p or p == "*" else f"{p}/*" for p in (i.strip().strip("\"'") for i in items) if p)


def allows(grant: Iterable[str], full_name: str) -> bool:
    """Whether FULL_NAME (``server/tool``) matches one of the patterns of GRANT."""
    return any(fnmatch.fnmatchcase(full_name, p) for p in grant)


def beyond(asked: Iterable[str], grant: Sequence[str]) -> list[str]:
    """The patterns of ASKED not inside GRANT (``git/*`` is inside ``*`` and ``git/*``, not inside
    ``git/git_status``)."""
    return [p for p in asked if not any(fnmatch.fnmatchcase(p, g) for g in grant)]


# -- the listing in the context ---------------------------------------------------------


def _type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "|".join(json.dumps(v) for v in schema["enum"][:8])
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind == "array":
        return f"[{_type(schema.get('items') or {})}]"
    return str(kind or "any")


def signature(server: str, tool: Any) -> str:
    """One line: ``server/tool :arg type :opt? type — description``."""
    schema = tool.input_schema or {}
    required = set(schema.get("required") or [])
    args = " ".join(f":{name}{'' if name in required else '?'} {_type(spec or {})}"
                    for name, spec in (schema.get("properties") or {}).items())
    # One line, and no tag of the prompt's own (a description cannot close the section).
    desc = re.sub(r"<(/?)(tools)", r"&lt;\1\2", " ".join((tool.description or "").split()), flags=re.I)
    if len(desc) > DESCRIPTION_CHARS:
        desc = desc[:DESCRIPTION_CHARS - 1] + "…"
    line = f"{server}/{tool.name}{' ' + args if args else ''}{' — ' + desc if desc else ''}"
    return re.sub(r"[\x00-\x1f\x7f\u2028\u2029]", " ", line)  # a schema's odd type cannot break the line


def listing(tools: Iterable[tuple[str, Any]], grant: Sequence[str], problems: Sequence[str] = ()) -> str:
    """The ``<tools>`` section: the tools GRANT allows, one line each, or '' when there are none."""
    lines = [signature(s, t) for s, t in tools if allows(grant, f"{s}/{t.name}")]
    if not lines:
        return ""
    head = ("MCP tools you may call from an eval: (agent-tool \"SERVER/TOOL\" :arg value ...). "
            "An argument marked ? is optional.")
    return "<tools>\n" + head + "\n" + "\n".join(lines) + "\n</tools>"
