"""`nimblemcp discover|tools|call|read|prompt|listen TARGET ...`: poke a server.

TARGET is an `http(s)://` URL or a server file `path.py[:name]` (spawned with
`nimblemcp run` over stdio), anywhere among the words and options, or everything after
`--` is a command line to spawn over stdio (`split_target`, which `stubs`, `snapshot`
and `diff` share):

    nimblemcp tools http://127.0.0.1:8000/mcp
    nimblemcp call search_docs --arg query=risk -- python server.py
    nimblemcp call search_docs http://127.0.0.1:8000/mcp --arg query=risk
    nimblemcp listen --tools --resource docs://brief.md -- python server.py

Readable text by default, `--json` for scripts (stdout is the result; what happens on
the way goes to stderr as JSON lines). While a request runs, the tool's progress
(a bar on a terminal, lines otherwise) and the server's log messages (`--log-level`)
show on stderr. `call` asks elicitation questions in the terminal and refuses sampling
unless `--sample-reply` is given; `call --tasks` lets the tool run as a task and
prints its status changes on stderr. `--cafile PEM` trusts a CA bundle for an
https:// server (as `SSL_CERT_FILE` does). An HTTP server is sent the token given
(`--bearer`, `NIMBLEMCP_BEARER`, an Authorization `--header`) or else the tokens of
`nimblemcp login URL` (`_cli_auth`), and its refusals are told in CLI words. A server
without tools says "no tools"; a name it does not have is answered with the names that
come close. Loaded only for these commands, so `nimblemcp run` never imports the
client; must not import the server.

A server spawned over stdio gets a longer era probe than the library's (COMPAT-C06:
silence on stdio means a 2025-11-25 server): the process is ours and was just started,
so a slow start (a loaded machine, heavy imports) is no sign of a legacy server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from nimblemcp.cli import _render as r
from nimblemcp.types._meta import LOG_LEVELS

__all__ = ["COMMANDS", "add_connection_options", "main", "split_target"]

COMMANDS = ("discover", "tools", "call", "read", "prompt", "listen")
# Seconds a stdio server we spawned may take to answer the `server/discover` probe
# before it counts as a 2025-11-25 server (capped by --timeout).
SPAWNED_PROBE_TIMEOUT = 30.0


HELP = {"discover": "server/discover", "tools": "list the tools", "call": "call a tool",
        "read": "read a resource (no URI: list resources and templates)",
        "prompt": "get a prompt (no NAME: list them)",
        "listen": "print subscription events until Ctrl-C"}


def _parser(command: str) -> argparse.ArgumentParser:
    """One command's parser; its words and options may come in any order."""
    p = argparse.ArgumentParser(
        prog=f"nimblemcp {command}", description=f"{HELP[command]}. TARGET is an http(s):// "
        "URL or a server file (path.py[:name]) anywhere on the line, or the server's command "
        "line after `--` (stdio).")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    add_connection_options(p)
    p.add_argument("--log-level", choices=(*LOG_LEVELS, "off"), default="info",
                   help="the server's log messages to show on stderr (default info)")
    words = {"discover": "[TARGET]", "tools": "[TARGET]", "call": "[TARGET] NAME",
             "read": "[TARGET] [URI]", "prompt": "[TARGET] [NAME]", "listen": "[TARGET]"}
    p.add_argument("words", nargs="*", metavar=words[command])
    if command in ("tools", "call", "listen"):
        # Read by `main` before this parser (the host commands parse their own words);
        # listed here so that `--help` shows it.
        p.add_argument("--config", metavar="MCP_JSON",
                       help="every server of an mcp.json instead of one TARGET (call takes "
                       "SERVER.TOOL; see `python -m nimblemcp.host --help`)")
    if command == "call":
        p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                       help="an argument; VALUE is parsed as JSON when it parses, else a string")
        p.add_argument("--args", dest="args_json", metavar="JSON",
                       help="all arguments as a JSON object")
        p.add_argument("--sample-reply", metavar="TEXT",
                       help="answer sampling requests with this text (refused otherwise)")
        p.add_argument("--tasks", action="store_true",
                       help="declare the tasks extension: the tool may run as a task, which is "
                       "polled to its end (status changes go to stderr)")
    elif command == "prompt":
        p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE")
    elif command == "listen":
        p.add_argument("--tools", action="store_true", help="tools/list_changed")
        p.add_argument("--prompts", action="store_true", help="prompts/list_changed")
        p.add_argument("--resources", action="store_true", help="resources/list_changed")
        p.add_argument("--resource", action="append", default=[], metavar="URI",
                       help="resources/updated for this URI (repeatable)")
    return p


def add_connection_options(p: argparse.ArgumentParser) -> None:
    """How to reach a TARGET: the options every command that connects to one takes."""
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout (s)")
    p.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                   help="extra HTTP header (repeatable)")
    p.add_argument("--cafile", metavar="PEM",
                   help="trust the CA certificates in this file for https:// (SSL_CERT_FILE also works)")
    p.add_argument("--bearer", metavar="TOKEN",
                   help="an OAuth access token to send (default: $NIMBLEMCP_BEARER, else the "
                   "tokens of `nimblemcp login URL`)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log to stderr (including a stdio server's stderr)")


class UsageError(Exception):
    pass


def _split_target(
    args: argparse.Namespace, command_line: list[str]
) -> tuple[Any, list[str]]:
    """The Client target and the remaining positional words (the URL may be any word)."""
    most = {"discover": 0, "tools": 0, "listen": 0, "call": 1, "read": 1, "prompt": 1}[args.command]
    target, words = split_target(list(args.words), command_line)
    if target is None:
        raise UsageError("give an http(s):// URL, a server file (server.py[:name]), or the "
                         "server's command line after `--`")
    if len(words) > most:
        raise UsageError(f"unexpected argument(s): {' '.join(words[most:])}")
    return target, words


def split_target(words: list[str], command_line: list[str]) -> tuple[Any, list[str]]:
    """The Client target among the words and the words left: an http(s):// URL (any
    word), a server file `path.py[:name]` (spawned with `nimblemcp run` over stdio), or
    the command line after `--`; None when there is none."""
    urls = [w for w in words if w.startswith(("http://", "https://"))]
    files = [w for w in words if _is_server_file(w)]
    if len(urls) > 1 or len(files) > 1:
        raise UsageError(f"more than one {'http(s):// URL' if len(urls) > 1 else 'server file'} given")
    if len(urls) + len(files) + bool(command_line) > 1:
        raise UsageError("give one server: an http(s):// URL, a server file, or a command line "
                         "after `--`, not both")
    if command_line:
        return command_line, words
    if urls or files:
        found = (urls or files)[0]
        rest = [w for w in words if w != found]
        return (found if urls else [sys.executable, "-m", "nimblemcp", "run", found]), rest
    return None, words


def _is_server_file(word: str) -> bool:
    path = word.rpartition(":")[0] if ".py:" in word else word
    return path.endswith(".py") and os.path.isfile(path)


def parse_arguments(pairs: Sequence[str], raw: str | None) -> dict[str, Any]:
    """`--args '{json}'` then `--arg k=v` on top (JSON values when they parse)."""
    out: dict[str, Any] = {}
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--args is not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise UsageError("--args must be a JSON object")
        out.update(parsed)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--arg wants KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _transport(target: Any, args: argparse.Namespace) -> Any:
    cafile = args.cafile
    if isinstance(target, list):
        if cafile is not None:
            raise UsageError("--cafile is for https:// URLs")
        from nimblemcp.transports.stdio.client import StdioTransport

        return StdioTransport(target[0], target[1:])
    from nimblemcp._extras import needs_extra

    with needs_extra("http", "An HTTP client connection"):
        from nimblemcp.transports.client.http import HttpTransport

    extra = {}
    for header in args.header:
        name, sep, value = header.partition(":")
        if not sep:
            raise UsageError(f"--header wants NAME:VALUE, got {header!r}")
        extra[name.strip()] = value.strip()
    return HttpTransport(target, headers=extra, verify=cafile if cafile is not None else True,
                         auth=_auth(target, args, extra))


def _auth(url: str, args: argparse.Namespace, headers: dict[str, str]) -> Any:
    """What authorizes the requests: a token given (`--bearer`, `$NIMBLEMCP_BEARER`, an
    Authorization `--header`), else the tokens of `nimblemcp login URL`, else nothing."""
    from nimblemcp._extras import needs_extra
    from nimblemcp.cli._tokens import TokenCache

    given = next((name for name in headers if name.lower() == "authorization"), None)
    token = args.bearer or os.environ.get("NIMBLEMCP_BEARER", "").strip()
    try:
        logged_in_before = not token and given is None and TokenCache(url).has_tokens()
    except ValueError:  # a malformed URL: the transport says so
        logged_in_before = False
    args.auth_source = ("--bearer" if args.bearer else "NIMBLEMCP_BEARER") if token else \
        "the Authorization --header" if given is not None else "login" if logged_in_before else None
    args.auth = None
    if args.auth_source is not None:
        with needs_extra("http", "An authorized HTTP connection"):
            from nimblemcp.cli._cli_auth import GivenToken, logged_in
        args.auth = GivenToken(f"Bearer {token}") if token else \
            GivenToken(headers.pop(given)) if given is not None else logged_in(url)
    return args.auth


async def _run(args: argparse.Namespace, target: Any, words: list[str]) -> int:
    from nimblemcp.client import Client

    callbacks: dict[str, Any] = {}
    progress = r.Progress(json_lines=args.json)  # a log line goes above the bar, not onto it
    if args.log_level != "off":
        callbacks["log_level"] = args.log_level
        callbacks["on_log"] = (lambda params: r.dump_event({"log": _untagged(params)})) if args.json \
            else (lambda params: progress.above(lambda: r.show_log(params)))
    if args.command == "call":
        async def elicit(params: dict[str, Any]) -> dict[str, Any]:
            return await asyncio.to_thread(r.ask_form, params)

        callbacks["on_elicit"] = elicit
        if args.sample_reply is not None:
            reply = args.sample_reply
            callbacks["on_sample"] = lambda params: reply
        callbacks["tasks"] = args.tasks
    if isinstance(target, list):  # spawned by us: starting, not silent (see the module doc)
        from nimblemcp.client import RetryPolicy

        callbacks["retry_policy"] = RetryPolicy(probe_timeout=min(args.timeout, SPAWNED_PROBE_TIMEOUT))
    async with Client(_transport(target, args), timeout=args.timeout, **callbacks) as client:
        if args.command == "discover":
            result = await client.discover()
            r.dump_json(result) if args.json else r.render_discover(result)
        elif args.command == "tools":
            tools = await _listed(client.list_tools)
            if args.json:
                r.dump_json(tools)
            elif not tools:
                print("no tools")
            else:
                r.table(r.describe_rows(tools), ["NAME", "DESCRIPTION"])
        elif args.command == "call":
            return await _call(client, args, words, progress)
        elif args.command == "read":
            if not words:
                items = await _listed(client.list_resources)
                templates = await _listed(client.list_resource_templates)
                if args.json:
                    r.dump_json({"resources": items, "resourceTemplates": templates})
                elif not items and not templates:
                    print("no resources")
                else:
                    r.table(r.resource_rows(items, templates), ["URI", "TYPE", "DESCRIPTION"])
            else:
                result = await client.read_resource(words[0])
                r.dump_json(result) if args.json else r.render_content(result.get("contents") or [])
        elif args.command == "prompt":
            if not words:
                prompts = await _listed(client.list_prompts)
                if args.json:
                    r.dump_json(prompts)
                elif not prompts:
                    print("no prompts")
                else:
                    r.table(r.describe_rows(prompts), ["NAME", "DESCRIPTION"])
            else:
                values = {k: v if isinstance(v, str) else json.dumps(v)
                          for k, v in parse_arguments(args.arg, None).items()}
                async with _named("prompt", words[0], client.list_prompts):
                    result = await client.get_prompt(words[0], values)
                r.dump_json(result) if args.json else r.render_messages(result.get("messages") or [])
        elif args.command == "listen":
            return await _listen(client, args)
    return 0


async def _call(client: Any, args: argparse.Namespace, words: list[str], progress: r.Progress) -> int:
    if len(words) != 1:
        raise UsageError("call wants exactly one tool NAME")
    arguments = parse_arguments(args.arg, args.args_json)
    try:
        async with _named("tool", words[0], client.list_tools):
            result = await client.call_tool(words[0], arguments, on_task_status=_print_status,
                                            on_progress=progress.update)
    finally:
        progress.finish()
    if args.json:
        r.dump_json(result)
    else:
        out = sys.stderr if result.get("isError") else sys.stdout
        content = result.get("content") or []
        if "structuredContent" in result and _serializes(content, result["structuredContent"]):
            r.dump_json(result["structuredContent"], out)  # the text is its serialization
        else:
            r.render_content(content, out)
    return 1 if result.get("isError") else 0


def _serializes(content: list[dict[str, Any]], structured: Any) -> bool:
    """Whether the content is only the structured result as JSON text (TOOL-06); a list of
    content blocks returned as structured output is shown as those blocks."""
    if len(content) != 1 or content[0].get("type") != "text":
        return not content
    try:
        return bool(json.loads(content[0].get("text") or "") == structured)
    except ValueError:
        return False


async def _listed(fetch: Callable[[], Awaitable[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """A list, or none when the server has no such capability (it answers -32601)."""
    from nimblemcp.errors import MethodNotFound

    try:
        return await fetch()
    except MethodNotFound:
        return []


class _NoSuchName(Exception):
    """A tool or prompt name the server does not have; says which names come close."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        import difflib

        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        if close:
            hint = "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        elif known:
            shown = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
            hint = f"; its {kind}s: {shown}"
        else:
            hint = f"; it has no {kind}s"
        super().__init__(f"the server has no {kind} named {name!r}{hint}")


@contextlib.asynccontextmanager
async def _named(kind: str, name: str,
                 fetch: Callable[[], Awaitable[list[dict[str, Any]]]]) -> AsyncIterator[None]:
    """Around a request naming a tool or prompt: when the server refuses its params
    (-32602) and the name is not in its list, or has no such list (-32601), say so, with
    the names that come close."""
    from nimblemcp.errors import InvalidParams, MethodNotFound

    try:
        yield
    except MethodNotFound:  # the server has no tools (prompts) at all
        raise _NoSuchName(kind, name, []) from None
    except InvalidParams:
        known = [str(item.get("name")) for item in await _listed(fetch)]
        if name not in known:
            raise _NoSuchName(kind, name, known) from None
        raise


def _print_status(task: dict[str, Any]) -> None:
    """One stderr line per task status change (stdout stays the result)."""
    message = task.get("statusMessage")
    print(f"task {task.get('taskId')}: {task.get('status')}" + (f" - {message}" if message else ""),
          file=sys.stderr, flush=True)


async def _listen(client: Any, args: argparse.Namespace) -> int:
    if not (args.tools or args.prompts or args.resources or args.resource):
        raise UsageError("listen wants at least one of --tools, --prompts, --resources, --resource URI")
    async with client.listen(tools=args.tools, prompts=args.prompts,
                             resources_list=args.resources, resources=args.resource) as events:
        async for event in events:
            if args.json:
                print(json.dumps({"kind": event.kind, "uri": event.uri, "message": event.raw},
                                 ensure_ascii=False), flush=True)
            else:
                print(r.render_event(event.kind, event.uri, event.raw), flush=True)
    return 0


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if any(a == "--config" or a.startswith("--config=") for a in argv[1:]):  # issue 16: mcp.json
        from nimblemcp.host._cli import main as host_main

        return host_main(argv)
    command_line: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command_line = argv[:cut], argv[cut + 1:]
    command, rest = argv[0], argv[1:]
    parser = _parser(command)
    args = parser.parse_intermixed_args(rest)
    args.command = command
    if args.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(levelname)s %(name)s: %(message)s")
    from nimblemcp.errors import McpError

    target: Any = None
    try:
        target, words = _split_target(args, command_line)
        return asyncio.run(_run(args, target, words))
    except UsageError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        return 130 if args.command != "listen" else 0
    except McpError as exc:
        from nimblemcp.errors import AuthError, HttpStatusError

        told = None
        if isinstance(target, str) and isinstance(exc, AuthError | HttpStatusError):
            from nimblemcp.cli._cli_auth import explain  # an HTTP server: authorization may be why

            told = explain(exc, target, args)
        if told is not None and not args.json:
            print(f"nimblemcp: {told}", file=sys.stderr)
        else:
            r.show_error(exc, json_lines=args.json)
        return 1
    except _NoSuchName as exc:
        if args.json:
            r.dump_event({"error": {"type": "NoSuchName", "message": str(exc)}})
        else:
            print(f"nimblemcp: {exc}", file=sys.stderr)
        return 1
    return 2  # parser.error exits; kept for the type checker


def _untagged(params: dict[str, Any]) -> dict[str, Any]:
    """A log notification as the server sent it: without the client's `requestId` tag
    (one CLI command is one request)."""
    return {k: v for k, v in params.items() if k != "requestId"}
