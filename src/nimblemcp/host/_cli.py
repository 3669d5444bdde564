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
Imports the host group; must not import the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nimblemcp.errors import ConfigError, McpError

from ._cli_pins import held_notes, pinning_for, terminal_review
from ._events import HostEvent
from ._group import ClientGroup
from ._policy import ToolCall, allow_all
from ._supervisor import Supervision

__all__ = ["call_one", "list_all", "listen_all", "main"]


def _group(config: str, timeout: float, variables: Mapping[str, str] | None,
           **options: Any) -> ClientGroup:
    supervision = Supervision(connect_timeout=timeout, reconnect=False, listen=False)
    options.setdefault("pinning", pinning_for(config))
    return ClientGroup.from_config(config, variables=variables, supervision=supervision,
                                   **options)


async def list_all(
    config: str, *, timeout: float = 30.0, as_json: bool = False,
    variables: Mapping[str, str] | None = None,
) -> tuple[str, int]:
    """Every server's status and tools; the exit code is 1 when a server failed."""
    async with _group(config, timeout, variables) as group:
        for note in held_notes(group, config):
            print(note, file=sys.stderr)
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
        failed = any(s.status == "failed" for s in states.values())
        return text, 1 if failed else 0


async def call_one(
    config: str, name: str, arguments: Mapping[str, Any], *, timeout: float = 30.0,
    confirm: Callable[[ToolCall], bool] | None = None, assume_yes: bool = False,
    elicit: Callable[[str, dict[str, Any]], Any] | None = None,
    variables: Mapping[str, str] | None = None,
) -> tuple[str, int]:
    """Call `SERVER.TOOL` (or a catalog name); the result's text and an exit code."""
    server = name.partition(".")[0]
    async with _group(config, timeout, variables, confirm=confirm, on_elicit=elicit,
                      policy=allow_all if assume_yes else None,
                      pinning=pinning_for(config, terminal_review(config, server))) as group:
        for note in held_notes(group, config):
            print(note, file=sys.stderr)
        state = group.states.get(server)
        if state is not None and state.status != "connected":
            return f"server {server!r} is {state.status}: {state.error}", 1
        result = await group.call_tool(name, arguments)
        parts: list[str] = []
        for block in result.get("content") or []:
            if block.get("type") == "text":
                parts.append(str(block.get("text")))
            else:
                parts.append(json.dumps(block, ensure_ascii=False))
        if "structuredContent" in result and not parts:
            parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
        return "\n".join(parts), 1 if result.get("isError") else 0


def render(event: HostEvent) -> str:
    if event.kind == "status" and event.state is not None:
        extra = f": {event.state.error}" if event.state.error else ""
        return f"{event.server}  status {event.state.status}{extra}"
    if event.kind == "log" and event.raw is not None:
        return f"{event.server}  log {event.raw.get('level')}: {json.dumps(event.raw.get('data'))}"
    return f"{event.server}  {event.kind}" + (f" {event.uri}" if event.uri else "")


async def listen_all(
    config: str, emit: Callable[[str], None], *, timeout: float = 30.0,
    resources: Sequence[str] = (), seconds: float | None = None,
    variables: Mapping[str, str] | None = None,
) -> int:
    """Print every server's events (status, list changes, logs) until `seconds` or Ctrl-C."""
    group = ClientGroup.from_config(config, variables=variables, pinning=pinning_for(config),
                                    supervision=Supervision(connect_timeout=timeout))
    async with group.events() as events:
        await group.start()
        try:
            for name, state in group.states.items():
                emit(f"{name}  status {state.status}" + (f": {state.error}" if state.error else ""))
            for uri in resources:
                await group.subscribe(uri)
                emit(f"{group.server_for_uri(uri)}  subscribed {uri}")
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
    common.add_argument("--timeout", type=float, default=30.0, help="per-server connect timeout (s)")
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
    print(f"{call.server} wants to run {call.tool}({shown}). Allow? [y/N] ", end="",
          file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _elicit(server: str, params: dict[str, Any]) -> dict[str, Any]:
    print(f"{server} asks: {params.get('message')}", file=sys.stderr)
    schema = params.get("requestedSchema") or {}
    content: dict[str, Any] = {}
    for key, prop in (schema.get("properties") or {}).items():
        print(f"  {prop.get('title') or key}: ", end="", file=sys.stderr, flush=True)
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
    if args.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(levelname)s %(name)s: %(message)s")
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
        print(f"nimblemcp: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130 if args.command != "listen" else 0
    except McpError as exc:
        print(f"nimblemcp: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(text)
    return code
