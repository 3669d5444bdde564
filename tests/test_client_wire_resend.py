"""A side-effecting `tools/call` runs at most once whatever the server does with the
connection (issue 31 point 6), on nimblemcp's own HTTP/1.1 wire and on httpx, side by
side against one misbehaving server on loopback (tests/_fake_mcp.py).

The tool `side_effect` has no `idempotentHint`: the Client never re-sends it, and the
wire re-sends nothing that may have left (before issue 31 the h1 wire retried a request
whose reused connection closed before any answer byte on every idle connection, then a
fresh one: nine runs where httpx made one). What may be re-sent is the Client's call:
`safe` carries `idempotentHint: true`, and `retry=True` says so for one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct

import pytest
from _fake_mcp import (
    FakeMcp,
    Seen,
    answer_body,
    close,
    close_mid_head,
    fake_mcp,
    half_close,
    json_answer,
    ok,
    raw,
    reset,
    slow,
)

from nimblemcp.client import Client, RetryPolicy
from nimblemcp.errors import StreamBroken, TransportError
from nimblemcp.transports.client._wire import route
from nimblemcp.transports.client.http import HttpTransport
from nimblemcp.transports.h1.client import DECODERS, H1Pool, _Conn, _Unsent

WIRES = ("h1", "httpx")
MISBEHAVIOURS = {"closes before any byte": close, "closes mid-head": close_mid_head,
                 "resets": reset, "half-closes": half_close}


def client_for(url: str, wire: str) -> Client:
    return Client(HttpTransport(url, wire=wire), mode="modern", retry_policy=RetryPolicy(retry_backoff=0.01))  # type: ignore[arg-type]


async def call_once(url: str, wire: str, tool: str) -> str:
    """Call `tool` on a fresh client (its discover and tools/list leave a kept-alive
    connection, so the call goes out on a reused one); the text, or the error's class."""
    async with client_for(url, wire) as client:
        try:
            result = await client.call_tool(tool, {})
        except StreamBroken:
            return "StreamBroken"  # nothing final arrived (the wire's own subclass or not)
        except TransportError as exc:
            return type(exc).__name__
        return str(result["content"][0]["text"])


@pytest.mark.parametrize("how", MISBEHAVIOURS)
async def test_the_tool_runs_once_and_the_error_is_reported_as_httpx_does(how: str) -> None:
    runs, outcomes = {}, {}
    for wire in WIRES:
        peer = FakeMcp(script={"side_effect": [MISBEHAVIOURS[how]] * 10})
        async with fake_mcp(peer) as url:
            outcomes[wire] = await call_once(url, wire, "side_effect")
        runs[wire] = peer.runs["side_effect"]
    assert runs == {"h1": 1, "httpx": 1}
    assert outcomes == {"h1": "StreamBroken", "httpx": "StreamBroken"}  # nothing final arrived


@pytest.mark.parametrize("wire", WIRES)
async def test_with_many_idle_connections_the_tool_still_runs_once(wire: str) -> None:
    peer = FakeMcp(script={"side_effect": [close] * 30}, answer=slow(0.2))  # the discovers overlap
    async with fake_mcp(peer) as url, client_for(url, wire) as client:
        await client.list_tools()
        await asyncio.gather(*(client.discover(cache=False) for _ in range(8)))
        assert peer.connections >= 8  # eight kept-alive connections wait in the pool
        with pytest.raises(StreamBroken):
            await client.call_tool("side_effect", {})
    assert peer.runs["side_effect"] == 1


@pytest.mark.parametrize("wire", WIRES)
async def test_a_keep_alive_connection_that_died_while_idle_is_replaced(wire: str) -> None:
    peer = FakeMcp()
    async with fake_mcp(peer) as url, client_for(url, wire) as client:
        await client.list_tools()
        await asyncio.gather(*(client.discover(cache=False) for _ in range(3)))
        assert peer.close_idle() >= 1  # the server timed them out, or its worker died
        await asyncio.sleep(0.2)  # the closes reach the client while it is idle
        for _ in range(3):
            result = await client.call_tool("side_effect", {})
            assert result["content"][0]["text"] == "side_effect"
    assert peer.runs["side_effect"] == 3


@pytest.mark.parametrize("wire", WIRES)
async def test_a_server_that_closes_after_every_answer_never_gets_a_call_twice(wire: str) -> None:
    async def answer_and_close(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await ok(seen, reader, writer)
        return False  # unannounced: no `Connection: close`

    peer = FakeMcp(answer=answer_and_close)
    attempts = 0
    async with fake_mcp(peer) as url, client_for(url, wire) as client:
        await client.list_tools()
        for _ in range(20):  # back to back: the close races the next request
            attempts += 1
            with contextlib.suppress(StreamBroken):
                await client.call_tool("side_effect", {})
    assert peer.runs["side_effect"] <= attempts


@pytest.mark.parametrize("wire", WIRES)
async def test_what_is_re_sent_is_the_clients_idempotence_policy(wire: str) -> None:
    peer = FakeMcp(script={"safe": [close], "side_effect": [close, close]})
    async with fake_mcp(peer) as url, client_for(url, wire) as client:
        result = await client.call_tool("safe", {})  # idempotentHint: re-sent with a new id
        assert result["content"][0]["text"] == "safe" and peer.runs["safe"] == 2
        with pytest.raises(StreamBroken):
            await client.call_tool("side_effect", {})
        assert peer.runs["side_effect"] == 1
        result = await client.call_tool("side_effect", {}, retry=True)  # the caller says it is safe
        assert result["content"][0]["text"] == "side_effect" and peer.runs["side_effect"] == 3
        result = await client.call_tool("safe", {}, retry=False)  # and the caller's word wins
        assert peer.runs["safe"] == 3
    calls = [s.message["id"] for s in peer.seen if s.message.get("method") == "tools/call"]
    assert len(calls) == len(set(calls))  # a re-send is a new request (BASE-02)


async def test_a_write_that_fails_at_once_is_known_unsent() -> None:
    """The other proof that a request never left: the socket refused the write."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    _, conn = await loop.create_connection(lambda: _Conn(loop, DECODERS), sock=ours)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    theirs.close()
    conn.idle = False
    with pytest.raises(_Unsent):
        conn.start(b"POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
    conn.close()


@pytest.mark.parametrize("extra", ["a whole answer", "the start of one"])
async def test_a_second_answer_to_one_request_is_never_taken_for_the_next(extra: str) -> None:
    """Bytes after a complete answer (a server out of step) end that connection: the
    next request goes out on another and gets its own answer. (httpx 0.28 keeps such
    bytes and hands them over as the next request's answer: here, the forged result.)"""
    wire = "h1"

    def twice(seen: Seen) -> bytes:
        forged = {"jsonrpc": "2.0", "id": seen.message["id"] + 1,
                  "result": {"resultType": "complete", "content": [{"type": "text", "text": "forged"}]}}
        more = json_answer(json.dumps(forged).encode()) if extra == "a whole answer" else b"HTTP/1.1 2"
        return json_answer(answer_body(seen.message)) + more

    peer = FakeMcp(script={"side_effect": [raw(twice)]})
    async with fake_mcp(peer) as url, client_for(url, wire) as client:
        await client.list_tools()
        for _ in range(3):
            result = await client.call_tool("side_effect", {})
            assert result["content"][0]["text"] == "side_effect"
            await asyncio.sleep(0.05)
    assert peer.runs["side_effect"] == 3


async def test_an_idle_connection_past_its_keep_alive_expiry_is_not_reused() -> None:
    peer = FakeMcp()
    pool = H1Pool(route=route, keepalive_expiry=0.2)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover"}).encode()
    async with fake_mcp(peer) as url:
        for pause in (0, 0, 0.4, 0):
            await asyncio.sleep(pause)
            async with pool.stream("POST", url, {}, body) as response:
                await response.aread()
    await pool.aclose()
    assert peer.connections == 2  # one for the first two and the last; a fresh one after the pause
