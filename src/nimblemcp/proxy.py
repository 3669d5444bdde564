"""A proxy: another MCP server served as a stateless 2026-07-28 server.

`proxy(target)` returns a `Server` whose lifespan opens one `Client` to `target` (an
`http(s)://` URL or a command line as a list for stdio; either era: with `mode="auto"`
a 2025-11-25 server is reached through its handshake), mirrors the target's tools,
prompts, resources and templates with their definitions as published (schemas,
annotations, output schemas), and forwards every call, read, get and completion
to it. Serve it like any server: `server.run("http")` or its ASGI app; the front is
stateless (no sessions), so instances scale out behind a round-robin balancer, each
with its own pooled connection to the target. Protocol errors of the target reach
the front's client with their code.

Questions the target asks (elicitation, sampling, roots) reach the front's own client
as MRTR `input_required` rounds, when the target speaks 2026-07-28: the front calls the
target with the front client's own capabilities (so the target asks only what that
client can answer), turns the target's `inputRequests` into its own (keys prefixed with
the target's round number, `1.confirm`), keeps the target's `requestState` in its
sealed `ctx.state`, and on the retry sends the answers back with that state. Any
instance can take any round (set `NIMBLEMCP_STATE_KEYS` alike on all of them).
A 2025-11-25 target asks over its session's back channel in the middle of a call,
expecting the answer on that same open call; a stateless front would have to hold the
call open across its client's rounds, which may land on other instances, so to a
legacy target the proxy declares no elicitation, sampling or roots (the target may
not ask; if it does the question fails and the target sees an error).

List changes after start-up are followed: the front listens to the target
(`subscriptions/listen`, or the legacy session's notifications), re-lists what
changed and updates its mirror, which notifies the front's own listeners. A target
that cannot notify keeps the start-up mirror. Not forwarded: tasks. Sits above the
client and the server (imports both), like `nimblemcp.serving`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from nimblemcp.client import Client
from nimblemcp.errors import InvalidParams, MethodNotFound
from nimblemcp.server._context import Context
from nimblemcp.server._mrtr import InputRequired
from nimblemcp.server._options import ServerInfo
from nimblemcp.server._prompts import PromptEntry
from nimblemcp.server._resources import ResourceEntry, TemplateEntry
from nimblemcp.server._server import Server
from nimblemcp.server._tools import ToolEntry, ToolResult
from nimblemcp.types._meta import CLIENT_CAPABILITIES

__all__ = ["proxy"]

log = logging.getLogger("nimblemcp.proxy")
_ASKABLE = ("elicitation", "sampling", "roots")
_PENDING = "nimblemcp.proxy/pending"  # ctx.state: the target's open round

_VAR = re.compile(r"\{([+]?)([A-Za-z0-9_]+)\}")


def proxy(target: Any, *, name: str | None = None, mode: str = "auto", **client_options: Any) -> Server:
    """A Server that serves `target` (see the module docstring), presenting itself with
    the target's serverInfo once connected, or as `name` when given. `client_options` go
    to `nimblemcp.Client` (auth, timeout, versions...)."""

    mirrored: set[str] = set()  # the tools this proxy mirrors (not those derived from them)

    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[Client]:
        client = Client(target, mode=mode, cache=False, validate_output=False, **client_options)  # type: ignore[arg-type]
        async with client:
            await _mirror(server, client, mirrored)
            if name is None:  # known once the target has answered
                _present_as(server, client.server_info)
            follower = asyncio.create_task(_follow(server, client, mirrored))
            try:
                yield client
            finally:
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follower

    label = name or (target if isinstance(target, str) else " ".join(map(str, target)))
    # Each instance follows the target itself, so its runtime mirror updates are local.
    return Server(name or "proxy", lifespan=lifespan, info=ServerInfo(description=f"proxy of {label}"),
                  registrations="local")


def _present_as(server: Server, info: Mapping[str, Any] | None) -> None:
    """The front presents itself as the target (its serverInfo: name, version, title...):
    a host shows the target's name, not "proxy"."""
    if not isinstance(info, Mapping) or not isinstance(info.get("name"), str):
        return
    description = server.info.get("description")
    server.info.clear()  # the dispatcher holds this dict: change it in place
    server.info.update({k: v for k, v in info.items() if isinstance(k, str)})
    server.info.setdefault("version", "0.0.0")
    if description is not None and "description" not in info:
        server.info["description"] = description
    server.name = str(info["name"])


def _client(ctx: Context) -> Client:
    client: Client = ctx.lifespan
    return client


async def _forwarded(ctx: Context, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One request forwarded to the target, its questions relayed as this front's MRTR
    rounds (see the module docstring)."""
    client = _client(ctx)
    if client.era == "legacy":
        return await client.request(method, params, cache=False)
    caps = ctx._meta.client_capabilities
    meta = {CLIENT_CAPABILITIES: {k: v for k, v in caps.items() if k in _ASKABLE}}
    call = dict(params)
    pending: dict[str, Any] | None = ctx.state.get(_PENDING)
    if pending is not None:
        prefix = f"{pending['round']}."
        answers: dict[str, Any] = {}
        missing: dict[str, Any] = {}
        for key, request in pending["requests"].items():
            answer = ctx._responses.get(prefix + key)
            if answer is None:
                missing[prefix + key] = request
            else:
                answers[key] = answer
        if missing:
            raise InputRequired(missing)  # not all answered yet: ask again
        if answers:
            call["inputResponses"] = answers
        if pending["state"] is not None:
            call["requestState"] = pending["state"]
    result = await client.request(method, call, manual=True, cache=False, meta=meta)
    if result.get("resultType", "complete") != "input_required":
        return result
    round_ = pending["round"] + 1 if pending is not None else 1
    requests = result.get("inputRequests") or {}
    ctx.state[_PENDING] = {"round": round_, "state": result.get("requestState"), "requests": requests}
    raise InputRequired({f"{round_}.{key}": request for key, request in requests.items()})


async def _mirror(server: Server, client: Client, mirrored: set[str]) -> None:
    """Make `server`'s lists the target's (at start-up; a second start, after a stop,
    finds the first one's mirror and brings it up to date)."""
    await _resync_tools(server, client, mirrored)
    await _resync_prompts(server, client)
    await _resync_resources(server, client)
    if server.prompts or server.templates:
        server.completion(_forward_completion(client))


async def _follow(server: Server, client: Client, mirrored: set[str]) -> None:
    """Keep the mirror in step with the target's list changes (runs for the lifespan)."""
    try:
        async with client.listen(tools=True, prompts=True, resources_list=True) as events:
            async for event in events:
                if event.kind in ("tools_changed", "missed"):
                    await _resync_tools(server, client, mirrored)
                if event.kind in ("prompts_changed", "missed"):
                    await _resync_prompts(server, client)
                if event.kind in ("resources_changed", "missed"):
                    await _resync_resources(server, client)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a target that cannot notify keeps the start-up mirror
        log.info("proxy: not following the target's list changes: %s", exc)


async def _resync_tools(server: Server, client: Client, mirrored: set[str]) -> None:
    """The target's tools, mirrored; tools derived from them (`derive_tool`) or added by
    hand are the front's own and stay."""
    tools = await _listed(client.list_tools(cache=False))

    def remove(name: str) -> None:
        mirrored.discard(name)
        server.remove_tool(name)

    def add(definition: Mapping[str, Any]) -> None:
        _add_tool(server, definition)
        mirrored.add(str(definition["name"]))

    table = {name: entry for name, entry in server.tools.items() if name in mirrored}
    _sync(table, {str(t["name"]): t for t in tools}, remove, add)
    server.dispatcher.invalidate()


async def _resync_prompts(server: Server, client: Client) -> None:
    prompts = await _listed(client.list_prompts(cache=False))
    _sync(server.prompts, {str(p["name"]): p for p in prompts}, server.remove_prompt, partial(_add_prompt, server))
    server.dispatcher.invalidate()


async def _resync_resources(server: Server, client: Client) -> None:
    resources = await _listed(client.list_resources(cache=False))
    _sync(server.resources, {str(r["uri"]): r for r in resources}, server.remove_resource, partial(_add_resource, server))
    templates = await _listed(client.list_resource_templates(cache=False))
    _sync(
        server.templates,
        {str(t["uriTemplate"]): t for t in templates},
        server.remove_template,
        partial(_add_template, server),
    )
    server.dispatcher.invalidate()


def _sync(
    table: Mapping[str, Any],
    listed: Mapping[str, Mapping[str, Any]],
    remove: Callable[[str], None],
    add: Callable[[Mapping[str, Any]], None],
) -> None:
    """Make one registry table match the target's listing: drop what went, replace what changed."""
    for key in [k for k in table if k not in listed]:
        remove(key)
    for key, definition in listed.items():
        entry = table.get(key)
        if entry is not None and entry.definition == dict(definition):
            continue
        if entry is not None:
            remove(key)
        add(definition)


async def _listed(listing: Awaitable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A list of the target's, or [] when it does not serve that kind (-32601)."""
    try:
        return await listing
    except MethodNotFound:
        return []


def _add_tool(server: Server, definition: Mapping[str, Any]) -> None:
    tool_name = str(definition["name"])

    async def forward(ctx: Context, **arguments: Any) -> ToolResult:
        result = await _forwarded(ctx, "tools/call", {"name": tool_name, "arguments": arguments})
        return ToolResult(result.get("content") or [], structured=result.get("structuredContent"),
                          is_error=bool(result.get("isError")), meta=result.get("_meta"))

    forward.__name__ = tool_name
    entry = ToolEntry(forward, name=tool_name, input_schema=dict(definition["inputSchema"]),
                      structured_output=False)
    entry.definition = dict(definition)  # as published: annotations, outputSchema, title...
    server._add_tool_entry(entry)  # registered with it: a tool derived from it sees it whole


def _add_prompt(server: Server, definition: Mapping[str, Any]) -> None:
    prompt_name = str(definition["name"])

    async def forward(ctx: Context, **arguments: str) -> Any:
        result = await _forwarded(ctx, "prompts/get", {"name": prompt_name, "arguments": arguments})
        return result.get("messages") or []

    forward.__name__ = prompt_name
    entry = PromptEntry(forward, name=prompt_name)
    arguments = definition.get("arguments") or []
    entry.names = frozenset(str(a["name"]) for a in arguments)
    entry.required = tuple(str(a["name"]) for a in arguments if a.get("required"))
    entry.definition = dict(definition)
    server.add_prompt(entry)


def _add_resource(server: Server, definition: Mapping[str, Any]) -> None:
    uri = str(definition["uri"])

    async def forward(ctx: Context) -> Any:
        return (await _forwarded(ctx, "resources/read", {"uri": uri}))["contents"]

    entry = ResourceEntry(uri, forward, name=str(definition.get("name") or uri))
    entry.definition = dict(definition)
    server.add_resource(entry)


def _expand(uri_template: str, values: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        return urllib.parse.quote(values[m.group(2)], safe="/" if m.group(1) == "+" else "")

    return _VAR.sub(one, uri_template)


def _add_template(server: Server, definition: Mapping[str, Any]) -> None:
    uri_template = str(definition["uriTemplate"])
    names = [m.group(2) for m in _VAR.finditer(uri_template)]

    async def forward(ctx: Context, **values: str) -> Any:
        return (await _forwarded(ctx, "resources/read", {"uri": _expand(uri_template, values)}))["contents"]

    # The variables as keyword parameters, so the template's checks see them.
    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context)]
        + [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names]
    )
    entry = TemplateEntry(uri_template, forward, name=str(definition.get("name") or uri_template))
    entry.definition = dict(definition)
    server.add_template(entry)


def _forward_completion(client: Client) -> Any:
    async def complete(ref: Any, argument: str, value: str, context: Any) -> Any:
        try:
            result = await client.complete(ref, argument, value, context or None)
        except InvalidParams:
            return []
        return result.get("completion", {"values": []})

    return complete
