"""SSE resumability on the legacy (2025-11-25) HTTP leg (SEP-1699; 2025-11-25
transports, "Resumability and Redelivery"), under a real uvicorn: event ids and the
priming event with `retry`, `ctx.close_sse_stream()` ending the POST's stream mid-call,
GET + `Last-Event-ID` replaying what followed (and only that stream's events), another
session not being able to resume it, our Client resuming transparently, and the
bounds of the event log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from _serving import serving

from nimblemcp import Context, Server
from nimblemcp.client import Client
from nimblemcp.transports._sse import ServerSentEvent, iter_sse
from nimblemcp.transports.http._sse_log import EventLog
from nimblemcp.transports.http.app import asgi_app

V = "2025-11-25"


def make_server() -> Server:
    server = Server("resume")

    @server.tool
    async def reconnect(ctx: Context) -> str:
        ctx.info("before")
        assert ctx.close_sse_stream()
        assert not ctx.close_sse_stream()  # only once
        ctx.info("after")
        await asyncio.sleep(0.2)
        return "done"

    @server.tool
    async def plain(ctx: Context) -> str:
        return "closed" if ctx.close_sse_stream() else "no stream to close"

    return server


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with serving(asgi_app(make_server())) as base:
        yield f"{base}/mcp"


async def initialize(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = await http.post(url, json=body, headers={"accept": "application/json, text/event-stream"})
    assert r.status_code == 200
    headers = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": V}
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


async def events_of(response: httpx.Response) -> list[ServerSentEvent]:
    return [e async for e in iter_sse(response.aiter_lines())]


def messages(events: list[ServerSentEvent]) -> list[dict[str, Any]]:
    return [orjson.loads(e.data) for e in events if e.data]


async def call(http: httpx.AsyncClient, url: str, headers: dict[str, str], tool: str) -> list[ServerSentEvent]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    async with http.stream("POST", url, json=body, headers={
            **headers, "accept": "application/json, text/event-stream"}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        return await events_of(r)


async def resume(http: httpx.AsyncClient, url: str, headers: dict[str, str], last: str) -> list[ServerSentEvent]:
    async with http.stream("GET", url, headers={**headers, "accept": "text/event-stream",
                                                "last-event-id": last}) as r:
        assert r.status_code == 200
        return await asyncio.wait_for(events_of(r), 5)


async def test_priming_event_close_mid_call_and_replay(url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        headers = await initialize(http, url)
        first = await call(http, url, headers, "reconnect")
        priming = first[0]
        assert priming.id is not None and priming.data == "" and priming.retry is not None
        assert [m["params"]["data"] for m in messages(first)] == ["before"]  # no response yet
        assert all(e.id for e in first)
        # resuming from the priming id replays everything after it: "before", "after", the result
        replayed = await resume(http, url, headers, priming.id)
        got = messages(replayed)
        assert [m.get("params", {}).get("data") for m in got[:2]] == ["before", "after"]
        assert got[-1]["id"] == 1 and got[-1]["result"]["content"][0]["text"] == "done"
        # resuming from the last event seen on the POST skips what was already received
        again = await resume(http, url, headers, first[-1].id or "")
        assert [m.get("params", {}).get("data") for m in messages(again)][:1] == ["after"]
        ids = [e.id for e in replayed]
        assert len(set(ids)) == len(ids) and all(i and i.startswith(priming.id[:-1]) for i in ids)


async def test_another_session_cannot_resume(url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        owner = await initialize(http, url)
        first = await call(http, url, owner, "reconnect")
        other = await initialize(http, url)
        # an id of another session's stream is not honoured: the session's own GET
        # stream opens instead, which carries none of that request's events
        async with http.stream("GET", url, headers={**other, "accept": "text/event-stream",
                                                    "last-event-id": first[0].id or ""}) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            with pytest.raises(TimeoutError):
                while True:
                    line = await asyncio.wait_for(anext(lines), 0.6)
                    assert not line.startswith(("data:", "id:")), line


async def test_close_is_false_where_there_is_no_resumable_stream(url: str) -> None:
    async with Client(url) as client:  # the stateless (2026-07-28) wire
        result = await client.call_tool("plain")
        assert result["content"][0]["text"] == "no stream to close"


async def test_our_legacy_client_resumes_transparently(url: str) -> None:
    logs: list[Any] = []
    async with Client(url, mode="legacy", on_log=lambda p: logs.append(p["data"])) as client:
        result = await client.call_tool("reconnect")
        assert result["content"][0]["text"] == "done"
    assert logs == ["before", "after"]


def test_event_log_bounds() -> None:
    async def run() -> None:
        log = EventLog(max_events=3, max_streams=2, linger=0.0)
        a = log.open("s1")
        for n in range(5):
            a.append(str(n).encode())
        assert [s for s, _ in a.after(0)] == [3, 4, 5]  # the oldest went first
        assert log.find(f"{a.id}-2", "s1") == (a, 2)
        assert log.find(f"{a.id}-2", "s2") is None  # another session
        assert log.find(f"{a.id}-9", "s1") is None  # not issued yet
        assert log.find("garbage", "s1") is None
        b = log.open("s1")
        log.open("s1")  # the table holds two: the oldest stream is forgotten
        assert log.find(f"{a.id}-1", "s1") is None and log.find(f"{b.id}-0", "s1") == (b, 0)
        b.end()
        log.open("s2")  # finished streams past their linger go when a stream opens
        assert log.find(f"{b.id}-0", "s1") is None
        log.drop_owner("s1")
        assert len(log) == 1
        # the byte bound: a big event pushes the older ones out, the newest always stays
        small = EventLog(max_events=100, max_bytes=300).open("s3")
        for _ in range(10):
            small.append(b"x" * 50)
        assert small.size <= 300 and [s for s, _ in small.after(0)][-1] == 10
        small.append(b"y" * 1000)
        assert [s for s, _ in small.after(0)] == [11] and small.size == len(small.after(0)[0][1])

    asyncio.run(run())
