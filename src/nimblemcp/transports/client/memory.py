"""In-memory client transport: runs requests against an in-process server object.

Every message goes through the JSON codec both ways, so tests see the exact bytes a
real peer would. The peer is any object with the `Server.handle(message, emit,
subject)` coroutine. Besides the `Transport` methods, `exchange(raw)` is the wire-level
round trip `nimblemcp.testing` builds on: any bytes or dict in, the notifications and
the response (or None) out, parse errors answered as a transport would. This module
must not import `nimblemcp.server` or the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from nimblemcp.errors import ParseError, TransportError
from nimblemcp.jsonrpc import decode, encode, error_response

__all__ = ["MemoryTransport"]


class _Handler(Protocol):
    def handle(
        self,
        message: Any,
        emit: Callable[[dict[str, Any]], None] | None = None,
        subject: str | None = None,
    ) -> Awaitable[dict[str, Any] | None]: ...


class MemoryTransport:
    """A transport to a server living in this process (tests, embedding)."""

    carries_param_headers = False

    def __init__(self, server: _Handler, *, subject: str | None = None) -> None:
        self.server = server
        self.subject = subject
        self.peer = f"memory:{id(server)}"
        self.sent: list[dict[str, Any]] = []  # every message as the peer decoded it
        self._closed = False

    async def open(self) -> None:
        self._closed = False

    async def send(
        self, request: dict[str, Any], *, param_headers: Mapping[str, Any] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        if self._closed:
            raise TransportError("transport is closed")
        message = decode(encode(request))
        self.sent.append(message)
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def emit(note: dict[str, Any]) -> None:
            queue.put_nowait(("note", decode(encode(note))))

        async def run() -> None:
            try:
                response = await self.server.handle(message, emit, self.subject)
            except Exception as exc:  # a server bug surfaces as a broken stream
                queue.put_nowait(("fail", exc))
                return
            queue.put_nowait(("done", None if response is None else decode(encode(response))))

        task = asyncio.create_task(run())
        try:
            while True:
                kind, item = await queue.get()
                if kind == "note":
                    yield item
                elif kind == "done":
                    if item is None:
                        raise TransportError("the server sent no response")
                    yield item
                    return
                else:
                    raise TransportError(f"server failed: {item!r}") from item
        finally:
            if not task.done():
                task.cancel()  # the caller abandoned the request: cancel it (CANC-01)

    async def exchange(
        self, data: bytes | dict[str, Any]
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """Deliver one message as-is (bytes unchanged, dicts encoded) and wait for the
        server: the notifications it emitted, in order, and its response (None when it
        sends none, e.g. for a notification). Undecodable bytes get the parse error a
        transport would answer, without reaching the server."""
        notes: list[dict[str, Any]] = []
        try:
            message = decode(data if isinstance(data, bytes) else encode(data))
        except ParseError as exc:
            return notes, decode(encode(error_response(None, exc)))
        self.sent.append(message)

        def emit(note: dict[str, Any]) -> None:
            notes.append(decode(encode(note)))

        response = await self.server.handle(message, emit, self.subject)
        return notes, None if response is None else decode(encode(response))

    async def notify(self, message: dict[str, Any]) -> None:
        message = decode(encode(message))
        self.sent.append(message)
        await self.server.handle(message, None, self.subject)

    async def close(self) -> None:
        self._closed = True
