"""The HTTP client's own HTTP/1.1 wire (transports/h1/client.py, issue 18), against real
sockets on loopback: a scripted raw HTTP server (so the tests control framing and when
a connection closes), a real nimblemcp server under uvicorn, TLS with a certificate
made here, and a forward proxy that routes the request to the origin (HTTP_PROXY makes
the transport use httpx instead).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _serving import serving

from nimblemcp import Server
from nimblemcp.client import Client
from nimblemcp.errors import StreamBroken
from nimblemcp.transports.client import _tls
from nimblemcp.transports.client._wire import route
from nimblemcp.transports.client.http import HttpTransport
from nimblemcp.transports.h1.client import H1Closed, H1Pool, H1ProtocolError
from nimblemcp.transports.http.app import asgi_app

DISCOVERED = {"resultType": "complete", "supportedVersions": ["2026-07-28"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "0"}}


@dataclass
class Request:
    line: str
    headers: dict[str, str]
    body: bytes

    @property
    def message(self) -> dict[str, Any]:
        return json.loads(self.body) if self.body else {}

    @property
    def method(self) -> str:
        return str(self.message.get("method"))


def calls_in(requests: list[Request]) -> int:
    return sum(r.method == "tools/call" for r in requests)


def result_for(message: dict[str, Any]) -> dict[str, Any]:
    if message["method"] == "server/discover":
        return DISCOVERED
    if message["method"] == "tools/list":
        return {"resultType": "complete", "tools": [{"name": "echo", "inputSchema": {"type": "object"}}],
                "ttlMs": 0, "cacheScope": "private"}
    if message["method"] == "tools/call":
        text = message["params"]["arguments"]["text"]
        return {"resultType": "complete", "content": [{"type": "text", "text": text}]}
    return {"resultType": "complete"}


def framed(message: dict[str, Any], how: str) -> bytes:
    """The HTTP response to a JSON-RPC request, framed as `how` says."""
    if "id" not in message:
        return b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n"
    body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result_for(message)}).encode()
    if how == "length":
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
            len(body), body)
    if how == "close":  # no length, no chunks: the body ends with the connection
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n" + body
    if how == "chunked":  # the JSON split across chunks of a few bytes
        parts = [body[i:i + 7] for i in range(0, len(body), 7)]
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n" \
            + chunks + b"0\r\n\r\n"
    if how == "sse":  # a progress notification, then the answer, chunked mid-event
        note = {"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "info", "data": "working"}}
        events = b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n" \
            + b"event: message\ndata: " + body + b"\n\n"
        parts = [events[i:i + 11] for i in range(0, len(events), 11)]
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
        return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" \
            + chunks + b"0\r\n\r\n"
    raise AssertionError(how)


@dataclass
class RawServer:
    """An HTTP/1.1 server on a socket: `how` frames each answer; `close_after` closes the
    connection after each answer without saying so (an idle timeout, as servers do)."""

    how: str = "length"
    close_after: bool = False
    connections: int = 0
    requests: list[Request] = field(default_factory=list)
    answer: Callable[[Request], bytes] | None = None
    handlers: set[asyncio.Task[Any]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                line, *fields = head.decode("latin-1").split("\r\n")[:-2]
                headers = {k.strip().lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Request(line, headers, body)
                self.requests.append(request)
                writer.write(self.answer(request) if self.answer is not None
                             else framed(request.message, self.how))
                await writer.drain()
                if self.close_after or self.how == "close":
                    return
        finally:
            writer.close()


@asynccontextmanager
async def raw_server(peer: RawServer, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    server = await asyncio.start_server(peer.handle, "127.0.0.1", 0, ssl=tls)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        if peer.handlers:  # every client closed its connections: the handlers see EOF
            await asyncio.wait(peer.handlers, timeout=5)
        await server.wait_closed()


async def calls(url: str, n: int, transport: HttpTransport | None = None) -> list[str]:
    texts = []
    async with Client(transport or url, mode="modern") as client:
        for i in range(n):
            result = await client.call_tool("echo", {"text": f"hi {i}"})
            texts.append(result["content"][0]["text"])
    return texts


async def test_connections_are_kept_alive_and_reused() -> None:
    peer = RawServer()
    async with raw_server(peer) as port:
        transport = HttpTransport(f"http://127.0.0.1:{port}/mcp")
        assert await calls("", 5, transport) == [f"hi {i}" for i in range(5)]
        assert transport.backend == "h1"
    assert peer.connections == 1 and calls_in(peer.requests) == 5


async def test_a_connection_the_server_closed_between_calls_is_replaced() -> None:
    peer = RawServer(close_after=True)  # closes every connection after its answer, unannounced
    async with raw_server(peer) as port:
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(url, mode="modern") as client:
            for i in range(4):
                await asyncio.sleep(0.05)  # the close has reached the client
                result = await client.call_tool("echo", {"text": f"hi {i}"})
                assert result["content"][0]["text"] == f"hi {i}"
    assert peer.connections == len(peer.requests) and calls_in(peer.requests) == 4  # each sent once


async def test_a_stale_connection_found_only_when_writing_is_retried_once_on_a_fresh_one() -> None:
    pool = H1Pool(route=route)
    peer = RawServer(close_after=True)
    async with raw_server(peer) as port:
        url = f"http://127.0.0.1:{port}/mcp"
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover"}).encode()
        async with pool.stream("POST", url, {"content-type": "application/json"}, body) as response:
            assert response.status_code == 200
            await response.aread()
        # Pretend the close has not been noticed yet: the idle connection looks open.
        conn = pool._origins[("http", "127.0.0.1", port)].idle[0]
        await asyncio.sleep(0.05)
        conn.closed = False
        async with pool.stream("POST", url, {"content-type": "application/json"}, body) as response:
            assert json.loads(await response.aread())["result"] == DISCOVERED
    await pool.aclose()
    assert len(peer.requests) == 2


@pytest.mark.parametrize("how", ["chunked", "close", "sse"])
async def test_chunked_until_close_and_sse_bodies(how: str) -> None:
    peer = RawServer(how=how)
    logs: list[Any] = []
    async with raw_server(peer) as port, \
            Client(f"http://127.0.0.1:{port}/mcp", mode="modern", on_log=logs.append) as client:
        for i in range(3):
            result = await client.call_tool("echo", {"text": f"hi {i}"})
            assert result["content"][0]["text"] == f"hi {i}"
    assert peer.connections == (len(peer.requests) if how == "close" else 1)
    if how == "sse":
        answered = [r for r in peer.requests if "id" in r.message]
        assert len(logs) == len(answered) and all(log["data"] == "working" for log in logs)


async def test_leaving_a_streamed_answer_early_closes_its_connection_and_the_next_call_works() -> None:
    release = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer.connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        fields = head.decode().split("\r\n")
        length = int(next(f for f in fields if f.lower().startswith("content-length")).split(":")[1])
        message = json.loads(await reader.readexactly(length))
        if message.get("method") == "tools/call" and message["params"]["arguments"]["text"] == "slow":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n5\r\n: hi\n\r\n")
            await writer.drain()
            await release.wait()
        else:
            writer.write(framed(message, "length"))
            await writer.drain()
        writer.close()

    peer = RawServer()
    server = await asyncio.start_server(slow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="modern") as client:
            with pytest.raises(Exception, match="within"):
                await client.call_tool("echo", {"text": "slow"}, timeout=0.3)
            result = await client.call_tool("echo", {"text": "fast"})
            assert result["content"][0]["text"] == "fast"
    finally:
        release.set()
        server.close()
        await server.wait_closed()


async def test_a_real_server_under_uvicorn_over_the_h1_wire() -> None:
    server = Server("h1", "1.0")

    @server.tool
    async def echo(text: str) -> str:
        return text

    async with serving(asgi_app(server, path="/mcp")) as base:
        transport = HttpTransport(f"{base}/mcp")
        assert await calls("", 3, transport) == ["hi 0", "hi 1", "hi 2"]
        assert transport.backend == "h1"


async def test_the_connection_dropping_mid_answer_is_a_broken_stream() -> None:
    def cut(request: Request) -> bytes:
        if request.method != "tools/call":
            return framed(request.message, "length")
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"jsonrpc\""

    peer = RawServer(close_after=True, answer=cut)
    async with raw_server(peer) as port, Client(f"http://127.0.0.1:{port}/mcp", mode="modern") as client:
        with pytest.raises(StreamBroken):
            await client.call_tool("echo", {"text": "x"}, retry=False)


async def test_garbage_instead_of_http_is_a_broken_stream() -> None:
    peer = RawServer(answer=lambda request: b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    async with raw_server(peer) as port:
        pool = H1Pool(route=route)
        with pytest.raises(H1ProtocolError):
            async with pool.stream("POST", f"http://127.0.0.1:{port}/mcp", {}, b"{}"):
                pass
        await pool.aclose()
        with pytest.raises(StreamBroken):
            await calls(f"http://127.0.0.1:{port}/mcp", 1)


async def test_header_values_with_line_breaks_are_refused() -> None:
    pool = H1Pool(route=route)
    with pytest.raises(H1ProtocolError, match="CR, LF"):
        async with pool.stream("POST", "http://127.0.0.1:9/mcp", {"x-evil": "a\r\nHost: other"}, b"{}"):
            pass
    await pool.aclose()
    with pytest.raises(H1Closed):
        async with pool.stream("GET", "http://127.0.0.1:9/mcp", {}):
            pass


# -- TLS -----------------------------------------------------------------------------------


def _self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def test_tls_is_verified_with_the_shared_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _self_signed(tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    peer = RawServer()
    async with raw_server(peer, tls=served) as port:
        # Not trusted by the default store: the handshake fails, nothing is sent.
        with pytest.raises(StreamBroken, match="CERTIFICATE_VERIFY_FAILED"):
            await calls(f"https://127.0.0.1:{port}/mcp", 1)
        # Trusted through SSL_CERT_FILE, as httpx's default context honours it.
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        _tls._shared_context.cache_clear()
        try:
            transport = HttpTransport(f"https://localhost:{port}/mcp")
            assert await calls("", 2, transport) == ["hi 0", "hi 1"]
            assert transport.backend == "h1"
        finally:
            _tls._shared_context.cache_clear()
    assert peer.connections == 1 and calls_in(peer.requests) == 2  # the refused handshake reached no handler


# -- proxies and the other reasons for httpx ------------------------------------------------


async def test_a_proxy_in_the_environment_routes_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    origin = RawServer()
    proxy = RawServer()

    def forward(request: Request) -> bytes:  # a forward proxy that answers for the origin
        assert request.line.startswith("POST http://127.0.0.1:")
        return framed(request.message, "length")

    proxy.answer = forward
    async with raw_server(origin) as port, raw_server(proxy) as proxy_port:
        for key in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
        transport = HttpTransport(f"http://127.0.0.1:{port}/mcp")
        assert await calls("", 2, transport) == ["hi 0", "hi 1"]
        assert transport.backend == "httpx"
    assert calls_in(proxy.requests) == 2 and not origin.requests


async def test_auth_or_a_given_httpx_client_uses_httpx() -> None:
    import httpx

    class Nothing(httpx.Auth):
        pass

    peer = RawServer()
    async with raw_server(peer) as port:
        url = f"http://127.0.0.1:{port}/mcp"
        with_auth = HttpTransport(url, auth=Nothing())
        assert await calls("", 1, with_auth) == ["hi 0"]
        async with httpx.AsyncClient() as http:
            given = HttpTransport(url, http=http)
            assert await calls("", 1, given) == ["hi 0"]
        assert with_auth.backend == given.backend == "httpx"
