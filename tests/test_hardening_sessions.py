"""Issue 12, part A: 2025-11-25 sessions are bounded, against a real server process:
server-to-client requests time out, a full session table evicts instead of 503,
a session whose GET stream ended is idle from then on and expires."""

from __future__ import annotations

import asyncio
import os
import signal
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

from nimblemcp import Context, Server
from nimblemcp._port import LegacyOptions
from nimblemcp.transports._legacy import LegacySession

V = "2025-11-25"
ACCEPT = "application/json, text/event-stream"

SERVER_SOURCE = '''
import nimblemcp as m
from nimblemcp.server import LegacyOptions

server = m.Server("bounded", "1.0", legacy=LegacyOptions(request_timeout=0.5, max_sessions=3, idle_timeout=1.0))
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@server.tool
async def greet(ctx: m.Context) -> str:
    answer = await ctx.elicit("name", "Your name?", NAME)
    return f"Hello, {answer.content['name']}!" if answer.accepted else "no name"
'''


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import socket

    tmp = tmp_path_factory.mktemp("bounded_sessions")
    src = tmp / "bounded_server.py"
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


class Peer:
    def __init__(self, c: httpx.AsyncClient, url: str) -> None:
        self.c, self.url, self.sid = c, url, ""

    def headers(self, accept: str = ACCEPT) -> dict[str, str]:
        return {"accept": accept, "content-type": "application/json", "mcp-session-id": self.sid,
                "mcp-protocol-version": V}

    async def open(self) -> Peer:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": V, "capabilities": {"elicitation": {}}, "clientInfo": {"name": "t", "version": "1"}}}
        r = await self.c.post(self.url, json=init, headers={"accept": ACCEPT, "content-type": "application/json"})
        assert r.status_code == 200, r.text
        self.sid = r.headers["mcp-session-id"]
        return self

    async def ping(self) -> int:
        r = await self.c.post(self.url, json={"jsonrpc": "2.0", "id": "p", "method": "ping"}, headers=self.headers())
        return r.status_code


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    parser = SSEParser()
    async for chunk in response.aiter_bytes():
        for event in parser.feed(chunk):
            yield orjson.loads(event)


async def test_an_unanswered_elicitation_times_out_with_a_clear_error(url: str) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        peer = await Peer(c, url).open()
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "greet", "arguments": {}}}
        seen: list[dict[str, Any]] = []
        started = time.monotonic()
        async with c.stream("POST", url, json=body, headers=peer.headers()) as r:
            async for msg in events(r):
                seen.append(msg)  # never answered
        elapsed = time.monotonic() - started
    asked = next(m for m in seen if m.get("method") == "elicitation/create")
    withdrawn = next(m for m in seen if m.get("method") == "notifications/cancelled")
    assert withdrawn["params"]["requestId"] == asked["id"]
    final = seen[-1]
    assert final["id"] == 1 and final["error"]["code"] == -32603
    assert "did not answer elicitation/create within 0.5 s" in final["error"]["message"]
    assert elapsed < 10


async def test_a_full_table_evicts_the_least_recently_used_session_instead_of_503(url: str) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        peers = [await Peer(c, url).open() for _ in range(3)]
        streams = []
        try:
            for p in peers:  # every session busy: a GET stream open on each
                cm = c.stream("GET", url, headers=p.headers("text/event-stream"))
                r = await cm.__aenter__()
                assert r.status_code == 200
                streams.append(cm)
            newcomer = await Peer(c, url).open()  # used to be 503
            assert await newcomer.ping() == 200
            assert await peers[0].ping() == 404  # the least recently used went
            assert await peers[2].ping() == 200
        finally:
            for cm in streams:
                await cm.__aexit__(None, None, None)


async def test_a_session_whose_get_stream_ended_is_idle_from_then_and_expires(url: str) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        peer = await Peer(c, url).open()
        async with c.stream("GET", url, headers=peer.headers("text/event-stream")) as r:
            assert r.status_code == 200
            await asyncio.sleep(1.5)  # longer than idle_timeout, but the stream kept it busy
        await asyncio.sleep(0.2)  # the server notices the hang-up
        assert await peer.ping() == 200  # idle since the stream ended, not since it began
        await asyncio.sleep(1.3)
        assert await peer.ping() == 404  # and then it expires


async def test_stdio_and_in_process_sessions_time_out_too() -> None:
    server = Server("s", legacy=LegacyOptions(request_timeout=0.2))

    @server.tool
    async def ask(ctx: Context) -> str:
        await ctx.roots()
        return "never"

    session = LegacySession(server)
    session.initialize({"protocolVersion": V, "capabilities": {"roots": {}}, "clientInfo": {"name": "t", "version": "1"}})
    out: list[dict[str, Any]] = []
    prepared = session.prepare({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ask"}})
    assert not isinstance(prepared, dict)
    response = await asyncio.wait_for(session.run(prepared, out.append), 5)
    assert "roots/list" in response["error"]["message"]
    assert [m.get("method") for m in out] == ["roots/list", "notifications/cancelled"]
    assert session.pending == {}


async def test_the_handler_itself_hears_the_timeout_and_may_handle_it() -> None:
    from nimblemcp.errors import InputTimeout

    server = Server("s", legacy=LegacyOptions(request_timeout=0.2))

    @server.tool
    async def careful(ctx: Context) -> str:
        try:
            answer = await ctx.elicit("name", "Name?", {"type": "object", "properties": {}})
        except InputTimeout as exc:
            return f"gave up: {exc}"
        return f"got {answer.action}"

    session = LegacySession(server)
    session.initialize({"protocolVersion": V, "capabilities": {"elicitation": {}},
                        "clientInfo": {"name": "t", "version": "1"}})
    out: list[dict[str, Any]] = []
    prepared = session.prepare({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "careful"}})
    assert not isinstance(prepared, dict)
    response = await asyncio.wait_for(session.run(prepared, out.append), 5)
    assert response["result"]["content"][0]["text"] == (
        "gave up: The client did not answer elicitation/create within 0.2 s")
