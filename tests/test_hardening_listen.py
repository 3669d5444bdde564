"""Issue 12, part A: `subscriptions/listen` is bounded and keeps the spec's rules;
the tasks extension does not exist on a 2025-11-25 session."""

from __future__ import annotations

import asyncio
from typing import Any

from nimblemcp import Server
from nimblemcp.server._options import ListenOptions
from nimblemcp.server._tasks import TASKS_EXTENSION
from nimblemcp.transports._legacy import LegacySession

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
TASK_META = {**META, "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
SID = "io.modelcontextprotocol/subscriptionId"


def make_server(**listen: Any) -> Server:
    server = Server("subs", listen=ListenOptions(**listen))

    @server.resource("docs://brief.md")
    def brief() -> str:
        return "brief"

    return server


async def listen(server: Server, notifications: dict[str, Any], meta: dict[str, Any] = META,
                 until_ack: bool = True) -> tuple[list[dict[str, Any]], asyncio.Task[Any]]:
    seen: list[dict[str, Any]] = []
    message = {"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
               "params": {"_meta": meta, "notifications": notifications}}
    task = asyncio.create_task(server.handle(message, seen.append))
    async with asyncio.timeout(5):
        while until_ack and not seen and not task.done():
            await asyncio.sleep(0.005)
    return seen, task


async def test_a_filter_over_the_uri_limit_is_32602_and_nothing_is_subscribed() -> None:
    server = make_server(max_uris=10)
    seen, task = await listen(server, {"resourceSubscriptions": [f"docs://{i}" for i in range(11)]})
    response = await task
    assert response is not None and response["error"]["code"] == -32602
    assert "at most 10" in response["error"]["message"]
    assert seen == [] and len(server.bus) == 0  # type: ignore[arg-type]


async def test_the_default_limit_refuses_a_huge_filter_quickly() -> None:
    server = make_server()
    _seen, task = await listen(server, {"resourceSubscriptions": [f"docs://{i}" for i in range(300_000)]})
    response = await asyncio.wait_for(task, 5)
    assert response is not None and response["error"]["code"] == -32602


async def test_total_uri_length_is_limited_too() -> None:
    server = make_server(max_filter_chars=1000)
    _seen, task = await listen(server, {"resourceSubscriptions": ["docs://" + "x" * 600, "docs://" + "y" * 600]})
    response = await task
    assert response is not None and response["error"]["code"] == -32602


async def test_a_filter_at_the_limit_is_acknowledged_first() -> None:
    server = make_server(max_uris=1000)
    uris = [f"docs://brief.md/{i}" for i in range(1000)]
    seen, task = await listen(server, {"resourceSubscriptions": uris})
    assert seen[0]["method"] == "notifications/subscriptions/acknowledged"
    assert seen[0]["params"]["notifications"]["resourceSubscriptions"] == uris
    server.notify_resource_updated("docs://brief.md/7")
    async with asyncio.timeout(5):
        while len(seen) < 2:
            await asyncio.sleep(0.005)
    assert seen[1]["params"]["uri"] == "docs://brief.md/7"
    task.cancel()


async def test_task_notifications_without_the_extension_are_32021() -> None:
    server = make_server()
    seen, task = await listen(server, {"taskIds": ["abc"]})
    response = await task
    assert response is not None and response["error"]["code"] == -32021
    assert response["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    assert seen == []
    # Declared: acknowledged; "abc" is no task of this caller, so it is not honoured
    # (task notifications themselves: tests/test_task_notifications.py).
    seen, task = await listen(server, {"taskIds": ["abc"], "resourcesListChanged": True}, TASK_META)
    assert seen[0]["method"] == "notifications/subscriptions/acknowledged"
    assert seen[0]["params"]["notifications"]["taskIds"] == []
    task.cancel()


async def test_a_legacy_session_never_gets_a_task() -> None:
    """SEP-2663: the extension does not exist under 2025-11-25."""
    server = Server("tasks")

    @server.tool(task="optional")
    async def job() -> str:
        return "ran inline"

    session = LegacySession(server)
    session.initialize({"protocolVersion": "2025-11-25", "clientInfo": {"name": "old", "version": "1"},
                        "capabilities": {"extensions": {TASKS_EXTENSION: {}}}})
    prepared = session.prepare({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": {"name": "job", "arguments": {}, "task": {"ttl": 1000}}})
    assert not isinstance(prepared, dict)
    response = await session.run(prepared, lambda m: None)
    assert response["result"]["content"][0]["text"] == "ran inline"
    assert "taskId" not in response["result"]
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        refused = session.prepare({"jsonrpc": "2.0", "id": 2, "method": method, "params": {"taskId": "x"}})
        assert isinstance(refused, dict) and refused["error"]["code"] == -32601


async def test_a_listener_dropped_for_being_slow_is_told_so_over_real_http() -> None:
    """SUB-09: the listen stream ends with notifications/cancelled naming the listen."""
    import threading

    import httpx
    import orjson
    from _serving import serving
    from _sse_parser import SSEParser

    from nimblemcp.backends.bus import Event
    from nimblemcp.transports.http.app import asgi_app

    server = Server("slow", listen=ListenOptions(queue=4))
    server.tool(lambda: "x", name="t")
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen"}
    body = {"jsonrpc": "2.0", "id": "slow-1", "method": "subscriptions/listen",
            "params": {"_meta": META, "notifications": {"toolsListChanged": True}}}
    seen: list[dict[str, Any]] = []
    async with (serving(asgi_app(server)) as base, httpx.AsyncClient(timeout=10) as client,
                client.stream("POST", base + "/mcp", json=body, headers=headers) as stream):
        parser = SSEParser()
        chunks = stream.aiter_bytes()
        async with asyncio.timeout(10):
            while not seen:
                seen.extend(orjson.loads(e) for e in parser.feed(await chunks.__anext__()))
            assert seen[0]["method"] == "notifications/subscriptions/acknowledged"
            burst = threading.Thread(target=lambda: [server.bus.publish(Event("tools")) for _ in range(500)])
            burst.start()
            burst.join()
            async for chunk in chunks:
                seen.extend(orjson.loads(e) for e in parser.feed(chunk))
    cancelled = [m for m in seen if m.get("method") == "notifications/cancelled"]
    assert cancelled and cancelled[0]["params"]["requestId"] == "slow-1"
    assert "too slow" in cancelled[0]["params"]["reason"]
    assert seen[-1]["id"] == "slow-1"  # and the closing result
