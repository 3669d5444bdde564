"""The 2024-11-05 HTTP+SSE transport (deprecated, for the oldest hosts still in use).

The old wire has two endpoints: GET `sse_path` opens a long-lived SSE stream whose
first event is `endpoint` (data: the URL to POST to, carrying the session id), and
every later server message (responses, notifications, server-to-client requests) is
an `event: message` on that stream; the client POSTs each of its messages to the
endpoint and gets `202 Accepted` at once. One stream is one `initialize`-era session
(`LegacySession`, the same adapter stdio and the 2025-11-25 HTTP leg use), so the
handlers are the same; closing the stream ends the session and cancels its requests.
Sessions are bound to the credential that opened them (`scope[SUBJECT]`), bounded in
number, and the stream also carries the session's untagged change notifications.

`HttpSseApp(core, app)` serves the two old endpoints and hands every other path to
`app` (typically the Streamable HTTP app), so one server hosts both transports as
the spec's backwards-compatibility section asks. Wrap it in the same security
middleware as the main app (Origin/Host checks, body limits). Must not import the
server or uvicorn.

Graceful shutdown (SIGTERM under `run_http`): the GET carries the `ListenDrain` under
`DRAIN`; when the drain begins, each stream delivers the answers of its session's
requests still in flight, then ends cleanly (its final empty body) instead of being cut
at the shutdown deadline. The session ends with it (as whenever the stream closes); the
client connects again, through the balancer, elsewhere. Any other stop (SIGINT:
`ListenDrain.close`) ends each stream at once, cleanly, cancelling its requests.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any
from urllib.parse import parse_qs

from nimblemcp._port import Core
from nimblemcp.errors import InvalidRequest, ParseError, ProtocolError
from nimblemcp.jsonrpc import decode, encode, error_response
from nimblemcp.transports._legacy import LegacySession
from nimblemcp.transports._sse import KEEPALIVE, SSE_HEADERS
from nimblemcp.transports.http._asgi import (
    SUBJECT,
    Receive,
    Scope,
    Send,
    endpoint_path,
    respond,
    respond_json,
)
from nimblemcp.transports.http._drain import DRAIN

__all__ = ["HttpSseApp"]

logger = logging.getLogger("nimblemcp.http_sse")

_MAX_BODY = 4 << 20
_DRAINING = b""  # queued when a graceful shutdown begins (no event is ever empty)
_DRAIN_POLL = 0.05  # seconds between looks at the requests still in flight while draining


def _event(name: bytes, data: bytes) -> bytes:
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


class _SseSession:
    """One GET stream: the legacy session and the queue of what goes out on it."""

    __slots__ = ("legacy", "out", "owner", "tasks")

    def __init__(self, core: Core, owner: Any) -> None:
        self.legacy = LegacySession(core)
        self.owner = owner
        self.out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.tasks: set[asyncio.Task[None]] = set()

    def send(self, message: dict[str, Any]) -> None:
        self.out.put_nowait(_event(b"message", encode(message)))

    def close(self) -> None:
        self.legacy.close()
        for task in list(self.tasks):
            task.cancel()
        self.out.put_nowait(None)


class HttpSseApp:
    """ASGI app: the 2024-11-05 endpoints, and `app` for everything else."""

    def __init__(
        self, core: Core, app: Any = None, *, sse_path: str = "/sse", messages_path: str = "/messages/",
        keepalive: float = 15.0, max_sessions: int = 1000,
    ) -> None:
        self.core = core
        self.app = app
        self.sse_path = sse_path
        self.messages_path = messages_path
        self.keepalive = keepalive
        self.max_sessions = max_sessions
        self.sessions: dict[str, _SseSession] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = endpoint_path(scope)  # under a host's mount point too
            if path == self.sse_path:
                if scope["method"] != "GET":
                    await respond(send, 405, headers=[(b"allow", b"GET")])
                    return
                await self._stream(scope, receive, send)
                return
            if path in (self.messages_path, self.messages_path.rstrip("/")):
                if scope["method"] != "POST":
                    await respond(send, 405, headers=[(b"allow", b"POST")])
                    return
                await self._post(scope, receive, send)
                return
        if self.app is None:
            if scope["type"] == "http":
                await respond(send, 404)
            return
        await self.app(scope, receive, send)

    # -- GET: the session's stream --------------------------------------------------------

    async def _stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        if len(self.sessions) >= self.max_sessions:
            await respond(send, 503, b"Too many sessions", content_type=b"text/plain")
            return
        self.core.note_serving()  # once per stream: also where no lifespan runs
        sid = secrets.token_hex(16)
        session = self.sessions[sid] = _SseSession(self.core, scope.get(SUBJECT))
        gone = asyncio.ensure_future(self._watch(receive))
        sub = self.core.changes()
        forward = asyncio.ensure_future(session.legacy.forward(sub, session.send)) if sub is not None else None
        endpoint = f"{scope.get('root_path', '')}{self.messages_path}?session_id={sid}".encode()
        drain = scope.get(DRAIN)
        undrain = drain.on_drain(
            lambda: session.out.put_nowait(None if drain.closing else _DRAINING)) if drain is not None else None
        draining = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": list(SSE_HEADERS)})
            await send({"type": "http.response.body", "body": _event(b"endpoint", endpoint), "more_body": True})
            while not gone.done():
                if draining and not session.tasks and session.out.empty():
                    break  # shutting down and every answer delivered: end cleanly
                getter = asyncio.ensure_future(session.out.get())
                wait = _DRAIN_POLL if draining else self.keepalive if self.keepalive > 0 else None
                done, _ = await asyncio.wait({getter, gone}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    if not done and not draining:
                        await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
                    continue
                chunk = getter.result()
                if chunk is None:
                    break
                if not chunk:  # _DRAINING
                    draining = True
                    continue
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not gone.done():
                await send({"type": "http.response.body", "body": b""})
        finally:
            if undrain is not None:
                undrain()
            self.sessions.pop(sid, None)
            session.close()
            gone.cancel()
            if forward is not None:
                forward.cancel()
            if sub is not None:
                sub.close()

    @staticmethod
    async def _watch(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    # -- POST: one client message ---------------------------------------------------------

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        sid = (query.get("session_id") or [""])[0]
        session = self.sessions.get(sid)
        if session is None or session.owner != scope.get(SUBJECT):
            await respond(send, 404, b"Could not find session", content_type=b"text/plain")
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > _MAX_BODY:
                await respond(send, 413)
                return
            if not message.get("more_body"):
                break
        try:
            decoded = decode(bytes(body))
        except ParseError as exc:
            await respond_json(send, 400, error_response(None, exc))
            return
        if type(decoded) is not dict:
            await respond_json(send, 400, error_response(None, InvalidRequest("One JSON-RPC message per POST")))
            return
        await respond(send, 202, b"Accepted", content_type=b"text/plain")
        subject = scope.get(SUBJECT)
        self._take(session, decoded, subject if isinstance(subject, str) else None)

    def _take(self, session: _SseSession, message: dict[str, Any], subject: str | None) -> None:
        legacy = session.legacy
        method = message.get("method")
        if method is None:  # a response to one of our requests
            legacy.answer(message)
            return
        if "id" not in message:
            if method == "notifications/cancelled":
                legacy.cancel(message.get("params"))
            return
        rid = message["id"]
        if method == "initialize":
            try:
                session.send({"jsonrpc": "2.0", "id": rid, "result": legacy.initialize(message.get("params"))})
            except ProtocolError as exc:
                session.send(error_response(rid, exc))
            return
        prepared = legacy.prepare(message)
        if isinstance(prepared, dict):
            session.send(prepared)
            return

        async def run() -> None:
            try:
                session.send(await legacy.run(prepared, session.send, subject))
            except asyncio.CancelledError:
                pass  # cancelled (notifications/cancelled, or the stream closed): no response
            finally:
                legacy.cancelled.discard(rid)

        task = asyncio.ensure_future(run())
        session.tasks.add(task)
        task.add_done_callback(session.tasks.discard)

