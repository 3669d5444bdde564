"""The HTTP client's bounds (issue 31 point 6), on both wires against servers on loopback:
connections per server (100 by default, configurable, more calls wait in line; 400
concurrent calls under a 256-descriptor limit all succeed, as with httpx), and the
response head (100 KiB, refused as it arrives, so an 8 MB head fails at once and a head
that never ends lets the call's timeout fire).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys

import pytest
from _fake_mcp import FakeMcp, Seen, answer_body, fake_mcp, ok, raw, slow

from nimblemcp.client import Client, Limits
from nimblemcp.errors import RequestTimeout, StreamBroken
from nimblemcp.transports.client._wire import route
from nimblemcp.transports.client.http import HttpTransport
from nimblemcp.transports.h1.client import DECODERS, MAX_HEAD_BYTES, H1Pool, H1ProtocolError, _Conn

WIRES = ("h1", "httpx")

MANY_CALLS = """
import asyncio, json, resource, sys
from nimblemcp.client import Client
from nimblemcp.transports.client.http import HttpTransport

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

async def main(url, wire):
    async with Client(HttpTransport(url, wire=wire), mode="modern", timeout=300) as client:
        await client.list_tools()
        results = await asyncio.gather(*(client.call_tool("slow", {}) for _ in range(400)),
                                       return_exceptions=True)
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    print(json.dumps({"ok": len(results) - len(errors), "errors": errors[:3]}))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_NOFILE is POSIX")
@pytest.mark.parametrize("wire", WIRES)
async def test_400_concurrent_calls_under_256_descriptors_wait_for_100_connections(wire: str) -> None:
    peer = FakeMcp(answer=slow(0.05))
    async with fake_mcp(peer) as url:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", MANY_CALLS, url, wire,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert json.loads(out.decode().strip().splitlines()[-1]) == {"ok": 400, "errors": []}
    assert peer.runs["slow"] == 400
    assert 1 < peer.most_open <= 100  # concurrent, and capped


def test_the_clients_limits_set_the_cap() -> None:
    transport = Client("http://127.0.0.1:1/mcp", limits=Limits(max_connections=2)).transport
    assert isinstance(transport, HttpTransport) and transport.max_connections == 2
    assert HttpTransport("http://127.0.0.1:1/mcp").max_connections == 100
    with pytest.raises(ValueError):
        Limits(max_connections=0)


@pytest.mark.parametrize("wire", WIRES)
async def test_at_the_cap_calls_wait_in_line_and_one_that_gives_up_frees_its_place(wire: str) -> None:
    release = asyncio.Event()

    async def held(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await release.wait()
        return await ok(seen, reader, writer)

    peer = FakeMcp(script={"slow": [held, held]})
    async with fake_mcp(peer) as url:
        transport = HttpTransport(url, wire=wire, max_connections=2)  # type: ignore[arg-type]
        async with Client(transport, mode="modern") as client:
            await client.list_tools()
            first = [asyncio.create_task(client.call_tool("slow", {})) for _ in range(2)]  # both connections held
            while peer.runs["slow"] < 2:
                await asyncio.sleep(0.01)
            with pytest.raises(RequestTimeout):  # waits in line, then gives up
                await client.call_tool("side_effect", {}, timeout=0.3)
            later = [asyncio.create_task(client.call_tool("side_effect", {})) for _ in range(20)]
            release.set()
            results = await asyncio.gather(*first, *later)
            assert [r["content"][0]["text"] for r in results] == ["slow"] * 2 + ["side_effect"] * 20
        assert transport.backend == wire
    assert peer.most_open == 2
    assert peer.runs["side_effect"] == 20  # the one that gave up in line was never sent


async def test_the_pools_queue_serves_in_order_and_keeps_its_count() -> None:
    peer = FakeMcp(answer=slow(0.02))
    pool = H1Pool(route=route, max_connections=3)
    async with fake_mcp(peer) as url:
        async def exchange(i: int) -> bytes:
            body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "server/discover"}).encode()
            async with pool.stream("POST", url, {"content-type": "application/json"}, body) as response:
                return await response.aread()

        answers = await asyncio.gather(*(exchange(i) for i in range(30)))
        assert [json.loads(a)["id"] for a in answers] == list(range(30))
        origin = next(iter(pool._origins.values()))
        assert origin.count == len(origin.idle) == 3 and not origin.waiters
    await pool.aclose()
    assert peer.most_open == 3


# -- the response head ------------------------------------------------------------------


def huge_head(seen: Seen) -> bytes:
    """8 MB of header fields, many with one name (joined pairwise, they took seconds)."""
    body = answer_body(seen.message)
    fields = b"".join(b"x-pad: %s\r\n" % (b"a" * 1000) for _ in range(8000))
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + fields
            + b"content-length: %d\r\n\r\n" % len(body) + body)


@pytest.mark.parametrize("wire", WIRES)
async def test_an_8_mb_head_fails_at_once(wire: str) -> None:
    peer = FakeMcp(script={"side_effect": [raw(huge_head)]})
    async with fake_mcp(peer) as url, Client(HttpTransport(url, wire=wire), mode="modern") as client:  # type: ignore[arg-type]
        with pytest.raises(StreamBroken) as caught:
            await client.call_tool("side_effect", {}, timeout=60)
        result = await client.call_tool("side_effect", {})  # the client goes on
        assert result["content"][0]["text"] == "side_effect"
    if wire == "h1":
        assert "larger than 100 KiB" in str(caught.value)


@pytest.mark.parametrize("wire", WIRES)
async def test_a_head_that_never_ends_lets_the_timeout_fire(wire: str) -> None:
    async def drip(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\n")
        try:
            while True:
                writer.write(b"x-drip: %s\r\n" % (b"d" * 200))
                await writer.drain()
                await asyncio.sleep(0.005)
        except ConnectionError:
            return False

    peer = FakeMcp(script={"side_effect": [drip]})
    async with fake_mcp(peer) as url, Client(HttpTransport(url, wire=wire), mode="modern") as client:  # type: ignore[arg-type]
        with pytest.raises((RequestTimeout, StreamBroken)):  # the timeout, or the bound if reached first
            await client.call_tool("side_effect", {}, timeout=1.0)


async def test_a_whole_head_over_the_bound_in_one_read_is_refused() -> None:
    """asyncio's TLS transport hands over up to 256 KiB at once: a head may complete
    within one read and still be over the bound."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    try:
        _, conn = await loop.create_connection(lambda: _Conn(loop, DECODERS), sock=ours)
        head = conn.start(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        fields = b"".join(b"x-%d: %s\r\n" % (i, b"v" * 100) for i in range(MAX_HEAD_BYTES // 100))
        conn.data_received(b"HTTP/1.1 200 OK\r\n" + fields + b"content-length: 0\r\n\r\n")
        with pytest.raises(H1ProtocolError, match="larger than 100 KiB"):
            await head
        assert conn.closed
    finally:
        theirs.close()


async def test_repeated_fields_are_joined_in_order() -> None:
    fields = b"".join(b"x-many: v%d\r\n" % i for i in range(4000))
    body = b'{"ok": true}'
    peer = FakeMcp(answer=raw(b"HTTP/1.1 200 OK\r\n" + fields + b"content-length: %d\r\n\r\n" % len(body) + body))
    pool = H1Pool(route=route)
    async with fake_mcp(peer) as url:
        message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover"}).encode()
        async with pool.stream("POST", url, {}, message) as response:
            assert response.headers["X-Many"] == ", ".join(f"v{i}" for i in range(4000))
            assert await response.aread() == body
    await pool.aclose()
