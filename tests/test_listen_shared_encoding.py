"""Listen fan-out encodes each event's notification once (issue 34, point 4; SUB-05):
over HTTP a listen sends the event's shared JSON around its own subscription id
(`_subscriptions._shared`, `Exchange.emit_json`) instead of building and encoding a
message per listener. The bytes must be exactly those the per-listener path
(`encode(_notification(...))`) writes, for every kind of id and URI, and a listener
too slow to keep up is still ended with its reason. Real uvicorn on loopback, raw httpx."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from _deploy import HANG_GUARD, META, headers
from _serving import serving

import nimblemcp as m
from nimblemcp import ListenOptions
from nimblemcp.backends.bus import Event
from nimblemcp.jsonrpc import encode
from nimblemcp.server._subscriptions import _notification, _shared

IDS: list[Any] = [7, 0, -3, 2**53, "x", 'a "quoted" id', "ü\\n\x00", ""]
URIS = ["test://doc/1", 'test://doc/"q"', "test://doc/ü/€", "test://doc/a\\b", "test://doc/\x00\u2028"]


@pytest.mark.parametrize("sid", IDS)
def test_shared_parts_around_any_id_are_the_per_listener_bytes(sid: Any) -> None:
    cases = [(Event("updated", uri), "notifications/resources/updated", {"uri": uri}) for uri in URIS]
    cases += [(Event("tools"), "notifications/tools/list_changed", None),
              (Event("prompts"), "notifications/prompts/list_changed", None)]
    for event, method, extra in cases:
        head, tail = _shared(event, method)
        assert head + encode(sid) + tail == encode(_notification(method, sid, extra)), (event, sid)


def _server() -> m.Server:
    server = m.Server("shared-encoding")

    @server.resource("test://doc")
    def doc() -> str:
        return "doc"

    @server.tool
    def tool() -> str:
        return "t"

    return server


async def _data_lines(stream: Any, count: int) -> list[bytes]:
    """The next `count` SSE `data:` payloads of `stream`, as the bytes on the wire."""
    found: list[bytes] = []
    buf = b""
    async for chunk in stream:
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            found += [line[6:] for line in event.split(b"\n") if line.startswith(b"data: ")]
        if len(found) >= count:
            return found
    raise AssertionError(f"the stream ended after {found}")


async def test_listen_streams_carry_the_per_listener_bytes_exactly() -> None:
    server = _server()
    listens = [(sid, {"resourceSubscriptions": ["test://doc"], "toolsListChanged": True}) for sid in IDS[:4]]
    async with serving(server.asgi_app()) as base, httpx.AsyncClient(timeout=HANG_GUARD) as c:
        url = f"{base}/mcp"
        streams = []
        async with asyncio.timeout(HANG_GUARD):
            for sid, wanted in listens:
                body = {"jsonrpc": "2.0", "id": sid, "method": "subscriptions/listen",
                        "params": {"_meta": META, "notifications": wanted}}
                request = c.build_request("POST", url, content=orjson.dumps(body),
                                          headers=headers("subscriptions/listen"))
                response = await c.send(request, stream=True)
                chunks = response.aiter_bytes()
                (ack,) = await _data_lines(chunks, 1)
                assert orjson.loads(ack)["method"] == "notifications/subscriptions/acknowledged"
                streams.append((sid, response, chunks))
            for uri in URIS:
                server.notify_resource_updated(uri)
            server.bus.publish(Event("tools"))
            for sid, response, chunks in streams:
                got = await _data_lines(chunks, len(URIS) + 1)
                want = [encode(_notification("notifications/resources/updated", sid, {"uri": u})) for u in URIS]
                want.append(encode(_notification("notifications/tools/list_changed", sid)))
                assert got == want, sid
                await response.aclose()


async def test_a_listener_that_stops_reading_is_still_ended_with_its_reason() -> None:
    """The encoded path keeps the buffer cap (`Exchange.max_buffer`) and its reason."""
    server = m.Server("slow-reader", listen=ListenOptions(queue=100_000))

    @server.resource("test://doc")
    def doc() -> str:
        return "doc"

    async with serving(server.asgi_app()) as base, httpx.AsyncClient(timeout=HANG_GUARD) as c:
        body = {"jsonrpc": "2.0", "id": "slow", "method": "subscriptions/listen",
                "params": {"_meta": META, "notifications": {"resourceSubscriptions": ["test://doc"]}}}
        request = c.build_request("POST", f"{base}/mcp", content=orjson.dumps(body),
                                  headers=headers("subscriptions/listen"))
        async with asyncio.timeout(HANG_GUARD):
            response = await c.send(request, stream=True)
            chunks = response.aiter_bytes()
            await _data_lines(chunks, 1)  # the acknowledgement; then nothing is read for a while
            long = "test://doc/" + "x" * 60_000
            for i in range(40):  # ~2.4 MB: past the 1 MiB cap even with the socket buffers full
                server.notify_resource_updated(f"{long}/{i}")
            await asyncio.sleep(0.5)
            rest = b"".join([chunk async for chunk in chunks])
        tail = rest.rsplit(b"data: ", 1)[1]
        note = orjson.loads(tail)
        assert note["method"] == "notifications/cancelled", note
        assert note["params"] == {"requestId": "slow", "reason": "Listener too slow: stream buffer full"}
        assert len(server.bus) == 0  # unsubscribed
