"""Reading the `mcpServers` configuration every host uses, into `ServerConfig`s.

Accepted shapes (one file may be any of them):

    {"mcpServers": {"docs": {"command": "python", "args": [...], "env": {...}, "cwd": "..."},
                    "remote": {"url": "https://...", "headers": {...}}}}   Claude Desktop/Code, Cursor
    {"mcpServers": {"remote": {"type": "http", "url": "..."}}}             Claude Code (`type`)
    {"servers": {"docs": {"type": "stdio", "command": ...}}}               VS Code `.vscode/mcp.json`
    {"mcp": {"servers": {...}}}                                            VS Code `settings.json`

VS Code files may hold `//` and `/* */` comments and trailing commas (JSONC). Strings
expand `${VAR}`, `${VAR:-default}` (Claude Code) and `${env:VAR}` (VS Code, Cursor), plus
any names passed as `variables` (e.g. `workspaceFolder`); an unknown variable is a
`ConfigError` naming the server. VS Code's `envFile` is read (KEY=VALUE lines). A
server's `type` is `stdio`, `http` (aliases `streamable-http`, `streamableHttp`) or
`sse` (the 2024-11-05 HTTP+SSE transport, which nimblemcp does not speak: it is kept
so the server shows up, and fails to connect with a clear error). Without a `type`,
`command` means stdio and `url` (or `serverUrl`, `httpUrl`) means HTTP.
Pure data: imports only `nimblemcp.errors`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nimblemcp.errors import ConfigError

__all__ = ["ConfigError", "ServerConfig", "TransportKind", "load_config", "parse_config"]

TransportKind = Literal["stdio", "http", "sse"]
_TYPES: dict[str, TransportKind] = {
    "stdio": "stdio", "http": "http", "streamable-http": "http", "streamablehttp": "http",
    "streamable_http": "http", "sse": "sse",
}
_URL_KEYS = ("url", "serverUrl", "httpUrl")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """How to reach one server: a stdio command line or a remote URL.

    `timeout` bounds connecting (start, discovery, first lists) in seconds; None uses
    the group's default. `oauth` is the entry's `oauth` object (Claude Code), handed to
    the group's `auth` factory. `raw` keeps the entry as written, for host-specific keys.
    """

    name: str
    transport: TransportKind = "stdio"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    disabled: bool = False
    oauth: Mapping[str, Any] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.transport == "stdio" and not self.command:
            raise ConfigError(f"server {self.name!r}: a stdio server needs a `command`")
        if self.transport != "stdio" and not self.url:
            raise ConfigError(f"server {self.name!r}: a {self.transport} server needs a `url`")

    @classmethod
    def stdio(cls, name: str, command: Sequence[str], **kw: Any) -> ServerConfig:
        """`ServerConfig.stdio("docs", ["python", "server.py"], env={...})`."""
        if not command:
            raise ConfigError(f"server {name!r}: an empty command line")
        return cls(name, "stdio", command=command[0], args=tuple(command[1:]), **kw)

    @classmethod
    def http(cls, name: str, url: str, **kw: Any) -> ServerConfig:
        """`ServerConfig.http("remote", "https://example.com/mcp", headers={...})`."""
        return cls(name, "http", url=url, **kw)

    @property
    def command_line(self) -> list[str]:
        return [self.command or "", *self.args]


def load_config(
    source: str | os.PathLike[str] | Mapping[str, Any],
    *, variables: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None,
) -> dict[str, ServerConfig]:
    """The servers of an `mcp.json` (a path, or the already-parsed object), in file order.

    Relative `cwd` and `envFile` paths are taken from the file's folder."""
    base: Path | None = None
    if isinstance(source, Mapping):
        data: Any = source
    else:
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        try:
            data = json.loads(strip_jsonc(text))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not JSON: {exc}") from exc
        base = path.resolve().parent
    return parse_config(data, variables=variables, environ=environ, base=base)


def parse_config(
    data: Any, *, variables: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None, base: Path | None = None,
) -> dict[str, ServerConfig]:
    """`ServerConfig`s from a parsed configuration object (any of the accepted shapes)."""
    if not isinstance(data, Mapping):
        raise ConfigError("the configuration must be a JSON object")
    entries = data.get("mcpServers")
    if entries is None:
        entries = data.get("servers")
    if entries is None and isinstance(data.get("mcp"), Mapping):
        entries = data["mcp"].get("servers")
    if not isinstance(entries, Mapping):
        raise ConfigError("no `mcpServers` (or VS Code `servers`) object in the configuration")
    env = os.environ if environ is None else environ
    found: dict[str, ServerConfig] = {}
    for name, entry in entries.items():
        if not isinstance(entry, Mapping):
            raise ConfigError(f"server {name!r}: the entry must be an object")
        found[str(name)] = _server(str(name), entry, dict(variables or {}), env, base)
    return found


def _server(
    name: str, entry: Mapping[str, Any], variables: dict[str, str],
    environ: Mapping[str, str], base: Path | None,
) -> ServerConfig:
    def expand(value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise ConfigError(f"server {name!r}: `{what}` must be a string, not {value!r}")
        return _expand(value, variables, environ, f"server {name!r} `{what}`")

    def strings(key: str) -> dict[str, str]:
        value = entry.get(key) or {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"server {name!r}: `{key}` must be an object")
        return {str(k): expand(v, f"{key}.{k}") for k, v in value.items()}

    url_key = next((k for k in _URL_KEYS if k in entry), None)
    kind_raw = entry.get("type") or entry.get("transport")
    if kind_raw is None:
        kind: TransportKind = "stdio" if "command" in entry or url_key is None else "http"
    else:
        mapped = _TYPES.get(str(kind_raw).lower())
        if mapped is None:
            raise ConfigError(f"server {name!r}: unknown type {kind_raw!r} "
                              f"(expected stdio, http or sse)")
        kind = mapped
    disabled = bool(entry.get("disabled", False)) or entry.get("enabled", True) is False
    oauth = entry.get("oauth")
    common: dict[str, Any] = {
        "disabled": disabled, "raw": dict(entry),
        "oauth": dict(oauth) if isinstance(oauth, Mapping) else None,
    }
    if kind == "stdio":
        if not entry.get("command"):
            raise ConfigError(f"server {name!r}: a stdio server needs a `command`")
        args = entry.get("args") or []
        if not isinstance(args, list):
            raise ConfigError(f"server {name!r}: `args` must be a list")
        env = strings("env")
        env_file = entry.get("envFile")
        if env_file is not None:
            file_path = Path(expand(env_file, "envFile"))
            if base is not None and not file_path.is_absolute():
                file_path = base / file_path
            env = {**_read_env_file(name, file_path), **env}
        cwd = entry.get("cwd")
        cwd_text = expand(cwd, "cwd") if cwd is not None else None
        if cwd_text is not None and base is not None and not Path(cwd_text).is_absolute():
            cwd_text = str(base / cwd_text)
        return ServerConfig(
            name, "stdio", command=expand(entry.get("command"), "command"),
            args=tuple(expand(a, f"args[{i}]") for i, a in enumerate(args)),
            env=env, cwd=cwd_text, **common,
        )
    if url_key is None:
        raise ConfigError(f"server {name!r}: a {kind} server needs a `url`")
    return ServerConfig(name, kind, url=expand(entry[url_key], url_key),
                        headers=strings("headers"), **common)


def _expand(text: str, variables: Mapping[str, str], environ: Mapping[str, str],
            where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        body = match.group(1)
        if body.startswith("env:"):
            key, default = body[4:], None
        else:
            key, sep, fallback = body.partition(":-")
            default = fallback if sep else None
            if key in variables:
                return variables[key]
        if key in environ:
            return environ[key]
        if default is not None:
            return default
        raise ConfigError(f"{where}: the variable ${{{body}}} is not set")

    return _VARIABLE.sub(replace, text)


def _read_env_file(name: str, path: Path) -> dict[str, str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"server {name!r}: cannot read envFile {path}: {exc}") from exc
    env: dict[str, str] = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def strip_jsonc(text: str) -> str:
    """JSON from JSONC: drop `//` and `/* */` comments and trailing commas (outside strings)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch in "}]":
            # a trailing comma: the last non-blank character written was a comma
            k = len(out) - 1
            while k >= 0 and out[k].isspace():
                k -= 1
            if k >= 0 and out[k] == ",":
                del out[k]
            out.append(ch)
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)
