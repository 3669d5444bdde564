"""The `nimblemcp` command: thin over the library.

argparse rather than click/typer on purpose: `nimblemcp run` is on the cold-start
path of every stdio server a host spawns. The client commands (discover, tools, call,
read, prompt, listen) live in `_client_commands`, `dev` in `_dev`, `run` in `run`
(`RunSettings`: flags, environment and config file), `install` in
`_install`: each is imported only when asked for, so `run` imports none of them (nor
the client); `proxy` imports `nimblemcp.proxy` when asked for. A missing optional dependency ends the command with one line naming the
extra to install, not a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from nimblemcp._extras import MissingExtraError
from nimblemcp.server._server import Server

__all__ = ["endpoint_url", "load_server", "main"]

_CLIENT_COMMANDS = ("discover", "tools", "call", "read", "prompt", "listen")
_OWN_PARSERS = {"dev": "nimblemcp.cli._dev", "install": "nimblemcp.cli._install"}


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
    sub.add_parser("dev", help="run a server for development: reload on change, request log",
                   add_help=False)
    sub.add_parser("install", help="add a server to a host's config (Claude, Cursor, VS Code)",
                   add_help=False)
    from nimblemcp.cli.run import add_arguments

    add_arguments(sub.add_parser("run", help="serve a nimblemcp Server over stdio or HTTP"))
    keys = sub.add_parser("keys", help="make requestState sealing keys")
    keys.add_argument("action", choices=("new",), help="new: print a fresh key")
    proxy = sub.add_parser("proxy", help="serve another MCP server (URL or command) as a 2026-07-28 server",
                           usage="nimblemcp proxy [options] (URL | -- command args...)")
    proxy.add_argument("--transport", choices=("stdio", "http"), default="http")
    proxy.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    proxy.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    proxy.add_argument("--path", default="/mcp", help="HTTP endpoint path (default /mcp)")
    proxy.add_argument("--mode", choices=("auto", "modern", "legacy"), default="auto",
                       help="how to reach the target (default: auto-detect its era)")
    proxy.add_argument("target", nargs=argparse.REMAINDER, help="an http(s):// URL, or -- command args...")
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        _main(argv)
    except MissingExtraError as exc:
        print(f"nimblemcp: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def _main(argv: list[str]) -> None:
    head = argv[:argv.index("--")] if "--" in argv else argv
    if head and head[0] not in (*_CLIENT_COMMANDS, *_OWN_PARSERS, "run", "keys", "-h", "--help"):
        # Client options or the URL before the command word: `nimblemcp URL tools`.
        for i, word in enumerate(head):
            if word in _CLIENT_COMMANDS:
                argv = [word, *argv[:i], *argv[i + 1:]]
                break
    if argv and argv[0] in _CLIENT_COMMANDS:
        from nimblemcp.cli._client_commands import main as client_main

        raise SystemExit(client_main(argv))
    if argv and argv[0] in _OWN_PARSERS:
        command: Any = importlib.import_module(_OWN_PARSERS[argv[0]])
        raise SystemExit(command.main(argv[1:]))
    args = _parser().parse_args(argv)
    if args.command == "run":
        from nimblemcp.cli.run import main as run_main

        run_main(args)
    elif args.command == "proxy":
        from nimblemcp.proxy import proxy

        target: Any
        if args.target[:1] == ["--"] and len(args.target) > 1:
            target = args.target[1:]  # a command line: the target runs over stdio
        elif len(args.target) == 1 and args.target[0].startswith(("http://", "https://")):
            target = args.target[0]
        else:
            _parser().error("proxy needs options first, then an http(s):// URL or `-- command args...`")
        front = proxy(target, mode=args.mode)
        if args.transport == "stdio":
            front.run("stdio")
        else:
            front.run("http", host=args.host, port=args.port, path=args.path)
    elif args.command == "keys":
        from nimblemcp.server._sealing import new_key

        print(new_key())


def endpoint_url(host: str, port: int, path: str) -> str:
    """The URL a client uses for an endpoint bound to `host:port` at `path`."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # reachable from this machine; other machines use its address
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}{path if path.startswith('/') else '/' + path}"


if __name__ == "__main__":
    main()
