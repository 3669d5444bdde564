"""Listen fan-out (issue 13): subscriptions indexed by `Match`, one hand-over per event
loop, bursts through Redis. Each test runs on the in-process bus and on `RedisBus`
against a real `redis-server` (tests/_redis.py), like the contract suite.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from _redis import RedisServer

from nimblemcp.backends._redis_bus import RedisSubscription
from nimblemcp.backends.bus import Event, InProcessBus, Match, NotificationBus, SlowListener
from nimblemcp.backends.redis import RedisBus
from nimblemcp.server._subscriptions import _covers

HANG_GUARD = 30.0  # only so a broken bus fails instead of hanging the run


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


def queued(sub: Any) -> int:
    """Events waiting in a subscription (white-box: the local queue under it)."""
    local = sub._inner if isinstance(sub, RedisSubscription) else sub
    return len(local._queue)


async def settle(bus: NotificationBus) -> None:
    """Let a published event reach the subscriptions (through Redis: a marker round trip)."""
    if isinstance(bus, RedisBus):
        async with bus.subscribe(match=Match(kinds=("marker",))) as marker:
            bus.publish(Event("marker", uuid.uuid4().hex))
            await next_event(marker)
    for _ in range(5):
        await asyncio.sleep(0)


async def test_listener_for_uri_a_is_not_woken_by_uri_b(bus: NotificationBus) -> None:
    async with bus.subscribe(match=Match(uris=["file:///a"])) as sub:
        waiting = asyncio.ensure_future(next_event(sub))
        await asyncio.sleep(0)
        bus.publish(Event("updated", "file:///b"))
        bus.publish(Event("tools"))
        bus.publish(Event("task", "file:///a"))  # same string, other kind
        await settle(bus)
        assert not waiting.done()  # not woken at all
        bus.publish(Event("updated", "file:///a"))
        assert await asyncio.wait_for(waiting, HANG_GUARD) == Event("updated", "file:///a")


async def test_uri_index_agrees_with_the_listen_filter(bus: NotificationBus) -> None:
    """SUB-11: an update reaches a listener for its URI or any URI above it, and no other."""
    subscribed = ["file:///dir", "file:///dir/", "file:///", "file:", "mem://x/y//", "a", "", "q://h/p?x=1"]
    published = ["file:///dir", "file:///dir/", "file:///dir/f", "file:///directory/f", "file:///d",
                 "file:///", "file:/", "mem://x/y", "mem://x/y/z", "mem://x/y//z", "a/b", "ab", "/x",
                 "q://h/p?x=1/2", "q://h/p", "zz"]
    subs = [bus.subscribe(match=Match(uris=[u])) for u in subscribed]
    for sub in subs:
        await sub.__aenter__()
    try:
        for uri in published:
            bus.publish(Event("updated", uri))
        await settle(bus)
        for s, sub in zip(subscribed, subs, strict=True):
            want = [u for u in published if _covers([s], u)]
            got = [(await next_event(sub)).uri for _ in want]
            assert got == want, s
            assert queued(sub) == 0, s  # nothing else came
    finally:
        for sub in subs:
            sub.close()


async def test_kinds_tasks_and_everything(bus: NotificationBus) -> None:
    async with (
        bus.subscribe(match=Match(kinds=["tools"])) as tools,
        bus.subscribe(match=Match(tasks=["t1"])) as task,
        bus.subscribe(match=Match()) as nothing,
        bus.subscribe() as every,
    ):
        sent = [Event("prompts"), Event("task", "t2"), Event("tools"), Event("task", "t1"),
                Event("updated", "x://1"), Event("resources")]
        for e in sent:
            bus.publish(e)
        assert await next_event(tools) == Event("tools")
        assert await next_event(task) == Event("task", "t1")
        assert [await next_event(every) for _ in sent] == sent
        waiting = asyncio.ensure_future(next_event(nothing))
        await settle(bus)
        assert not waiting.done()
        waiting.cancel()
        bus.publish(Event("tools"))  # a marker: nothing else was queued before it
        assert await next_event(tools) == Event("tools")


async def test_overlapping_filters_deliver_once(bus: NotificationBus) -> None:
    match = Match(kinds=["updated"], uris=["m://a", "m://a/b", "m://a/b/c"])
    async with bus.subscribe(match=match) as sub:
        bus.publish(Event("updated", "m://a/b/c"))
        bus.publish(Event("tools"))  # not asked for
        bus.publish(Event("updated", "m://z"))  # every "updated", by kind
        assert await next_event(sub) == Event("updated", "m://a/b/c")
        assert await next_event(sub) == Event("updated", "m://z")


async def test_many_listeners_on_one_loop_each_get_each_event_once_in_order(bus: NotificationBus) -> None:
    n_subs, n_events = 200, 300
    subs = [bus.subscribe(n_events + 10, match=Match(uris=[f"m://t/{i % 4}"])) for i in range(n_subs)]
    for sub in subs:
        await sub.__aenter__()
    try:
        events = [Event("updated", f"m://t/{i % 4}/{i}") for i in range(n_events)]

        def burst() -> None:  # from another thread: handed over to this loop
            for e in events:
                bus.publish(e)
            bus.publish(Event("updated", "m://END"))

        t = threading.Thread(target=burst)
        t.start()
        t.join()
        for i, sub in enumerate(subs):
            want = [e for e in events if e.uri and e.uri.startswith(f"m://t/{i % 4}/")]
            got = [await next_event(sub) for _ in want]
            assert got == want
            waiting = asyncio.ensure_future(next_event(sub))
            await asyncio.sleep(0)
            assert not waiting.done()  # nothing twice, nothing else
            waiting.cancel()
    finally:
        for sub in subs:
            sub.close()
    await settle(bus)
    local: Any = bus._local if isinstance(bus, RedisBus) else bus
    assert len(local) == 0


async def test_listeners_on_two_loops_both_hear(bus: NotificationBus) -> None:
    """A subscription on another thread's event loop gets events from this one."""
    got: list[Event] = []
    ready = threading.Event()
    done = threading.Event()

    async def other() -> None:
        async with bus.subscribe(match=Match(uris=["o://x"])) as sub:
            ready.set()
            got.append(await next_event(sub))
            got.append(await next_event(sub))
        done.set()

    t = threading.Thread(target=asyncio.run, args=(other(),))
    t.start()
    assert await asyncio.to_thread(ready.wait, HANG_GUARD)
    async with bus.subscribe(match=Match(uris=["o://x"])) as here:
        bus.publish(Event("updated", "o://y"))
        bus.publish(Event("updated", "o://x/1"))
        bus.publish(Event("updated", "o://x/2"))
        assert await next_event(here) == Event("updated", "o://x/1")
        assert await next_event(here) == Event("updated", "o://x/2")
    assert await asyncio.to_thread(done.wait, HANG_GUARD)
    t.join()
    assert got == [Event("updated", "o://x/1"), Event("updated", "o://x/2")]


async def test_close_from_another_thread_unregisters() -> None:
    bus = InProcessBus()
    sub = bus.subscribe(match=Match(kinds=["tools"]))
    t = threading.Thread(target=sub.close)
    t.start()
    t.join()
    await asyncio.sleep(0)
    assert len(bus) == 0
    bus.publish(Event("tools"))  # nobody left: fine


async def test_overflow_counts_matching_events_only(bus: NotificationBus) -> None:
    """The bounded queue holds what the listener asked for; falling behind on those
    still ends it with SlowListener."""
    # `seen` hears the same events with room to spare: once it has the fifth "more",
    # the delivery that brought it has reached `sub` too (one fan-out step serves every
    # listener). Without that barrier a Redis bus could hand the five over in small
    # batches that the reads below drain as they come, so `sub` never fell behind.
    async with bus.subscribe(max_queue=3, match=Match(uris=["s://a"])) as sub, \
            bus.subscribe(max_queue=100, match=Match(uris=["s://a"])) as seen:
        for i in range(50):
            bus.publish(Event("updated", f"s://other/{i}"))
        for i in range(3):
            bus.publish(Event("updated", f"s://a/{i}"))
        for i in range(3):
            assert await next_event(sub) == Event("updated", f"s://a/{i}")
            assert await next_event(seen) == Event("updated", f"s://a/{i}")
        for i in range(5):
            bus.publish(Event("updated", f"s://a/more/{i}"))
        for i in range(5):
            assert await next_event(seen) == Event("updated", f"s://a/more/{i}")
        with pytest.raises(SlowListener):
            for _ in range(5):
                await next_event(sub)


async def test_redis_burst_arrives_complete_and_in_order(redis_server: RedisServer) -> None:
    """A burst from one instance (pipelined PUBLISH) reaches another instance whole, in order."""
    channel = f"t-{uuid.uuid4().hex}"
    a, b = RedisBus(redis_server.url, channel=channel), RedisBus(redis_server.url, channel=channel)
    try:
        n = 3000
        async with b.subscribe(n + 10, match=Match(uris=["b://t"])) as on_b, \
                a.subscribe(n + 10, match=Match(uris=["b://t"])) as on_a:
            sent = [Event("updated", f"b://t/{i}") for i in range(n)]

            def burst() -> None:
                for e in sent:
                    a.publish(e)

            t = threading.Thread(target=burst)
            t.start()
            t.join()
            assert [await next_event(on_b) for _ in sent] == sent
            assert [await next_event(on_a) for _ in sent] == sent
            a.publish(Event("updated", "b://t/last"))  # a marker: nothing twice before it
            assert await next_event(on_b) == Event("updated", "b://t/last")
        async with b.subscribe(match=Match(uris=["b://t"])) as again:
            a.publish(Event("updated", "b://t/alone2"))
            assert await next_event(again) == Event("updated", "b://t/alone2")  # a lone one after a burst
    finally:
        a.close()
        b.close()
