"""Resumable SSE streams of the legacy (2025-11-25) HTTP leg: event ids and the log.

Every event the server writes on a legacy POST's SSE stream gets an id
`<stream>-<seq>` (the stream part is random, so an id names its stream and cannot be
guessed) and is kept in that stream's bounded log. A client whose stream broke, or
that the server told to go away (`ctx.close_sse_stream()`), reconnects with GET and
`Last-Event-ID`; the server replays what followed that id on the same stream, then
goes on delivering it live until the request's response has been sent (2025-11-25
transports, "Resumability and Redelivery"; SEP-1699). Events of other streams are
never replayed there. The stream opens with a priming event (an id, the `retry:`
hint and empty data) so a client has an id to resume from before anything happened.

`EventLog` is per app instance and bounded three ways: `max_events` and `max_bytes`
per stream (the oldest events go first) and `max_streams` (finished streams are
forgotten `linger` seconds after they end, and the oldest go first when the table is
full), so the log never holds more than about `max_streams * max_bytes`. Streams are bound to the
session that opened them. Used on the event loop thread only.

`SharedLog` is the optional second tier: when the server's store is shared (Redis,
see `backends._redis_events`), every stream is also written there, so that a client
reconnecting to *another* instance is served from it (`_http_resume.replay_shared`).
The local log stays the first place a resume looks. Imports only the standard library.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict, deque
from typing import Final, Protocol

__all__ = ["EventLog", "LoggedStream", "SharedLog", "id_frame", "parse_event_id", "priming_frame"]

DEFAULT_RETRY_MS: Final = 1000


def id_frame(event_id: str, data: bytes) -> bytes:
    """One SSE event with an id, carrying one JSON text."""
    return b"id: " + event_id.encode() + b"\ndata: " + data + b"\n\n"


def priming_frame(event_id: str, retry_ms: int) -> bytes:
    """The first event of a resumable stream: an id, the reconnect delay, no data."""
    return b"id: " + event_id.encode() + b"\nretry: " + str(retry_ms).encode() + b"\ndata: \n\n"


def parse_event_id(event_id: str) -> tuple[str, int] | None:
    """(stream id, sequence number) of an event id `<stream>-<seq>`, or None."""
    sid, sep, seq = event_id.rpartition("-")
    if not sep or not sid or not seq.isdigit() or len(seq) > 18:
        return None
    return sid, int(seq)


class SharedLog(Protocol):
    """The resumable streams, kept where every instance reads them.

    Concurrency contract: `opened`, `logged` and `ended` are synchronous and never
    block (they queue the write, which goes out in order on the calling event loop);
    `owner_of` and `read` are coroutines of that same loop. Failures of the shared
    store are logged and cost only the cross-instance resume (the local log is
    unaffected); `read` and `owner_of` then answer as for an unknown stream.
    Cleanup contract: entries expire by themselves (a TTL refreshed at each write, and a
    cap on events per stream); `close()` stops the writer after flushing what is queued."""

    def opened(self, stream: str, owner: str, subject: str | None) -> None: ...
    def logged(self, stream: str, seq: int, framed: bytes) -> None: ...
    def ended(self, stream: str, seq: int) -> None: ...

    async def owner_of(self, stream: str) -> tuple[str, str | None, int] | None:
        """(owning session, auth subject, last sequence number) of a known stream."""
        ...

    async def read(self, stream: str, after: int, wait: float) -> tuple[list[bytes], int, bool]:
        """(frames, position, done): the framed events after `after`, in order; the
        sequence number of the last of them (`after` if none); whether the stream
        ended. Waits up to `wait` seconds for an event when none is there."""
        ...

    async def close(self) -> None: ...


class LoggedStream:
    """The log of one POST's SSE stream."""

    __slots__ = ("_waiters", "done", "ended_at", "events", "id", "max_bytes", "owner", "seq", "shared", "size")

    def __init__(self, sid: str, owner: str, max_events: int, max_bytes: int = 1 << 18,
                 shared: SharedLog | None = None) -> None:
        self.id = sid
        self.owner = owner
        self.seq = 0
        self.events: deque[tuple[int, bytes]] = deque(maxlen=max_events)  # (seq, framed)
        self.size = 0  # bytes held in `events`
        self.max_bytes = max_bytes
        self.done = False  # the response is in the log: nothing follows
        self.ended_at = 0.0
        self.shared = shared  # also written there (another instance may resume it)
        self._waiters: list[asyncio.Future[None]] = []

    def append(self, data: bytes) -> bytes:
        """Log one message; returns its framed event (with its id)."""
        self.seq += 1
        framed = id_frame(f"{self.id}-{self.seq}", data)
        events = self.events
        if len(events) == events.maxlen:
            self.size -= len(events[0][1])
        events.append((self.seq, framed))
        self.size += len(framed)
        while self.size > self.max_bytes and len(events) > 1:
            self.size -= len(events.popleft()[1])
        if self.shared is not None:
            self.shared.logged(self.id, self.seq, framed)
        self._wake()
        return framed

    def priming(self, retry_ms: int) -> bytes:
        """The priming event: id `<stream>-0` (resuming from it replays everything)."""
        return priming_frame(f"{self.id}-0", retry_ms)

    def end(self) -> None:
        if not self.done:
            self.done = True
            self.ended_at = time.monotonic()
            if self.shared is not None:
                self.shared.ended(self.id, self.seq)
            self._wake()

    def wait(self) -> asyncio.Future[None]:
        """Resolves at the next append or at the end (for a resumed reader)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def after(self, seq: int) -> list[tuple[int, bytes]]:
        """The logged events that followed `seq` (what is still kept of them)."""
        return [(s, f) for s, f in self.events if s > seq]


class EventLog:
    """The resumable streams of one app, by stream id."""

    def __init__(self, *, max_events: int = 256, max_bytes: int = 1 << 18, max_streams: int = 1024,
                 linger: float = 300.0, retry_ms: int = DEFAULT_RETRY_MS, shared: SharedLog | None = None) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_streams = max_streams
        self.linger = linger
        self.retry_ms = retry_ms
        self.shared = shared
        self._streams: OrderedDict[str, LoggedStream] = OrderedDict()

    def __len__(self) -> int:
        return len(self._streams)

    def open(self, owner: str, subject: str | None = None) -> LoggedStream:
        """A new stream of session `owner` (opened with credential `subject`)."""
        self._prune()
        while len(self._streams) >= self.max_streams:
            self._streams.popitem(last=False)
        sid = secrets.token_urlsafe(12)
        stream = self._streams[sid] = LoggedStream(sid, owner, self.max_events, self.max_bytes, self.shared)
        if self.shared is not None:
            self.shared.opened(sid, owner, subject)
        return stream

    def find(self, last_event_id: str, owner: str) -> tuple[LoggedStream, int] | None:
        """The stream `last_event_id` belongs to and the position after which to replay;
        None when it is unknown, forgotten or another session's."""
        parsed = parse_event_id(last_event_id)
        if parsed is None:
            return None
        sid, seq = parsed
        stream = self._streams.get(sid)
        if stream is None or stream.owner != owner or seq > stream.seq:
            return None
        return stream, seq

    def drop_owner(self, owner: str) -> None:
        """Forget every stream of a session (it ended)."""
        for sid in [s.id for s in self._streams.values() if s.owner == owner]:
            stream = self._streams.pop(sid)
            stream.end()

    def _prune(self) -> None:
        limit = time.monotonic() - self.linger
        for sid in [s.id for s in self._streams.values() if s.done and s.ended_at < limit]:
            del self._streams[sid]
