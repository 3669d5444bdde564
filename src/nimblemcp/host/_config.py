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

What the file says is checked, not guessed (issue 37): `disabled`, `enabled` and
`inheritEnv` must be JSON booleans (`"disabled": "false"` is refused, naming the file,
the entry and the key), and a key no host is known to use is logged as a warning. A
stdio server gets a small allow-list of the host's environment (`child_environment`)
with its `env` on top, all of it only with `"inheritEnv": true`. Argument values,
header and `env` values, URL queries and `${...}` expansions are secrets as far as
printing goes: `repr(config)`, `config.shown` and `config.redact(text)` hide them.
Pure data: imports only `nimblemcp.errors`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nimblemcp.errors import ConfigError

__all__ = [
    "ConfigError", "ServerConfig", "TransportKind", "child_environment", "load_config", "parse_config",
]

TransportKind = Literal["stdio", "http", "sse"]
_TYPES: dict[str, TransportKind] = {
    "stdio": "stdio", "http": "http", "streamable-http": "http", "streamablehttp": "http",
    "streamable_http": "http", "sse": "sse",
}
_URL_KEYS = ("url", "serverUrl", "httpUrl")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_BOOLEAN_KEYS = ("disabled", "enabled", "inheritEnv")
#: Keys of a server entry this module reads.
_READ_KEYS = frozenset({"type", "transport", "command", "args", "env", "envFile", "cwd",
                        "headers", "oauth", *_URL_KEYS, *_BOOLEAN_KEYS})
#: Keys other hosts write into the same files (Claude, Cursor, VS Code, Cline, Gemini,
#: Windsurf): not ours to read, and no reason for a warning.
_OTHER_HOSTS_KEYS = frozenset({
    "timeout", "description", "name", "title", "alwaysAllow", "autoApprove", "disabledTools",
    "includeTools", "excludeTools", "trust", "transportType", "dev", "gallery", "version",
    "icon", "icons", "envVars", "tools", "metadata", "startupTimeout",
})
#: What a stdio server gets of the host's environment without `inheritEnv` (the list
#: the official SDKs use, plus locale, time zone and temporary directory). Nothing that
#: usually holds a credential.
INHERITED_ENV = (
    ("APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT",
     "PROCESSOR_ARCHITECTURE", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "TMP", "USERNAME",
     "USERPROFILE", "COMSPEC", "WINDIR")
    if sys.platform == "win32" else
    ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
     "TMPDIR")
)
_HIDDEN = "***"
_SHORTEST_SECRET = 4  # shorter values are not searched for in free text (it would be noise)
logger = logging.getLogger("nimblemcp.host")


@dataclass(frozen=True, slots=True, repr=False)
class ServerConfig:
    """How to reach one server: a stdio command line or a remote URL.

    `timeout` bounds connecting (start, discovery, first lists) in seconds; None uses
    the group's default. `oauth` is the entry's `oauth` object (Claude Code), handed to
    the group's `auth` factory. `raw` keeps the entry as written, for host-specific keys.
    `inherit_env` hands a stdio server the host's whole environment (default: a short
    allow-list, see `child_environment`). `secrets` are values never to print (the file's
    `${...}` expansions); `repr()` and `shown` hide them, and every argument, header and
    `env` value and URL query besides.
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
    inherit_env: bool = False
    secrets: tuple[str, ...] = field(default=(), compare=False)

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

    @property
    def shown(self) -> str:
        """The command line or URL with every value hidden, for messages and logs:
        `--token=s3cr3t` and `--token s3cr3t` become `--token=***` and `--token ***`,
        a URL keeps its scheme, host and path (no user info, query values hidden)."""
        if self.transport == "stdio":
            return " ".join([self.command or "", *_hidden_args(self.args, self._secret_values())])
        return _hidden_url(self.url or "")

    def redact(self, text: str) -> str:
        """`text` (an error message, a log line) without this server's secret values."""
        for value in sorted(self._secret_values(), key=len, reverse=True):
            if len(value) >= _SHORTEST_SECRET:
                text = text.replace(value, _HIDDEN)
        return text

    def _secret_values(self) -> set[str]:
        found = set(self.secrets)
        found.update(self.env.values())
        for value in self.headers.values():
            found.add(value)
            found.update(value.split())  # `Bearer <token>`: the token on its own too
        found.update(_arg_values(self.args))
        found.update(_url_secrets(self.url or ""))
        if self.oauth:
            found.update(v for v in self.oauth.values() if isinstance(v, str))
        found.discard("")
        return found

    def __repr__(self) -> str:
        def names_only(field: str, values: Mapping[str, Any] | None) -> None:
            if values:  # the keys, never the values
                parts.append(f"{field}={{{', '.join(f'{k!r}: ***' for k in values)}}}")

        parts = [f"name={self.name!r}", f"transport={self.transport!r}"]
        if self.transport == "stdio":
            parts.append(f"command={self.shown!r}")
            names_only("env", self.env)
            if self.cwd is not None:
                parts.append(f"cwd={self.cwd!r}")
            if self.inherit_env:
                parts.append("inherit_env=True")
        else:
            parts.append(f"url={self.shown!r}")
            names_only("headers", self.headers)
        names_only("oauth", self.oauth)
        if self.timeout is not None:
            parts.append(f"timeout={self.timeout!r}")
        if self.disabled:
            parts.append("disabled=True")
        return f"ServerConfig({', '.join(parts)})"


def child_environment(config: ServerConfig,
                      environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a stdio server starts with: `INHERITED_ENV` taken from the host
    (or all of it with `inherit_env`), then the config's `env` on top."""
    source = os.environ if environ is None else environ
    if config.inherit_env:
        base = dict(source)
    else:  # exported shell functions ("() { ...") are left out, as the official SDK does
        base = {k: source[k] for k in INHERITED_ENV
                if k in source and not source[k].startswith("()")}
    return {**base, **config.env}


def _split_args(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """Each argument as (the part that may be shown, its value or None): `--opt=VALUE`
    is ("--opt=", VALUE), the word after a long option `--opt` is ("", word)."""
    split: list[tuple[str, str | None]] = []
    after_option = False
    for arg in args:
        if arg.startswith("-") and "=" in arg:
            head, _, value = arg.partition("=")
            split.append((head + "=", value))
        elif after_option and not arg.startswith("-"):
            split.append(("", arg))
        else:
            split.append((arg, None))
        after_option = arg.startswith("--") and len(arg) > 2 and "=" not in arg
    return split


def _arg_values(args: Sequence[str]) -> list[str]:
    return [value for _, value in _split_args(args) if value is not None]


def _hidden_args(args: Sequence[str], secrets: set[str]) -> list[str]:
    secrets = {s for s in secrets if len(s) >= _SHORTEST_SECRET}
    return [head + _HIDDEN if value is not None
            else _HIDDEN if any(secret in head for secret in secrets) else head
            for head, value in _split_args(args)]


def _url_secrets(url: str) -> list[str]:
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [value for _, value in parse_qsl(parts.query, keep_blank_values=True)]
    found.extend(pair.partition("=")[2] for pair in parts.query.split("&"))  # as written
    if parts.password:
        found.append(parts.password)
    if parts.username:
        found.append(parts.username)
    return found


def _hidden_url(url: str) -> str:
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return _HIDDEN
    netloc = (f"{_HIDDEN}@" if parts.username or parts.password else "") + (
        f"[{host}]" if ":" in host else host) + port
    query = "&".join(f"{key}={_HIDDEN}" for key, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


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
        try:
            return parse_config(data, variables=variables, environ=environ, base=base,
                                origin=str(path))
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return parse_config(data, variables=variables, environ=environ, base=base)


def parse_config(
    data: Any, *, variables: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None, base: Path | None = None,
    origin: str | None = None,
) -> dict[str, ServerConfig]:
    """`ServerConfig`s from a parsed configuration object (any of the accepted shapes).
    `origin` names the file in warnings (unknown keys)."""
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
        unknown = [str(k) for k in entry if k not in _READ_KEYS and k not in _OTHER_HOSTS_KEYS]
        if unknown:
            logger.warning("%s: server %r: unknown key%s %s ignored", origin or "configuration",
                           str(name), "s" if len(unknown) > 1 else "",
                           ", ".join(repr(k) for k in unknown))
    return found


def _server(
    name: str, entry: Mapping[str, Any], variables: dict[str, str],
    environ: Mapping[str, str], base: Path | None,
) -> ServerConfig:
    secrets: list[str] = []

    def expand(value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise ConfigError(f"server {name!r}: `{what}` must be a string, not {value!r}")
        return _expand(value, variables, environ, f"server {name!r} `{what}`", secrets)

    def flag(key: str, default: bool) -> bool:
        value = entry.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"server {name!r}: `{key}` must be true or false, not {value!r}"
                              + (" (a string)" if isinstance(value, str) else ""))
        return value

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
    disabled = flag("disabled", False) or not flag("enabled", True)
    inherit_env = flag("inheritEnv", False)
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
        command = expand(entry.get("command"), "command")
        arguments = tuple(expand(a, f"args[{i}]") for i, a in enumerate(args))
        return ServerConfig(name, "stdio", command=command, args=arguments, env=env,
                            cwd=cwd_text, inherit_env=inherit_env, secrets=tuple(secrets),
                            **common)
    if url_key is None:
        raise ConfigError(f"server {name!r}: a {kind} server needs a `url`")
    url = expand(entry[url_key], url_key)
    headers = strings("headers")
    return ServerConfig(name, kind, url=url, headers=headers, secrets=tuple(secrets), **common)


def _expand(text: str, variables: Mapping[str, str], environ: Mapping[str, str],
            where: str, expanded: list[str]) -> str:
    """`text` with its `${...}` replaced; the environment's values it used are added to
    `expanded` (a value from the environment is a secret until known otherwise)."""
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
            expanded.append(environ[key])
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
