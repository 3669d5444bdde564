"""Issue 19: the ASGI app fits its host: mounted under a path in Starlette or FastAPI it
answers on `<mount>/mcp` (root_path honoured, auth included), serves `@server.route`
routes and `/healthz` / `/readyz` probes. Real uvicorn on loopback."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from tests._serving import serving

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.client import Client
from nimblemcp.transports.auth.bearer import AccessToken, StaticTokens
from nimblemcp.transports.client.http import HttpTransport

pytest.importorskip("starlette")


@contextlib.asynccontextmanager
async def _uvicorn(app: Any) -> AsyncIterator[str]:
    import asyncio

    served = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    task = asyncio.create_task(served.serve())
    while not served.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.01)
    port = served.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        served.should_exit = True
        await task


def _server() -> m.Server:
    @contextlib.asynccontextmanager
    async def lifespan(server: m.Server) -> AsyncIterator[str]:
        yield "db"

    server = m.Server("hosted", lifespan=lifespan)

    @server.tool()
    def ping(ctx: m.Context) -> str:
        return f"pong from {ctx.lifespan}"

    @server.route("/status")
    async def status() -> dict[str, Any]:
        return {"tools": len(server.tools)}

    @server.route("/echo", methods=["POST"])
    def echo(scope: dict[str, Any]) -> tuple[int, str]:
        return 201, scope["method"]

    return server


async def test_fastapi_mount_with_health_routes_and_host_lifespan() -> None:
    fastapi = pytest.importorskip("fastapi")
    server = _server()
    app = fastapi.FastAPI(lifespan=server.lifespan_context)

    @app.get("/")
    async def root() -> dict[str, str]:
        return {"app": "host"}

    app.mount("/notes", server.asgi_app())
    async with _uvicorn(app) as base:
        async with Client(base + "/notes/mcp") as client:
            result = await client.call_tool("ping", {})
            assert result["content"][0]["text"] == "pong from db"
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/")).json() == {"app": "host"}
            assert (await http.get("/notes/healthz")).json() == {"status": "ok"}
            ready = await http.get("/notes/readyz")
            assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
            assert (await http.get("/notes/status")).json() == {"tools": 1}
            posted = await http.post("/notes/echo")
            assert (posted.status_code, posted.text) == (201, "POST")
            wrong = await http.get("/notes/echo")
            assert wrong.status_code == 405 and "POST" in wrong.headers["allow"]
            assert (await http.get("/notes/nothing")).status_code == 404
            assert (await http.post("/mcp", json={})).status_code == 404  # only under the mount


async def test_starlette_mount_keeps_auth_on_the_mounted_endpoint() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    server = _server()
    resource = "http://127.0.0.1/notes/mcp"
    tokens = StaticTokens({"t": AccessToken("alice", frozenset({"mcp:use"}), (resource,))})
    inner = server.asgi_app(auth={
        "verifier": tokens, "resource": resource, "authorization_servers": ["https://as.example"],
        "required_scopes": ["mcp:use"]}, security=HttpSecurity(allowed_hosts=["*"]))
    host = Starlette(routes=[Mount("/notes", app=inner)], lifespan=server.lifespan_context)
    async with _uvicorn(host) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            refused = await http.post("/notes/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                      headers={"accept": "application/json, text/event-stream"})
            assert refused.status_code == 401
            assert (await http.get("/notes/healthz")).status_code == 200  # probes need no token
        transport = HttpTransport(base + "/notes/mcp", headers={"authorization": "Bearer t"})
        async with Client(transport, mode="modern") as client:
            assert (await client.call_tool("ping", {}))["content"][0]["text"] == "pong from db"


async def test_readyz_is_503_until_the_lifespan_runs() -> None:
    server = _server()
    async with serving(server.asgi_app()) as base, httpx.AsyncClient(base_url=base) as http:  # lifespan off
        assert (await http.get("/healthz")).status_code == 200
        not_ready = await http.get("/readyz")
        assert (not_ready.status_code, not_ready.json()) == (503, {"status": "starting"})
        async with server.lifespan_context():
            assert (await http.get("/readyz")).status_code == 200
    plain = m.Server("plain")
    async with serving(plain.asgi_app(health=False)) as base, httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/healthz")).status_code == 404


def test_route_mistakes_are_refused() -> None:
    server = m.Server("r")
    with pytest.raises(ValueError, match="start with '/'"):
        server.route("healthz")
    with pytest.raises(TypeError, match="needs a function"):
        server.route("/x")(42)  # type: ignore[type-var]
