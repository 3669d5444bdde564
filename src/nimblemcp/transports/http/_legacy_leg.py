"""The legacy (2025-11-25) leg of the Streamable HTTP server: sessions over HTTP.

Plugged into `McpHttpApp` as its `legacy` hook, which hands over GET/DELETE and the
POSTs that carry `Mcp-Session-Id`, a legacy `MCP-Protocol-Version` or `initialize`
(COMPAT-S04). POST `initialize` opens a session and returns its `Mcp-Session-Id`
(LEG-01/04); later requests without the id get 400, with an unknown, expired,
deleted or foreign id 404. Requests run through the shared legacy adapter (`_legacy`)
with the session's metadata and legacy-shaped results; a handler's questions go out
as real server-to-client requests on that POST's SSE stream, and the client's
answers come back as separate POSTs answered 202 (LEG-06/09). A client hanging up
on a POST stream does not cancel it; `notifications/cancelled` does (LEG-07). GET
opens the session's one stream of untagged list_changed and resources/updated
notifications (LEG-08/12); DELETE ends the session. Bounded (see `_http_sessions`):
idle sessions expire, a full table evicts its least recently used session instead
of refusing new clients, and a session whose GET stream ended is idle from then on.

Must not import uvicorn, the server or any client code.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nimblemcp._loop import running_loop
from nimblemcp._port import Changes, Core, Prepared
from nimblemcp.errors import InvalidRequest, ProtocolError
from nimblemcp.jsonrpc import encode, error_response
from nimblemcp.transports._legacy import LegacySession, is_enveloped
from nimblemcp.transports._sse import KEEPALIVE, SSE_HEADERS, frame
from nimblemcp.transports.http._asgi import (
    SUBJECT,
    Receive,
    Scope,
    Send,
    accepted,
    accepts_sse,
    respond,
    respond_json,
)
from nimblemcp.transports.http._drain import DRAIN
from nimblemcp.transports.http._headers import ACCEPT, SESSION, VERSION, RequestHeaders
from nimblemcp.transports.http._resume import (
    ResumableExchange,
    last_event_id,
    replay,
    resume_elsewhere,
)
from nimblemcp.transports.http._sessions import HttpSession, Sessions
from nimblemcp.transports.http._sse_log import EventLog, SharedLog
from nimblemcp.types._versions import LEGACY_VERSIONS, MODERN_VERSIONS

__all__ = ["LegacyHttp"]

_SID = b"mcp-session-id"


async def _refuse(send: Send, status: int, text: str, rid: Any = None) -> None:
    """A transport-level refusal: the status says it, a JSON-RPC error body explains."""
    await respond_json(send, status, error_response(rid, InvalidRequest(text)))


class LegacyHttp:
    """The `LegacyHandler` of one app: a session table and the legacy wire."""

    def __init__(
        self, core: Core, *, keepalive: float = 15.0,
        max_sessions: int | None = None, idle_timeout: float | None = None, shared_events: SharedLog | None = None,
    ) -> None:
        """`max_sessions` / `idle_timeout` override the server's `LegacyOptions`;
        `shared_events` also keeps resumable streams where other instances resume them."""
        self.core = core
        self.keepalive = keepalive
        opts = core.legacy_options
        self.sessions = Sessions(
            opts.max_sessions if max_sessions is None else max_sessions,
            opts.idle_timeout if idle_timeout is None else idle_timeout,
        )
        self.events = EventLog(shared=shared_events)  # resumable POST streams (see _http_resume)

    async def __call__(self, scope: Scope, receive: Receive, send: Send, message: Any) -> None:
        h = RequestHeaders(scope["headers"])
        method = scope["method"]
        owner = scope.get(SUBJECT)
        if message is not None and method == "POST" and type(message) is dict and h.values[SESSION] is None \
                and message.get("method") == "initialize" and "id" in message:
            await self._initialize(send, message, owner)
            return
        raw = h.values[SESSION]
        if method not in ("POST", "GET", "DELETE") or (method != "POST" and raw is None):
            # Without a session, GET/DELETE get the modern answer (HTTP-01, COMPAT-S03).
            allow = b"GET, POST, DELETE" if raw is not None else b"POST"
            await respond(send, 405, headers=[(b"allow", allow)])
            return
        rid = message.get("id") if type(message) is dict and "method" in message else None
        version = h.values[VERSION]
        if version is not None and version.decode("latin-1") not in LEGACY_VERSIONS:
            await _refuse(send, 400, f"Bad Request: unsupported MCP-Protocol-Version {version.decode('latin-1')!r}", rid)
            return
        if raw is None:
            await _refuse(send, 400, "Bad Request: Mcp-Session-Id header is required", rid)
            return
        session = self.sessions.get(raw.decode("latin-1"), owner)
        if session is None:
            if method == "GET" and accepts_sse(accepted(h.values[ACCEPT])) and await resume_elsewhere(
                    scope, receive, send, self.events, raw.decode("latin-1"), self.keepalive):
                return  # a stream another instance opened, resumed from the shared log
            await _refuse(send, 404, "Session not found", rid)
            return
        if method == "DELETE":
            self.sessions.drop(session.id)
            self.events.drop_owner(session.id)
            await respond(send, 200)
        elif method == "GET":
            last = last_event_id(scope["headers"])
            found = self.events.find(last, session.id) if last is not None else None
            if not accepts_sse(accepted(h.values[ACCEPT])):
                await _refuse(send, 406, "Not Acceptable: the GET stream needs Accept: text/event-stream")
            elif found is not None:  # resume that POST's stream (SEP-1699)
                await replay(receive, send, found[0], found[1], self.keepalive, [(_SID, session.id.encode())])
            else:
                await self._stream(scope, receive, send, session)
        elif "method" not in message:  # a response to one of our requests (LEG-06)
            session.legacy.answer(message)
            await respond(send, 202)
        elif "id" not in message:  # a notification (LEG-06)
            if message["method"] == "notifications/cancelled":
                session.legacy.cancel(message.get("params"))
            await respond(send, 202)
        else:
            await self._request(scope, receive, send, session, message)

    # -- initialize ----------------------------------------------------------------------

    async def _initialize(self, send: Send, message: dict[str, Any], owner: Any) -> None:
        rid = message["id"]
        legacy = LegacySession(self.core)
        try:
            result = legacy.initialize(message.get("params"))
        except ProtocolError as exc:
            params = message.get("params")
            requested = params.get("protocolVersion") if isinstance(params, dict) else None
            error = error_response(rid, exc)
            error["error"]["data"] = {"supported": [*LEGACY_VERSIONS, *MODERN_VERSIONS], "requested": requested}
            await respond_json(send, 400, error)  # COMPAT-S02: the only diagnostic a legacy client gets
            return
        session = self.sessions.open(legacy, owner)  # evicts the least recently used when full
        await respond_json(send, 200, {"jsonrpc": "2.0", "id": rid, "result": result}, [(_SID, session.id.encode())])

    # -- requests ------------------------------------------------------------------------

    async def _request(
        self, scope: Scope, receive: Receive, send: Send, session: HttpSession, message: dict[str, Any]
    ) -> None:
        rid = message["id"]
        method = message["method"]
        legacy = session.legacy
        prepared: Prepared | dict[str, Any]
        if method == "initialize":
            prepared = legacy.refusal(rid, method, InvalidRequest("The session is already initialized"))
        elif is_enveloped(message):
            prepared = legacy.refusal(
                rid, method, InvalidRequest("A modern (enveloped) request cannot use a legacy session"))
        else:
            prepared = legacy.prepare(message)
        if isinstance(prepared, dict):  # answered at once (or refused)
            await respond_json(send, 200, prepared)
            return
        if rid in legacy.requests:
            await respond_json(send, 200, error_response(rid, InvalidRequest("Request id already in use")))
            return
        loop = running_loop()
        ex = ResumableExchange(loop, receive, send, self.keepalive, self.events, session.id,
                               scope=scope)  # headers, auth on demand
        task = ex.owner = asyncio.current_task(loop)
        assert task is not None
        # No disconnect watch: hanging up is not cancellation on this wire (LEG-07).
        if self.keepalive > 0:
            ex.commit_timer = loop.call_later(self.keepalive, ex._commit)
        subject = scope.get(SUBJECT)
        try:
            response = await legacy.run(prepared, ex.emit, subject if isinstance(subject, str) else None,
                                        ex, ex.detach)
        except asyncio.CancelledError:
            ex.finish()
            ex.abandon()
            if not (legacy.closed or rid in legacy.cancelled or ex.slow):
                raise
            task.uncancel()
            # A cancelled request gets no response: the stream just ends.
            ex.closed = True
            if ex.pump is None:
                await respond(send, 200, headers=SSE_HEADERS)
            else:
                ex._wake()
                with contextlib.suppress(Exception):
                    await ex.pump
            return
        finally:
            legacy.cancelled.discard(rid)
            self.sessions.touch(session)  # a long request does not leave it looking idle
        ex.finish()
        if ex.pump is None:
            await respond_json(send, 200, response)
            return
        ex.deliver(response)
        await ex.pump

    # -- the GET stream ------------------------------------------------------------------

    async def _stream(self, scope: Scope, receive: Receive, send: Send, session: HttpSession) -> None:
        """The session's standalone stream: untagged notifications (LEG-08/12). A
        graceful shutdown (`_drain`) ends it cleanly; the client opens a new one."""
        if session.stream is not None:
            await _refuse(send, 409, "Conflict: this session already has a GET stream")
            return
        stop = session.stream = asyncio.Event()
        drain = scope.get(DRAIN)
        undrain = drain.on_drain(stop.set) if drain is not None else None
        notes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        tasks = [asyncio.ensure_future(self._watch(receive, stop))]
        sub = self.core.changes()  # subscribed before the headers go out: nothing is missed
        if sub is not None:
            tasks.append(asyncio.ensure_future(self._forward(session, sub, notes, stop)))
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [*SSE_HEADERS, (_SID, session.id.encode())]})
            await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
            while not stop.is_set():
                getter = asyncio.ensure_future(notes.get())
                stopper = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait(
                    {getter, stopper}, timeout=self.keepalive if self.keepalive > 0 else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                stopper.cancel()
                if getter in done:
                    await send({"type": "http.response.body", "body": frame(encode(getter.result())), "more_body": True})
                    continue
                getter.cancel()
                if not done:
                    await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            if undrain is not None:
                undrain()
            for task in tasks:
                task.cancel()
            if sub is not None:
                sub.close()  # also when the forwarder never got to run
            if session.stream is stop:
                session.stream = None
                self.sessions.touch(session)  # idle from now: expires after idle_timeout

    @staticmethod
    async def _watch(receive: Receive, stop: asyncio.Event) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        stop.set()

    @staticmethod
    async def _forward(
        session: HttpSession, sub: Changes, notes: asyncio.Queue[dict[str, Any]], stop: asyncio.Event
    ) -> None:
        await session.legacy.forward(sub, notes.put_nowait)
        stop.set()  # the subscription ended (closed bus, dropped slow listener): so does the stream

    def close(self) -> None:
        """End every session (GET streams finish, waiting questions are cancelled)."""
        self.sessions.close_all()

