"""A `Server` made from an OpenAPI document: each operation registered as a tool, a
resource or a resource template (by the route maps), each call sent over HTTP.

The server's lifespan closes the HTTP client it made (never one handed in) and, for
an in-process app (`from_fastapi`), runs that app's own lifespan around the server's.
A lifespan given in `server_options` runs inside, and its value is `ctx.lifespan`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import urljoin

from nimblemcp.errors import SchemaRefused
from nimblemcp.openapi._calls import OutputCheck, Upstream, contents, tool_result
from nimblemcp.openapi._operations import Operation, read_operations, success_response
from nimblemcp.openapi._routes import RouteMap, kind_of
from nimblemcp.openapi._spec import Document
from nimblemcp.server._context import Context
from nimblemcp.server._options import ServerInfo
from nimblemcp.server._resources import ResourceEntry, TemplateEntry
from nimblemcp.server._server import Server
from nimblemcp.server._tools import ToolAnnotations, ToolResult

__all__ = ["build_server", "server_url"]

log = logging.getLogger("nimblemcp.openapi")
_VARIABLE = re.compile(r"\{([^}]+)\}")
_TEMPLATE_NAME = re.compile(r"[^A-Za-z0-9_]")


def server_url(doc: Mapping[str, Any], where: str | None) -> str | None:
    """The document's first server URL, its variables at their defaults, resolved
    against the document's own URL when relative; None when it names none."""
    servers = doc.get("servers") or []
    first = servers[0] if servers and isinstance(servers[0], dict) else None
    if first is None or not isinstance(first.get("url"), str):
        return None
    url: str = first["url"]
    for name, variable in (first.get("variables") or {}).items():
        if isinstance(variable, dict) and "default" in variable:
            url = url.replace("{" + name + "}", str(variable["default"]))
    if not url.startswith(("http://", "https://")):
        if where is None or not where.startswith(("http://", "https://")):
            return None
        url = urljoin(where, url)
    return url


def build_server(
    doc: dict[str, Any], *, upstream: Upstream, routes: Sequence[RouteMap],
    names: Mapping[str, str] | None, uri_scheme: str, name: str | None,
    app_lifespan: Callable[[], AbstractAsyncContextManager[Any]] | None,
    server_options: dict[str, Any],
) -> Server:
    document = Document(doc)
    info: dict[str, Any] = doc["info"] if isinstance(doc.get("info"), dict) else {}
    inner = server_options.pop("lifespan", None)

    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[Any]:
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(upstream.close)
            if app_lifespan is not None:
                await stack.enter_async_context(app_lifespan())
            yield (await stack.enter_async_context(inner(server))) if inner is not None else None

    options: dict[str, Any] = {"version": str(info.get("version") or "0.1.0")}
    if isinstance(info.get("description"), str) and info["description"].strip():
        # a line, not the manual
        options["info"] = ServerInfo(description=info["description"].strip().splitlines()[0][:200])
    server = Server(name or str(info.get("title") or "openapi"), lifespan=lifespan, **{**options, **server_options})
    for op in read_operations(document, names):
        kind = kind_of(op.route, routes)
        if kind == "exclude":
            continue
        try:
            if kind in ("resource", "template") and _readable(op):
                _add_readable(server, upstream, op, uri_scheme)
            else:
                _add_tool(server, upstream, op)
        except SchemaRefused as exc:
            log.warning("openapi: %s %s left out: %s", op.route.method, op.route.path, exc)
    return server


def _annotations(method: str) -> ToolAnnotations:
    """What the HTTP method promises: GET and HEAD read only, PUT and DELETE idempotent,
    DELETE destructive; every call reaches an outside API."""
    if method in ("GET", "HEAD", "OPTIONS"):
        return {"readOnlyHint": True, "openWorldHint": True}
    return {"readOnlyHint": False, "destructiveHint": method == "DELETE",
            "idempotentHint": method in ("PUT", "DELETE"), "openWorldHint": True}


def _output_check(op: Operation) -> OutputCheck | None:
    if op.output_schema is None:
        return None
    from nimblemcp.server._refs import build_validator

    validator = build_validator(op.output_schema, f"{op.name}: outputSchema")  # refused here if unusable

    def check(data: Any) -> str | None:
        import jsonschema

        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path) or "body"
        return f"{where}: {error.message}"

    return check


def _add_tool(server: Server, upstream: Upstream, op: Operation) -> None:
    check = _output_check(op)

    async def call(ctx: Context, **arguments: Any) -> ToolResult:
        return tool_result(op, await upstream.send(op, arguments, ctx), check)

    call.__name__ = op.name
    entry = server.add_tool(call, name=op.name, description=op.description, input_schema=op.input_schema,
                            structured_output=False, annotations=_annotations(op.route.method))
    if op.output_schema is not None:
        entry.definition["outputSchema"] = op.output_schema


def _readable(op: Operation) -> bool:
    """A GET whose every required argument sits in its path: a URI can say it all."""
    required = set(op.input_schema.get("required") or ())
    return op.route.method == "GET" and all(a.where == "path" or a.name not in required for a in op.arguments)


def _add_readable(server: Server, upstream: Upstream, op: Operation, scheme: str) -> None:
    path_args = [a for a in op.arguments if a.where == "path"]
    # Template variables are plain names: `pet-id` is read as `pet_id` in the URI.
    variables = {a.name: _TEMPLATE_NAME.sub("_", a.name) for a in path_args}
    uri = f"{scheme}://" + _VARIABLE.sub(
        lambda m: "{" + variables.get(m.group(1), _TEMPLATE_NAME.sub("_", m.group(1))) + "}",
        op.route.path.lstrip("/"))
    description = op.description
    media = _success_media(op)
    # What a caller's forwarded credentials fetched is theirs alone (CACHE-07).
    scope = "private" if upstream.forward else None
    if not path_args:

        async def read(ctx: Context) -> list[dict[str, Any]]:
            return contents(uri, op, await upstream.send(op, {}, ctx))

        server.add_resource(ResourceEntry(uri, read, name=op.name, description=description, mime_type=media,
                                          cache_scope=scope))
        return

    async def read_template(ctx: Context, **values: str) -> list[dict[str, Any]]:
        arguments = {arg: values[var] for arg, var in variables.items()}
        concrete = uri
        for var, value in values.items():
            concrete = concrete.replace("{" + var + "}", value)
        return contents(concrete, op, await upstream.send(op, arguments, ctx))

    read_template.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context)]
        + [inspect.Parameter(v, inspect.Parameter.KEYWORD_ONLY) for v in variables.values()])
    server.add_template(TemplateEntry(uri, read_template, name=op.name, description=description, mime_type=media,
                                      cache_scope=scope))


def _success_media(op: Operation) -> str | None:
    response = success_response(dict(op.route.operation))
    content = response.get("content") if isinstance(response, dict) else None
    return next(iter(content), None) if isinstance(content, dict) and content else None
