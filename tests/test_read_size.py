"""asyncio's Unix transports read 256 KiB at a time, an mmap/mremap/munmap per message
read (issue 18): our readers cap it at 64 KiB. Checked on real transports: the HTTP
client's connection, the stdio client's own stdout pipe, and messages larger than one
read still arrive whole."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

from test_stdio_client_lines import SERVER  # echo, and `big`: a 300 kB line

from nimblemcp.client import Client
from nimblemcp.transports._read_size import READ_SIZE, small_reads
from nimblemcp.transports.h1.client import DECODERS, _Conn
from nimblemcp.transports.stdio.client import StdioTransport


def max_size(transport: object) -> int:
    """The read size of one of asyncio's Unix transports (not in the typed interface)."""
    size = transport.max_size  # type: ignore[attr-defined]
    assert isinstance(size, int)
    return size


async def test_a_socket_transport_is_capped_and_others_are_left_alone() -> None:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    try:
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
        assert max_size(transport) > READ_SIZE  # asyncio's own default
        small_reads(transport)
        assert max_size(transport) == READ_SIZE
        transport.max_size = 1024  # type: ignore[attr-defined]
        small_reads(transport)  # never raised
        assert max_size(transport) == 1024
        small_reads(None)  # and no attribute at all is fine
        transport.close()
    finally:
        theirs.close()


async def test_the_http_clients_connection_reads_in_small_pieces_and_whole_bodies_arrive() -> None:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    try:
        _, conn = await loop.create_connection(lambda: _Conn(loop, DECODERS), sock=ours)
        assert max_size(conn.transport) == READ_SIZE
        conn.close()
    finally:
        theirs.close()


async def test_the_stdio_clients_pipe_reads_in_small_pieces_and_a_big_line_arrives_whole(tmp_path: Path) -> None:
    path = tmp_path / "server.py"
    path.write_text(SERVER)
    async with Client([sys.executable, str(path)]) as client:
        result = await client.call_tool("big", {})
        assert result["content"][0]["text"] == "x" * 300000  # over four reads
        transport = client.transport
        assert isinstance(transport, StdioTransport) and transport._stdout is not None
        assert max_size(transport._stdout) == READ_SIZE


async def test_the_engines_connections_read_in_small_pieces_and_a_big_body_arrives_whole() -> None:
    from nimblemcp.transports.h1.engine import Connection
    from nimblemcp.transports.h1.engine_server import Engine, EngineConfig

    got: list[bytes] = []

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        body = b""
        while True:
            message = await receive()  # type: ignore[operator]
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        got.append(body)
        await send({"type": "http.response.start", "status": 200,  # type: ignore[operator]
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]

    loop = asyncio.get_running_loop()
    engine = Engine(app, EngineConfig(port=0), loop)
    engine.use_plain_tasks()
    server = await loop.create_server(lambda: Connection(engine), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = b"b" * 300000
        writer.write(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.readexactly(2), 10) == b"ok"
        assert got == [body]
        (conn,) = engine.connections
        assert max_size(conn.transport) == READ_SIZE
        writer.close()
    finally:
        for conn in list(engine.connections):
            conn.transport.close()
        server.close()
        await server.wait_closed()
