"""MCP servers from OpenAPI documents and FastAPI apps.

    server = Server.from_openapi("openapi.yaml", base_url="https://api.example.com")
    server = Server.from_fastapi(app)          # in-process, over ASGI

Every operation of the document becomes a tool (route maps can make GET operations
resources or resource templates, or leave operations out): its parameters and body
become one `inputSchema`, its success response an `outputSchema` when that is a JSON
object, its summary and description the tool's description, its `operationId` the
tool's name. Calls go through `httpx`; HTTP errors come back as tool errors naming the
status and the start of the body. See `_operations` for names and arguments, `_calls`
for requests and answers, `_routes` for route maps. Needs the `[openapi]` extra (httpx;
PyYAML for YAML documents).

Sits above the server (it builds one), beside `nimblemcp.proxy`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nimblemcp._extras import needs_extra
from nimblemcp.openapi._operations import Route
from nimblemcp.openapi._routes import GET_AS_RESOURCES, RouteMap

if TYPE_CHECKING:
    import httpx

    from nimblemcp.openapi._calls import HeaderSource
    from nimblemcp.server._server import Server

__all__ = ["GET_AS_RESOURCES", "Route", "RouteMap", "from_fastapi", "from_openapi"]


def from_openapi(
    spec: Mapping[str, Any] | str | os.PathLike[str],
    *,
    base_url: str | None = None,
    http: httpx.AsyncClient | None = None,
    routes: Sequence[RouteMap] = (),
    names: Mapping[str, str] | None = None,
    forward_headers: Sequence[str] | HeaderSource = (),
    uri_scheme: str = "api",
    name: str | None = None,
    **server_options: Any,
) -> Server:
    """A Server whose tools (and resources) call the HTTP API an OpenAPI 3.0/3.1
    document describes.

        server = from_openapi("petstore.yaml", base_url="http://localhost:8080/api/v3")

    `spec` is the document (a dict), a file (JSON or YAML) or an `http(s)://` URL; its
    `$ref`s are followed inside it only, never fetched. `base_url` is where calls go
    (default: `http`'s own base URL, else the document's first server). `http` is your
    `httpx.AsyncClient` (timeouts, auth, fixed headers; you close it); without one, the
    server makes one and closes it with its lifespan. `routes` are `RouteMap`s tried in
    order (unmatched: a tool; `GET_AS_RESOURCES` serves GETs as resources under
    `uri_scheme://`). `names` renames tools by `operationId`. `forward_headers` names the
    incoming MCP request's HTTP headers to pass on to the API (`["authorization"]`), or is
    a function of the `Context` returning the headers to send. Other keywords go to
    `Server` (`name` defaults to the document's title).
    """
    with needs_extra("openapi", "Server.from_openapi"):
        import httpx  # noqa: F401  (the calls' client)
    from nimblemcp.openapi._build import build_server, server_url
    from nimblemcp.openapi._calls import Upstream
    from nimblemcp.openapi._spec import load

    doc, where = load(spec)
    if base_url is None and (http is None or not str(http.base_url)):
        base_url = server_url(doc, where)
        if base_url is None:
            raise ValueError("the document names no absolute server URL to call: give base_url= "
                             "(nimblemcp run: --base-url)")
    upstream = Upstream(http, base_url, _forwarding(forward_headers))
    return build_server(doc, upstream=upstream, routes=routes, names=names, uri_scheme=uri_scheme, name=name,
                        app_lifespan=None, server_options=server_options)


def from_fastapi(
    app: Any,
    *,
    routes: Sequence[RouteMap] = (),
    names: Mapping[str, str] | None = None,
    forward_headers: Sequence[str] | HeaderSource = (),
    uri_scheme: str = "api",
    name: str | None = None,
    **server_options: Any,
) -> Server:
    """A Server over a FastAPI (or any ASGI app with an `openapi()` method) app, called
    in-process through `httpx.ASGITransport`: no port, no network.

        server = from_fastapi(app, forward_headers=["authorization"])

    The app's own lifespan (startup and shutdown) runs inside the server's. The other
    options are `from_openapi`'s.
    """
    with needs_extra("openapi", "Server.from_fastapi"):
        import httpx
    from nimblemcp.openapi._build import build_server
    from nimblemcp.openapi._calls import DEFAULT_TIMEOUT, Upstream

    doc = app.openapi()
    upstream = Upstream(None, None, _forwarding(forward_headers), make=lambda: httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://app", timeout=DEFAULT_TIMEOUT))

    @contextlib.asynccontextmanager
    async def app_lifespan() -> AsyncIterator[None]:
        async with _asgi_lifespan(app):
            yield

    return build_server(doc, upstream=upstream, routes=routes, names=names, uri_scheme=uri_scheme,
                        name=name or str(doc.get("info", {}).get("title") or "fastapi"),
                        app_lifespan=app_lifespan, server_options=server_options)


def _forwarding(given: Sequence[str] | HeaderSource) -> tuple[str, ...] | HeaderSource:
    """Header names as the Context holds them (lowercase), or the caller's function."""
    return given if callable(given) else tuple(name.lower() for name in given)


@contextlib.asynccontextmanager
async def _asgi_lifespan(app: Any) -> AsyncIterator[None]:
    """Run an ASGI app's lifespan protocol: startup before, shutdown after. An app that
    does not speak it (raises at once) is left as it is."""
    import asyncio

    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def receive() -> dict[str, Any]:
        return await inbox.get()

    async def send(message: dict[str, Any]) -> None:
        await outbox.put(message)

    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    task = asyncio.ensure_future(app(scope, receive, send))
    await inbox.put({"type": "lifespan.startup"})
    reply = asyncio.ensure_future(outbox.get())
    await asyncio.wait({task, reply}, return_when=asyncio.FIRST_COMPLETED)
    if not reply.done():  # the app ended without answering: no lifespan support
        reply.cancel()
        with contextlib.suppress(Exception):
            task.result()
        yield
        return
    if reply.result()["type"] == "lifespan.startup.failed":
        raise RuntimeError(f"the app's startup failed: {reply.result().get('message', '')}")
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await task
