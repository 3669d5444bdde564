"""The `nimblemcp` command: thin over the library.

argparse rather than click/typer on purpose: `nimblemcp run` is on the cold-start
path of every stdio server a host spawns. The client commands (discover, tools, call,
read, prompt, listen) live in `_client_commands`, imported only when one is asked for,
so `run` never imports the client.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from nimblemcp.server._server import Server

__all__ = ["load_server", "main"]

_CLIENT_COMMANDS = ("discover", "tools", "call", "read", "prompt", "listen")


def load_server(target: str) -> Server:
    """Load `path/to/file.py[:name]` or `package.module[:name]` and return its Server."""
    spec_part, _, attr = target.partition(":")
    if target.count(":") > 1 or (len(spec_part) == 1 and spec_part.isalpha()):
        spec_part, _, attr = target.rpartition(":")  # Windows drive letters
    path = Path(spec_part)
    if spec_part.endswith(".py") or path.exists():
        if not path.exists():
            raise SystemExit(f"nimblemcp: no such file: {spec_part}")
        sys.path.insert(0, str(path.resolve().parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise SystemExit(f"nimblemcp: cannot import {spec_part}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(spec_part)
    if attr:
        obj: Any = getattr(module, attr, None)
        if obj is None:
            raise SystemExit(f"nimblemcp: {spec_part} has no attribute {attr!r}")
        if callable(obj) and not isinstance(obj, Server):
            obj = obj()
        if not isinstance(obj, Server):
            raise SystemExit(f"nimblemcp: {target} is not a nimblemcp Server")
        return obj
    for name in ("server", "mcp", "app"):
        obj = getattr(module, name, None)
        if isinstance(obj, Server):
            return obj
    found = [v for v in vars(module).values() if isinstance(v, Server)]
    if len(found) == 1:
        return found[0]
    raise SystemExit(f"nimblemcp: name the server object, e.g. {spec_part}:server")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nimblemcp", description="Run MCP servers, or talk to one.",
        epilog="Client commands take an http(s):// URL or `-- command args...`; "
        "see `nimblemcp COMMAND --help`.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("discover", "ask a server what it supports"),
                       ("tools", "list a server's tools"), ("call", "call a tool"),
                       ("read", "read a resource (or list them)"),
                       ("prompt", "get a prompt (or list them)"),
                       ("listen", "print list changes and resource updates")):
        sub.add_parser(name, help=text, add_help=False)
    run = sub.add_parser("run", help="serve a nimblemcp Server over stdio or HTTP")
    run.add_argument("target", help="path/to/server.py[:object] or package.module[:object]")
    run.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    run.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    run.add_argument("--path", default="/mcp", help="HTTP endpoint path (default /mcp)")
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in _CLIENT_COMMANDS:
        from nimblemcp.cli._client_commands import main as client_main

        raise SystemExit(client_main(argv))
    args = _parser().parse_args(argv)
    if args.command == "run":
        if args.transport == "stdio":  # before the module runs: its print() is not protocol
            from nimblemcp.transports.stdio import protect_stdout

            protect_stdout()
        server = load_server(args.target)
        if args.transport == "stdio":
            server.run("stdio")
        else:
            server.run("http", host=args.host, port=args.port, path=args.path)


if __name__ == "__main__":
    main()
