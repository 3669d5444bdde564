"""The worker threads that run sync handlers (server/_workers.py)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from nimblemcp.server._workers import Workers

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")


async def test_results_exceptions_and_context_cross_the_hop() -> None:
    pool = Workers(max_workers=4)
    assert await pool.run(lambda a, b: a + b, a=2, b=3) == 5
    with pytest.raises(ValueError, match="boom"):
        await pool.run(lambda: (_ for _ in ()).throw(ValueError("boom")))

    class Signal(BaseException):
        pass

    def raise_signal() -> None:
        raise Signal()

    with pytest.raises(Signal):  # BaseException (e.g. MRTR's InputRequired) propagates too
        await pool.run(raise_signal)
    var.set("from the request")
    assert await pool.run(var.get) == "from the request"
    assert await pool.run(threading.get_ident) != threading.get_ident()


async def test_many_concurrent_calls_all_complete_on_a_bounded_pool() -> None:
    pool = Workers(max_workers=3)
    results = await asyncio.gather(*[pool.run(lambda i=i: i * 2) for i in range(2000)])
    assert results == [i * 2 for i in range(2000)]
    assert pool.threads <= 3


async def test_a_blocked_worker_gets_a_sibling_for_the_next_job() -> None:
    """A sync tool that blocks must not hold up the next one: the pool spawns."""
    pool = Workers(max_workers=2)
    gate = threading.Event()
    blocked = pool.run(gate.wait, timeout=30)
    await asyncio.sleep(0.05)  # the first worker is now inside gate.wait
    assert await asyncio.wait_for(pool.run(lambda: "next"), 10) == "next"
    assert pool.threads == 2
    gate.set()
    assert await blocked is True


async def test_a_cancelled_waiter_does_not_disturb_the_others() -> None:
    pool = Workers(max_workers=2)
    gate = threading.Event()
    blocked = asyncio.ensure_future(pool.run(gate.wait))
    await asyncio.sleep(0.01)
    blocked.cancel()
    gate.set()
    assert await pool.run(lambda: "after") == "after"
    assert blocked.cancelled()


def test_one_pool_serves_several_event_loops() -> None:
    pool = Workers(max_workers=2)

    async def once(tag: str) -> str:
        return await pool.run(lambda: tag)  # type: ignore[no-any-return]

    assert asyncio.run(once("first")) == "first"
    assert asyncio.run(once("second")) == "second"
