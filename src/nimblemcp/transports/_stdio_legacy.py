"""The legacy (2025-11-25) leg of the stdio server: `initialize`, then a session.

A connection whose client sends `initialize` gets a `LegacySession`; its requests
without the modern `_meta` envelope run through the same dispatcher with the
session's metadata. Questions a handler asks (elicitation, sampling, roots) go out
as real server-to-client requests on stdout and the answers come back as JSON-RPC
responses on stdin (LEG-09); list changes and subscribed resource updates are
written as untagged notifications (LEG-12). Enveloped (modern) requests keep
working on the same connection (COMPAT-S01).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import InternalError, ProtocolError
from nimblemcp.jsonrpc import error_response
from nimblemcp.server._legacy import LegacySession

if TYPE_CHECKING:
    from nimblemcp.server._server import Server

logger = logging.getLogger("nimblemcp.stdio")

Write = Callable[[dict[str, Any]], None]
Start = Callable[[Any, Callable[[], Awaitable[dict[str, Any]]]], None]  # (id, response maker)


class LegacyStdio:
    """Legacy session state of one stdio connection."""

    def __init__(self, server: Server, write: Write, start: Start) -> None:
        self.server = server
        self.write = write
        self.start = start
        self.session: LegacySession | None = None
        self.pending: dict[str, asyncio.Future[Any]] = {}
        self.ids = itertools.count(1)
        self.forwarder: asyncio.Task[None] | None = None

    def on_request(self, message: dict[str, Any]) -> bool:
        """Handle a request if it belongs to the legacy era; False = not ours."""
        method = message["method"]
        rid = message["id"]
        if method == "initialize":
            try:
                self.session = LegacySession(self.server, message.get("params"))
            except ProtocolError as exc:
                self.write(error_response(rid, exc))
                return True
            self.write({"jsonrpc": "2.0", "id": rid, "result": self.session.initialize_result()})
            if self.forwarder is None and self.server.subscriptions:
                self.forwarder = asyncio.create_task(self._forward())
            return True
        session = self.session
        if session is None:
            return False
        params = message.get("params")
        try:
            own = session.handle_own(method, params)
            if own is not None:
                self.write({"jsonrpc": "2.0", "id": rid, "result": own})
                return True
            req = self.server.dispatcher.prepare_legacy(message, session.request_meta(params or {}))
        except ProtocolError as exc:
            self.write(session.shape(error_response(rid, exc), method))
            return True
        self.start(rid, lambda: self._run(req, session))
        return True

    async def _run(self, req: Any, session: LegacySession) -> dict[str, Any]:
        response = await self.server.dispatcher.execute(req, self.write, ask=self.ask)
        return session.shape(response, req.method)

    async def ask(self, requests: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Send one round of questions as requests; return the answers by key."""
        session = self.session
        assert session is not None
        loop = asyncio.get_running_loop()
        waits: dict[str, asyncio.Future[Any]] = {}
        for key, request in requests.items():
            rid = f"nimblemcp-{next(self.ids)}"
            waits[key] = self.pending[rid] = loop.create_future()
            body = session.outgoing(request)
            self.write({"jsonrpc": "2.0", "id": rid, **body})
        try:
            answers = await asyncio.gather(*waits.values())
        finally:
            for rid in [r for r, f in self.pending.items() if f in waits.values()]:
                del self.pending[rid]
        return dict(zip(waits, answers, strict=True))

    def on_response(self, message: dict[str, Any]) -> None:
        """A client's answer to one of our requests (unknown ids are ignored)."""
        rid = message.get("id")
        future = self.pending.get(rid) if isinstance(rid, str) else None
        if future is None or future.done():
            return
        if "result" in message and isinstance(message["result"], dict):
            future.set_result(message["result"])
        else:
            error = message.get("error")
            text = error.get("message") if isinstance(error, dict) else None
            future.set_exception(InternalError(f"The client could not answer: {text or 'error'}"))

    async def _forward(self) -> None:
        async with self.server.bus.subscribe(self.server.listen_queue) as events:
            with contextlib.suppress(Exception):
                async for event in events:
                    session = self.session
                    note = session.notification_for(event) if session else None
                    if note is not None:
                        self.write(note)

    def close(self) -> None:
        if self.forwarder is not None:
            self.forwarder.cancel()
        for future in self.pending.values():
            future.cancel()
