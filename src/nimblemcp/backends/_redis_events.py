"""`RedisEventLog`: the resumable SSE streams of the 2025-11-25 HTTP leg, kept in Redis.

The `SharedLog` of `transports._sse_log` (structurally: this module does not import the
transports). Chosen automatically (`backends._select.shared_event_log`) when the
server's store is a `RedisStore`; it uses that store's client and key prefix, so
there is no second connection pool to configure.

Layout, per stream id `S` (random, unguessable; see `_sse_log`):
- `<prefix>sse:S:meta`, a hash: `o` the owning session id, `s` the auth subject (empty
  when none);
- `<prefix>sse:S`, a Redis stream whose entry ids are `0-<seq>`, the event's own
  sequence number, so `XREAD` from `0-<n>` is exactly "the events after n". An entry
  holds `f` (the framed SSE event, id line included: replayed byte for byte); the
  entry after the last event holds `e` (the end marker: the response went out, or
  the request ended without one).
Bounds: `XADD ... MAXLEN max_events` keeps the newest `max_events` events of a stream,
both keys expire `ttl` seconds after the last write to them, and a stream writes at
most `max_bytes` of events in all: past that its shared copy ends there (a reader on
another instance sees the stream end early; the local log of the instance that runs the
request is not affected).

Writes are queued by the synchronous `opened` / `logged` / `ended` (called as events are
emitted) and sent in order, pipelined, by one writer task on the loop that first
wrote; the store's client is bound to that loop (the server's), so reads must run on it
too. A Redis failure is logged (without the address) and costs only the
cross-instance resume: queued writes are dropped, never retried out of order.
Imports redis lazily (through the store); must not import server, transports or client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any, NamedTuple

from nimblemcp.backends._redis_bus import describe

__all__ = ["Read", "RedisEventLog"]

logger = logging.getLogger("nimblemcp.backends.redis")

_MAX_QUEUED = 50_000  # writes waiting for Redis; beyond this, new ones are dropped


class Read(NamedTuple):
    """What `read` found: see `transports._sse_log.SharedLog.read`."""

    frames: list[bytes]
    position: int
    done: bool


class RedisEventLog:
    """Resumable SSE streams in Redis, shared by every instance on the same store."""

    def __init__(self, store: Any, *, max_events: int = 256, ttl: float = 600.0,
                 max_bytes: int = 4 << 20) -> None:
        """`store`: a `RedisStore` (its client and prefix are used, not owned)."""
        self._client: Any = store._client
        self._errors: type[Exception] = store._errors
        self.prefix = store.prefix + "sse:"
        self.max_events = max_events
        self.ttl_ms = max(1, int(ttl * 1000))
        self.max_bytes = max_bytes
        self._budget: dict[str, int] = {}  # bytes a live stream may still write
        self._queue: deque[tuple[str, str, int, Any]] = deque()
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._flushing = False
        self._closed = False

    # -- writes (sync, queued) ----------------------------------------------------------

    def opened(self, stream: str, owner: str, subject: str | None) -> None:
        self._budget[stream] = self.max_bytes
        self._put(("meta", stream, 0, (owner, subject or "")))

    def logged(self, stream: str, seq: int, framed: bytes) -> None:
        left = self._budget.get(stream)
        if left is None:
            return  # over budget (ended here) or never opened
        if len(framed) > left:
            self.ended(stream, seq - 1)
            return
        self._budget[stream] = left - len(framed)
        self._put(("event", stream, seq, framed))

    def ended(self, stream: str, seq: int) -> None:
        if self._budget.pop(stream, None) is not None:
            self._put(("end", stream, seq + 1, None))

    def _put(self, item: tuple[str, str, int, Any]) -> None:
        if self._closed:
            return
        if len(self._queue) >= _MAX_QUEUED:
            logger.warning("redis event log: %d writes queued, dropping one", _MAX_QUEUED)
            return
        self._queue.append(item)
        if self._writer is None:
            self._wake = asyncio.Event()
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        assert self._wake is not None
        self._wake.set()

    async def _write_loop(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), 256))]
                self._flushing = True
                try:
                    await self._flush(batch)
                except self._errors as exc:
                    logger.warning("redis event log: write failed (%s); %d writes lost", describe(exc), len(batch))
                    # A stream whose writes were lost would be resumed with a gap
                    # elsewhere; end it there instead (best effort).
                    with contextlib.suppress(self._errors):
                        await self._end_streams({s for _, s, _, _ in batch})
                finally:
                    self._flushing = False

    async def _flush(self, batch: list[tuple[str, str, int, Any]]) -> None:
        pipe = self._client.pipeline(transaction=False)
        touched: set[str] = set()
        for kind, stream, seq, value in batch:
            key = self.prefix + stream
            if kind == "meta":
                owner, subject = value
                pipe.hset(key + ":meta", mapping={"o": owner, "s": subject})
                pipe.pexpire(key + ":meta", self.ttl_ms)
                continue
            fields = {"f": value} if kind == "event" else {"e": b"1"}
            pipe.xadd(key, fields, id=f"0-{seq}", maxlen=self.max_events + 1, approximate=False)
            touched.add(stream)
        for stream in touched:
            pipe.pexpire(self.prefix + stream, self.ttl_ms)
            pipe.pexpire(self.prefix + stream + ":meta", self.ttl_ms)
        # Errors of single commands (an id not above the top, after a lost write) are
        # returned, not raised: one bad entry does not void its neighbours.
        results = await pipe.execute(raise_on_error=False)
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            logger.warning("redis event log: %d commands refused (%s)", len(failed), describe(failed[0]))

    async def _end_streams(self, streams: set[str]) -> None:
        for stream in streams:
            await self._client.xadd(self.prefix + stream, {"e": b"1"}, id="*")

    # -- reads --------------------------------------------------------------------------

    async def owner_of(self, stream: str) -> tuple[str, str | None, int] | None:
        key = self.prefix + stream
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.hgetall(key + ":meta")
            pipe.xrevrange(key, count=1)
            meta, top = await pipe.execute()
        except self._errors as exc:
            logger.warning("redis event log: lookup failed (%s)", describe(exc))
            return None
        owner = meta.get(b"o")
        if owner is None:
            return None
        subject = meta.get(b"s", b"").decode()
        last = _seq(top[0][0]) if top else 0
        if top and b"e" in top[0][1]:
            last -= 1  # the end marker carries no event
        return owner.decode(), subject or None, last

    async def read(self, stream: str, after: int, wait: float) -> Read:
        key = self.prefix + stream
        try:
            found = await self._client.xread({key: f"0-{after}"}, count=self.max_events + 1, block=max(1, int(wait * 1000)))
        except self._errors as exc:
            logger.warning("redis event log: read failed (%s)", describe(exc))
            return Read([], after, True)  # ends the resumed stream; the client may retry
        frames: list[bytes] = []
        position, done = after, False
        for _, entries in found or ():
            for entry_id, fields in entries:
                if b"e" in fields:
                    done = True
                    break
                frames.append(bytes(fields[b"f"]))
                position = _seq(entry_id)
        return Read(frames, position, done)

    async def close(self) -> None:
        """Flush what is queued (at most a few seconds), then stop the writer."""
        self._closed = True
        writer = self._writer
        if writer is None:
            return
        for _ in range(100):
            if not self._queue and not self._flushing:
                break
            await asyncio.sleep(0.02)
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer


def _seq(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.rpartition("-")[2])
