"""Resumable SSE streams on the legacy (2025-11-25) HTTP leg: the writer and the replay.

`ResumableExchange` is the `Exchange` of a legacy POST: every message it writes is
logged in an `EventLog` stream (see `_sse_log`) and framed with its event id; the SSE
stream opens with the priming event (id, `retry:`, empty data). Its `detach`
(a handler's `ctx.close_sse_stream()`) ends the HTTP response at once while the
request goes on: later messages, the response included, are only logged. `replay`
serves a GET carrying `Last-Event-ID`: what the stream logged after that id, then its
live events until the response went out, then the end of the response. The log entry
is made lazily, when the answer turns out to be a stream (a plain JSON answer costs
nothing). `replay_shared` serves the same GET from the `SharedLog` when the stream was
opened on another instance: what that instance logged, then (read from the shared log
as it writes) its later events, until the response. Must not import the server or
uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nimblemcp.jsonrpc import encode, encode_reply
from nimblemcp.transports._sse import KEEPALIVE, SSE_HEADERS
from nimblemcp.transports.http._asgi import SUBJECT, Receive, Send
from nimblemcp.transports.http._exchange import Exchange
from nimblemcp.transports.http._sse_log import EventLog, LoggedStream, SharedLog, parse_event_id

__all__ = ["ResumableExchange", "last_event_id", "replay", "replay_shared", "resume_elsewhere"]


def last_event_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    for key, value in headers:
        if key == b"last-event-id":
            text = value.decode("latin-1").strip()
            return text or None
    return None


class ResumableExchange(Exchange):
    """An `Exchange` whose SSE events carry ids and are kept for a reconnect."""

    __slots__ = ("detached", "events", "log", "session_id")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, receive: Receive, send: Send, keepalive: float,
        events: EventLog, session_id: str, scope: Any = None,
    ) -> None:
        super().__init__(loop, receive, send, keepalive, scope=scope)
        self.events = events
        self.session_id = session_id
        self.log: LoggedStream | None = None
        self.detached = False  # detach() ended the response; the request goes on

    def _stream_log(self) -> LoggedStream:
        log = self.log
        if log is None:
            subject = self.scope.get(SUBJECT) if self.scope is not None else None
            log = self.log = self.events.open(self.session_id, subject if isinstance(subject, str) else None)
        return log

    def emit(self, message: dict[str, Any]) -> None:
        self._log(encode(message), message, None)

    def emit_json(self, data: bytes, subscription: Any = None) -> None:
        self._log(data, None, subscription)

    def _log(self, data: bytes, message: dict[str, Any] | None, subscription: Any) -> None:
        log = self._stream_log()
        if log.done:
            return
        framed = log.append(data)
        if self.detached or self.closed or self.disconnected:
            return  # logged: a reconnecting client gets it
        self._push(framed, message, subscription)

    async def _pump(self) -> None:
        self.frames.insert(0, self._stream_log().priming(self.events.retry_ms))
        await super()._pump()

    def detach(self) -> bool:
        """End the HTTP response now (after the priming event and what is queued)."""
        if self.detached or self.closed or self.done:
            return False
        self.detached = True
        self.closed = True
        if self.pump is None:
            self.pump = self.loop.create_task(self._pump())
        self._wake()
        return True

    def deliver(self, response: dict[str, Any]) -> None:
        """The request's response: logged (and written, when still attached); the end."""
        log = self._stream_log()
        framed = log.append(encode_reply(response))
        log.end()
        if not self.detached and not self.closed:
            self.frames.append(framed)
        self.closed = True
        self._wake()

    def abandon(self) -> None:
        """The request ended without a response (cancelled): the stream just ends."""
        if self.log is not None:
            self.log.end()


def _watch(receive: Receive) -> tuple[asyncio.Future[None], asyncio.Future[None]]:
    """(gone, watcher): `gone` resolves when the client hangs up."""
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not gone.done():
            gone.set_result(None)

    return gone, asyncio.ensure_future(watch())


async def replay(
    receive: Receive, send: Send, stream: LoggedStream, after: int, keepalive: float,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """Serve a resumed stream: the logged events after `after`, then live ones until
    the stream ends (or the client hangs up)."""
    gone, watcher = _watch(receive)
    try:
        await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *headers]})
        await send(_FLUSH)  # the head goes out now, not with the first event (ASGI lets a server wait)
        position = after
        while True:
            batch = stream.after(position)
            if batch:
                position = batch[-1][0]
                await send({"type": "http.response.body", "body": b"".join(f for _, f in batch),
                            "more_body": True})
                continue
            if stream.done or gone.done():
                break
            changed = stream.wait()
            done, _ = await asyncio.wait({changed, gone}, timeout=keepalive if keepalive > 0 else None,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                changed.cancel()
                await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
        if not gone.done():
            await send({"type": "http.response.body", "body": b""})
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def replay_shared(
    receive: Receive, send: Send, shared: SharedLog, stream: str, after: int, keepalive: float,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """Serve a resumed stream from the shared log (it was opened on another instance):
    the events after `after`, then those the other instance goes on writing, until the
    stream ends or the client hangs up. A keep-alive comment goes out whenever nothing
    came for `keepalive` seconds (1 s polls when keep-alives are off)."""
    gone, watcher = _watch(receive)
    wait = keepalive if keepalive > 0 else 1.0
    try:
        await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *headers]})
        await send(_FLUSH)  # the head goes out now, not with the first event (ASGI lets a server wait)
        position = after
        while not gone.done():
            reading: asyncio.Future[tuple[list[bytes], int, bool]] = asyncio.ensure_future(
                shared.read(stream, position, wait))
            await asyncio.wait((reading, gone), return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading
                break
            frames, position, done = reading.result()
            if frames:
                await send({"type": "http.response.body", "body": b"".join(frames), "more_body": True})
            elif not done and keepalive > 0:
                await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
            if done:
                break
        if not gone.done():
            await send({"type": "http.response.body", "body": b""})
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


# An empty chunk that is not the end: an ASGI server may hold the response head until the
# first body message (nimblemcp's engine does, to write a JSON answer in one piece), and a
# resumed stream may have nothing to send for a while.
_FLUSH: dict[str, Any] = {"type": "http.response.body", "body": b"", "more_body": True}

_GRACE = (0.02, 0.05, 0.1, 0.0)  # pauses between lookups of a stream not (yet) in the shared log


async def resume_elsewhere(
    scope: Any, receive: Receive, send: Send, events: EventLog, session_id: str, keepalive: float,
) -> bool:
    """A GET with `Last-Event-ID` for a session this instance does not know: serve it
    from the shared log when the stream belongs to that session and was opened with
    the same credential; False (nothing sent) otherwise. Knowing the session id and the
    stream id (both random) is what entitles a client to the stream, as on the
    instance that opened it. Only the stream resumes here: the session itself (later
    POSTs, answers to the server's questions) lives on the instance that opened it."""
    shared = events.shared
    last = last_event_id(scope["headers"])
    if shared is None or last is None:
        return False
    parsed = parse_event_id(last)
    subject = scope.get(SUBJECT)
    if parsed is None or (subject is not None and not isinstance(subject, str)):
        return False
    for pause in _GRACE:
        # The other instance writes to the shared log just after it writes to the
        # socket: a client that reconnects at once may be a few milliseconds ahead.
        found = await shared.owner_of(parsed[0])
        if found is not None and parsed[1] <= found[2]:
            break
        await asyncio.sleep(pause)
    if found is None or found[0] != session_id or found[1] != subject or parsed[1] > found[2]:
        return False
    await replay_shared(receive, send, shared, parsed[0], parsed[1], keepalive,
                        [(b"mcp-session-id", session_id.encode())])
    return True
