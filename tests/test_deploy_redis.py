"""Redis done properly (issue 13): a store keeps working across a Redis restart (the
stale pooled connection is retried, not surfaced), health checks on pooled connections,
and failures named without the Redis address. Real redis-server on loopback."""

from __future__ import annotations

import pytest
from _redis import RedisServer

from nimblemcp.backends.redis import RedisStore
from nimblemcp.errors import BackendError


@pytest.fixture
def redis(fresh_redis: RedisServer) -> RedisServer:
    return fresh_redis  # each test restarts its own (conftest.py)


async def test_store_survives_a_redis_restart_without_a_failed_operation(redis: RedisServer) -> None:
    store = RedisStore(redis.url, prefix="t:")
    try:
        await store.set("a", b"1", 60)
        assert await store.get("a") == b"1"
        redis.stop()
        redis.start()  # same port, empty (no persistence): the pooled connection is stale
        assert await store.get("a") is None  # no ConnectionError for the first operation
        await store.set("b", b"2", 60)
        assert await store.set_if_absent("c", b"3", 60) is True
        assert await store.set_if_absent("c", b"3", 60) is False
        assert await store.delete("b") is True
    finally:
        await store.close()


async def test_errors_name_the_failure_without_the_address(redis: RedisServer) -> None:
    store = RedisStore(redis.url, prefix="t:")
    try:
        await store.set("handle-secret", b"1", 60)
        redis.stop()
        with pytest.raises(BackendError) as caught:
            await store.get("handle-secret")
        message = str(caught.value)
        assert "GET" in message and "connect" in message.lower()
        assert "127.0.0.1" not in message and str(redis.port) not in message
        assert "handle-secret" not in message  # keys can be capabilities (handles)
    finally:
        await store.close()


async def test_listen_gap_after_a_redis_outage_is_under_a_second(redis: RedisServer) -> None:
    """After a 4 s outage, events flow again within about a second of Redis being back
    (reconnect attempts are capped at 0.5 s apart)."""
    import asyncio
    import time

    from nimblemcp.backends._redis_bus import RedisBus
    from nimblemcp.backends.bus import Event

    bus = RedisBus(redis.url, channel="t:events")
    try:
        async with bus.subscribe(1024) as events:
            bus.publish(Event("tools"))
            assert (await asyncio.wait_for(events.__anext__(), 10)).kind == "tools"
            redis.stop()
            await asyncio.sleep(4.0)
            await asyncio.to_thread(redis.start)
            back = time.monotonic()

            async def first_event() -> None:
                while True:
                    bus.publish(Event("updated", f"x://{time.monotonic()}"))
                    try:
                        await asyncio.wait_for(events.__anext__(), 0.05)
                        return
                    except TimeoutError:
                        continue

            await asyncio.wait_for(first_event(), 10)
            gap = time.monotonic() - back
            assert gap < 1.2, f"events resumed {gap:.2f} s after Redis came back"
    finally:
        bus.close()
