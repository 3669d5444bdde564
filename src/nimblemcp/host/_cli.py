"""The host commands over an `mcp.json`: `tools`, `call SERVER.TOOL`, `listen`.

    python -m nimblemcp.host tools --config mcp.json
    python -m nimblemcp.host call --config mcp.json docs.read_doc --arg name=brief.md
    python -m nimblemcp.host listen --config mcp.json --var workspaceFolder=$PWD

`main(argv)` takes the same words `nimblemcp tools|call|listen --config FILE ...` would
get, so the `nimblemcp` CLI can hand any command carrying `--config` to it. The work
itself is in the async functions `list_all`, `call_one` and `listen_all` (text out), for
other front ends. `call` asks in the terminal before a risky tool (see `_policy`) unless
`--yes`; elicitation questions are answered in the terminal too. A lockfile beside the
mcp.json pins the servers' catalogs (`_cli_pins`).

A server is not trusted with the terminal (issue 37): everything it says (names,
descriptions, results, errors, log lines, questions) passes `printable`, which shows
control characters (ESC, CR, the C1 set, bidirectional overrides) as `\\uXXXX` instead
of letting them move the cursor or rewrite the y/N question; errors are shown without
the configuration's secrets (`ServerConfig.redact`). `--timeout` bounds each server's
connection, each request (the call included) and the start-up as a whole: a server
cannot keep the command from finishing.
Imports the host group; must not import the server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nimblemcp.errors import ClientError, ConfigError, McpError

from ._cli_pins import held_notes, pinning_for, terminal_review
from ._events import HostEvent
from ._group import ClientGroup
from ._policy import ToolCall, allow_all
from ._supervisor import Supervision

__all__ = ["call_one", "list_all", "listen_all", "main", "printable"]

# What a terminal must not receive from a server: the C0 controls but tab and newline
# (ESC, CR, BS...), DEL, the C1 controls (0x9B is a CSI on some terminals) and the
# bidirectional marks, overrides and isolates that reorder what is shown.
_UNSAFE = (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0),
           0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPED = {c: f"\\u{c:04x}" for c in _UNSAFE}  # also a valid escape inside a JSON string
_ESCAPED_ONE_LINE = {**_ESCAPED, 0x09: "\\u0009", 0x0A: "\\u000a"}
# start-up may take the connect timeout, plus this for the supervisors' own work
_START_SLACK = 5.0


def printable(text: str, *, one_line: bool = False) -> str:
    """`text` safe for a terminal: control characters shown as `\\uXXXX` (`one_line`:
    newlines and tabs too)."""
    return text.translate(_ESCAPED_ONE_LINE if one_line else _ESCAPED)


def _group(config: str, timeout: float, variables: Mapping[str, str] | None,
           supervision: Supervision | None = None, **options: Any) -> ClientGroup:
    supervision = supervision or Supervision(connect_timeout=timeout, reconnect=False,
                                             listen=False)
    options.setdefault("pinning", pinning_for(config))
    return ClientGroup.from_config(config, variables=variables, supervision=supervision,
                                   client_options={"timeout": timeout}, **options)


async def _start(group: ClientGroup, timeout: float) -> None:
    """Start the group, waiting at most about `timeout` whatever the servers do (those
    still connecting then show as `connecting`)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout + _START_SLACK):
            await group.start()


def _redacted(group: ClientGroup, text: str) -> str:
    for server in group.servers.values():
        text = server.redact(text)
    return text


async def list_all(
    config: str, *, timeout: float = 30.0, as_json: bool = False,
    variables: Mapping[str, str] | None = None,
) -> tuple[str, int]:
    """Every server's status and tools; the exit code is 1 when a server failed."""
    group = _group(config, timeout, variables)
    try:
        await _start(group, timeout)
        for note in held_notes(group, config):
            print(printable(note), file=sys.stderr)
        states = group.states
        catalog = group.catalog
        if as_json:
            data = {name: {"status": s.status, "error": s.error,
                           "tools": [t.as_definition() for t in catalog.tools if t.server == name]}
                    for name, s in states.items()}
            text = json.dumps(data, indent=2, ensure_ascii=False)
        else:
            lines: list[str] = []
            for name, state in states.items():
                head = f"{name}  [{state.status}]"
                if state.error:
                    head += f"  {state.error}"
                lines.append(head)
                for tool in catalog.tools:
                    if tool.server == name:
                        summary = str(tool.definition.get("description") or "").strip()
                        summary = summary.splitlines()[0] if summary else ""
                        lines.append(f"  {name}.{tool.original}" + (f"  - {summary}" if summary else ""))
            text = "\n".join(lines)
        failed = any(s.status != "connected" and s.status != "disabled" for s in states.values())
        return printable(text), 1 if failed else 0
    finally:
        await group.close()


async def call_one(
    config: str, name: str, arguments: Mapping[str, Any], *, timeout: float = 30.0,
    confirm: Callable[[ToolCall], bool] | None = None, assume_yes: bool = False,
    elicit: Callable[[str, dict[str, Any]], Any] | None = None,
    variables: Mapping[str, str] | None = None,
) -> tuple[str, int]:
    """Call `SERVER.TOOL` (or a catalog name); the result's text and an exit code."""
    server = name.partition(".")[0]
    group = _group(config, timeout, variables, confirm=confirm, on_elicit=elicit,
                   policy=allow_all if assume_yes else None,
                   pinning=pinning_for(config, terminal_review(config, server)))
    try:
        await _start(group, timeout)
        for note in held_notes(group, config):
            print(printable(note), file=sys.stderr)
        state = group.states.get(server)
        if state is not None and state.status != "connected":
            return printable(f"server {server!r} is {state.status}: {state.error}"), 1
        try:
            result = await group.call_tool(name, arguments)
        except ClientError as exc:  # our words (a URL, a command line): no secrets in them
            exc.args = (_redacted(group, str(exc)),)
            raise
        parts: list[str] = []
        for block in result.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text")))
            else:
                parts.append(json.dumps(block, ensure_ascii=False))
        if "structuredContent" in result and not parts:
            parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
        return printable("\n".join(parts)), 1 if result.get("isError") else 0
    finally:
        await group.close()


def render(event: HostEvent) -> str:
    """One event as one terminal-safe line."""
    if event.kind == "status" and event.state is not None:
        extra = f": {event.state.error}" if event.state.error else ""
        line = f"{event.server}  status {event.state.status}{extra}"
    elif event.kind == "log" and event.raw is not None:
        line = (f"{event.server}  log {event.raw.get('level')}: "
                f"{json.dumps(event.raw.get('data'), ensure_ascii=False)}")
    elif event.kind == "warning" and event.raw is not None:
        line = f"{event.server}  warning: {event.raw.get('message')}"
    else:
        line = f"{event.server}  {event.kind}" + (f" {event.uri}" if event.uri else "")
    return printable(line, one_line=True)


async def listen_all(
    config: str, emit: Callable[[str], None], *, timeout: float = 30.0,
    resources: Sequence[str] = (), seconds: float | None = None,
    variables: Mapping[str, str] | None = None,
) -> int:
    """Print every server's events (status, list changes, logs) until `seconds` or Ctrl-C."""
    group = _group(config, timeout, variables, Supervision(connect_timeout=timeout))
    async with group.events() as events:
        try:
            await _start(group, timeout)
            for name, state in group.states.items():
                emit(render(HostEvent(name, "status", state=state)))
            for uri in resources:
                await group.subscribe(uri)
                emit(printable(f"{group.server_for_uri(uri)}  subscribed {uri}", one_line=True))
            async with asyncio.timeout(seconds):
                async for event in events:
                    emit(render(event))
        except TimeoutError:
            pass
        finally:
            await group.close()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nimblemcp", description="Host commands over an mcp.json.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", required=True, metavar="FILE",
                        help="an mcp.json (mcpServers, or VS Code servers)")
    common.add_argument("--timeout", type=float, default=30.0,
                        help="seconds for each server to connect, and for each request")
    common.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="a value for ${NAME} in the configuration (repeatable)")
    common.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("tools", parents=[common], help="every server's status and tools")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("call", parents=[common], help="call SERVER.TOOL")
    p.add_argument("name", metavar="SERVER.TOOL")
    p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--args", dest="args_json", metavar="JSON")
    p.add_argument("--yes", action="store_true", help="do not ask before risky tools")
    p = sub.add_parser("listen", parents=[common], help="print every server's events")
    p.add_argument("--resource", action="append", default=[], metavar="URI")
    p.add_argument("--seconds", type=float, default=None, help="stop after this long")
    return parser


def _arguments(pairs: Sequence[str], raw: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if raw is not None:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict):
            raise ValueError("--args must be a JSON object")
        out.update(parsed)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--arg wants KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--var wants NAME=VALUE, got {text!r}")
    return key, value


def _ask(call: ToolCall) -> bool:
    shown = json.dumps(dict(call.arguments), ensure_ascii=False)
    question = printable(f"{call.server} wants to run {call.tool}({shown})", one_line=True)
    print(f"{question}. Allow? [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _elicit(server: str, params: dict[str, Any]) -> dict[str, Any]:
    print(printable(f"{server} asks: {params.get('message')}"), file=sys.stderr)
    schema = params.get("requestedSchema") or {}
    properties = schema.get("properties") if isinstance(schema, dict) else None
    content: dict[str, Any] = {}
    for key, prop in (properties if isinstance(properties, dict) else {}).items():
        title = prop.get("title") if isinstance(prop, dict) else None
        print(f"  {printable(str(title or key), one_line=True)}: ", end="", file=sys.stderr,
              flush=True)
        answer = sys.stdin.readline().strip()
        if answer:
            try:
                content[key] = json.loads(answer)
            except json.JSONDecodeError:
                content[key] = answer
    return {"action": "accept", "content": content}


def main(argv: Sequence[str]) -> int:
    """`tools|call|listen --config FILE ...`; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(list(argv))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Printable("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        handlers=[handler])
    try:
        variables = dict(_pair(v) for v in args.var)
        if args.command == "tools":
            text, code = asyncio.run(list_all(args.config, timeout=args.timeout, as_json=args.json,
                                              variables=variables))
        elif args.command == "call":
            arguments = _arguments(args.arg, args.args_json)
            text, code = asyncio.run(call_one(args.config, args.name, arguments,
                                              timeout=args.timeout, confirm=_ask,
                                              assume_yes=args.yes, elicit=_elicit,
                                              variables=variables))
        else:
            return asyncio.run(listen_all(args.config, lambda line: print(line, flush=True),
                                          timeout=args.timeout, resources=args.resource,
                                          seconds=args.seconds, variables=variables))
    except (ConfigError, ValueError) as exc:
        print(printable(f"nimblemcp: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130 if args.command != "listen" else 0
    except McpError as exc:
        print(printable(f"nimblemcp: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return 1
    print(text)
    return code


class _Printable(logging.Formatter):
    """Log lines (a server's stderr among them) without control characters."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))
