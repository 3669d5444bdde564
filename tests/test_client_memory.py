"""Client against our Server in memory: _meta, ids, high-level API, errors, cache.

Every message passes through the JSON codec both ways (MemoryTransport).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.conftest import build_full_server

from nimblemcp import Server
from nimblemcp.client import CachePolicy, Client, OutputValidationError
from nimblemcp.errors import (
    ClientError,
    InvalidParams,
    RequestTimeout,
    UnsupportedProtocolVersion,
)
from nimblemcp.transports.client.memory import MemoryTransport


def client_for(server: Any, **kw: Any) -> tuple[Client, MemoryTransport]:
    transport = MemoryTransport(server)
    return Client(transport, **kw), transport


async def test_every_request_carries_meta_and_unique_ids() -> None:
    """META-01, META-03, VER-01, BASE-02: _meta on every request; ids never repeat."""
    client, wire = client_for(build_full_server(), on_elicit=lambda p: None,
                              on_sample=lambda p: "hi", on_roots=lambda p: [],
                              log_level="debug")
    async with client:
        await client.discover()
        await client.list_tools()
        await client.call_tool("echo", {"message": "x"})
        await client.read_resource("docs://brief")
    ids = [m["id"] for m in wire.sent]
    assert len(ids) == len(set(ids)) == 4
    for message in wire.sent:
        meta = message["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {
            "elicitation": {"form": {}}, "sampling": {}, "roots": {}}
        assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "nimblemcp-client"
        assert meta["io.modelcontextprotocol/logLevel"] == "debug"


async def test_capabilities_follow_callbacks() -> None:
    """ELIC-01, SAMP-01, ROOTS-01: nothing registered, nothing declared."""
    client, wire = client_for(build_full_server(), client_info=None)
    async with client:
        await client.list_tools()
    meta = wire.sent[0]["params"]["_meta"]
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
    assert "io.modelcontextprotocol/clientInfo" not in meta


async def test_high_level_calls(schemas: Any) -> None:
    """TOOL-04/08, RES-05, PROMPT, COMP: results come back as the spec shapes them."""
    async with Client(build_full_server()) as client:
        tools = await client.list_tools()
        assert "echo" in [t["name"] for t in tools]
        echoed = await client.call_tool("echo", {"message": "hello"})
        assert echoed["content"][0]["text"] == "hello"
        schemas.check("CallToolResult", echoed)
        weather = await client.call_tool("weather", {"city": "Oslo"})
        assert weather["structuredContent"] == {"city": "Oslo", "celsius": 21.5}
        failed = await client.call_tool("fail", {"reason": "nope"})
        assert failed["isError"] is True
        read = await client.read_resource("docs://brief")
        assert read["contents"][0]["text"] == "# Brief"
        with pytest.raises(InvalidParams) as info:
            await client.read_resource("docs://../nope/x/y")
        assert info.value.code == -32602
        assert [p["name"] for p in await client.list_prompts()] == ["review"]
        prompt = await client.get_prompt("review", {"topic": "risks"})
        assert "risks" in prompt["messages"][0]["content"]["text"]
        done = await client.complete({"type": "ref/prompt", "name": "review"}, "topic", "a")
        assert done["completion"]["values"] == ["alpha", "beta"]
        templates = await client.list_resource_templates()
        assert templates[0]["uriTemplate"] == "docs://{name}"
        assert client.server_info is not None and client.server_info["name"] == "full"


async def test_progress_callback_gets_the_requests_notifications() -> None:
    """PROG-01: a progressToken in _meta only when asked; updates reach the callback."""
    seen: list[tuple[float, float | None, str | None]] = []
    client, wire = client_for(build_full_server())
    async with client:
        await client.call_tool("work", {}, on_progress=lambda p, t, m: seen.append((p, t, m)))
        await client.call_tool("work", {})
    assert seen == [(1, 2, "half"), (2, 2, None)]
    calls = [m for m in wire.sent if m["method"] == "tools/call"]
    assert "progressToken" in calls[0]["params"]["_meta"]
    assert "progressToken" not in calls[1]["params"]["_meta"]


async def test_output_schema_violation_is_a_client_error() -> None:
    """TOOL-04: structuredContent that breaks outputSchema raises; isError results pass."""

    class Lying:
        async def handle(self, message: Any, emit: Any = None, subject: Any = None) -> Any:
            method = message["method"]
            rid = message["id"]
            if method == "tools/list":
                return {"jsonrpc": "2.0", "id": rid, "result": {
                    "resultType": "complete", "ttlMs": 0, "cacheScope": "public",
                    "tools": [{"name": "n", "inputSchema": {"type": "object"},
                               "outputSchema": {"type": "object", "properties": {"v": {"type": "integer"}},
                                                "required": ["v"]}}]}}
            bad = message["params"]["arguments"].get("error", False)
            return {"jsonrpc": "2.0", "id": rid, "result": {
                "resultType": "complete", "isError": bad,
                "content": [{"type": "text", "text": "x"}], "structuredContent": {"v": "nope"}}}

    async with Client(MemoryTransport(Lying())) as client:
        await client.list_tools()
        with pytest.raises(OutputValidationError):
            await client.call_tool("n", {})
        assert isinstance(OutputValidationError("x"), ClientError)
        result = await client.call_tool("n", {"error": True})
        assert result["isError"] is True


class Scripted:
    """A peer answering from a script: one reply (or a callable) per request."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.seen: list[dict[str, Any]] = []

    async def handle(self, message: Any, emit: Any = None, subject: Any = None) -> Any:
        self.seen.append(message)
        reply = self.replies.pop(0)
        if callable(reply):
            reply = reply(message)
        if isinstance(reply, dict) and "code" in reply:
            return {"jsonrpc": "2.0", "id": message["id"], "error": reply}
        return {"jsonrpc": "2.0", "id": message["id"], "result": reply}


async def test_version_negotiation_on_unsupported_version() -> None:
    """VER-03: -32022 with a common version retries with it; none in common raises."""
    peer = Scripted(
        {"code": -32022, "message": "Unsupported", "data": {"supported": ["2026-07-28"], "requested": "2025-11-25"}},
        {"resultType": "complete", "tools": []},
    )
    async with Client(MemoryTransport(peer), versions=["2025-11-25", "2026-07-28"], cache=False) as client:
        assert await client.list_tools() == []
    versions = [m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] for m in peer.seen]
    assert versions == ["2025-11-25", "2026-07-28"]
    assert peer.seen[0]["id"] != peer.seen[1]["id"]

    none = Scripted({"code": -32022, "message": "Unsupported", "data": {"supported": ["2099-01-01"], "requested": "x"}})
    async with Client(MemoryTransport(none)) as client:
        with pytest.raises(UnsupportedProtocolVersion, match="no protocol version in common"):
            await client.list_prompts()


async def test_result_type_rules() -> None:
    """RT-02: absent resultType is complete; RT-03: unknown values are invalid."""
    peer = Scripted({"contents": [{"uri": "a://b", "text": "t"}]}, {"resultType": "weird"})
    async with Client(MemoryTransport(peer), cache=False) as client:
        assert (await client.read_resource("a://b"))["contents"][0]["text"] == "t"
        with pytest.raises(ClientError, match="resultType"):
            await client.read_resource("a://b")


async def test_timeout_is_a_client_error_and_cancels() -> None:
    """ERR-05, CANC-07: no answer in time raises RequestTimeout, the server task is cancelled."""
    import asyncio

    cancelled = asyncio.Event()
    server = Server("slow")

    @server.tool
    async def hang() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    async with Client(server, timeout=0.05) as client:
        with pytest.raises(RequestTimeout):
            await client.call_tool("hang", {})
    await asyncio.wait_for(cancelled.wait(), 5)
    assert cancelled.is_set()


async def test_cache_honors_ttl_scope_and_opt_out() -> None:
    """CACHE-03/05/08: fresh entries served, keyed by params; cache=False bypasses."""
    peer = Scripted(
        {"resultType": "complete", "ttlMs": 60000, "cacheScope": "public", "contents": [{"uri": "a://1", "text": "one"}]},
        {"resultType": "complete", "ttlMs": 60000, "cacheScope": "private", "contents": [{"uri": "a://2", "text": "two"}]},
        {"resultType": "complete", "ttlMs": 0, "cacheScope": "public", "contents": [{"uri": "a://3", "text": "v1"}]},
        {"resultType": "complete", "ttlMs": 0, "cacheScope": "public", "contents": [{"uri": "a://3", "text": "v2"}]},
        {"resultType": "complete", "ttlMs": 60000, "cacheScope": "public", "contents": [{"uri": "a://1", "text": "fresh"}]},
    )
    async with Client(MemoryTransport(peer)) as client:
        first = await client.read_resource("a://1")
        assert (await client.read_resource("a://1")) == first  # served from cache
        assert (await client.read_resource("a://2"))["contents"][0]["text"] == "two"
        assert (await client.read_resource("a://2"))["contents"][0]["text"] == "two"
        assert (await client.read_resource("a://3"))["contents"][0]["text"] == "v1"
        assert (await client.read_resource("a://3"))["contents"][0]["text"] == "v2"  # ttl 0
        assert (await client.read_resource("a://1", cache=False))["contents"][0]["text"] == "fresh"
    assert [m["params"]["uri"] for m in peer.seen] == ["a://1", "a://2", "a://3", "a://3", "a://1"]


async def test_private_entries_stay_with_their_auth_context() -> None:
    """CACHE-08: a shared store shares public entries but never private ones."""
    from nimblemcp.client import MemoryCacheStore

    store = MemoryCacheStore()
    public = {"resultType": "complete", "ttlMs": 60000, "cacheScope": "public", "contents": []}
    private = {"resultType": "complete", "ttlMs": 60000, "cacheScope": "private", "contents": [{"uri": "p://", "text": "alice"}]}
    peer = Scripted(public, private, dict(private, contents=[{"uri": "p://", "text": "bob"}]))
    transport = MemoryTransport(peer)
    async with Client(transport, cache_policy=CachePolicy(store=store, auth_context="alice")) as alice:
        await alice.read_resource("pub://")
        assert (await alice.read_resource("p://"))["contents"][0]["text"] == "alice"
    async with Client(transport, cache_policy=CachePolicy(store=store, auth_context="bob")) as bob:
        assert (await bob.read_resource("pub://"))["cacheScope"] == "public"  # shared hit
        assert (await bob.read_resource("p://"))["contents"][0]["text"] == "bob"
    assert len(peer.seen) == 3


async def test_paginated_lists_are_gathered_and_pages_cached() -> None:
    """PAG-02, CACHE-09: every page fetched by its opaque cursor, "" is a cursor."""
    peer = Scripted(
        {"resultType": "complete", "ttlMs": 60000, "cacheScope": "public", "prompts": [{"name": "a"}], "nextCursor": ""},
        {"resultType": "complete", "ttlMs": 60000, "cacheScope": "public", "prompts": [{"name": "b"}]},
    )
    async with Client(MemoryTransport(peer)) as client:
        assert [p["name"] for p in await client.list_prompts()] == ["a", "b"]
        assert [p["name"] for p in await client.list_prompts()] == ["a", "b"]
    assert "cursor" not in peer.seen[0]["params"]
    assert peer.seen[1]["params"]["cursor"] == ""
    assert len(peer.seen) == 2


async def test_list_changed_notification_evicts() -> None:
    """CACHE-06/SUB: a tools list_changed notification drops the cached tools pages."""
    from nimblemcp.client import ResultCache

    cache = ResultCache("p")
    cache.put("tools/list", {}, "v", {"resultType": "complete", "ttlMs": 1000, "cacheScope": "public"})
    cache.put("resources/read", {"uri": "a://"}, "v", {"resultType": "complete", "ttlMs": 1000, "cacheScope": "private"})
    assert cache.get("tools/list", {}, "v") is not None
    cache.evict("tools/list")
    assert cache.get("tools/list", {}, "v") is None
    cache.evict(uri="a://")
    assert cache.get("resources/read", {"uri": "a://"}, "v") is None
    assert cache.get("tools/list", {"requestState": "s"}, "v") is None


async def test_rejected_version_that_the_server_lists_is_retried_once() -> None:
    """VER-03: a -32022 listing our own version gets one retry with it, not a loop."""
    reject = {"code": -32022, "message": "Unsupported",
              "data": {"supported": ["2026-07-28"], "requested": ""}}
    peer = Scripted(reject, {"resultType": "complete", "tools": []}, reject, reject)
    async with Client(MemoryTransport(peer), cache=False) as client:
        assert await client.list_tools() == []
        with pytest.raises(UnsupportedProtocolVersion):
            await client.list_tools()
    assert len(peer.seen) == 4


async def test_stale_cursor_drops_cached_pages_and_restarts() -> None:
    """CACHE-09: an invalid cursor makes the client refetch the list from the start."""
    def page(names: list[str], nxt: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = {"resultType": "complete", "ttlMs": 60000, "cacheScope": "public",
                                  "prompts": [{"name": n} for n in names]}
        if nxt is not None:
            result["nextCursor"] = nxt
        return result

    peer = Scripted(page(["a"], "c1"), {"code": -32602, "message": "Invalid cursor"},
                    page(["x"], "c2"), page(["y"]))
    async with Client(MemoryTransport(peer)) as client:
        assert [p["name"] for p in await client.list_prompts()] == ["x", "y"]
    assert [m["params"].get("cursor") for m in peer.seen] == [None, "c1", None, "c2"]
