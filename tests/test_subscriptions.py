"""subscriptions/listen over the in-memory path (CHECKLIST section 6, TOOL-13, RES-07)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from nimblemcp import ListenOptions, Server
from nimblemcp.backends.bus import Event, InProcessBus, SlowListener
from nimblemcp.jsonrpc import decode, encode

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
SID = "io.modelcontextprotocol/subscriptionId"


def make_server(**options: Any) -> Server:
    server = Server("subs", **options)

    @server.tool
    def echo(text: str) -> str:
        return text

    @server.resource("docs://brief.md")
    def brief() -> str:
        return "brief"

    return server


class Listener:
    """Runs one listen request as a task and records what it emits."""

    def __init__(self, server: Server, rid: Any, notifications: dict[str, Any]) -> None:
        self.messages: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        message = {"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen",
                   "params": {"_meta": META, "notifications": notifications}}
        self.task = asyncio.create_task(server.handle(decode(encode(message)), self._emit))

    def _emit(self, message: dict[str, Any]) -> None:
        self.messages.append(decode(encode(message)))
        self.arrived.set()

    async def wait_for(self, count: int) -> list[dict[str, Any]]:
        async with asyncio.timeout(5):
            while len(self.messages) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.messages

    def methods(self) -> list[str]:
        return [m["method"] for m in self.messages]


async def test_sub_02_03_05_ack_first_with_honoured_subset_and_id() -> None:
    server = make_server()
    listener = Listener(server, "listen-1", {
        "toolsListChanged": True, "promptsListChanged": True,
        "resourceSubscriptions": ["docs://brief.md"],
    })
    (ack,) = await listener.wait_for(1)
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"][SID] == "listen-1"
    # No prompts on this server: promptsListChanged is silently dropped (SUB-03).
    assert ack["params"]["notifications"] == {
        "toolsListChanged": True, "resourceSubscriptions": ["docs://brief.md"],
    }
    listener.task.cancel()


async def test_sub_01_05_only_requested_kinds_tagged_with_same_json_type() -> None:
    """TOOL-13, RES-07, SUB-01, SUB-05, BASE-11 (integer id stays an integer)."""
    server = make_server()
    listener = Listener(server, 7, {"toolsListChanged": True, "resourceSubscriptions": ["docs://"]})
    await listener.wait_for(1)
    server.add_tool(lambda: "x", name="late_tool")  # tools list changed
    server.prompt(lambda: "p", name="late_prompt")  # not requested
    server.notify_resource_updated("docs://brief.md")  # beneath a subscribed URI (SUB-11)
    server.notify_resource_updated("other://x")  # not subscribed
    messages = await listener.wait_for(3)
    await asyncio.sleep(0.05)
    assert listener.methods() == [
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
        "notifications/resources/updated",
    ]
    assert all(m["params"]["_meta"][SID] == 7 and type(m["params"]["_meta"][SID]) is int for m in messages)
    assert messages[2]["params"]["uri"] == "docs://brief.md"
    listener.task.cancel()


async def test_two_listeners_with_different_filters() -> None:
    server = make_server()
    tools = Listener(server, 1, {"toolsListChanged": True})
    resources = Listener(server, 2, {"resourcesListChanged": True})
    await tools.wait_for(1)
    await resources.wait_for(1)
    server.add_tool(lambda: "x", name="t2")
    server.resource("docs://new.md")(lambda: "new")
    await tools.wait_for(2)
    await resources.wait_for(2)
    await asyncio.sleep(0.05)
    assert tools.methods()[1:] == ["notifications/tools/list_changed"]
    assert resources.methods()[1:] == ["notifications/resources/list_changed"]
    tools.task.cancel()
    resources.task.cancel()


async def test_sub_09_graceful_close_sends_closing_result() -> None:
    server = make_server()
    listener = Listener(server, "L", {"toolsListChanged": True})
    await listener.wait_for(1)
    server.close_listeners()
    response = await asyncio.wait_for(listener.task, 5)
    assert response is not None
    result = response["result"]
    assert response["id"] == "L" and result["resultType"] == "complete"
    assert result["_meta"][SID] == "L"
    assert len(server.bus) == 0  # type: ignore[arg-type]


async def test_sub_08_cancel_unsubscribes() -> None:
    server = make_server()
    listener = Listener(server, 1, {"toolsListChanged": True})
    await listener.wait_for(1)
    assert len(server.bus) == 1  # type: ignore[arg-type]
    listener.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await listener.task
    assert len(server.bus) == 0  # type: ignore[arg-type]
    server.add_tool(lambda: "x", name="after")  # publishing with no listeners is fine


@pytest.mark.parametrize("bad", [None, [], {"toolsListChanged": "yes"}, {"resourceSubscriptions": "docs://a"}])
async def test_bad_filter_is_invalid_params(bad: Any) -> None:
    server = make_server()
    params: dict[str, Any] = {"_meta": META}
    if bad is not None:
        params["notifications"] = bad
    response = await server.handle({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": params})
    assert response is not None and response["error"]["code"] == -32602


async def test_capabilities_advertise_list_changed_and_subscribe_only_when_enabled() -> None:
    assert make_server().capabilities()["resources"] == {"subscribe": True, "listChanged": True}
    quiet = make_server(listen=ListenOptions(enabled=False))
    assert quiet.capabilities()["tools"] == {}
    response = await quiet.handle({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                                   "params": {"_meta": META, "notifications": {}}})
    assert response is not None and response["error"]["code"] == -32601


async def test_slow_listener_is_cut_off_with_a_reason_while_others_keep_receiving() -> None:
    """Bounded queues: a burst larger than the queue ends that listener only."""
    server = make_server(listen=ListenOptions(queue=4))
    slow = Listener(server, "slow", {"toolsListChanged": True})
    await slow.wait_for(1)
    fast_sub = server.bus.subscribe(max_queue=1000)
    # A burst from another thread: the listen task cannot run in between.
    burst = threading.Thread(target=lambda: [server.bus.publish(Event("tools")) for _ in range(50)])
    burst.start()
    burst.join()
    response = await asyncio.wait_for(slow.task, 5)
    assert slow.methods()[-1] == "notifications/cancelled"
    assert slow.messages[-1]["params"]["requestId"] == "slow"
    assert "too slow" in slow.messages[-1]["params"]["reason"]
    assert response is not None and response["result"]["_meta"][SID] == "slow"
    received = 0
    async with fast_sub:
        async with asyncio.timeout(5):
            async for _event in fast_sub:
                received += 1
                if received == 50:
                    break
    assert received == 50


async def test_bus_overflow_raises_slow_listener() -> None:
    bus = InProcessBus()
    sub = bus.subscribe(max_queue=2)
    for _ in range(3):
        bus.publish(Event("tools"))
    with pytest.raises(SlowListener):
        await sub.__anext__()
