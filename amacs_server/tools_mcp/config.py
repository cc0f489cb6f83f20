"""``AMACS_HOME/mcp.json``: the ``mcpServers`` object as Claude Code and Claude Desktop write it.

A stdio server has ``command`` (and ``args``, ``env``); an HTTP server has ``url``
(and ``headers``).  ``${VAR}`` in any of those strings is taken from the
environment.  What the file gives a server is secret: every variable it names
(but places: ``not_secret``), a value under a name like a key's (``Authorization``,
``API_TOKEN``), and a URL's password, are redacted wherever the server writes or sends; ``${VAR}`` in ``args``
is a warning (the process list shows it).  Keys other clients add (``disabled``, ``autoApprove``, ...) are
accepted; ``disabled: true`` leaves a server out.  AMACS reads one key of its
own: ``timeout``, a call's limit in seconds (default :data:`DEFAULT_TIMEOUT`).
A key that is not one of these but reads like one (``arg``, ``comand``,
``environment``, ``timout``, ``mcp_servers``) is a problem, not a silent default.

Each problem is one line that names the file and the key; a server with a
problem is left out and every other server is kept.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AmacsError

DEFAULT_TIMEOUT = 20.0  # seconds a tool call may take (under the eval's own limit, 30 s by default)
MAX_TIMEOUT = 3600.0
SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SERVER_KEYS = ("command", "args", "env", "url", "headers", "timeout", "type", "disabled")
OTHER_CLIENTS_KEYS = ("autoApprove", "alwaysAllow", "description", "transportType")
_MEANT = {"environment": "env", "enviroment": "env", "environ": "env", "arguments": "args",
          "argv": "args", "uri": "url", "endpoint": "url", "header": "headers", "cmd": "command"}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class ServerSpec:
    """One configured server: how to reach it, and how long a call may take."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold keys: never logged
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = DEFAULT_TIMEOUT

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"


@dataclass(frozen=True)
class McpConfig:
    """The servers of one reading of the file, and what was wrong in it (one line each)."""

    servers: dict[str, ServerSpec]
    problems: tuple[str, ...] = ()
    # (name, value) of every secret the file gives its servers or names: redacted wherever the
    # server writes or sends (the scrubber learns them).
    secrets: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = ()  # lines said once; the server they name still runs


class _Bad(AmacsError, ValueError):
    """A problem at one key of the file."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")


# Variables that name places, not secrets: their values are in every path, and redacting them
# would blind the agent to its own files.  Any other variable mcp.json names is a secret.
NOT_SECRET = frozenset(("HOME", "USER", "LOGNAME", "PATH", "PWD", "SHELL", "TMPDIR", "TMP", "TEMP", "LANG",
                        "LANGUAGE", "TERM", "TZ", "PYTHONPATH", "NODE_PATH", "VIRTUAL_ENV", "AMACS_HOME"))
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|AUTH|CRED|COOKIE|SESSION|PAT$", re.I)
# A URL's user:password@ part: a credential whatever the variable or key is called.
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:([^/\s@]+)@")


def not_secret(name: str) -> bool:
    """Whether the variable NAME names a place, not a secret (``NOT_SECRET``, ``LC_*``, ``XDG_*``)."""
    return name in NOT_SECRET or name.startswith(("LC_", "XDG_"))


def _expand(value: str, key: str, environ: Mapping[str, str], used: list[tuple[str, str]]) -> str:
    """VALUE with its ${VAR}s from ENVIRON; each variable's value (but a place's, ``not_secret``)
    goes to USED as (NAME, value), to be redacted wherever the server writes or sends."""
    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            if not not_secret(name):
                used.append((name, environ[name]))
            return environ[name]
        if default is not None:
            return default
        raise _Bad(key, f"${{{name}}} is not set in the environment")

    return _VAR.sub(one, value)


def _string(raw: object, key: str, environ: Mapping[str, str], used: list[tuple[str, str]]) -> str:
    if not isinstance(raw, str):
        raise _Bad(key, f"expected a string, got {json.dumps(raw)[:60]}")
    value = _expand(raw, key, environ, used)
    for match in _URL_PASSWORD.finditer(value):
        used.append(("password", match.group(0)))
        used.append(("password", f":{match.group(1)}@"))
    return value


def _strings(raw: object, key: str, environ: Mapping[str, str], used: list[tuple[str, str]]) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise _Bad(key, f"expected a list of strings, got {json.dumps(raw)[:60]}")
    return tuple(_string(v, f"{key}[{i}]", environ, used) for i, v in enumerate(raw))


def _table(raw: object, key: str, environ: Mapping[str, str], used: list[tuple[str, str]]) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise _Bad(key, f"expected an object of strings, got {json.dumps(raw)[:60]}")
    table = {str(k): _string(v, f"{key}.{k}", environ, used) for k, v in raw.items()}
    # A value written in the file under a name like a key's is a secret (a ${VAR}'s value already
    # is); and so is what the environment holds under an env key's name (an eval can read it there).
    for name, value in table.items():
        if SECRET_NAME.search(name):
            used.append((name, value))
        if key.endswith(".env") and name in environ and not not_secret(name):
            used.append((name, environ[name]))
    return table


def meant(key: str, known: tuple[str, ...]) -> str | None:
    """The known key KEY reads like when it is not itself one (a misspelling, another case), else None."""
    if key in known:
        return None
    lowered = {k.lower(): k for k in known}
    if key.lower() in _MEANT and _MEANT[key.lower()] in known:
        return _MEANT[key.lower()]
    close = difflib.get_close_matches(key.lower(), list(lowered), 1, 0.75)
    return lowered[close[0]] if close else None


def _server(name: str, raw: object, environ: Mapping[str, str], used: list[tuple[str, str]]) -> ServerSpec | None:
    key = f"mcpServers.{name}"
    if not SERVER_NAME.fullmatch(name) or "/" in name:
        raise _Bad(key, "a server name is letters, digits, '.', '_' and '-' (no '/': tools are SERVER/TOOL)")
    if not isinstance(raw, dict):
        raise _Bad(key, "expected an object with command (stdio) or url (HTTP)")
    for given in raw:
        wanted = None if given in OTHER_CLIENTS_KEYS else meant(str(given), SERVER_KEYS)
        if wanted is not None:
            raise _Bad(f"{key}.{given}", f"is not a key AMACS reads; did you mean {wanted!r}?")
    if raw.get("disabled") is True:
        return None
    kind = raw.get("type")
    if kind is not None and kind not in ("stdio", "http", "streamable-http", "streamableHttp"):
        raise _Bad(f"{key}.type", f"{kind!r} is not supported; use stdio or http (streamable HTTP)")
    timeout = raw.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT:
        raise _Bad(f"{key}.timeout", f"seconds, a number above 0 and at most {MAX_TIMEOUT:.0f}")
    if "command" in raw and "url" in raw:
        raise _Bad(key, "has both command and url; give one")
    if "command" in raw:
        command = _string(raw["command"], f"{key}.command", environ, used)
        if not command.strip():
            raise _Bad(f"{key}.command", "is empty")
        return ServerSpec(name, command=command,
                          args=_strings(raw.get("args", []), f"{key}.args", environ, used),
                          env=_table(raw.get("env", {}), f"{key}.env", environ, used), timeout=float(timeout))
    if "url" in raw:
        url = _string(raw["url"], f"{key}.url", environ, used)
        if not url.startswith(("http://", "https://")):
            raise _Bad(f"{key}.url", f"{url!r} is not an http:// or https:// URL")
        return ServerSpec(name, url=url, headers=_table(raw.get("headers", {}), f"{key}.headers", environ, used),
                          timeout=float(timeout))
    raise _Bad(key, "has neither command (a stdio server) nor url (an HTTP server)")


def parse(text: str, path: Path, environ: Mapping[str, str]) -> McpConfig:
    """Read the text of PATH; raise ValueError (one line, naming PATH) when it is not a JSON object."""
    try:
        data: Any = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON at line {err.lineno} column {err.colno} ({err.msg}); "
                         "the servers stay as they were until it is fixed") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object with an mcpServers object; "
                         "the servers stay as they were until it is fixed")
    if "mcpServers" not in data:
        for given in data:
            if meant(str(given), ("mcpServers",)) is not None:
                raise ValueError(f"{path}: {given}: is not a key AMACS reads; did you mean 'mcpServers'? "
                                 "the servers stay as they were until it is fixed")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ValueError(f"{path}: mcpServers: expected an object of servers by name; "
                         "the servers stay as they were until it is fixed")
    out: dict[str, ServerSpec] = {}
    problems: list[str] = []
    warnings: list[str] = []
    used: list[tuple[str, str]] = []
    for name, raw in servers.items():
        warnings.extend(f"{path}: mcpServers.{name}.args: {var} puts its value in the process list, which "
                        "every user of this machine can read; give it in env instead"
                        for var in _args_vars(raw))
        try:
            spec = _server(str(name), raw, environ, used)
        except _Bad as err:
            problems.append(f"{path}: {err}; server {name!r} is left out, the others work")
            continue
        if spec is not None:
            out[spec.name] = spec
    return McpConfig(out, tuple(problems), tuple(dict.fromkeys(used)), tuple(warnings))


def _args_vars(raw: object) -> list[str]:
    """The ``${VAR}`` of RAW's args that are not places (``not_secret``), once each."""
    args = raw.get("args") if isinstance(raw, dict) else None
    found = [m.group(0) for a in (args if isinstance(args, list) else []) if isinstance(a, str)
             for m in _VAR.finditer(a) if not not_secret(m.group(1))]
    return list(dict.fromkeys(found))
