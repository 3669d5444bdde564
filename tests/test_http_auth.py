"""The MCP server as an OAuth resource server (CHECKLIST 23.1: AUTH-RS-01..08)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

import nimblemcp as m
from nimblemcp.transports.auth.bearer import AccessToken, StaticTokens
from nimblemcp.transports.http.security import secure_app

RESOURCE = "http://localhost/mcp"
AS = "https://auth.example.com"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
TOKENS = StaticTokens({
    "alice-token": AccessToken("alice", frozenset({"mcp:use"}), (RESOURCE,)),
    "bob-token": AccessToken("bob", frozenset({"mcp:use"}), (RESOURCE,)),
    "narrow-token": AccessToken("carol", frozenset(), (RESOURCE,)),
    "other-audience": AccessToken("dave", frozenset({"mcp:use"}), ("https://elsewhere/mcp",)),
    "expired-token": AccessToken("erin", frozenset({"mcp:use"}), (RESOURCE,), expires_at=time.time() - 1),
})


def make_client() -> httpx.AsyncClient:
    server = m.Server("protected")

    @server.tool
    async def whoami(ctx: m.Context) -> str:
        return ctx.subject or "nobody"

    @server.tool
    async def confirm(ctx: m.Context) -> str:
        answer = await ctx.elicit("ok", "Sure?", {"type": "object", "properties": {}})
        return answer.action

    app = secure_app(server, auth={
        "verifier": TOKENS, "resource": RESOURCE, "authorization_servers": [AS],
        "scopes_supported": ["mcp:use", "offline_access"], "required_scopes": ["mcp:use"],
    })
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")


def call(name: str, rid: int = 1, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "_meta": META, **params}}


def headers(token: str | None, name: str) -> dict[str, str]:
    h = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
         "mcp-method": "tools/call", "mcp-name": name}
    if token is not None:
        h["authorization"] = f"Bearer {token}"
    return h


async def test_auth_rs_01_02_metadata_at_root_and_path_inserted_well_known() -> None:
    async with make_client() as client:
        for url in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
            r = await client.get(url)
            assert r.status_code == 200
            doc = r.json()
            assert doc["resource"] == RESOURCE and doc["authorization_servers"] == [AS]
            assert doc["scopes_supported"] == ["mcp:use"]  # AUTH-RS-07: no offline_access


@pytest.mark.parametrize(("token", "error"), [
    (None, None), ("garbage", "invalid_token"), ("other-audience", "invalid_token"),
    ("expired-token", "invalid_token")])
async def test_auth_rs_03_04_05_missing_or_bad_tokens_get_401_with_a_challenge(token: str | None, error: str | None) -> None:
    async with make_client() as client:
        r = await client.post("/mcp", json=call("whoami"), headers=headers(token, "whoami"))
        assert r.status_code == 401
        challenge = r.headers["www-authenticate"]
        assert challenge.startswith("Bearer ")
        assert 'resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp"' in challenge
        assert 'scope="mcp:use"' in challenge
        assert (f'error="{error}"' in challenge) if error else ("error=" not in challenge)
        ok = await client.post("/mcp", json=call("whoami"), headers=headers("alice-token", "whoami"))
        assert ok.json()["result"]["content"][0]["text"] == "alice"  # still serving


async def test_auth_rs_06_insufficient_scope_is_403() -> None:
    async with make_client() as client:
        r = await client.post("/mcp", json=call("whoami"), headers=headers("narrow-token", "whoami"))
        assert r.status_code == 403
        assert 'error="insufficient_scope"' in r.headers["www-authenticate"]


async def test_request_state_is_bound_to_the_authenticated_subject() -> None:
    """MRTR-13 / ELIC-09: another user cannot continue alice's round."""
    async with make_client() as client:
        first = (await client.post("/mcp", json=call("confirm"), headers=headers("alice-token", "confirm"))).json()
        state = first["result"]["requestState"]
        retry = call("confirm", 2, requestState=state, inputResponses={"ok": {"action": "accept", "content": {}}})
        stolen = await client.post("/mcp", json=retry, headers=headers("bob-token", "confirm"))
        assert stolen.json()["error"]["code"] == -32602
        mine = await client.post("/mcp", json=retry, headers=headers("alice-token", "confirm"))
        assert mine.json()["result"]["content"][0]["text"] == "accept"


async def test_cache_07_authenticated_lists_default_to_private_scope() -> None:
    async with make_client() as client:
        body = {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": META}}
        h = {**headers("alice-token", "x"), "mcp-method": "tools/list"}
        del h["mcp-name"]
        r = await client.post("/mcp", json=body, headers=h)
        assert r.json()["result"]["cacheScope"] == "private"
    unauthenticated = m.Server("open")
    unauthenticated.tool(lambda: "x", name="t")
    from nimblemcp.testing import connect

    async with connect(unauthenticated) as c:
        assert (await c.request("tools/list"))["cacheScope"] == "public"
    explicit = m.Server("explicit", lists=m.ListOptions(cache_hints={"tools/list": (1000, "public")}))
    explicit.tool(lambda: "x", name="t")
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}
    answer = await explicit.handle(message, subject="alice")
    assert answer is not None and answer["result"]["cacheScope"] == "public"
