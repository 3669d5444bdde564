"""`nimblemcp install HOST server.py`: put a server into a host's MCP config.

The entry runs the server with the absolute interpreter of the environment this
command runs in (`sys.executable`, not resolved through symlinks so a virtualenv
stays a virtualenv): `PYTHON -m nimblemcp run /abs/server.py`. A bare `python` in a
desktop host's environment is the wrong interpreter or none at all.

The existing file is merged, never clobbered: other entries and other top-level keys
stay; an entry of the same name is replaced only with `--force`. The change is shown
as a unified diff; only `--write` writes it (atomically, through a temporary file).

Config locations (user scope):

| host | Linux | macOS | key |
|---|---|---|---|
| claude-desktop | `$XDG_CONFIG_HOME/Claude/claude_desktop_config.json` | `~/Library/Application Support/Claude/claude_desktop_config.json` | `mcpServers` |
| claude-code | `~/.claude.json` | same | `mcpServers` (`type: stdio`) |
| cursor | `~/.cursor/mcp.json` | same | `mcpServers` |
| vscode | `$XDG_CONFIG_HOME/Code/User/mcp.json` | `~/Library/Application Support/Code/User/mcp.json` | `servers` (`type: stdio`) |
| generic | `--config PATH` | same | `mcpServers` |

The server is loaded first, with the entry's environment, as the host will load it: its
name names the entry, and one that does not load (a syntax error, a missing attribute,
an import that fails) is refused, exit status 1, unless `--no-check` says to write it
anyway. Imports only the standard library and, for that, `cli.load_server`.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["HOSTS", "config_path", "main", "server_entry"]


@dataclass(frozen=True, slots=True)
class Host:
    key: str  # the top-level object holding the servers
    typed: bool  # whether the entry carries `"type": "stdio"`


HOSTS: dict[str, Host] = {
    "claude-desktop": Host("mcpServers", typed=False),
    "claude-code": Host("mcpServers", typed=True),
    "cursor": Host("mcpServers", typed=False),
    "vscode": Host("servers", typed=True),
    "generic": Host("mcpServers", typed=False),
}


def _config_home(home: Path) -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return Path(xdg) if xdg and os.path.isabs(xdg) else home / ".config"


def config_path(host: str, platform: str, home: Path | None = None) -> Path:
    """Where `host` keeps its user-level MCP servers on `platform` (linux | macos)."""
    home = Path.home() if home is None else home
    app_support = home / "Library" / "Application Support"
    if host == "claude-desktop":
        base = app_support if platform == "macos" else _config_home(home)
        return base / "Claude" / "claude_desktop_config.json"
    if host == "claude-code":
        return home / ".claude.json"
    if host == "cursor":
        return home / ".cursor" / "mcp.json"
    if host == "vscode":
        base = app_support if platform == "macos" else _config_home(home)
        return base / "Code" / "User" / "mcp.json"
    raise ValueError(f"{host} has no default config location; give --config PATH")


def server_entry(host: str, target: str, env: dict[str, str]) -> dict[str, Any]:
    """The JSON object that makes `host` spawn `target` with this interpreter."""
    entry: dict[str, Any] = {"type": "stdio"} if HOSTS[host].typed else {}
    entry["command"] = os.path.abspath(sys.executable)
    entry["args"] = ["-m", "nimblemcp", "run", target]
    if env:
        entry["env"] = env
    return entry


def read_env_file(path: Path) -> dict[str, str]:
    """`KEY=VALUE` lines (`export ` prefix, quotes and `#` comment lines allowed)."""
    out: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise _Refused(f"{path}:{number}: expected KEY=VALUE, got {raw!r}")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    return out


class _Refused(Exception):
    pass


def _absolute_target(target: str) -> tuple[str, Path]:
    """`server.py[:obj]` with the file made absolute, and the file."""
    file_part, sep, attr = target.partition(":")
    if target.count(":") > 1 or (len(file_part) == 1 and file_part.isalpha()):
        file_part, sep, attr = target.rpartition(":")  # a Windows drive letter
    path = Path(file_part)
    if not path.is_file():
        raise _Refused(f"no such file: {file_part}")
    path = path.resolve()
    return str(path) + (f":{attr}" if sep else ""), path


def _server_name(target: str, env: dict[str, str]) -> str:
    """The Server's own name, loaded as the host will load it (with the entry's `env`):
    a target that does not load here would fail in the host, so it is refused."""
    from nimblemcp.cli import load_server

    quiet = io.StringIO()
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(quiet):
            return load_server(target).name
    except (Exception, SystemExit) as exc:
        why = str(exc).removeprefix("nimblemcp: ") or type(exc).__name__
        if isinstance(exc, Exception):
            why = f"{type(exc).__name__}: {why}"
        raise _Refused(f"cannot load {target}: {why}. The host would fail the same way; fix it, "
                       "or pass --no-check to write the entry anyway") from None
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nimblemcp install",
        description="Add a stdio server to an MCP host's user config. Shows the change; "
        "--write applies it.")
    parser.add_argument("host", choices=tuple(HOSTS))
    parser.add_argument("target", help="path/to/server.py[:object]")
    parser.add_argument("--name", help="entry name (default: the server's name)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment for the server (repeatable; wins over --env-file)")
    parser.add_argument("--env-file", type=Path, metavar="PATH",
                        help="read KEY=VALUE lines into the environment")
    parser.add_argument("--config", type=Path, metavar="PATH",
                        help="the config file (required for generic; overrides the default)")
    parser.add_argument("--platform", choices=("linux", "macos"),
                        default="macos" if sys.platform == "darwin" else "linux",
                        help="whose config location to use (default: this machine's)")
    parser.add_argument("--write", action="store_true", help="write the change")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing entry of the same name")
    parser.add_argument("--no-check", action="store_true",
                        help="write the entry without loading the server first (default: a "
                        "server that does not load is refused); the name is --name or the file's")
    return parser


def _dump(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _install(args: argparse.Namespace) -> int:
    if args.host == "generic" and args.config is None:
        raise _Refused("generic needs --config PATH (the mcp.json to edit)")
    path: Path = args.config if args.config is not None else config_path(args.host, args.platform)
    target, server_file = _absolute_target(args.target)
    env = read_env_file(args.env_file) if args.env_file is not None else {}
    for pair in args.env:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _Refused(f"--env wants KEY=VALUE, got {pair!r}")
        env[key] = value
    if args.no_check:
        name = args.name or server_file.stem
    else:
        loaded = _server_name(target, env)
        name = args.name or loaded
    entry = server_entry(args.host, target, env)

    before_text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        config = json.loads(before_text) if before_text.strip() else {}
    except json.JSONDecodeError as exc:
        raise _Refused(f"{path} is not plain JSON ({exc}); add this entry under "
                       f"{HOSTS[args.host].key!r} by hand:\n"
                       + json.dumps({name: entry}, indent=2)) from None
    if not isinstance(config, dict):
        raise _Refused(f"{path} does not hold a JSON object")
    before = _dump(config) if before_text.strip() else ""
    servers = config.setdefault(HOSTS[args.host].key, {})
    if not isinstance(servers, dict):
        raise _Refused(f"{path}: {HOSTS[args.host].key!r} is not a JSON object")
    if name in servers and servers[name] == entry:
        print(f"{name!r} is already installed in {path}; nothing to change.", file=sys.stderr)
        return 0
    if name in servers and not args.force:
        raise _Refused(f"{path} already has an entry named {name!r}; --force replaces it, "
                       "--name picks another name")
    servers[name] = entry
    after = _dump(config)
    sys.stdout.writelines(difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=f"{path} (now)", tofile=f"{path} (with {name!r})"))
    sys.stdout.flush()
    if not args.write:
        print(f"nothing written; run again with --write to add {name!r} to {path}",
              file=sys.stderr)
        return 0
    _write_atomically(path, after)
    print(f"wrote {path}; restart {args.host} to load {name!r}", file=sys.stderr)
    return 0


def main(argv: Sequence[str]) -> int:
    parser = _parser()
    args = parser.parse_args(list(argv))
    try:
        return _install(args)
    except (_Refused, ValueError, OSError) as exc:
        print(f"nimblemcp install: {exc}", file=sys.stderr)
        return 1
