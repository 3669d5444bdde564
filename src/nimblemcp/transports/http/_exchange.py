"""One HTTP request in flight: lazy SSE, keep-alives, the disconnect watch, backpressure.

The response starts as nothing: a handler that finishes without emitting gets a plain
JSON body from `http.py`; the first request-scoped notification (or a handler still
running after one keep-alive interval) turns it into an SSE stream that this class
pumps. A client that hangs up cancels the handler (HTTP-10); a client that stops
reading is cut off once `max_buffer` bytes pile up. An Exchange is also the request's
`RequestIO` (see `nimblemcp._port`): `emit`, `subject`, `loop`, no back channel.

Most requests never stream and end before their watch starts, so the modern POST path
(`McpHttpApp.__call__`) makes its Exchange lean (`lean=True`): the request's own fields
only (`LEAN`, `armed` False); the stream's state (`_arm`) is set by the first `emit` or
when the watch starts. Until then no other field may be read: the methods below look
at `armed` first. Without `lean` every field is set at once (the legacy leg's
`ResumableExchange`, tests).
Must not import the server.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from nimblemcp.jsonrpc import encode
from nimblemcp.transports._sse import KEEPALIVE, SSE_HEADERS, frame
from nimblemcp.transports.http._asgi import ACCESS, Receive, Send
from nimblemcp.types._meta import SUBSCRIPTION_ID

WATCH_DELAY = 0.02  # seconds
BODY_SWEEP = 1.0  # seconds between checks of the body read deadlines
# The fields a lean Exchange is made with (`armed` False); the rest come with `_arm`.
LEAN = ("loop", "scope", "subject", "receive", "send", "keepalive", "owner", "watch_entry", "armed")


class Exchange:
    """One request in flight: buffered SSE frames, the writer task, the disconnect watch."""

    __slots__ = (
        "armed", "buffered", "closed", "commit_timer", "disconnected", "done", "frames", "keepalive",
        "loop", "owner", "pump", "receive", "scope", "send", "slow", "subject", "waiter",
        "watch_entry", "watcher",
    )
    # Set by `_arm` (unset on a lean Exchange until then).
    frames: list[bytes]
    buffered: int
    pump: asyncio.Task[None] | None
    watcher: asyncio.Task[None] | None
    waiter: asyncio.Future[bool] | None
    commit_timer: asyncio.TimerHandle | None
    done: bool
    closed: bool
    disconnected: bool
    slow: bool
    ask = None  # RequestIO: no back channel on this wire
    close_stream = None  # nor a resumable stream

    # A reader that lets this much pile up is cut off: memory stays bounded and a
    # slow listen stream cannot hold the bus (see backends/bus.py).
    max_buffer = 1 << 20

    def __init__(
        self, loop: asyncio.AbstractEventLoop, receive: Receive, send: Send, keepalive: float,
        subject: str | None = None, scope: Any = None, owner: asyncio.Task[Any] | None = None,
        *, lean: bool = False,
    ) -> None:
        self.loop = loop
        self.scope = scope  # read only by `headers` / `auth`, when a handler asks
        self.subject = subject
        self.receive = receive
        self.send = send
        self.keepalive = keepalive
        self.owner = owner  # the task the handler runs on: a disconnect cancels it
        self.watch_entry: list[Any] | None = None
        if lean:
            self.armed = False
        else:
            self._arm()

    def _arm(self) -> None:
        """The state of a stream and of the watch: set at once by `__init__`, on a lean
        Exchange by the first `emit` or when the watch starts."""
        self.armed = True
        self.frames = []
        self.pump = None
        self.watcher = None
        self.waiter = None
        self.commit_timer = None
        self.done = False
        self.closed = False
        self.disconnected = False
        self.slow = False
        self.buffered = 0

    @property
    def headers(self) -> dict[str, str] | None:
        """RequestIO (optional): the request headers, decoded now (names lowercased)."""
        if self.scope is None:
            return None
        return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self.scope["headers"]}

    @property
    def auth(self) -> Any:
        """RequestIO (optional): the verified access token (`http_auth`), else None."""
        return None if self.scope is None else self.scope.get(ACCESS)

    def emit(self, message: dict[str, Any]) -> None:
        """Called by Context on the loop thread for progress/log notifications."""
        if not self.armed:  # the first message of a lean Exchange
            self._arm()
        elif self.closed or self.disconnected:
            return
        self._push(frame(encode(message)), message, None)

    def emit_json(self, data: bytes, subscription: Any = None) -> None:
        """RequestIO (optional): one message already encoded as JSON, from the loop
        thread (a listen's notification, whose shared part is encoded once for all
        its listeners); `subscription`, the listen's id, names it should the client be
        cut off."""
        if not self.armed:
            self._arm()
        elif self.closed or self.disconnected:
            return
        self._push(b"data: " + data + b"\n\n", None, subscription)

    def _push(self, framed: bytes, message: dict[str, Any] | None, subscription: Any) -> None:
        self.buffered += len(framed)
        if self.buffered > self.max_buffer:
            if message is not None:
                subscription = (message.get("params") or {}).get("_meta", {}).get(SUBSCRIPTION_ID)
            self._cut(subscription)
            return
        self.frames.append(framed)
        self._wake()
        if self.pump is None:
            self.pump = self.loop.create_task(self._pump())

    def _cut(self, sid: Any) -> None:
        """The client stopped reading: drop what is queued, end the request; a listen
        stream (`sid`, its subscription id) ends with the reason (SUB-09)."""
        self.slow = True
        self.closed = True
        self.frames.clear()
        if sid is not None:
            note = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": sid, "reason": "Listener too slow: stream buffer full"}}
            self.frames.append(frame(encode(note)))
        if self.owner is not None:
            self.owner.cancel()
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(True)

    def start_watch(self) -> None:
        """Runs only for a request still in flight after WATCH_DELAY (see `Watchlist`)."""
        if not self.armed:  # lean: nothing set up yet
            self._arm()
        elif self.done:
            return
        self.watcher = self.loop.create_task(self._watch())
        if self.keepalive > 0:
            self.commit_timer = self.loop.call_later(self.keepalive, self._commit)

    def _commit(self) -> None:
        # Still running after one keep-alive interval: go SSE so idle timers stay fed.
        if not self.done and self.pump is None:
            self.frames.append(KEEPALIVE)  # flush the headers now; proxies see bytes
            self.pump = self.loop.create_task(self._pump())

    async def _watch(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                break
        if not self.done:
            self.disconnected = True
            if self.owner is not None:
                self.owner.cancel()  # HTTP-10: closing the stream cancels the request
            self._wake()

    async def _pump(self) -> None:
        send = self.send
        await send({"type": "http.response.start", "status": 200, "headers": list(SSE_HEADERS)})
        while True:
            if self.frames:
                data = b"".join(self.frames)
                self.frames.clear()
                self.buffered = 0
                if self.closed:
                    await send({"type": "http.response.body", "body": data})
                    return
                await send({"type": "http.response.body", "body": data, "more_body": True})
                continue
            if self.closed or self.disconnected:
                # Finished after a disconnect too: a client that only shut its sending
                # side (half-close) still gets the end of the body; for one that is gone
                # the server drops it. (Unfinished, uvicorn logs an error.)
                await send({"type": "http.response.body", "body": b""})
                return
            w = self.waiter = self.loop.create_future()
            timer = self.loop.call_later(self.keepalive or 3600.0, _ping, w)
            try:
                woke = await w
            finally:  # also when the stream is cancelled: a live timer holds `w` for its delay
                timer.cancel()
            if not woke and not self.frames and not self.closed:
                await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})

    def finish(self) -> None:
        self.done = True
        entry = self.watch_entry
        if entry is not None:
            entry[1] = None  # let the Watchlist drop it without holding this request
        if not self.armed:  # lean: no timer, no watch
            return
        if self.commit_timer is not None:
            self.commit_timer.cancel()
        if self.watcher is not None:
            self.watcher.cancel()


def _ping(w: asyncio.Future[bool]) -> None:
    if not w.done():
        w.set_result(False)


class Watchlist:
    """Starts the disconnect watch (and keep-alive timer) of the requests still in
    flight WATCH_DELAY after they began, with one timer for all of them: a quick
    request costs a list append instead of arming and cancelling its own timer.
    Likewise it keeps the body read deadlines of one event loop's requests."""

    __slots__ = ("body_timeout", "body_timer", "entries", "loop", "reading", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.entries: deque[list[Any]] = deque()  # [due, Exchange | None], in due order
        self.timer: asyncio.TimerHandle | None = None
        # The tasks reading a request body, each with the loop time it began at;
        # `sweep_bodies` (once per BODY_SWEEP seconds while any read is under way)
        # cancels those older than the deadline and marks them -1. The deadline is
        # read off the clock, not counted in sweeps: a sweep runs late on a busy loop,
        # and 30 late sweeps made a 30 s deadline 41 s (issue 31).
        self.reading: dict[asyncio.Task[Any], float] = {}
        self.body_timer: asyncio.TimerHandle | None = None
        self.body_timeout = 30.0  # seconds a body may take; the app sets it from its own

    def arm_body_sweep(self) -> None:
        self.body_timer = self.loop.call_later(BODY_SWEEP, self.sweep_bodies)

    def sweep_bodies(self) -> None:
        reading, limit, now = self.reading, self.body_timeout, self.loop.time()
        for task, began in list(reading.items()):
            if task.done():
                del reading[task]
            elif began >= 0 and now - began >= limit:
                reading[task] = -1.0
                task.cancel()
        self.body_timer = None
        if reading:
            self.arm_body_sweep()

    def add(self, ex: Exchange) -> None:
        due = self.loop.time() + WATCH_DELAY
        ex.watch_entry = entry = [due, ex]
        self.entries.append(entry)
        if self.timer is None:
            self.timer = self.loop.call_at(due, self.sweep)

    def sweep(self) -> None:
        entries, now = self.entries, self.loop.time()
        while entries:
            due, ex = entries[0]
            if ex is not None and due > now:
                break
            entries.popleft()
            if ex is not None:
                ex.watch_entry = None
                ex.start_watch()
        self.timer = self.loop.call_at(entries[0][0], self.sweep) if entries else None
