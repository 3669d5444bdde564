"""The requests in flight over one client connection, and where each message the
server sends on it goes. Shared by the stdio and HTTP+SSE client transports, whose
server speaks on one stream for every request (the Streamable HTTP client gets a
stream per request and needs none of this).

A response goes to the request with its id. A request from the server goes to the
transport's `serve` (which answers it), or is ignored with a warning (BASE-06). A
notification goes to the request it belongs to: by its progress token, by the
subscription id in its `_meta` (SUB-06), by `requestId` for `notifications/cancelled`,
and, where `lone_logs` is set, a log message to the one request in flight; any other
goes to `on_notification`. A queue gets None when the connection is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nimblemcp.errors import TransportError
from nimblemcp.types._meta import SUBSCRIPTION_ID

__all__ = ["Inbox", "Router", "answer"]

logger = logging.getLogger("nimblemcp.client.transport")

Key = tuple[type, Any]
Inbox = asyncio.Queue[dict[str, Any] | None]
Handler = Callable[[dict[str, Any]], None]


def _key(value: Any) -> Key | None:
    """A JSON-RPC id or token as a dict key (`1` and `"1"` differ); None if unhashable."""
    return None if isinstance(value, dict | list) else (type(value), value)


class Router:
    """`open` a request before sending it, read its `Inbox`, `close` it when done."""

    def __init__(self, *, lone_logs: bool = False) -> None:
        self.pending: dict[Key, Inbox] = {}
        self.tokens: dict[Key, Key] = {}
        self.lone_logs = lone_logs

    def open(self, request: dict[str, Any]) -> Inbox:
        key = _key(request["id"])
        if key is None or key in self.pending:
            raise TransportError(f"request id {request['id']!r} is already in flight or not an id")
        inbox: Inbox = asyncio.Queue()
        self.pending[key] = inbox
        token = _key(_progress_token(request.get("params")))
        if token is not None and token[1] is not None:
            self.tokens[token] = key
        return inbox

    def close(self, request: dict[str, Any]) -> None:
        key = _key(request["id"])
        if key is not None:
            self.pending.pop(key, None)
        token = _key(_progress_token(request.get("params")))
        if token is not None and self.tokens.get(token) == key:
            del self.tokens[token]

    def end_all(self) -> None:
        """The connection is gone: every request still waiting reads None."""
        for inbox in self.pending.values():
            inbox.put_nowait(None)

    def route(self, message: Any, *, serve: Handler | None, on_notification: Handler | None) -> None:
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if method is None:
            key = _key(message.get("id"))
            inbox = self.pending.get(key) if key is not None else None
            if inbox is not None:
                inbox.put_nowait(message)
        elif "id" in message:
            if serve is None:
                logger.warning("ignoring a server-to-client request %s (BASE-06)", method)
            else:
                serve(message)
        else:
            owner = self._owner(method, message.get("params"))
            if owner is not None:
                owner.put_nowait(message)
            elif on_notification is not None:
                on_notification(message)

    def _owner(self, method: str, params: Any) -> Inbox | None:
        target: Key | None = None
        if isinstance(params, dict):
            token = _key(params.get("progressToken"))
            if token is not None and token[1] is not None:
                target = self.tokens.get(token)
            if target is None:
                meta = params.get("_meta")
                sid = meta.get(SUBSCRIPTION_ID) if isinstance(meta, dict) else None
                if sid is None and method == "notifications/cancelled":
                    sid = params.get("requestId")
                key = _key(sid) if sid is not None else None
                target = key if key in self.pending else None
        if target is None and self.lone_logs and method == "notifications/message" and len(self.pending) == 1:
            target = next(iter(self.pending))
        return self.pending.get(target) if target is not None else None


def answer(message: dict[str, Any], handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
           reply: Callable[[dict[str, Any]], Awaitable[None]]) -> asyncio.Task[None]:
    """Answer a server's request in a task of its own: `handler` makes the response,
    `reply` sends it back (nothing is sent on a connection already gone)."""

    async def run() -> None:
        response = await handler(message)
        with contextlib.suppress(TransportError):
            await reply(response)

    return asyncio.create_task(run())


def _progress_token(params: Any) -> Any:
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None
