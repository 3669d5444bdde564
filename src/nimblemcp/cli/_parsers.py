"""The `nimblemcp` command's parsers: the full one, and `run`'s alone.

`run` is on the cold-start path of every stdio server a host spawns (issue 18): `parse`
builds only the run parser for it, and no parser here imports shutil (with it bz2,
lzma, fnmatch) for the terminal width: `_Formatter` reads it as shutil would. What
they print is unchanged. Imports `nimblemcp.cli.run` (for `run`'s options) and nothing
else of ours.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

__all__ = ["full_parser", "parse"]


def _columns() -> int:
    """`shutil.get_terminal_size().columns`, the width argparse lays help out for,
    without importing shutil: `COLUMNS`, else the terminal of stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, given the width it would have read through shutil."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None, **more: Any) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width, **more)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser laid out by `_Formatter`; its subparsers are `_Parser`s too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


class _RunParser(_Parser):
    """`nimblemcp run`'s own parser, as `full_parser()` builds it, raising argparse's
    `ArgumentError` instead of exiting on an error."""

    def error(self, message: str) -> NoReturn:
        raise argparse.ArgumentError(None, message)


def parse(argv: list[str]) -> argparse.Namespace:
    """`full_parser().parse_args(argv)`. For `run ...` only the run parser is built: the
    same namespace (`command` first, then run's options), `--help` prints the same text
    (same prog, same layout), and any error falls back to the full parser, which reports
    it as before (some, such as unknown arguments, in its own usage)."""
    if not argv or argv[0] != "run":
        return full_parser().parse_args(argv)
    from nimblemcp.cli.run import add_arguments

    parser = _RunParser(prog="nimblemcp run")
    add_arguments(parser)
    try:
        return parser.parse_args(argv[1:], argparse.Namespace(command="run"))
    except argparse.ArgumentError:
        return full_parser().parse_args(argv)


def full_parser() -> argparse.ArgumentParser:
    """The parser of every command (the client ones, `dev` and `install` parse their own)."""
    parser = _Parser(
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
    sub.add_parser("login", help="log in to a server that uses OAuth (browser), for the client commands",
                   add_help=False)
    sub.add_parser("logout", help="forget the tokens of `nimblemcp login`", add_help=False)
    sub.add_parser("snapshot", help="print a server's catalog as canonical JSON (a lockfile)",
                   add_help=False)
    sub.add_parser("diff", help="compare two catalogs: breaking, security-relevant, compatible",
                   add_help=False)
    sub.add_parser("stubs", help="write a typed Python client module for a server", add_help=False)
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
    proxy.add_argument("--name", help="the name the proxy presents (default: the target's own)")
    proxy.add_argument("--mode", choices=("auto", "modern", "legacy"), default="auto",
                       help="how to reach the target (default: auto-detect its era)")
    proxy.add_argument("target", nargs=argparse.REMAINDER, help="an http(s):// URL, or -- command args...")
    return parser
