"""Re-issue on broken HTTP streams: a tiny ASGI peer under a real uvicorn drops chosen
responses mid-stream (after one SSE event, before the final response).

Idempotent requests (lists, reads, discover, completion) are re-sent with a new id;
`tools/call` only when the cached tool says `idempotentHint: true` or the caller
passes `retry=True`; at most `max_retries` times (BASE-02: ids never reused).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _serving import serving

from nimblemcp.client import Client, RetryPolicy
from nimblemcp.errors import HttpStatusError, TransportError

TOOLS = [
    {"name": "safe", "inputSchema": {"type": "object"}, "annotations": {"idempotentHint": True}},
    {"name": "unsafe", "inputSchema": {"type": "object"}},
]


class FlakyPeer:
    """Answers like a minimal MCP server; `drops[method]` responses are cut mid-stream."""

    def __init__(self) -> None:
        self.drops: dict[str, int] = {}
        self.gateway: dict[str, int] = {}  # method -> statuses to answer first (a proxy's 502/504)
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            chunk = await receive()
            body += chunk.get("body", b"")
            if not chunk.get("more_body"):
                break
        message = json.loads(body)
        self.seen.append(message)
        if "id" not in message:
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        method = message["method"]
        statuses = self.gateway.get(method)
        if statuses:
            self.gateway[method] = statuses[1:]
            await send({"type": "http.response.start", "status": statuses[0],
                        "headers": [(b"content-type", b"text/html")]})
            await send({"type": "http.response.body", "body": b"<html>Bad Gateway</html>"})
            return
        if self.drops.get(method, 0) > 0:
            self.drops[method] -= 1
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            note = {"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": "working"}}
            await send({"type": "http.response.body", "more_body": True,
                        "body": b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n"})
            raise RuntimeError("dropping the connection on purpose")
        result = self.result(method, message.get("params") or {})
        payload = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload})

    def result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "tools/list":
            return {"resultType": "complete", "tools": TOOLS}
        if method == "tools/call":
            return {"resultType": "complete", "content": [{"type": "text", "text": params["name"]}]}
        if method == "resources/read":
            return {"resultType": "complete",
                    "contents": [{"uri": params["uri"], "text": "hello"}]}
        if method == "server/discover":
            return {"resultType": "complete", "supportedVersions": ["2026-07-28"],
                    "capabilities": {"tools": {}}, "serverInfo": {"name": "flaky", "version": "0"}}
        return {"resultType": "complete"}

    def ids(self, method: str) -> list[Any]:
        return [m["id"] for m in self.seen if m.get("method") == method]


@pytest.fixture
async def peer() -> AsyncIterator[tuple[FlakyPeer, str]]:
    app = FlakyPeer()
    async with serving(app, log_level="critical") as base:
        yield app, f"{base}/mcp"


async def test_lists_reads_and_discover_are_reissued_with_new_ids(peer: tuple[FlakyPeer, str]) -> None:
    app, url = peer
    app.drops = {"tools/list": 1, "resources/read": 2, "server/discover": 1}
    async with Client(url, retry_policy=RetryPolicy(retry_backoff=0.01)) as client:
        assert (await client.discover())["serverInfo"]["name"] == "flaky"
        assert [t["name"] for t in await client.list_tools()] == ["safe", "unsafe"]
        read = await client.read_resource("docs://a")
        assert read["contents"][0]["text"] == "hello"
    for method, attempts in (("server/discover", 2), ("tools/list", 2), ("resources/read", 3)):
        ids = app.ids(method)
        assert len(ids) == attempts, method
    every = [m["id"] for m in app.seen if "id" in m]
    assert len(every) == len(set(every))  # a re-issue is a new request


async def test_tools_call_is_reissued_only_when_idempotent_or_asked(peer: tuple[FlakyPeer, str]) -> None:
    app, url = peer
    async with Client(url, retry_policy=RetryPolicy(retry_backoff=0.01)) as client:
        app.drops = {"tools/call": 1}
        with pytest.raises(TransportError):
            await client.call_tool("unsafe", {})
        assert len(app.ids("tools/call")) == 1  # not re-sent: it may have side effects
        app.drops = {"tools/call": 1}
        assert (await client.call_tool("safe", {}))["content"][0]["text"] == "safe"  # idempotentHint
        assert len(app.ids("tools/call")) == 3
        app.drops = {"tools/call": 1}
        assert (await client.call_tool("unsafe", {}, retry=True))["content"][0]["text"] == "unsafe"
        assert len(app.ids("tools/call")) == 5
        app.drops = {"tools/call": 1}
        with pytest.raises(TransportError):
            await client.call_tool("safe", {}, retry=False)  # the caller's word wins


async def test_retries_are_capped(peer: tuple[FlakyPeer, str]) -> None:
    app, url = peer
    app.drops = {"tools/list": 10}
    async with Client(url, retry_policy=RetryPolicy(max_retries=2, retry_backoff=0.01)) as client:
        with pytest.raises(TransportError):
            await client.list_tools()
    assert len(app.ids("tools/list")) == 3  # the first try and two re-issues


async def test_a_gateway_failure_is_reissued_only_for_idempotent_requests(peer: tuple[FlakyPeer, str]) -> None:
    """A proxy's 502/504 (found by the chaos run, issue 34: nginx answers 502 when an
    instance closes a kept-alive connection as it stops) means the request may or may not
    have run: an idempotent one is sent again, others fail with the status."""
    app, url = peer
    async with Client(url, retry_policy=RetryPolicy(retry_backoff=0.01)) as client:
        await client.list_tools()
        app.gateway = {"tools/call": [502, 504]}
        assert (await client.call_tool("safe", {}))["content"][0]["text"] == "safe"
        assert len(app.ids("tools/call")) == 3
        app.gateway = {"tools/call": [502]}
        with pytest.raises(HttpStatusError) as failed:
            await client.call_tool("unsafe", {})
        assert failed.value.status == 502 and len(app.ids("tools/call")) == 4  # not re-sent
        app.gateway = {"tools/call": [500]}  # the server itself failed: not a gateway's doing
        with pytest.raises(HttpStatusError):
            await client.call_tool("safe", {})
        assert len(app.ids("tools/call")) == 5
