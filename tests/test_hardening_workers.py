"""Issue 12, part A: the worker pool has no head-of-line blocking, retires idle
threads, and never starts a sync tool whose request is gone (warm pools)."""

from __future__ import annotations

import asyncio
import threading
import time

from nimblemcp import Server
from nimblemcp.server import _workers
from nimblemcp.server._workers import Workers

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def test_a_warm_pool_never_queues_a_job_behind_a_blocked_one() -> None:
    pool = Workers(max_workers=4)
    await pool.run(lambda: None)  # warm: one idle worker
    await asyncio.sleep(0.05)
    gate = threading.Event()
    for _ in range(20):
        blocked = pool.run(gate.wait, timeout=30)
        quick = pool.run(lambda: "quick")  # submitted before the idle worker woke up
        assert await asyncio.wait_for(quick, 2) == "quick"
        gate.set()
        assert await blocked is True
        gate.clear()
    assert pool.threads <= 4


async def test_a_full_pool_serves_queued_jobs_in_order_and_keeps_its_accounting() -> None:
    pool = Workers(max_workers=2)
    gate = threading.Event()
    blockers = [pool.run(gate.wait, timeout=30) for _ in range(2)]
    queued = [pool.run(lambda i=i: i) for i in range(5)]
    await asyncio.sleep(0.05)
    assert not any(f.done() for f in queued)
    gate.set()
    assert await asyncio.gather(*queued) == list(range(5))
    await asyncio.gather(*blockers)
    # Afterwards both workers are free again: two blocked jobs do not stall a third.
    gate.clear()
    again = [pool.run(gate.wait, timeout=30) for _ in range(1)]
    assert await asyncio.wait_for(pool.run(lambda: "free"), 2) == "free"
    gate.set()
    await asyncio.gather(*again)
    # The books balance once every worker is back: one idle token per thread, no job
    # owed (the queued jobs above took the pool's lock-free full-pool branch).
    async with asyncio.timeout(5):
        while len(pool.idle) != pool.threads:
            await asyncio.sleep(0.01)
    assert pool.threads == 2 and pool.owed == [] and pool.jobs.empty()


async def test_idle_threads_retire_and_the_pool_restarts() -> None:
    pool = Workers(max_workers=3, idle_timeout=0.1)
    await asyncio.gather(*[pool.run(lambda: time.sleep(0.05)) for _ in range(3)])
    assert pool.threads == 3
    async with asyncio.timeout(5):
        while pool.threads:
            await asyncio.sleep(0.05)
    assert await pool.run(lambda: "back") == "back"


async def test_a_cancelled_job_is_never_started() -> None:
    pool = Workers(max_workers=1)
    gate = threading.Event()
    ran: list[int] = []
    blocked = pool.run(gate.wait, timeout=30)
    await asyncio.sleep(0.02)
    abandoned = pool.run(ran.append, object=1)
    abandoned.cancel()
    gate.set()
    await blocked
    assert await pool.run(lambda: "after") == "after"
    assert ran == [] and pool.skipped == 1


async def test_cancelled_sync_tool_calls_never_run_and_a_quick_tool_is_not_delayed() -> None:
    server = Server("pool")
    gate = threading.Event()
    started: list[int] = []

    @server.tool
    def slow_sync(n: int) -> str:
        started.append(n)
        gate.wait(30)
        return "slow"

    @server.tool
    def quick() -> str:
        return "quick"

    size = _workers._workers.max_workers
    calls = [asyncio.create_task(server.handle(
        {"jsonrpc": "2.0", "id": i, "method": "tools/call",
         "params": {"_meta": META, "name": "slow_sync", "arguments": {"n": i}}}))
        for i in range(size + 20)]
    async with asyncio.timeout(5):
        while len(started) < size:
            await asyncio.sleep(0.01)
    for task in calls:
        task.cancel()  # the clients went away
    await asyncio.gather(*calls, return_exceptions=True)
    gate.set()
    response = await asyncio.wait_for(server.handle(
        {"jsonrpc": "2.0", "id": "q", "method": "tools/call",
         "params": {"_meta": META, "name": "quick", "arguments": {}}}), 5)
    assert response is not None and response["result"]["content"][0]["text"] == "quick"
    await asyncio.sleep(0.1)
    assert len(started) == size  # none of the 20 abandoned calls ever started
