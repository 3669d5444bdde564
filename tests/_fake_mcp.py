"""A misbehaving MCP server on a raw loopback socket, for the HTTP client's wire tests
(issue 31): it answers `server/discover`, `tools/list` and `tools/call` like a minimal
2026-07-28 server, counts every `tools/call` it receives (the tool "ran"), and does to
the connection whatever a test scripts for a tool's next calls: close it before any
byte of the answer, cut the head, reset it, half-close it, stall, or answer with a head
or body a test builds. Every request's line and headers are kept.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

TOOLS = [
    {"name": "side_effect", "inputSchema": {"type": "object"}},  # no idempotentHint: never re-sent
    {"name": "safe", "inputSchema": {"type": "object"}, "annotations": {"idempotentHint": True}},
    {"name": "slow", "inputSchema": {"type": "object"}},
]
DISCOVERED = {"resultType": "complete", "supportedVersions": ["2026-07-28"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "0"}}


@dataclass
class Seen:
    line: str
    headers: dict[str, str]
    message: dict[str, Any]


def answer_body(message: dict[str, Any]) -> bytes:
    """The JSON-RPC response a well-behaved server sends for `message`."""
    method = message["method"]
    if method == "server/discover":
        result: dict[str, Any] = DISCOVERED
    elif method == "tools/list":
        result = {"resultType": "complete", "tools": TOOLS, "ttlMs": 0, "cacheScope": "private"}
    elif method == "tools/call":
        result = {"resultType": "complete", "content": [{"type": "text", "text": message["params"]["name"]}]}
    else:
        result = {"resultType": "complete"}
    return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()


def json_answer(body: bytes, *fields: str) -> bytes:
    extra = "".join(f"{f}\r\n" for f in fields)
    return (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}\r\n"
            .encode() + body)


#: What the server does with one request: return True to keep serving the connection.
Behaviour = Callable[[Seen, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


async def ok(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(json_answer(answer_body(seen.message)))
    await writer.drain()
    return True


async def close(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """The request was read (the tool ran), and the connection closes before any byte."""
    return False


async def close_mid_head(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: appli")
    await writer.drain()
    return False


async def reset(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """A TCP reset (SO_LINGER 0), as a crashed worker's socket gives."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
    return False


async def half_close(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """The server ends its side (FIN) without answering, and keeps reading."""
    writer.write_eof()
    await reader.read()
    return False


async def stall(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    await reader.read()  # until the client gives up
    return False


def slow(delay: float) -> Behaviour:
    async def answer(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(delay)
        return await ok(seen, reader, writer)

    return answer


def raw(data: bytes | Callable[[Seen], bytes], keep: bool = True) -> Behaviour:
    """Answer with these bytes (or bytes built from the request)."""
    async def answer(seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(data(seen) if callable(data) else data)
        await writer.drain()
        return keep

    return answer


@dataclass
class FakeMcp:
    """`script[tool]` lists what to do for that tool's next calls (then `ok`);
    `answer` replaces `ok` for every request when set."""

    script: dict[str, list[Behaviour]] = field(default_factory=dict)
    answer: Behaviour | None = None
    runs: Counter[str] = field(default_factory=Counter)
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    idle: set[asyncio.StreamWriter] = field(default_factory=set)
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    handlers: set[asyncio.Task[Any]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.writers.add(writer)
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while True:
                self.idle.add(writer)
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                finally:
                    self.idle.discard(writer)
                line, *fields = head.decode("latin-1").split("\r\n")[:-2]
                headers = {k.strip().lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                message = json.loads(body) if body else {}
                seen = Seen(line, headers, message)
                self.seen.append(seen)
                if "id" not in message:  # a notification
                    writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                behave = self.answer or ok
                if message.get("method") == "tools/call":
                    name = message["params"]["name"]
                    self.runs[name] += 1
                    queue = self.script.get(name)
                    if queue:
                        behave = queue.pop(0)
                if not await behave(seen, reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self.open_now -= 1
            self.writers.discard(writer)
            writer.close()

    def close_idle(self) -> int:
        """Close every connection waiting for a request (an idle timeout, a worker that
        died); returns how many."""
        idle = list(self.idle)
        for writer in idle:
            writer.close()
        return len(idle)


@asynccontextmanager
async def fake_mcp(peer: FakeMcp) -> AsyncIterator[str]:
    """Serve `peer` on 127.0.0.1; yields the endpoint URL."""
    server = await asyncio.start_server(peer.handle, "127.0.0.1", 0, limit=1 << 20, backlog=1024)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp"
    finally:
        server.close()
        for writer in list(peer.writers):  # the handlers see their connection end
            writer.transport.abort()
        await asyncio.gather(*peer.handlers, return_exceptions=True)
        await server.wait_closed()
