"""The `nimblemcp` command: thin over the library.

argparse rather than click/typer on purpose: `nimblemcp run` is on the cold-start
path of every stdio server a host spawns. The client commands (discover, tools, call,
read, prompt, listen) live in `_client_commands`, `dev` in `_dev`, `run` in `run`
(`RunSettings`: flags, environment and config file), `install` in `_install`, `login`
and `logout` in `_login`, `snapshot`, `diff` and `stubs` in `_catalog_commands`: each
is imported only when asked for, so `run` imports none of them (nor the client);
`proxy` imports `nimblemcp.proxy` when asked for. The parsers are in `_parsers`; loading
the server file needs no pathlib (issue 18). A missing optional dependency ends the
command with one line naming the extra to install, not a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import MissingExtraError

if TYPE_CHECKING:
    from nimblemcp.server._server import Server

__all__ = ["endpoint_url", "load_server", "main"]

_CLIENT_COMMANDS = ("discover", "tools", "call", "read", "prompt", "listen")
# command -> "module:function" taking the arguments after the command word
_OWN_PARSERS = {"dev": "nimblemcp.cli._dev:main", "install": "nimblemcp.cli._install:main",
                "login": "nimblemcp.cli._login:login", "logout": "nimblemcp.cli._login:logout",
                "snapshot": "nimblemcp.cli._catalog_commands:snapshot",
                "diff": "nimblemcp.cli._catalog_commands:diff",
                "stubs": "nimblemcp.cli._catalog_commands:stubs"}


def load_server(target: str) -> Server:
    """Load `path/to/file.py[:name]` or `package.module[:name]` and return its Server."""
    from nimblemcp.server._server import Server

    spec_part, _, attr = target.partition(":")
    if target.count(":") > 1 or (len(spec_part) == 1 and spec_part.isalpha()):
        spec_part, _, attr = target.rpartition(":")  # Windows drive letters
    path = _pure_path(spec_part)
    if spec_part.endswith(".py") or _exists(path):
        if not _exists(path):
            raise SystemExit(f"nimblemcp: no such file: {spec_part}")
        import importlib.util

        sys.path.insert(0, os.path.dirname(os.path.realpath(path)))
        stem = _stem(path)
        spec = importlib.util.spec_from_file_location(stem, path)
        if spec is None or spec.loader is None:
            raise SystemExit(f"nimblemcp: cannot import {spec_part}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[stem] = module
        spec.loader.exec_module(module)
    else:
        import importlib

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


# `load_server` without pathlib on POSIX (pathlib imports urllib.parse and ipaddress:
# ~16M instructions on the start-up path; issue 18). These three give what
# `pathlib.Path` gives: its normal form (`str(Path(s))`, which becomes the module's
# `__file__`), `exists()` and `stem`; `Path.resolve()` is `os.path.realpath`.
# Elsewhere (Windows: drives, backslashes) they ask pathlib itself.


def _pure_path(text: str) -> str:
    """`str(pathlib.Path(text))`: on POSIX, empty and `.` parts dropped, `//` kept as a root."""
    if os.name != "posix":
        from pathlib import Path

        return str(Path(text))
    root = ""
    if text.startswith("/"):
        rest = text.lstrip("/")
        root = "//" if len(text) - len(rest) == 2 else "/"
        text = rest
    return root + "/".join(part for part in text.split("/") if part and part != ".") or "."


def _exists(path: str) -> bool:
    """`pathlib.Path(path).exists()`: only the "no such file" kinds of error mean False."""
    if os.name != "posix":
        from pathlib import Path

        return Path(path).exists()
    import errno

    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            raise
        return False
    except ValueError:  # not representable (an embedded NUL)
        return False
    return True


def _stem(path: str) -> str:
    """`pathlib.Path(path).stem`: the last part without its last suffix."""
    if os.name != "posix":
        from pathlib import Path

        return Path(path).stem
    name = "" if path == "." else os.path.basename(path)
    i = name.rfind(".")
    return name[:i] if 0 < i < len(name) - 1 else name


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
        import importlib

        module, _, function = _OWN_PARSERS[argv[0]].partition(":")
        command: Any = getattr(importlib.import_module(module), function)
        raise SystemExit(command(argv[1:]))
    from nimblemcp.cli._parsers import parse

    args: Any = parse(argv)
    if args.command == "run":
        from nimblemcp.cli.run import main as run

        run(args)
    elif args.command == "proxy":
        from nimblemcp.proxy import proxy

        target: Any
        if args.target[:1] == ["--"] and len(args.target) > 1:
            target = args.target[1:]  # a command line: the target runs over stdio
        elif len(args.target) == 1 and args.target[0].startswith(("http://", "https://")):
            target = args.target[0]
        else:
            from nimblemcp.cli._parsers import full_parser

            full_parser().error("proxy needs options first, then an http(s):// URL or `-- command args...`")
        front = proxy(target, mode=args.mode, name=args.name)
        if args.transport == "stdio":
            front.run("stdio")
        else:
            front.run("http", host=args.host, port=args.port, path=args.path)
    elif args.command == "keys":
        from nimblemcp.server._sealing import new_key

        print(new_key())


def endpoint_url(host: str, port: int, path: str, scheme: str = "http") -> str:
    """The URL a client uses for an endpoint bound to `host:port` at `path`."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # reachable from this machine; other machines use its address
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}{path if path.startswith('/') else '/' + path}"


if __name__ == "__main__":
    main()
