"""One contract suite for every backend: each `KeyValueStore` (memory, Redis) and each
`NotificationBus` (in-process, Redis) must pass the same tests, against a real
`redis-server` (tests/_redis.py; missing redis-server fails, it never skips).
Redis-only behaviour (several instances, restarts, prefixes) follows the shared part.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from _redis import RedisServer

from nimblemcp.backends import KeyValueStore, MemoryStore, from_env, from_url
from nimblemcp.backends.bus import Event, InProcessBus, NotificationBus, SlowListener
from nimblemcp.backends.redis import RedisBus, RedisStore

HANG_GUARD = 30.0  # only so a broken backend fails instead of hanging the run


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest, redis_server: RedisServer) -> AsyncIterator[KeyValueStore]:
    s: KeyValueStore
    if request.param == "memory":
        s = MemoryStore()
    else:
        s = RedisStore(redis_server.url, prefix=f"t-{uuid.uuid4().hex}:")
    yield s
    await s.close()


@pytest.fixture(params=["inprocess", "redis"])
def bus(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[NotificationBus]:
    if request.param == "inprocess":
        yield InProcessBus()
        return
    b = RedisBus(redis_server.url, channel=f"t-{uuid.uuid4().hex}")
    yield b
    b.close()


async def next_event(sub: Any) -> Event:
    event: Event = await asyncio.wait_for(sub.__anext__(), HANG_GUARD)
    return event


# -- KeyValueStore ---------------------------------------------------------------------


async def test_store_is_a_key_value_store(store: KeyValueStore) -> None:
    assert isinstance(store, KeyValueStore)


async def test_store_set_get_overwrite_bytes(store: KeyValueStore) -> None:
    assert await store.get("k") is None
    raw = bytes(range(256))  # not UTF-8: values are bytes, kept exactly
    await store.set("k", raw, 60)
    assert await store.get("k") == raw
    await store.set("k", b"second", 60)
    assert await store.get("k") == b"second"
    assert await store.get("other") is None


async def test_store_set_if_absent_only_first_wins(store: KeyValueStore) -> None:
    assert await store.set_if_absent("once", b"a", 60) is True
    assert await store.set_if_absent("once", b"b", 60) is False
    assert await store.get("once") == b"a"
    await store.set("plain", b"x", 60)
    assert await store.set_if_absent("plain", b"y", 60) is False


async def test_store_set_if_absent_is_atomic_under_concurrency(store: KeyValueStore) -> None:
    results = await asyncio.gather(*(store.set_if_absent("race", str(i).encode(), 60) for i in range(25)))
    assert results.count(True) == 1
    winner = results.index(True)
    assert await store.get("race") == str(winner).encode()


async def test_store_delete(store: KeyValueStore) -> None:
    await store.set("d", b"1", 60)
    assert await store.delete("d") is True
    assert await store.get("d") is None
    assert await store.delete("d") is False
    assert await store.set_if_absent("d", b"2", 60) is True


async def test_store_expired_keys_are_absent(store: KeyValueStore) -> None:
    await store.set("short", b"1", 0.05)
    assert await store.set_if_absent("short-nx", b"1", 0.05) is True
    await store.set("long", b"2", 60)
    await asyncio.sleep(0.3)  # well past the 50 ms TTL
    assert await store.get("short") is None
    assert await store.get("long") == b"2"
    assert await store.set_if_absent("short-nx", b"again", 60) is True
    assert await store.get("short-nx") == b"again"


async def test_store_non_positive_ttl_is_expired_at_once(store: KeyValueStore) -> None:
    await store.set("zero", b"1", 60)
    await store.set("zero", b"2", 0)
    assert await store.get("zero") is None


# -- NotificationBus -------------------------------------------------------------------


async def test_bus_delivers_in_order_exactly_once(bus: NotificationBus) -> None:
    async with bus.subscribe() as sub:
        sent = [Event("tools"), Event("updated", "file:///a"), Event("prompts")]
        for e in sent:
            bus.publish(e)
        assert [await next_event(sub) for _ in sent] == sent
        bus.publish(Event("resources"))  # the marker: nothing was delivered twice
        assert await next_event(sub) == Event("resources")


async def test_bus_publish_from_another_thread(bus: NotificationBus) -> None:
    async with bus.subscribe() as sub:
        t = threading.Thread(target=bus.publish, args=(Event("updated", "mem://thread"),))
        t.start()
        t.join()
        assert await next_event(sub) == Event("updated", "mem://thread")


async def test_bus_fans_out_to_every_subscriber(bus: NotificationBus) -> None:
    async with bus.subscribe() as one, bus.subscribe() as two:
        bus.publish(Event("tools"))
        assert await next_event(one) == Event("tools")
        assert await next_event(two) == Event("tools")


async def test_bus_closed_subscription_stops_receiving(bus: NotificationBus) -> None:
    async with bus.subscribe() as keep:
        gone = bus.subscribe()
        async with gone:
            pass  # leaving the block unregisters it
        bus.publish(Event("tools"))
        assert await next_event(keep) == Event("tools")
        local: Any = bus._local if isinstance(bus, RedisBus) else bus
        assert len(local) == 1


async def test_bus_slow_listener_is_dropped(bus: NotificationBus) -> None:
    async with bus.subscribe(max_queue=2) as slow, bus.subscribe(max_queue=100) as fast:
        for i in range(10):
            bus.publish(Event("updated", f"mem://{i}"))
        for i in range(10):  # the fast one saw all; the slow one's queue overflowed by now
            assert await next_event(fast) == Event("updated", f"mem://{i}")
        with pytest.raises(SlowListener):
            await next_event(slow)


async def test_bus_close_all_ends_iteration(bus: NotificationBus) -> None:
    async with bus.subscribe() as sub:
        bus.publish(Event("tools"))
        assert await next_event(sub) == Event("tools")

        async def drain() -> list[Event]:
            return [e async for e in sub]

        task = asyncio.create_task(drain())
        await asyncio.sleep(0)
        bus.close_all()
        assert await asyncio.wait_for(task, HANG_GUARD) == []


# -- Redis only: several instances, restarts, namespacing -------------------------------


async def test_redis_two_instances_hear_each_other_once(redis_server: RedisServer) -> None:
    channel = f"t-{uuid.uuid4().hex}"
    a, b = RedisBus(redis_server.url, channel=channel), RedisBus(redis_server.url, channel=channel)
    try:
        async with a.subscribe() as on_a, b.subscribe() as on_b:
            a.publish(Event("tools"))
            b.publish(Event("updated", "file:///x"))
            for sub in (on_a, on_b):
                got = {await next_event(sub), await next_event(sub)}
                assert got == {Event("tools"), Event("updated", "file:///x")}
            b.publish(Event("prompts"))  # marker: no duplicates before it
            assert await next_event(on_a) == Event("prompts")
            assert await next_event(on_b) == Event("prompts")
    finally:
        a.close()
        b.close()


async def test_redis_channels_are_isolated(redis_server: RedisServer) -> None:
    a, b = RedisBus(redis_server.url, channel="iso-a"), RedisBus(redis_server.url, channel="iso-b")
    try:
        async with a.subscribe() as on_a, b.subscribe() as on_b:
            b.publish(Event("prompts"))
            a.publish(Event("tools"))
            assert await next_event(on_a) == Event("tools")
            assert await next_event(on_b) == Event("prompts")
    finally:
        a.close()
        b.close()


async def test_redis_bus_ignores_malformed_messages(redis_server: RedisServer) -> None:
    import redis.asyncio

    bus = RedisBus(redis_server.url, channel=f"t-{uuid.uuid4().hex}")
    raw = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        async with bus.subscribe() as sub:
            for junk in (b"not json", b"[1]", b'{"k": 5}', b'{"u": "x"}'):
                await raw.publish(bus.channel, junk)
            bus.publish(Event("tools"))
            assert await next_event(sub) == Event("tools")
    finally:
        await raw.aclose()
        bus.close()


async def test_redis_bus_survives_a_redis_restart() -> None:
    server = RedisServer()
    server.start()
    bus = RedisBus(server.url, channel="restart")
    try:
        async with bus.subscribe() as sub:
            bus.publish(Event("tools"))
            assert await next_event(sub) == Event("tools")
            server.stop()
            server.start()  # same port, empty Redis
            assert await bus.wait_subscribed(2, timeout=HANG_GUARD)
            bus.publish(Event("updated", "file:///after"))
            # The listener was told nothing and keeps receiving.
            assert await next_event(sub) == Event("updated", "file:///after")
    finally:
        bus.close()
        server.close()


async def test_redis_store_set_if_absent_across_instances(redis_server: RedisServer) -> None:
    prefix = f"t-{uuid.uuid4().hex}:"
    stores = [RedisStore(redis_server.url, prefix=prefix) for _ in range(4)]
    try:
        results = await asyncio.gather(*(s.set_if_absent("guard", b"1", 60) for s in stores for _ in range(5)))
        assert results.count(True) == 1
        assert all([await s.get("guard") == b"1" for s in stores])
    finally:
        for s in stores:
            await s.close()


async def test_redis_store_prefix_and_px_ttl(redis_server: RedisServer) -> None:
    import redis.asyncio

    raw = redis.asyncio.Redis.from_url(redis_server.url)
    one, two = RedisStore(raw, prefix="p1:"), RedisStore(raw, prefix="p2:")
    await one.set("k", b"v", 2.5)
    assert await two.get("k") is None
    assert 0 < await raw.pttl("p1:k") <= 2500
    await one.close()  # a passed-in client stays the caller's: still usable
    assert await raw.get("p1:k") == b"v"
    await raw.delete("p1:k")
    await raw.aclose()


def test_from_url_chooses_backends(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    store, bus = from_url("memory://")
    assert isinstance(store, MemoryStore) and isinstance(bus, InProcessBus)
    store, bus = from_url(redis_server.url, prefix="app1:")
    assert isinstance(store, RedisStore) and isinstance(bus, RedisBus)
    assert (store.prefix, bus.channel) == ("app1:", "app1:events")
    with pytest.raises(ValueError):
        from_url("postgres://x")
    monkeypatch.delenv("NIMBLEMCP_REDIS_URL", raising=False)
    assert from_env() is None
    monkeypatch.setenv("NIMBLEMCP_REDIS_URL", redis_server.url)
    chosen = from_env()
    assert chosen is not None and isinstance(chosen[0], RedisStore)


def test_redis_is_not_imported_unless_chosen() -> None:
    code = ("import sys, nimblemcp, nimblemcp.backends as b; b.from_url('memory://'); "
            "import nimblemcp.server; print('redis' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_redis_bus_started_before_redis_catches_up() -> None:
    server = RedisServer()  # port chosen, nothing listening yet
    bus = RedisBus(server.url, channel="late", ready_timeout=0.1)
    try:
        bus.publish(Event("tools"))  # Redis unreachable: kept, not raised, not blocking
        async with bus.subscribe() as sub:  # gives up waiting after ready_timeout
            assert bus.connects == 0
            server.start()
            assert await bus.wait_subscribed(1, timeout=HANG_GUARD)
            bus.publish(Event("updated", "file:///late"))
            got = await next_event(sub)
            if got == Event("tools"):  # the early event went out once Redis came up
                got = await next_event(sub)
            assert got == Event("updated", "file:///late")
    finally:
        bus.close()
        server.close()


async def test_redis_store_failures_are_backend_errors() -> None:
    """Issue 11: a Redis failure is translated at the boundary (BackendError, cause chained)."""
    import socket

    import redis.exceptions

    from nimblemcp.errors import BackendError, McpError

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0")
    try:
        for attempt in (store.get("k"), store.set("k", b"v", 5), store.set_if_absent("k", b"v", 5),
                        store.delete("k")):
            with pytest.raises(BackendError) as caught:
                await asyncio.wait_for(attempt, HANG_GUARD)
            assert isinstance(caught.value, McpError)
            assert isinstance(caught.value.__cause__, redis.exceptions.RedisError)
    finally:
        await store.close()
