"""Issue 19: auth inside handlers: the principal on the context, and scopes required per
tool, prompt or resource (`Server.require_scopes`): 403 with an `insufficient_scope`
challenge on HTTP before anything runs, -32001 from the core on every other path.
Real HTTP (uvicorn on loopback), modern and legacy clients; the in-memory client."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from tests._serving import serving

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.client import Client
from nimblemcp.errors import InsufficientScope
from nimblemcp.testing import connect
from nimblemcp.transports.auth.bearer import AccessToken, StaticTokens
from nimblemcp.transports.client.http import HttpTransport

RESOURCE = "http://127.0.0.1/mcp"
TOKENS = StaticTokens({
    "admin": AccessToken("alice", frozenset({"mcp:use", "repo:admin"}), (RESOURCE,), claims={"org": "acme"}),
    "user": AccessToken("bob", frozenset({"mcp:use"}), (RESOURCE,)),
})
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def _server() -> m.Server:
    server = m.Server("scoped")

    @server.tool()
    def delete_repo(name: str, ctx: m.Context) -> str:
        token = ctx.principal
        return f"{name} deleted by {token.subject} of {token.claims.get('org')}" if token else "anonymous"

    @server.tool()
    def whoami(ctx: m.Context) -> str:
        return ctx.principal.subject if ctx.principal else "nobody"

    @server.prompt()
    def audit() -> str:
        return "audit"

    @server.resource("repo://{name}/secrets")
    def secrets(name: str) -> str:
        return f"secrets of {name}"

    server.require_scopes(["repo:admin"], tool="delete_repo")
    server.require_scopes(["repo:admin"], prompt="audit")
    server.require_scopes(["repo:admin"], resource="repo://{name}/secrets")
    return server


def _app(server: m.Server) -> Any:
    return server.asgi_app(auth={
        "verifier": TOKENS, "resource": RESOURCE, "authorization_servers": ["https://as.example"],
        "required_scopes": ["mcp:use"]}, security=HttpSecurity(allowed_hosts=["*"]))


def _headers(token: str, method: str, name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28", "mcp-method": method, "mcp-name": name}


async def test_http_403_with_the_required_scope_before_the_handler_runs() -> None:
    async with serving(_app(_server())) as base, httpx.AsyncClient(base_url=base) as http:
        for method, name, params in (
            ("tools/call", "delete_repo", {"name": "delete_repo", "arguments": {"name": "x"}}),
            ("prompts/get", "audit", {"name": "audit"}),
            ("resources/read", "repo://x/secrets", {"uri": "repo://x/secrets"}),
        ):
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
            refused = await http.post("/mcp", json=body, headers=_headers("user", method, name))
            assert refused.status_code == 403, (method, refused.text)
            challenge = refused.headers["www-authenticate"]
            assert 'error="insufficient_scope"' in challenge and 'scope="mcp:use repo:admin"' in challenge
            allowed = await http.post("/mcp", json=body, headers=_headers("admin", method, name))
            assert allowed.status_code == 200 and "result" in allowed.json(), allowed.text


async def test_principal_and_scopes_with_the_client_in_both_eras() -> None:
    async with serving(_app(_server())) as base:
        for mode in ("modern", "legacy"):
            admin = HttpTransport(base + "/mcp", headers={"authorization": "Bearer admin"})
            async with Client(admin, mode=mode) as client:  # type: ignore[arg-type]
                done = await client.call_tool("delete_repo", {"name": "r"})
                assert done["content"][0]["text"] == "r deleted by alice of acme"
            user = HttpTransport(base + "/mcp", headers={"authorization": "Bearer user"})
            async with Client(user, mode=mode) as client:  # type: ignore[arg-type]
                assert (await client.call_tool("whoami", {}))["content"][0]["text"] == "bob"
                with pytest.raises(m.McpError) as info:
                    await client.call_tool("delete_repo", {"name": "r"})
                code = getattr(info.value, "code", None)
                status = getattr(info.value, "status", None)
                assert code == InsufficientScope.code or status == 403, (mode, info.value)


async def test_core_refuses_without_a_token() -> None:
    async with connect(_server()) as client:
        exchange = await client.exchange("tools/call", {"name": "delete_repo", "arguments": {"name": "x"}})
        assert exchange.error["code"] == -32001
        assert exchange.error["data"] == {"requiredScopes": ["repo:admin"]}
        assert (await client.call_tool("whoami"))["content"][0]["text"] == "nobody"


def test_require_scopes_mistakes() -> None:
    server = m.Server("s")
    with pytest.raises(TypeError, match="exactly one"):
        server.require_scopes(["a"], tool="x", prompt="y")
    with pytest.raises(ValueError, match="at least one scope"):
        server.require_scopes([], tool="x")
    assert server.dispatcher.handlers == server.dispatcher.bare  # nothing required: nothing added
