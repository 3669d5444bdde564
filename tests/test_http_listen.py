"""subscriptions/listen over Streamable HTTP (HTTP-11, SUB-02/05/09/12, TOOL-13).

A real uvicorn subprocess for the stream itself and for the graceful close at
shutdown; the plain ASGI app in-process for a reader that stops reading.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from _sse_parser import SSEParser

from nimblemcp import Server
from nimblemcp.transports.http.app import asgi_app

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}
SID = "io.modelcontextprotocol/subscriptionId"

SOURCE = """
import nimblemcp as m

server = m.Server("listen-test")

@server.tool
def echo(text: str) -> str:
    return text

@server.tool
def add_tool(name: str) -> str:
    server.add_tool(lambda: "hi", name=name)
    return "added"
"""


def _headers(method: str) -> dict[str, str]:
    return {"content-type": "application/json", "accept": "application/json, text/event-stream",
            "mcp-protocol-version": V, "mcp-method": method}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    source = tmp_path / "listen_server.py"
    source.write_text(SOURCE)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nimblemcp", "run", str(source), "--transport", "http", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("server did not start")


class Events:
    """JSON messages of an SSE response, one at a time."""

    def __init__(self, chunks: Any) -> None:
        self.chunks = chunks
        self.parser = SSEParser()
        self.pending: list[bytes] = []

    async def next(self) -> dict[str, Any]:
        while not self.pending:
            self.pending.extend(self.parser.feed(await self.chunks.__anext__()))
        return orjson.loads(self.pending.pop(0))  # type: ignore[no-any-return]


async def test_http_listen_stream_ack_events_and_graceful_close(tmp_path: Path) -> None:
    proc, url = _start(tmp_path)
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            body = {"jsonrpc": "2.0", "id": 41, "method": "subscriptions/listen",
                    "params": {"_meta": META, "notifications": {"toolsListChanged": True}}}
            async with client.stream("POST", url, json=body, headers=_headers("subscriptions/listen")) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                events = Events(stream.aiter_bytes())
                ack = await asyncio.wait_for(events.next(), 5)  # flushed at once
                assert ack["method"] == "notifications/subscriptions/acknowledged"
                assert ack["params"]["_meta"][SID] == 41
                call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"_meta": META, "name": "add_tool", "arguments": {"name": "late"}}}
                h = {**_headers("tools/call"), "mcp-name": "add_tool"}
                r = await client.post(url, json=call, headers=h)
                assert r.json()["result"]["content"][0]["text"] == "added"
                changed = await asyncio.wait_for(events.next(), 5)
                assert changed["method"] == "notifications/tools/list_changed"
                assert changed["params"]["_meta"][SID] == 41
                proc.send_signal(signal.SIGINT)  # server shutdown closes listens gracefully
                closing = await asyncio.wait_for(events.next(), 10)
                assert closing["id"] == 41 and closing["result"]["_meta"][SID] == 41
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_reader_that_stops_reading_is_cut_off_and_unsubscribed() -> None:
    """Slow listeners must not grow memory without bound: the stream is cut."""
    server = Server("slow")
    server.tool(lambda: "x", name="t")
    app = asgi_app(server, keepalive=0)
    body = orjson.dumps({"jsonrpc": "2.0", "id": "s", "method": "subscriptions/listen",
                         "params": {"_meta": META, "notifications": {"toolsListChanged": True}}})
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [
        (k.encode(), v.encode()) for k, v in _headers("subscriptions/listen").items()]}
    sent: list[dict[str, Any]] = []
    stuck = asyncio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body":
            stuck.set()
            await asyncio.Event().wait()  # the client never reads: send blocks forever

    task = asyncio.create_task(app(scope, receive, send))
    await asyncio.wait_for(stuck.wait(), 5)
    from nimblemcp.backends.bus import Event

    for _ in range(200):
        for _ in range(100):
            server.bus.publish(Event("tools"))
        await asyncio.sleep(0)
        if len(server.bus) == 0:  # type: ignore[arg-type]
            break
    assert len(server.bus) == 0  # type: ignore[arg-type]
    task.cancel()
