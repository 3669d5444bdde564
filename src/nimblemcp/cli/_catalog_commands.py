"""`nimblemcp snapshot|diff|stubs`: a server's catalog as a file, what changed, typed stubs.

    nimblemcp snapshot http://127.0.0.1:8000/mcp > server.lock.json
    nimblemcp snapshot --config mcp.json --write-lock          # pin every server (mcp.lock.json)
    nimblemcp diff server.lock.json -- python server.py        # exit status by the worst change
    nimblemcp diff --config mcp.json                           # the pins against the live servers
    nimblemcp stubs examples/docs_server/server.py -o docs_client.py

A live TARGET is what the client commands take (`_client_commands.split_target`): an
http(s):// URL, a server file `path.py[:name]` (spawned with `nimblemcp run`), or a
command line after `--`; or `--config FILE NAME`, one entry of an mcp.json, reached as
the host reaches it (`ClientGroup`). `diff` and `stubs` also take a catalog file: a
snapshot, or a lockfile (`--server NAME` picks one of its servers). A command line
after `--` is always the last TARGET (`diff OLD -- command` compares OLD with it).

Exit status: `snapshot` and `stubs` 0, or 2 on an error; `diff` 0 no change, 1 only
compatible changes, 3 breaking ones, 4 security-relevant ones (`EXIT_CODES`), 2 an
error. Must not import the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nimblemcp.cli._client_commands import (
    SPAWNED_PROBE_TIMEOUT,
    UsageError,
    _transport,
    add_connection_options,
    split_target,
)

__all__ = ["diff", "snapshot", "stubs"]

Catalogs = dict[str, dict[str, Any]]  # server name -> snapshot


class _Failed(Exception):
    """A command that cannot go on: its message goes to stderr, the exit status is 2."""


def _parser(command: str, about: str, words: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"nimblemcp {command}", description=about,
        epilog="A live TARGET is an http(s):// URL, a server file (path.py[:name]) or a "
        "command line after `--`; --config FILE NAME is one server of an mcp.json.")
    p.add_argument("words", nargs="*", metavar=words)
    p.add_argument("--config", metavar="MCP_JSON", help="servers of an mcp.json (NAME: just that one)")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="a value for ${NAME} in the mcp.json (repeatable)")
    add_connection_options(p)
    return p


# -- where catalogs come from --------------------------------------------------------


async def _live(target: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The snapshot of one live server (URL, spawned command, server file)."""
    from nimblemcp.catalog import take_snapshot
    from nimblemcp.client import Client, RetryPolicy

    options: dict[str, Any] = {"timeout": args.timeout}
    if isinstance(target, list):  # spawned by us: a slow start is no sign of a legacy server
        options["retry_policy"] = RetryPolicy(probe_timeout=min(args.timeout, SPAWNED_PROBE_TIMEOUT))
    async with Client(_transport(target, args), **options) as client:
        return await take_snapshot(client)


async def _configured(path: str, names: Sequence[str], args: argparse.Namespace) -> Catalogs:
    """Snapshots of servers of an mcp.json (all enabled ones, or `names`), each reached
    as a `ClientGroup` reaches it; one that does not connect is an error."""
    from nimblemcp.host import ClientGroup, Supervision, load_config

    servers = load_config(path, variables=_variables(args))
    unknown = [n for n in names if n not in servers]
    if unknown:
        raise _Failed(f"{path} has no server named {', '.join(map(repr, unknown))} "
                      f"(it has {', '.join(servers) or 'none'})")
    chosen = {n: c for n, c in servers.items() if (n in names if names else not c.disabled)}
    supervision = Supervision(connect_timeout=args.timeout, reconnect=False, listen=False)
    async with ClientGroup(chosen, supervision=supervision) as group:
        failed = {n: s for n, s in group.states.items() if s.status not in ("connected", "disabled")}
        if failed:
            raise _Failed("; ".join(f"server {n!r} is {s.status}: {s.error}" for n, s in failed.items()))
        return {name: group.snapshot(name) for name, state in group.states.items()
                if state.status == "connected"}


def _variables(args: argparse.Namespace) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in args.var:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--var wants NAME=VALUE, got {pair!r}")
        found[key] = value
    return found


def _from_file(path: str) -> tuple[str, Catalogs]:
    """`("catalog" | "lock", {server: snapshot})` from a snapshot or lockfile."""
    from nimblemcp.catalog import load_catalog

    try:
        kind, data = load_catalog(path)
    except ValueError as exc:
        raise _Failed(str(exc)) from None
    if kind == "catalog":
        return kind, {str(data["server"].get("name") or path): data}
    return kind, data


def _is_catalog_file(word: str) -> bool:
    return not word.startswith(("http://", "https://")) and not word.endswith(".py") \
        and ".py:" not in word and os.path.isfile(word)


async def _source(word: Any, args: argparse.Namespace) -> tuple[str, Catalogs]:
    """A catalog file, or a live target (given as `split_target` found it)."""
    if isinstance(word, str) and _is_catalog_file(word):
        return _from_file(word)
    snap = await _live(word, args)
    return "catalog", {str(snap["server"].get("name") or "server"): snap}


def _one(kind: str, found: Catalogs, where: str, server: str | None) -> dict[str, Any]:
    """The one snapshot of a side: a snapshot file's, or a lockfile's `server`."""
    if kind == "catalog":
        return next(iter(found.values()))
    if server is not None:
        if server not in found:
            raise _Failed(f"{where} has no server {server!r} (it has {', '.join(found) or 'none'})")
        return found[server]
    if len(found) != 1:
        raise _Failed(f"{where} holds {len(found)} servers ({', '.join(found)}): pick one with --server NAME")
    return next(iter(found.values()))


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, work: Any,
         error_status: int = 2) -> int:
    """Run a command's coroutine; errors become one stderr line and status 2."""
    from nimblemcp.errors import ConfigError, McpError

    if args.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(asyncio.run(work))
    except UsageError as exc:
        parser.error(str(exc))
    except (_Failed, ConfigError) as exc:
        print(f"nimblemcp: {exc}", file=sys.stderr)
    except McpError as exc:
        from nimblemcp.cli._render import show_error

        show_error(exc)
    except RecursionError:  # a schema nested past Python's stack: say so, no traceback
        print("nimblemcp: the catalog is nested too deeply to process", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return error_status


def _write(text: str, output: str | None) -> None:
    if output is None or output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(output).write_text(text, encoding="utf-8")


# -- snapshot ------------------------------------------------------------------------


def snapshot(argv: Sequence[str]) -> int:
    """`nimblemcp snapshot TARGET`: the canonical catalog as JSON."""
    parser = _parser("snapshot", "Print a server's catalog as canonical JSON (a lockfile). With "
                     "--config, every server of the mcp.json (one lockfile), or the one NAME.",
                     "[TARGET | NAME]")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.add_argument("--write-lock", action="store_true",
                        help="with --config: pin the servers in the lockfile beside the mcp.json "
                        "(mcp.lock.json), showing what changed since their last pins")
    words, command_line = _split(argv)
    args = parser.parse_intermixed_args(words)
    return _run(parser, args, _snapshot(args, command_line))


async def _snapshot(args: argparse.Namespace, command_line: list[str]) -> int:
    from nimblemcp.catalog import Lockfile, dumps

    if args.config is None:
        if args.write_lock:
            raise UsageError("--write-lock needs --config MCP_JSON (the lockfile goes beside it)")
        target, rest = split_target(list(args.words), command_line)
        if target is None or rest:
            raise UsageError("give one TARGET: an http(s):// URL, a server file, or a command line after `--`")
        _write(dumps(await _live(target, args)), args.output)
        return 0
    if command_line:
        raise UsageError("--config takes server NAMEs, not a command line")
    found = await _configured(args.config, args.words, args)
    if args.write_lock:
        return _write_lock(args.config, found)
    if len(args.words) == 1:
        _write(dumps(found[args.words[0]]), args.output)
    else:
        _write(dumps(Lockfile(None, found).to_json()), args.output)
    return 0


def _write_lock(config: str, found: Catalogs) -> int:
    from nimblemcp.catalog import Lockfile, diff_catalogs, lock_path_for

    path = lock_path_for(config)
    try:
        lock = Lockfile.load(path)
    except ValueError as exc:
        raise _Failed(f"{exc}; remove it to pin every server again") from None
    for name, snap in found.items():
        before = lock.get(name)
        if before is None:
            print(f"{name}: pinned", file=sys.stderr)
        else:
            changes = diff_catalogs(before, snap, server=name)
            if not changes:
                print(f"{name}: unchanged", file=sys.stderr)
            else:
                print(f"{name}: pin updated, accepting:", file=sys.stderr)
                sys.stderr.write(changes.render())
        lock.set(name, snap)
    lock.save()
    print(f"wrote {path}", file=sys.stderr)
    return 0


# -- diff ------------------------------------------------------------------------------


def diff(argv: Sequence[str]) -> int:
    """`nimblemcp diff OLD NEW`: every change, classified; the exit status says the worst."""
    parser = _parser("diff", "Compare two catalogs (snapshot or lock files, or live TARGETs) and "
                     "classify every change. Exit status: 0 no change, 1 compatible changes only, "
                     "3 breaking changes, 4 security-relevant changes, 2 an error. With --config: "
                     "the lockfile beside the mcp.json against its live servers.",
                     "OLD NEW | NAME")
    parser.add_argument("--json", action="store_true", help="print the changes as JSON (for CI)")
    parser.add_argument("--server", metavar="NAME",
                        help="the server to compare when a lockfile holds several")
    words, command_line = _split(argv)
    args = parser.parse_intermixed_args(words)
    return _run(parser, args, _diff(args, command_line))


async def _diff(args: argparse.Namespace, command_line: list[str]) -> int:
    from nimblemcp.catalog import CatalogDiff, diff_catalogs, diff_locks, lock_path_for

    found: CatalogDiff
    if args.config is not None:
        if command_line:
            raise UsageError("--config takes server NAMEs, not a command line")
        path = lock_path_for(args.config)
        if not path.exists():
            raise _Failed(f"no lockfile {path}: pin the servers first with "
                          f"`nimblemcp snapshot --config {args.config} --write-lock`")
        _, pinned = _from_file(str(path))
        names = list(args.words)
        live = await _configured(args.config, names, args)
        if names:
            pinned = {n: s for n, s in pinned.items() if n in names}
        found = diff_locks(pinned, live)
    else:
        sides: list[Any] = list(args.words)
        if command_line:
            sides.append(command_line)
        if len(sides) != 2:
            raise UsageError("diff wants OLD and NEW: two catalog files or live TARGETs "
                             "(a command line after `--` is the last one)")
        for side in sides:
            if isinstance(side, str) and not _is_catalog_file(side):
                target, rest = split_target([side], [])
                if target is None or rest:
                    raise UsageError(f"{side!r} is neither a catalog file nor a live TARGET")
        loaded = [await _source(_target(side), args) for side in sides]
        (old_kind, old), (new_kind, new) = loaded
        if old_kind == new_kind == "lock" and args.server is None:
            found = diff_locks(old, new)
        else:
            found = diff_catalogs(_one(old_kind, old, _shown(sides[0]), args.server),
                                  _one(new_kind, new, _shown(sides[1]), args.server))
    if args.json:
        print(json.dumps(found.to_json(), indent=2, ensure_ascii=True))
    else:
        sys.stdout.write(found.render())
    return found.exit_code


def _target(side: Any) -> Any:
    if isinstance(side, str) and not _is_catalog_file(side):
        return split_target([side], [])[0]
    return side


def _shown(side: Any) -> str:
    return " ".join(side) if isinstance(side, list) else str(side)


# -- stubs -----------------------------------------------------------------------------


def stubs(argv: Sequence[str]) -> int:
    """`nimblemcp stubs TARGET -o module.py`: a typed client module for a server."""
    parser = _parser("stubs", "Write a typed Python client module for a server: one async method "
                     "per tool, resource template, resource and prompt (passes mypy --strict). "
                     "TARGET may also be a snapshot or lockfile.", "TARGET | NAME")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.add_argument("--class-name", metavar="NAME",
                        help="the generated class's name (default: from the server's name)")
    parser.add_argument("--server", metavar="NAME", help="the server to use when a lockfile holds several")
    words, command_line = _split(argv)
    args = parser.parse_intermixed_args(words)
    return _run(parser, args, _stubs(args, command_line))


async def _stubs(args: argparse.Namespace, command_line: list[str]) -> int:
    from nimblemcp.catalog import generate_stubs

    if args.config is not None:
        if len(args.words) != 1 or command_line:
            raise UsageError("--config MCP_JSON takes the NAME of one of its servers")
        found = await _configured(args.config, args.words, args)
        snap = found[args.words[0]]
    else:
        words = list(args.words)
        if len(words) == 1 and not command_line and _is_catalog_file(words[0]):
            kind, catalogs = _from_file(words[0])
            snap = _one(kind, catalogs, words[0], args.server)
        else:
            target, rest = split_target(words, command_line)
            if target is None or rest:
                raise UsageError("give one TARGET: an http(s):// URL, a server file, a command line "
                                 "after `--`, or a catalog file")
            snap = await _live(target, args)
    _write(generate_stubs(snap, name=args.class_name), args.output)
    if args.output not in (None, "-"):
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
