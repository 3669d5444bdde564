"""`RedisBus`: the `NotificationBus` shared by every instance through Redis pub/sub.

Shape: one background thread per bus runs its own event loop, which owns both Redis
connections (one for PUBLISH, one SUBSCRIBEd to `channel`). `publish()` is sync,
non-blocking and thread-safe: it hands the event to that loop; events are sent as
small JSON (`{"k": kind, "u": uri}`), one PUBLISH per event, and a burst of them
in one pipeline (one round trip; a lone event goes out at once, nothing waits to
batch). Every message read from the channel, the instance's own included, goes to the
in-process fan-out of `backends.bus` (indexed by `Match`, bounded queues,
`SlowListener`); the messages already buffered are read as one batch, handed to each
event loop at once, so each local listener gets every instance's matching events, in
order, each exactly once. Listeners are subscribed once `async with bus.subscribe()` is entered
(it waits for Redis to confirm the channel, at most `ready_timeout` seconds).

Delivery is at most once while Redis stays up. When Redis drops, both connections reconnect with capped
exponential backoff: events that reach the channel while an instance is not subscribed
are lost to that instance, so the local subscriptions that ask for it get a `GAP` event
when the subscription is lost and again once it is back (a listen then ends and its
client re-listens, hearing `missed`). Unsent events wait, bounded,
and go out once the publisher reconnects (a pipeline that failed part-way is sent again
whole, so its first events may then arrive twice). Identical events still waiting to be sent are
merged: they mean the same thing ("refetch"), and this turns a burst of registrations
at start-up into one notification. `close_all()` ends local subscriptions; `close()`
also stops the thread, after sending what was published before it (at most
`_CLOSE_FLUSH` seconds); `await flush()` waits for that without stopping (the server
does at the end of its lifespan). A bus still running when the interpreter exits is
closed then (atexit), so an event published at the very last moment is not lost with
the daemon thread. Must not import server, transports or client modules.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import itertools
import logging
import os
import threading
import weakref
from types import TracebackType
from typing import Any

import orjson

from nimblemcp.backends.bus import GAP, Event, InProcessBus, Match

logger = logging.getLogger("nimblemcp.backends.redis")

_MAX_PENDING = 10_000  # distinct unsent events; beyond this, new ones are dropped
_BATCH = 500  # events per PUBLISH pipeline, and messages read per hand-over to the loops
# Reconnect attempts while Redis is away: at most every 0.5 s, so that listeners hear
# events again within about a second of Redis coming back.
_BACKOFF_MIN, _BACKOFF_MAX = 0.05, 0.5
_CLOSE_FLUSH = 2.0  # seconds `close()` (and `flush()` by default) waits for unsent events
_EXIT_FLUSH = 2.0  # the same at interpreter exit, for each bus still running
_JOIN = 10.0  # seconds `close()` waits for the thread to end after that

# Buses whose thread runs, closed at interpreter exit (daemon threads die unflushed).
_running: weakref.WeakSet[RedisBus] = weakref.WeakSet()


def _close_at_exit() -> None:
    for bus in list(_running):
        with contextlib.suppress(Exception):
            bus.close(_EXIT_FLUSH)


atexit.register(_close_at_exit)
os.register_at_fork(after_in_child=_running.clear)  # a child has no such threads


def encode(event: Event) -> bytes:
    return orjson.dumps({"k": event.kind, "u": event.uri})


def decode(data: bytes) -> Event | None:
    try:
        obj = orjson.loads(data)
        kind, uri = obj["k"], obj.get("u")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(kind, str) or not (uri is None or isinstance(uri, str)):
        return None
    return Event(kind, uri)


def client_options() -> dict[str, Any]:
    """redis.asyncio client options for the store and the bus: retries with backoff on
    connection errors and timeouts, health checks of idle pooled connections."""
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError, TimeoutError

    return {
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
        "retry_on_error": [ConnectionError, TimeoutError],
        "health_check_interval": 10,
        "socket_connect_timeout": 5.0,
    }


def describe(exc: BaseException) -> str:
    """What went wrong, without the address redis-py puts in its messages."""
    from redis.exceptions import AuthenticationError, ConnectionError, ResponseError, TimeoutError

    if isinstance(exc, AuthenticationError):
        return "Redis refused the credentials"
    if isinstance(exc, TimeoutError):
        return "Redis did not answer in time"
    if isinstance(exc, ConnectionError):
        return "cannot connect to Redis (refused or lost)"
    if isinstance(exc, ResponseError):
        return f"Redis replied with an error: {str(exc).split(chr(10))[0][:200]}"
    return f"Redis error ({type(exc).__name__})"


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class RedisSubscription:
    """A local subscription whose `__aenter__` waits until the channel is subscribed."""

    def __init__(self, bus: RedisBus, inner: Any) -> None:
        self._bus = bus
        self._inner = inner

    def __aiter__(self) -> RedisSubscription:
        return self

    async def __anext__(self) -> Event:
        event: Event = await self._inner.__anext__()
        return event

    async def __aenter__(self) -> RedisSubscription:
        await self._bus.wait_subscribed()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._inner.close()


class RedisBus:
    """Publish/subscribe of change events across instances through one Redis channel."""

    def __init__(self, url: str, *, channel: str = "nimblemcp:events", ready_timeout: float = 5.0) -> None:
        from nimblemcp._extras import needs_extra

        with needs_extra("redis", "The Redis bus"):  # fail here, not in the thread
            import redis.asyncio

        self._redis = redis.asyncio
        self.url = url
        self.channel = channel
        self.ready_timeout = ready_timeout
        self._local = InProcessBus()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[Event, None] = {}
        self._wake: asyncio.Event | None = None
        self._connects = 0  # times the channel subscription was confirmed
        self._live = False  # subscribed now (on the bus thread)
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._flushes: list[asyncio.Future[None]] = []  # on the bus loop: wait for _pending to empty
        self._closed = False
        self._stopping = False  # set on the bus thread by `close()`: the loops end

    # -- NotificationBus ----------------------------------------------------------------

    def publish(self, event: Event) -> None:
        loop = self._start()
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # loop closed by close()
                loop.call_soon_threadsafe(self._enqueue, event)

    def subscribe(self, max_queue: int = 256, *, match: Match | None = None) -> RedisSubscription:
        self._start()
        return RedisSubscription(self, self._local.subscribe(max_queue, match=match))

    def publish_local(self, event: Event) -> None:
        """`LocalBus`: to this instance's subscriptions only (not through Redis)."""
        self._local.publish(event)

    def close_all(self) -> None:
        self._local.close_all()

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def connects(self) -> int:
        """How many times the channel subscription has been (re)established."""
        return self._connects

    async def wait_subscribed(self, connects: int = 1, timeout: float | None = None) -> bool:
        """Wait until the channel subscription was established `connects` times in all
        (at most `timeout`, default `ready_timeout`, seconds); True if it was."""
        self._start()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        entry = (connects, loop, waiter)
        with self._lock:
            if self._connects >= connects:
                return True
            self._waiters.append(entry)
        try:
            await asyncio.wait_for(waiter, self.ready_timeout if timeout is None else timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    def _connected(self) -> None:
        """Runs on the bus thread each time the channel subscription is confirmed."""
        with self._lock:
            self._connects += 1
            ready = [(loop, w) for n, loop, w in self._waiters if n <= self._connects]
        for loop, waiter in ready:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_wake, waiter)

    async def flush(self, timeout: float = _CLOSE_FLUSH) -> bool:
        """Wait until every event published before this call has been sent to Redis
        (True), or `timeout` seconds passed (False: Redis is away; they stay queued)."""
        loop = self._loop
        if loop is None:
            return True  # never started: nothing was published
        try:
            sent = asyncio.run_coroutine_threadsafe(self._drained(), loop)
        except RuntimeError:
            return not self._pending  # the thread has stopped
        try:
            await asyncio.wait_for(asyncio.wrap_future(sent), timeout)
            return True
        except TimeoutError:
            logger.warning("redis bus: %d event(s) not sent within %.1fs", len(self._pending), timeout)
            return False

    def close(self, timeout: float = _CLOSE_FLUSH) -> None:
        """End local subscriptions, send what was published before (at most `timeout`
        seconds), then stop the thread (closing both connections). Blocks the caller."""
        self.close_all()
        with self._lock:
            self._closed = True
            thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        _running.discard(self)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the thread is gone
            sent = asyncio.run_coroutine_threadsafe(self._drained(), loop)
            try:
                sent.result(timeout)
            except concurrent.futures.TimeoutError:
                sent.cancel()
                logger.warning("redis bus: closing with %d event(s) unsent", len(self._pending))
            loop.call_soon_threadsafe(self._stop_main)
        thread.join(_JOIN)
        if thread.is_alive():  # a daemon thread: it cannot keep the process alive
            logger.warning("redis bus: the bus thread did not stop within %.0fs", _JOIN)

    def _start(self) -> asyncio.AbstractEventLoop | None:
        if self._loop is not None or self._closed:
            return self._loop
        with self._lock:
            if self._loop is None and not self._closed:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._run, args=(loop,), name="nimblemcp-redis-bus", daemon=True)
                self._loop = loop
                self._thread.start()
                _running.add(self)
        return self._loop

    # -- the bus thread -----------------------------------------------------------------

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        self._main_task = loop.create_task(self._main())
        try:
            loop.run_until_complete(self._main_task)
        except asyncio.CancelledError:
            pass
        finally:
            # What redis-py left running (a connect cut short by the stop): end it
            # here, not with "Task was destroyed but it is pending" at loop close.
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=1.0))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _stop_main(self) -> None:
        # redis-py may turn a cancel that lands inside its connect into another
        # error, which the reader would take for a lost connection and retry
        # forever: `_stopping` tells the loops below to end instead.
        self._stopping = True
        self._main_task.cancel()

    async def _drained(self) -> None:
        """On the bus loop: return once nothing waits to be sent (what was published
        before this coroutine was scheduled has been enqueued by then)."""
        if self._pending:
            waiter = asyncio.get_running_loop().create_future()
            self._flushes.append(waiter)
            await waiter

    def _enqueue(self, event: Event) -> None:
        if event not in self._pending:
            if len(self._pending) >= _MAX_PENDING:
                logger.warning("redis bus: %d events unsent, dropping %r", _MAX_PENDING, event)
                return
            self._pending[event] = None
        if self._wake is not None:
            self._wake.set()

    async def _main(self) -> None:
        self._wake = asyncio.Event()
        if self._pending:
            self._wake.set()
        client = self._redis.Redis.from_url(self.url, **client_options())
        try:
            await asyncio.gather(self._publisher(client), self._reader(client))
        finally:
            await client.aclose()

    async def _publisher(self, client: Any) -> None:
        assert self._wake is not None
        delay = _BACKOFF_MIN
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch = list(itertools.islice(self._pending, _BATCH))
                try:
                    if len(batch) == 1:
                        await client.publish(self.channel, encode(batch[0]))
                    else:  # a burst: one round trip, in order
                        pipe = client.pipeline(transaction=False)
                        for event in batch:
                            pipe.publish(self.channel, encode(event))
                        await pipe.execute()
                except Exception as exc:  # never let the publisher die
                    if self._stopping:
                        return
                    # Keep them pending and retry after a pause; Redis may be restarting.
                    logger.warning("redis bus: publish failed (%s); retrying in %.2fs", describe(exc), delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _BACKOFF_MAX)
                    continue
                for event in batch:
                    self._pending.pop(event, None)
                delay = _BACKOFF_MIN
            flushes, self._flushes = self._flushes, []
            for waiter in flushes:
                _wake(waiter)

    async def _reader(self, client: Any) -> None:
        delay = _BACKOFF_MIN
        while True:
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                while True:
                    message = await pubsub.get_message(timeout=None)
                    events: list[Event] = []
                    while message is not None:
                        if message["type"] == "subscribe":
                            delay = _BACKOFF_MIN
                            self._connected()
                            if self._connects > 1:  # back after a loss: what came meanwhile is gone
                                events.append(Event(GAP))
                            self._live = True
                        elif message["type"] == "message":
                            event = decode(message["data"])
                            if event is None:
                                logger.warning("redis bus: ignoring malformed message %r", message["data"][:100])
                            else:
                                events.append(event)
                        if len(events) >= _BATCH:
                            break
                        message = await pubsub.get_message(timeout=0)  # already buffered, or None
                    self._local.publish_many(events)
            except Exception as exc:  # never let the reader die: Redis errors, a bug
                if self._stopping:
                    return
                logger.warning("redis bus: subscription lost (%s); reconnecting in %.2fs", describe(exc), delay)
                if self._live:  # events from now on may not reach this instance
                    self._live = False
                    self._local.publish(Event(GAP))
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)
