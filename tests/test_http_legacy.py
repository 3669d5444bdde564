"""The legacy (2025-11-25) Streamable HTTP leg's rules, in-process over httpx (LEG-01..06, LEG-15).

Sessions: `initialize` mints a visible-ASCII `Mcp-Session-Id`; later requests without
it get 400, with an unknown, deleted, expired, evicted or foreign one 404; DELETE ends
a session. Notifications and responses are 202. Results are legacy-shaped and valid
against the 2025-11-25 schema. The streams (SSE on a POST, GET) are tested under a
real uvicorn in test_http_legacy_streams.py.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import nimblemcp as m
from nimblemcp.transports.http._asgi import SUBJECT
from nimblemcp.transports.http._legacy_leg import LegacyHttp
from nimblemcp.transports.http.app import asgi_app
from nimblemcp.transports.http.security import secure_app

V = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
INIT = {"protocolVersion": V, "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "legacy-host", "version": "1"}}


def make_server() -> m.Server:
    server = m.Server("legacy-http", "1.0", instructions="Use the tools.")

    @server.tool
    def echo(text: str) -> str:
        return text

    @server.resource("test://doc")
    def doc() -> str:
        return "doc text"

    return server


def body(rid: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


class Legacy:
    """A hand-driven legacy client over an httpx client."""

    def __init__(self, c: httpx.AsyncClient, extra: dict[str, str] | None = None) -> None:
        self.c = c
        self.extra = extra or {}
        self.sid: str | None = None

    def headers(self, **more: str) -> dict[str, str]:
        h = {"accept": ACCEPT, "content-type": "application/json", **self.extra}
        if self.sid is not None:
            h["mcp-session-id"] = self.sid
            h["mcp-protocol-version"] = V
        h.update(more)
        return h

    async def initialize(self, params: dict[str, Any] | None = None) -> httpx.Response:
        r = await self.c.post("/mcp", json=body(0, "initialize", params or INIT), headers=self.headers())
        if r.status_code == 200:
            self.sid = r.headers["mcp-session-id"]
            ok = await self.c.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                   headers=self.headers())
            assert ok.status_code == 202 and ok.content == b""
        return r

    async def post(self, message: dict[str, Any], **more: str) -> httpx.Response:
        return await self.c.post("/mcp", json=message, headers=self.headers(**more))


@pytest.fixture
async def c() -> AsyncIterator[httpx.AsyncClient]:
    app = asgi_app(make_server())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
        yield client


async def serving(c: httpx.AsyncClient) -> None:
    peer = Legacy(c)
    assert (await peer.initialize()).status_code == 200
    r = await peer.post(body(9, "tools/call", {"name": "echo", "arguments": {"text": "ok"}}))
    assert r.json()["result"]["content"] == [{"type": "text", "text": "ok"}]


async def test_leg_01_04_initialize_mints_a_visible_ascii_session(c: httpx.AsyncClient, legacy_schemas: Any) -> None:
    a, b = Legacy(c), Legacy(c)
    r = await a.initialize()
    await b.initialize()
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    legacy_schemas.check("JSONRPCResultResponse", r.json())
    legacy_schemas.check("InitializeResult", r.json()["result"])
    result = r.json()["result"]
    assert result["protocolVersion"] == V and result["instructions"] == "Use the tools."
    assert "resultType" not in result
    assert a.sid is not None and re.fullmatch(r"[\x21-\x7e]{16,}", a.sid)
    assert a.sid != b.sid


async def test_leg_01_unknown_version_is_answered_with_the_newest_legacy_one(c: httpx.AsyncClient) -> None:
    r = await Legacy(c).initialize({**INIT, "protocolVersion": "2099-01-01"})
    assert r.json()["result"]["protocolVersion"] == V


async def test_compat_s02_bad_initialize_is_400_naming_versions(c: httpx.AsyncClient) -> None:
    r = await Legacy(c).initialize({"clientInfo": {"name": "x", "version": "1"}})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == -32602 and V in error["data"]["supported"] and r.json()["id"] == 0
    assert "mcp-session-id" not in r.headers
    await serving(c)


async def test_legacy_requests_are_served_and_shaped(c: httpx.AsyncClient, legacy_schemas: Any) -> None:
    peer = Legacy(c)
    await peer.initialize()
    tools = (await peer.post(body(1, "tools/list"))).json()
    legacy_schemas.check("ListToolsResult", tools["result"])
    assert not {"ttlMs", "cacheScope", "resultType", "_meta"} & set(tools["result"])
    call = await peer.post(body(2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert call.status_code == 200 and call.headers["content-type"] == "application/json"
    legacy_schemas.check("CallToolResult", call.json()["result"])
    assert call.json()["result"]["content"] == [{"type": "text", "text": "hi"}]
    read = (await peer.post(body(3, "resources/read", {"uri": "test://doc"}))).json()
    legacy_schemas.check("ReadResourceResult", read["result"])
    for rid, method, params in ((4, "ping", None), (5, "logging/setLevel", {"level": "error"}),
                                (6, "resources/subscribe", {"uri": "test://doc"}),
                                (7, "resources/unsubscribe", {"uri": "test://doc"})):
        r = await peer.post(body(rid, method, params))
        assert r.json() == {"jsonrpc": "2.0", "id": rid, "result": {}}


async def test_leg_15_errors_stay_json_rpc_errors(c: httpx.AsyncClient, legacy_schemas: Any) -> None:
    peer = Legacy(c)
    await peer.initialize()
    missing = (await peer.post(body(1, "resources/read", {"uri": "test://nope"}))).json()
    assert missing["error"]["code"] == -32002 and missing["id"] == 1
    legacy_schemas.check("JSONRPCErrorResponse", missing)
    unknown = (await peer.post(body(2, "no/such"))).json()
    assert unknown["error"]["code"] == -32601
    modern_only = (await peer.post(body(3, "server/discover"))).json()
    assert modern_only["error"]["code"] == -32601
    again = (await peer.post(body(4, "initialize", INIT))).json()
    assert again["error"]["code"] == -32600
    bad_level = (await peer.post(body(5, "logging/setLevel", {"level": "loud"}))).json()
    assert bad_level["error"]["code"] == -32602
    await serving(c)


async def test_leg_04_missing_session_id_is_400(c: httpx.AsyncClient) -> None:
    r = await c.post("/mcp", json=body(1, "tools/list"), headers={
        "accept": ACCEPT, "content-type": "application/json", "mcp-protocol-version": V})
    assert r.status_code == 400 and "Mcp-Session-Id" in r.json()["error"]["message"]
    assert r.json()["id"] == 1
    await serving(c)


async def test_leg_04_unknown_and_deleted_sessions_are_404(c: httpx.AsyncClient) -> None:
    peer = Legacy(c)
    await peer.initialize()
    stranger = await peer.post(body(1, "ping"), **{"mcp-session-id": "no-such-session"})
    assert stranger.status_code == 404
    gone = await c.delete("/mcp", headers=peer.headers())
    assert gone.status_code == 200
    for attempt in (peer.post(body(2, "ping")), c.delete("/mcp", headers=peer.headers()),
                    c.get("/mcp", headers=peer.headers(accept="text/event-stream"))):
        assert (await attempt).status_code == 404
    await serving(c)


async def test_leg_05_unsupported_version_header_is_400(c: httpx.AsyncClient) -> None:
    peer = Legacy(c)
    await peer.initialize()
    r = await peer.post(body(1, "ping"), **{"mcp-protocol-version": "1999-01-01"})
    assert r.status_code == 400
    assert (await peer.post(body(2, "ping"))).json()["result"] == {}


async def test_leg_06_notifications_and_responses_are_202(c: httpx.AsyncClient) -> None:
    peer = Legacy(c)
    await peer.initialize()
    for msg in ({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 77}},
                {"jsonrpc": "2.0", "id": "nimblemcp-999", "result": {}},
                {"jsonrpc": "2.0", "id": "nimblemcp-998", "error": {"code": -1, "message": "no"}}):
        r = await peer.post(msg)
        assert r.status_code == 202 and r.content == b""
    assert (await peer.post(body(1, "ping"))).json()["result"] == {}


async def test_get_needs_event_stream_and_other_verbs_are_405(c: httpx.AsyncClient) -> None:
    peer = Legacy(c)
    await peer.initialize()
    r = await c.get("/mcp", headers=peer.headers(accept="application/json"))
    assert r.status_code == 406
    r = await c.put("/mcp", headers=peer.headers())
    assert r.status_code == 405 and "GET" in r.headers["allow"]
    r = await c.get("/mcp", headers={"accept": "text/event-stream"})  # no session: the modern answer
    assert r.status_code == 405 and r.headers["allow"] == "POST"


async def test_leg_04_sessions_are_bound_to_the_credential() -> None:
    inner = asgi_app(make_server())

    async def with_user(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = dict(scope["headers"]).get(b"x-user")
            scope = {**scope, SUBJECT: raw.decode() if raw else None}
        await inner(scope, receive, send)

    transport = httpx.ASGITransport(app=with_user)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
        alice = Legacy(c, {"x-user": "alice"})
        await alice.initialize()
        assert (await alice.post(body(1, "ping"))).status_code == 200
        mallory = Legacy(c, {"x-user": "mallory"})
        mallory.sid = alice.sid
        assert (await mallory.post(body(2, "ping"))).status_code == 404
        assert (await c.delete("/mcp", headers=mallory.headers())).status_code == 404
        assert (await alice.post(body(3, "ping"))).status_code == 200


async def test_sessions_expire_when_idle_and_the_table_is_bounded() -> None:
    server = make_server()
    expiring = asgi_app(server, legacy=LegacyHttp(server, idle_timeout=-1))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=expiring), base_url="http://localhost") as c:
        peer = Legacy(c)
        r = await c.post("/mcp", json=body(0, "initialize", INIT), headers=peer.headers())
        peer.sid = r.headers["mcp-session-id"]
        assert (await peer.post(body(1, "ping"))).status_code == 404
    small = LegacyHttp(server, max_sessions=2)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi_app(server, legacy=small)),
                                 base_url="http://localhost") as c:
        first, second, third = Legacy(c), Legacy(c), Legacy(c)
        for peer in (first, second, third):
            assert (await peer.initialize()).status_code == 200
        assert len(small.sessions) == 2
        assert (await first.post(body(1, "ping"))).status_code == 404  # the oldest idle one went
        assert (await third.post(body(2, "ping"))).status_code == 200


async def test_opt_out_serves_only_the_modern_wire() -> None:
    app = asgi_app(make_server(), legacy_sessions=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
        r = await Legacy(c).initialize()
        assert r.status_code != 200 and "mcp-session-id" not in r.headers
        r = await c.get("/mcp", headers={"accept": "text/event-stream", "mcp-session-id": "x"})
        assert r.status_code == 405


async def test_secure_app_serves_legacy_sessions_by_default() -> None:
    app = secure_app(make_server())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
        await serving(c)
        r = await c.post("/mcp", json=body(0, "initialize", INIT),
                         headers={"accept": ACCEPT, "content-type": "application/json", "origin": "http://evil.example"})
        assert r.status_code == 403


async def test_compat_s04_the_version_header_picks_the_era(c: httpx.AsyncClient) -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    modern = {"accept": ACCEPT, "content-type": "application/json",
              "mcp-protocol-version": "2026-07-28", "mcp-method": "initialize"}
    r = await c.post("/mcp", json=body(1, "initialize", {"_meta": meta}), headers=modern)
    assert r.status_code == 404 and r.json()["error"]["code"] == -32601  # removed in 2026-07-28
    assert "mcp-session-id" not in r.headers
    r = await c.post("/mcp", json=body(2, "initialize", INIT), headers={"accept": ACCEPT, "content-type": "application/json"})
    assert r.status_code == 200 and r.headers["mcp-session-id"]
