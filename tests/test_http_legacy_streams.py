"""The legacy (2025-11-25) Streamable HTTP leg's streams under a real uvicorn
(LEG-07/08/09/12): server-to-client requests on the POST's SSE stream answered by
separate POSTs, several such streams at once, `notifications/cancelled`, a hang-up
that is not a cancellation, and the session's GET stream of untagged notifications.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from _sse_parser import SSEParser

V = "2025-11-25"
CAPS = {"elicitation": {}, "sampling": {}, "roots": {}}

SERVER_SOURCE = '''
import asyncio
import nimblemcp as m

server = m.Server("legacy-streams", "1.0")
gate = asyncio.Event()
stats = {"started": 0, "cancelled": 0, "completed": 0}
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@server.tool
async def greet(ctx: m.Context) -> str:
    answer = await ctx.elicit("name", "Your name?", NAME)
    return f"Hello, {answer.content['name']}!" if answer.accepted else "no name"


@server.tool
async def everything(ctx: m.Context) -> str:
    reply, roots = ctx.gather(ctx.sample("q", ["Capital of France?"], 20), ctx.roots("r"))
    return f"{reply['content']['text']} / {roots[0]['uri']}"


@server.tool
async def waiter(ctx: m.Context) -> str:
    stats["started"] += 1
    ctx.info("waiting")
    try:
        await gate.wait()
    except asyncio.CancelledError:
        stats["cancelled"] += 1
        raise
    stats["completed"] += 1
    return "released"


@server.tool
def release() -> str:
    gate.set()
    return "ok"


@server.tool
def status() -> dict:
    return dict(stats)


@server.tool
def add_tool(name: str) -> str:
    server.add_tool(lambda: "new", name=name)
    return "added"


@server.tool
def touch(uri: str) -> str:
    server.notify_resource_updated(uri)
    return "touched"


@server.resource("test://doc")
def doc() -> str:
    return "doc text"
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("legacy_streams")
    src = tmp / "legacy_streams_server.py"
    src.write_text(SERVER_SOURCE)
    port = free_port()
    log = tmp / "server.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "run", str(src), "--transport", "http", "--port", str(port)],
            stdout=sink, stderr=sink, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        for _ in range(300):
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=30) == 0, Path(log).read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class Session:
    def __init__(self, c: httpx.AsyncClient, url: str) -> None:
        self.c = c
        self.url = url
        self.sid = ""

    def headers(self, accept: str = "application/json, text/event-stream") -> dict[str, str]:
        return {"accept": accept, "content-type": "application/json",
                "mcp-session-id": self.sid, "mcp-protocol-version": V}

    async def open(self) -> None:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": V, "capabilities": CAPS, "clientInfo": {"name": "t", "version": "1"}}}
        r = await self.c.post(self.url, json=init, headers={
            "accept": "application/json, text/event-stream", "content-type": "application/json"})
        assert r.status_code == 200
        self.sid = r.headers["mcp-session-id"]
        r = await self.c.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                              headers=self.headers())
        assert r.status_code == 202

    async def post(self, message: dict[str, Any]) -> httpx.Response:
        return await self.c.post(self.url, json=message, headers=self.headers())

    async def call(self, rid: Any, tool: str, **arguments: Any) -> dict[str, Any]:
        r = await self.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                             "params": {"name": tool, "arguments": arguments}})
        assert r.status_code == 200
        if r.headers["content-type"].startswith("text/event-stream"):
            events = [orjson.loads(e) for e in SSEParser().feed(r.content)]
            return next(e for e in events if e.get("id") == rid)
        msg: dict[str, Any] = r.json()
        return msg

    def stream(self, rid: Any, name: str, **arguments: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        return self.c.stream("POST", self.url, json=body, headers=self.headers())


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    parser = SSEParser()
    async for chunk in response.aiter_bytes():
        for event in parser.feed(chunk):
            yield orjson.loads(event)


@pytest.fixture
async def session(url: str) -> AsyncIterator[Session]:
    async with httpx.AsyncClient(timeout=30) as c:
        s = Session(c, url)
        await s.open()
        yield s


async def test_leg_09_elicitation_goes_out_on_the_post_stream(session: Session, legacy_schemas: Any) -> None:
    async with session.stream(1, "greet") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        seen = []
        async for msg in events(r):
            seen.append(msg)
            legacy_schemas.check("JSONRPCMessage", msg)
            if msg.get("method") == "elicitation/create":
                legacy_schemas.check("ElicitRequest", msg)
                answer = {"jsonrpc": "2.0", "id": msg["id"], "result": {"action": "accept", "content": {"name": "Ada"}}}
                ok = await session.post(answer)
                assert ok.status_code == 202 and ok.content == b""
    final = seen[-1]
    assert final["id"] == 1 and final["result"]["content"][0]["text"] == "Hello, Ada!"
    assert "resultType" not in final["result"]


async def test_leg_09_questions_of_one_round_go_out_together(session: Session, legacy_schemas: Any) -> None:
    async with session.stream("e", "everything") as r:
        asks: dict[str, dict[str, Any]] = {}
        final = None
        async for msg in events(r):
            if "method" in msg:
                asks[msg["method"]] = msg
                if len(asks) == 2:
                    legacy_schemas.check("CreateMessageRequest", asks["sampling/createMessage"])
                    legacy_schemas.check("ListRootsRequest", asks["roots/list"])
                    # Answered in the opposite order of asking.
                    await session.post({"jsonrpc": "2.0", "id": asks["roots/list"]["id"],
                                        "result": {"roots": [{"uri": "file:///w"}]}})
                    await session.post({"jsonrpc": "2.0", "id": asks["sampling/createMessage"]["id"], "result": {
                        "role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"}})
            else:
                final = msg
    assert final is not None and final["result"]["content"][0]["text"] == "Paris / file:///w"


async def test_several_post_streams_at_once_each_get_their_answer(session: Session) -> None:
    async def one(rid: int, name: str) -> str:
        async with session.stream(rid, "greet") as r:
            async for msg in events(r):
                if msg.get("method") == "elicitation/create":
                    await session.post({"jsonrpc": "2.0", "id": msg["id"],
                                        "result": {"action": "accept", "content": {"name": name}}})
                elif msg.get("id") == rid:
                    return str(msg["result"]["content"][0]["text"])
        raise AssertionError("no response")

    assert await asyncio.gather(one(11, "A"), one(12, "B"), one(13, "C")) == ["Hello, A!", "Hello, B!", "Hello, C!"]


async def test_a_refusing_client_fails_the_call_and_the_session_goes_on(session: Session) -> None:
    async with session.stream(2, "greet") as r:
        final = None
        async for msg in events(r):
            if msg.get("method") == "elicitation/create":
                await session.post({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -1, "message": "no UI"}})
            else:
                final = msg
    assert final is not None and ("error" in final or final["result"].get("isError"))
    pong = await session.post({"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert pong.json()["result"] == {}


async def test_leg_07_cancelled_notification_stops_the_request_hangup_does_not(session: Session) -> None:
    before = (await session.call("s0", "status"))["result"]["structuredContent"]
    async with session.stream("w1", "waiter") as r:
        async for msg in events(r):
            assert msg.get("method") == "notifications/message"  # the log line; the handler now waits
            note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "w1"}}
            assert (await session.post(note)).status_code == 202
        # the stream ended with no response for the cancelled request
    mid = (await session.call("s1", "status"))["result"]["structuredContent"]
    assert mid["cancelled"] == before["cancelled"] + 1
    async with session.stream("w2", "waiter") as r:
        async for msg in events(r):
            assert msg.get("method") == "notifications/message"
            break  # hang up mid-stream: not a cancellation on this wire
    assert (await session.call("rel", "release"))["result"]["content"][0]["text"] == "ok"
    for i in range(200):  # the abandoned call finishes by itself once released
        after = (await session.call(f"s{i + 2}", "status"))["result"]["structuredContent"]
        if after["completed"] > mid["completed"]:
            break
        await asyncio.sleep(0.01)
    assert after["completed"] == mid["completed"] + 1 and after["cancelled"] == mid["cancelled"]


async def test_leg_08_12_get_stream_carries_untagged_notifications(session: Session, legacy_schemas: Any) -> None:
    sub = await session.post({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": {"uri": "test://doc"}})
    assert sub.json()["result"] == {}
    async with session.c.stream("GET", session.url, headers=session.headers("text/event-stream")) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        second = await session.c.get(session.url, headers=session.headers("text/event-stream"))
        assert second.status_code == 409
        await session.call(2, "touch", uri="test://other")  # not subscribed: not sent
        await session.call(3, "touch", uri="test://doc")
        await session.call(4, "add_tool", name="fresh")
        got = []
        async for msg in events(r):
            legacy_schemas.check("JSONRPCNotification", msg)
            got.append(msg)
            if len(got) == 2:
                break
    assert got[0] == {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "test://doc"}}
    assert got[1] == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def test_delete_ends_the_get_stream(session: Session) -> None:
    async with session.c.stream("GET", session.url, headers=session.headers("text/event-stream")) as r:
        assert r.status_code == 200
        gone = await session.c.delete(session.url, headers=session.headers())
        assert gone.status_code == 200
        rest = [msg async for msg in events(r)]  # the stream ends instead of hanging
    assert rest == []
    assert (await session.post({"jsonrpc": "2.0", "id": 1, "method": "ping"})).status_code == 404
