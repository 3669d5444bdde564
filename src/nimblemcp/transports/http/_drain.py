"""Ending open streams for a rolling restart (issues 13 and 34).

`ListenDrain` wraps the HTTP app that `serving.run_http` serves. `drain()` first asks
`listens` (set by `run_http`: the server's `move_listeners`) to move the open
`subscriptions/listen` streams, make-before-break: the server core does that itself
and ends each with its closing result. Where it cannot (a bus without `LocalBus`),
`drain()` falls back to ending each listen response it remembers (recognised by its
`Mcp-Method` header, which 2026-07-28 clients must send) cleanly but *without* the
listen's closing result: per SUB-10 that reads to the client as "the stream went
away", so a client re-listens (through the load balancer, on another instance).
Whatever the handler sends afterwards is dropped.

2025-11-25 standalone GET streams end too: every GET's scope carries this drain under
`DRAIN` (a shallow copy of the scope keeps it), and the legacy leg registers each GET
stream it opens with `on_drain(stop)`; `drain()` calls `stop`, and the stream ends itself
cleanly (its final empty body, the session's stream slot freed). The 2025-11-25 spec lets
a server close a stream at any time; the client opens a new GET (through the balancer,
on another instance). A GET stream opened while draining is ended at once. Any other
stop (SIGINT) calls `close()`: the same hooks run at once, with `closing` set (an `/sse`
stream then ends without waiting for its answers in flight). `on_drain`
takes any such hook: `run_http` registers one that starts the grace time of the
server's running background tasks (`Server.drain`).

Cost per request: one scan of the header list; only listens get a wrapped `send`, only
GETs a scope key. Made around nimblemcp's guard (`SecurityMiddleware`), the guard does
that part from the header dict it builds anyway, and `entry` (the guard) is what to
serve: no layer of its own. Imports nothing from the server; stdlib only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nimblemcp.transports.http._asgi import Receive, Scope, Send

__all__ = ["DRAIN", "ListenDrain"]

DRAIN = "nimblemcp.drain"  # scope key of a GET: the `ListenDrain` serving it

_LISTEN = b"subscriptions/listen"


class _Stream:
    __slots__ = ("ended", "send", "started")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False
        self.ended = False

    async def relay(self, message: Any) -> None:
        if self.ended:
            return
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.ended = True
        await self.send(message)

    async def end(self) -> None:
        if self.started and not self.ended:
            self.ended = True
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})


class ListenDrain:
    """ASGI middleware: `await drain()` ends every open listen stream (see module doc)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.streams: set[_Stream] = set()
        self.stoppers: set[Callable[[], None]] = set()  # open legacy GET streams
        # Moves the open listens (the server's `move_listeners`); False: it could not.
        self.listens: Callable[[], bool] | None = None
        self.draining = False
        self.closing = False  # `close()`: streams end now, not after their answers
        # The ASGI app to serve: this drain, or the guard it was made around
        # (`SecurityMiddleware`: `takes_listen_drain`), which then does this
        # drain's per-request part itself from the header dict it builds anyway
        # (`track`/`untrack` for listens, `DRAIN` for GETs): one layer less per request.
        self.entry: Any = self
        if getattr(app, "takes_listen_drain", False) is True and app.drain is None:
            app.drain = self
            self.entry = app

    def track(self, send: Send) -> Send:
        """The `send` of a listen's response, kept until `untrack`."""
        stream = _Stream(send)
        self.streams.add(stream)
        return stream.relay

    def untrack(self, relay: Send) -> None:
        self.streams.discard(relay.__self__)  # type: ignore[attr-defined]

    def on_drain(self, stop: Callable[[], None]) -> Callable[[], None]:
        """Call `stop()` on `drain()` (at once when draining already); returns the
        function that unregisters it (call it when the stream ends by itself)."""
        if self.draining:
            stop()
            return _nothing
        self.stoppers.add(stop)
        return lambda: self.stoppers.discard(stop)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.entry is not self:  # the guard does it (see `__init__`)
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http" or scope["method"] != "POST":
            if scope["type"] == "http" and scope["method"] == "GET":
                scope[DRAIN] = self
            await self.app(scope, receive, send)
            return
        for key, value in scope["headers"]:
            if key == b"mcp-method":
                if value == _LISTEN:
                    break
                await self.app(scope, receive, send)
                return
        else:
            await self.app(scope, receive, send)
            return
        stream = _Stream(send)
        self.streams.add(stream)
        try:
            await self.app(scope, receive, stream.relay)
        finally:
            self.streams.discard(stream)

    def close(self) -> None:
        """A stop that is no rolling restart (SIGINT): the legacy GET and 2024-11-05
        `/sse` streams end now, cleanly (an `/sse` stream's requests in flight are
        cancelled: their answers could only go to that stream). Listen streams get
        their closing result from the server (`close_listeners`)."""
        self.closing = self.draining = True
        for stop in list(self.stoppers):
            self.stoppers.discard(stop)
            stop()

    async def drain(self) -> int:
        """End the legacy GET streams and move (or end) the listen streams; how many
        streams this ended itself."""
        self.draining = True
        ended = 0
        for stop in list(self.stoppers):
            self.stoppers.discard(stop)
            stop()
            ended += 1
        if self.listens is not None and self.listens():
            return ended  # the server moves them and ends each with its closing result
        for stream in list(self.streams):
            if stream.started and not stream.ended:
                try:
                    await stream.end()
                    ended += 1
                except Exception:  # the connection is already gone: nothing to end
                    stream.ended = True
        return ended


def _nothing() -> None:
    pass
