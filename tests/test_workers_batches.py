"""The worker threads of sync handlers (server/_workers.py): what the pool must do. Results of one batch all reach their requests even when one of
them was cancelled while it ran or raised StopIteration; two event loops sharing the
pool never see each other's results; the token accounting settles; context variables
cross as `asyncio.to_thread` copies them; the stdio shutdown check still tells a busy
worker from an idle one; and a real `nimblemcp run` server keeps answering quick sync
calls while sync calls block."""

from __future__ import annotations

import asyncio
import contextvars
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from _deploy import call, launch, stop

from nimblemcp.server._workers import Workers
from nimblemcp.transports.stdio._stuck import busy_pool_threads

var: contextvars.ContextVar[str] = contextvars.ContextVar("hop_var", default="unset")


class LoopErrors:
    """Collects what reaches the running loop's exception handler."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: self.seen.append(context))


async def test_a_job_cancelled_while_it_runs_does_not_hold_back_the_batch() -> None:
    errors = LoopErrors()
    pool = Workers(max_workers=4)
    gate = threading.Event()
    started = threading.Event()

    def blocker() -> str:
        started.set()
        gate.wait(30)
        return "late"

    running = pool.run(blocker)
    assert await asyncio.to_thread(started.wait, 5)
    running.cancel()  # its request went away while the call ran
    quick = [pool.run(lambda i=i: i) for i in range(200)]
    gate.set()  # the cancelled job's result lands in a batch with quick ones
    assert await asyncio.wait_for(asyncio.gather(*quick), 10) == list(range(200))
    more = [pool.run(lambda i=i: -i) for i in range(50)]
    assert await asyncio.wait_for(asyncio.gather(*more), 10) == [-i for i in range(50)]
    assert running.cancelled()
    assert errors.seen == []


async def test_stop_iteration_becomes_a_runtime_error_and_the_batch_still_arrives() -> None:
    errors = LoopErrors()
    pool = Workers(max_workers=2)
    gate = threading.Event()

    def stop_after_gate() -> None:
        gate.wait(30)
        raise StopIteration("from a sync handler")

    def value_after_gate(i: int) -> int:
        gate.wait(30)
        return i

    # Queued together, finished together: one drain hands all of them back.
    jobs = [pool.run(stop_after_gate), *[pool.run(value_after_gate, i=i) for i in range(20)]]
    await asyncio.sleep(0.05)
    gate.set()
    results = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), 10)
    failed = results[0]
    assert isinstance(failed, RuntimeError) and "StopIteration" in str(failed)
    assert isinstance(failed.__cause__, StopIteration)
    assert results[1:] == list(range(20))
    assert errors.seen == []


def test_two_loops_in_two_threads_each_get_their_own_results() -> None:
    pool = Workers(max_workers=4)
    outcome: dict[str, Any] = {}

    def serve(name: str) -> None:
        async def main() -> list[tuple[str, int]]:
            loop = asyncio.get_running_loop()
            got: list[tuple[str, int]] = []
            for round_ in range(200):
                futures = [pool.submit(loop, lambda i: (name, i), {"i": round_ * 10 + k}) for k in range(10)]
                for f in futures:
                    assert f.get_loop() is loop
                got.extend(await asyncio.wait_for(asyncio.gather(*futures), 10))
            return got

        try:
            outcome[name] = asyncio.run(main())
        except BaseException as exc:  # reported below, in the test's thread
            outcome[name] = exc

    threads = [threading.Thread(target=serve, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for name in ("a", "b"):
        assert outcome[name] == [(name, i) for i in range(2000)], outcome[name]


async def test_the_token_accounting_settles_after_bursts_on_a_full_pool() -> None:
    pool = Workers(max_workers=3)
    gate = threading.Event()
    for _ in range(5):
        gate.clear()
        blocked = [pool.run(gate.wait, timeout=30) for _ in range(2)]
        burst = [pool.run(lambda i=i: i) for i in range(300)]
        assert await asyncio.wait_for(asyncio.gather(*burst), 10) == list(range(300))
        gate.set()
        await asyncio.gather(*blocked)
    async with asyncio.timeout(5):  # every worker back in `get`, each holding its token
        while not (pool.owed == [] and len(pool.idle) == pool.threads == 3):
            await asyncio.sleep(0.01)
    # And the settled pool still reserves a free worker per job: one blocked, one quick.
    gate.clear()
    held = pool.run(gate.wait, timeout=30)
    assert await asyncio.wait_for(pool.run(lambda: "free"), 2) == "free"
    gate.set()
    await held


async def test_context_variables_are_copied_per_call_as_to_thread_does() -> None:
    pool = Workers(max_workers=1)  # one worker: both calls run on the same thread

    def read_then_set(value: str) -> str:
        seen = var.get()
        var.set(value)
        return seen

    var.set("request one")
    assert await pool.run(read_then_set, value="set in the worker") == "request one"
    assert var.get() == "request one"  # the worker's change stays in its copy
    assert await pool.run(var.get) == "request one"  # not in the next call's either
    ctx = contextvars.copy_context()
    ctx.run(var.set, "request two")
    assert await ctx.run(pool.run, var.get) == "request two"
    assert await asyncio.to_thread(var.get) == "request one"  # the reference behaviour


async def test_the_shutdown_check_tells_a_busy_worker_from_an_idle_one() -> None:
    pool = Workers(max_workers=2)
    await pool.run(lambda: None)  # one idle worker, waiting in its loop
    await asyncio.sleep(0.05)
    before = busy_pool_threads().count("nimblemcp-worker")  # other tests' pools may be busy
    gate = threading.Event()
    started = threading.Event()

    def held() -> None:
        started.set()
        gate.wait(30)

    job = pool.run(held)
    assert await asyncio.to_thread(started.wait, 5)
    assert busy_pool_threads().count("nimblemcp-worker") == before + 1
    gate.set()
    await job
    await asyncio.sleep(0.05)
    assert busy_pool_threads().count("nimblemcp-worker") == before


SERVER = '''
import threading

import nimblemcp as m

server = m.Server("hop")
gate = threading.Event()


@server.tool
def hold(seconds: float) -> str:
    gate.wait(seconds)
    return "held"


@server.tool(run_in_thread=False)
def release() -> str:
    gate.set()
    return "released"


@server.tool
def echo(text: str) -> str:
    return text


@server.tool
def stop() -> str:
    raise StopIteration("inside a tool")
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_served_sync_tool_keeps_answering_while_other_calls_block(tmp_path: Path) -> None:
    src = tmp_path / "hop_server.py"
    src.write_text(SERVER)
    port = _free_port()
    proc = launch(src, port, tmp_path / "server.log", "--log-level", "warning")
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=30, limits=limits) as c:
            holders = [asyncio.create_task(call(c, url, "hold", {"seconds": 25})) for _ in range(2)]
            await asyncio.sleep(0.3)  # both hold a worker thread now
            t0 = time.monotonic()
            answers = await asyncio.gather(*[call(c, url, "echo", {"text": f"t{i}"}) for i in range(300)])
            assert [a.json()["result"]["content"][0]["text"] for a in answers] == [f"t{i}" for i in range(300)]
            assert time.monotonic() - t0 < 20  # not queued behind the held calls
            assert not any(h.done() for h in holders)
            mixed = await asyncio.gather(call(c, url, "stop"), *[call(c, url, "echo", {"text": "x"})
                                                                for _ in range(20)])
            failed = mixed[0].json()["result"]
            assert failed["isError"] is True
            assert all(m.json()["result"]["content"][0]["text"] == "x" for m in mixed[1:])
            assert (await call(c, url, "release")).json()["result"]["content"][0]["text"] == "released"
            for h in holders:
                assert (await asyncio.wait_for(h, 10)).json()["result"]["content"][0]["text"] == "held"
    finally:
        assert stop(proc) == 0


async def test_the_pool_answers_what_asyncio_to_thread_answers() -> None:
    """The policy's survivor (issue 32, point 3): for the same calls, the worker pool gives
    what `asyncio.to_thread` gives: results, exceptions (their type and message), keyword
    calls, context variables, and calls from many tasks at once in their own order."""
    pool = Workers(max_workers=4)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")

    def job(i: int, fail: bool = False) -> tuple[int, str, str]:
        if fail:
            raise ValueError(f"job {i} failed")
        where = "main" if threading.current_thread() is threading.main_thread() else "worker"
        return i * i, var.get(), where

    async def both(i: int, fail: bool) -> tuple[object, object]:
        var.set(f"task {i}")
        answers: list[object] = []
        for run in (lambda: pool.run(job, i=i, fail=fail), lambda: asyncio.to_thread(job, i=i, fail=fail)):
            try:
                answers.append(await run())
            except ValueError as exc:
                answers.append((type(exc).__name__, str(exc)))
        return answers[0], answers[1]

    pairs = await asyncio.gather(*(both(i, i % 5 == 0) for i in range(40)))
    for mine, reference in pairs:
        assert mine == reference
    assert sum(isinstance(m, tuple) and m[0] == "ValueError" for m, _ in pairs) == 8
