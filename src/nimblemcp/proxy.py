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

Not forwarded (yet): the target's questions to the user (elicitation/sampling
answered on the front's MRTR rounds), list-change notifications after start-up (the
mirror is taken at start-up), tasks. Sits above the client and the server (imports
both), like `nimblemcp.serving`.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any

from nimblemcp.client import Client
from nimblemcp.errors import InvalidParams, MethodNotFound
from nimblemcp.server._context import Context
from nimblemcp.server._prompts import PromptEntry
from nimblemcp.server._resources import ResourceEntry, TemplateEntry
from nimblemcp.server._server import Server
from nimblemcp.server._tools import ToolResult

__all__ = ["proxy"]

_VAR = re.compile(r"\{([+]?)([A-Za-z0-9_]+)\}")


def proxy(target: Any, *, name: str | None = None, mode: str = "auto", **client_options: Any) -> Server:
    """A Server that serves `target` (see the module docstring). `client_options` go to
    `nimblemcp.Client` (auth, timeout, versions...)."""

    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[Client]:
        client = Client(target, mode=mode, cache=False, validate_output=False, **client_options)  # type: ignore[arg-type]
        async with client:
            await _mirror(server, client)
            yield client

    label = name or (target if isinstance(target, str) else " ".join(map(str, target)))
    return Server(name or "proxy", instructions=None, lifespan=lifespan, description=f"proxy of {label}")


def _client(ctx: Context) -> Client:
    client: Client = ctx.lifespan
    return client


async def _mirror(server: Server, client: Client) -> None:
    """Register the target's lists on `server` (at start-up)."""
    for tool in await _listed(client.list_tools()):
        _add_tool(server, tool)
    prompts = await _listed(client.list_prompts())
    for prompt in prompts:
        _add_prompt(server, prompt)
    for resource in await _listed(client.list_resources()):
        _add_resource(server, resource)
    templates = await _listed(client.list_resource_templates())
    for template in templates:
        _add_template(server, template)
    if prompts or templates:
        server.completion(_forward_completion(client))
    server.dispatcher.invalidate()


async def _listed(listing: Awaitable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A list of the target's, or [] when it does not serve that kind (-32601)."""
    try:
        return await listing
    except MethodNotFound:
        return []


def _add_tool(server: Server, definition: Mapping[str, Any]) -> None:
    tool_name = str(definition["name"])

    async def forward(ctx: Context, **arguments: Any) -> ToolResult:
        result = await _client(ctx).call_tool(tool_name, arguments)
        return ToolResult(result.get("content") or [], structured=result.get("structuredContent"),
                          is_error=bool(result.get("isError")), meta=result.get("_meta"))

    forward.__name__ = tool_name
    entry = server.add_tool(forward, name=tool_name, input_schema=dict(definition["inputSchema"]),
                            structured_output=False)
    entry.definition = dict(definition)  # as published: annotations, outputSchema, title...


def _add_prompt(server: Server, definition: Mapping[str, Any]) -> None:
    prompt_name = str(definition["name"])

    async def forward(ctx: Context, **arguments: str) -> Any:
        result = await _client(ctx).get_prompt(prompt_name, arguments)
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
        return (await _client(ctx).read_resource(uri))["contents"]

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
        return (await _client(ctx).read_resource(_expand(uri_template, values)))["contents"]

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
