"""The worker threads' scheduling policy (server/_workers.py): idle worker threads
wait for jobs under SCHED_BATCH and switch back to their own policy before any user
code runs. Pinned here with real threads and a real `nimblemcp run` server: an idle
worker of a busy pool (one that found jobs queued) really waits as a batch thread, and
one called a job at a time does not; a handler, a thread it starts and a subprocess
it starts all run under the policy the worker had before (never SCHED_BATCH); a pool
with `batch_wait=False`, or a thread already under another policy, is left alone; and
the pool's guarantees hold with the policy switches in place: a blocked job never
delays another while the pool has room, a burst handed over in one loop pass delivers
every result, idle workers retire, and the stdio shutdown check still sees an idle
worker as idle."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from _deploy import call, launch, stop

from nimblemcp.server._workers import Workers, _calm_policy
from nimblemcp.transports.stdio._stuck import busy_pool_threads


def _can_switch() -> bool:
    """Whether this system lets a thread switch to SCHED_BATCH and back (probed here,
    not through the pool, so that a pool that stopped switching fails instead of
    skipping)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mine = os.sched_getscheduler(0)
        if mine != os.SCHED_OTHER:
            return False
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        os.sched_setscheduler(0, mine, os.sched_param(0))
    except OSError:
        return False
    return True


# Where the OS refuses (or lacks) the switch, the pool leaves policies alone; the
# tests that need the switch are skipped there, the others run everywhere.
CAN_SWITCH = _can_switch()
needs_switch = pytest.mark.skipif(not CAN_SWITCH, reason="no SCHED_BATCH switch on this system")


def _policy(tid: int) -> int:
    return os.sched_getscheduler(tid)


async def _until(check: object, seconds: float = 5.0) -> None:
    assert callable(check)
    async with asyncio.timeout(seconds):
        while not check():
            await asyncio.sleep(0.005)


def _who() -> tuple[int, int]:
    return threading.get_native_id(), os.sched_getscheduler(0)


async def _burst(pool: Workers, n: int = 50) -> set[int]:
    """`n` jobs handed over in one loop pass: the pool's workers find jobs queued."""
    loop = asyncio.get_running_loop()
    seen = await asyncio.gather(*[pool.submit(loop, _who, {}) for _ in range(n)])
    assert {policy for _, policy in seen} == {os.SCHED_OTHER}  # every job under the normal policy
    return {tid for tid, _ in seen}


@needs_switch
async def test_a_worker_of_a_busy_pool_waits_under_sched_batch_and_runs_jobs_under_its_own_policy() -> None:
    pool = Workers(max_workers=1)
    (tid,) = await _burst(pool)
    # Back in its wait: a batch thread now, which a submission wakes without preemption.
    await _until(lambda: _policy(tid) == os.SCHED_BATCH)
    assert await pool.run(_who) == (tid, os.SCHED_OTHER)  # woken from the batch wait, switched back


@needs_switch
async def test_a_worker_called_one_job_at_a_time_keeps_its_policy_while_it_waits() -> None:
    pool = Workers(max_workers=1)
    (tid,) = await _burst(pool, 5)
    await _until(lambda: _policy(tid) == os.SCHED_BATCH)
    for _ in range(5):  # each job alone: the worker found none queued, so no switch
        assert await pool.run(_who) == (tid, os.SCHED_OTHER)
        await asyncio.sleep(0.05)
        assert _policy(tid) == os.SCHED_OTHER
    await _burst(pool)  # busy again: the next wait is a batch one
    await _until(lambda: _policy(tid) == os.SCHED_BATCH)


@needs_switch
async def test_threads_and_subprocesses_a_handler_starts_inherit_the_normal_policy() -> None:
    pool = Workers(max_workers=1)
    (tid,) = await _burst(pool)
    await _until(lambda: _policy(tid) == os.SCHED_BATCH)

    def spawn() -> tuple[int, int, int]:
        seen: list[int] = []
        t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
        t.start()
        t.join(10)
        child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                               capture_output=True, text=True, timeout=30, check=True)
        return os.sched_getscheduler(0), seen[0], int(child.stdout)

    assert await pool.run(spawn) == (os.SCHED_OTHER, os.SCHED_OTHER, os.SCHED_OTHER)


async def test_batch_wait_off_leaves_the_worker_policy_alone() -> None:
    pool = Workers(max_workers=1, batch_wait=False)
    mine = os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else None
    (tid,) = await _burst(pool) if mine is not None else {0}
    await asyncio.sleep(0.1)  # well inside its wait
    if mine is not None:
        assert _policy(tid) == mine
    assert await pool.run(lambda: 41 + 1) == 42


@needs_switch
async def test_a_thread_under_another_policy_keeps_it() -> None:
    # A worker inherits the policy of the thread that starts it; one that is not
    # SCHED_OTHER (the application chose it) is neither switched nor switched back.
    started = threading.Event()
    seen: dict[str, object] = {}

    def loop_thread() -> None:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))

        async def main() -> None:
            pool = Workers(max_workers=1)
            seen["calm"] = _calm_policy()
            tid, during = await pool.run(lambda: (threading.get_native_id(), os.sched_getscheduler(0)))
            seen["during"] = during
            await asyncio.sleep(0.1)
            seen["idle"] = _policy(tid)
            started.set()

        asyncio.run(main())

    t = threading.Thread(target=loop_thread)
    t.start()
    t.join(30)
    assert started.is_set()
    assert seen == {"calm": None, "during": os.SCHED_BATCH, "idle": os.SCHED_BATCH}


async def test_a_blocked_job_never_delays_another_after_the_workers_went_idle() -> None:
    pool = Workers(max_workers=3)
    tids = await asyncio.gather(*[pool.run(lambda: (time.sleep(0.05), threading.get_native_id())[1])
                                  for _ in range(9)])
    assert len(set(tids)) == 3
    if CAN_SWITCH:  # every worker found jobs queued: back in a batch wait
        await _until(lambda: all(_policy(t) == os.SCHED_BATCH for t in set(tids)))
    assert _calm_policy() is not None or not CAN_SWITCH
    gate = threading.Event()
    held = [pool.run(gate.wait, timeout=30) for _ in range(2)]
    # Two workers blocked: the third takes every quick job, each well before the gate opens.
    for i in range(50):
        assert await asyncio.wait_for(pool.run(lambda i=i: i), 5) == i
    assert not any(h.done() for h in held)
    gate.set()
    assert await asyncio.wait_for(asyncio.gather(*held), 10) == [True, True]


async def test_a_burst_submitted_in_one_loop_pass_delivers_every_result() -> None:
    pool = Workers(max_workers=4)
    loop = asyncio.get_running_loop()
    for round_ in range(5):
        # No await between submissions: one pass hands all of them over.
        futures = [pool.submit(loop, lambda i: i * i, {"i": i}) for i in range(500)]
        assert await asyncio.wait_for(asyncio.gather(*futures), 20) == [i * i for i in range(500)]
        await asyncio.sleep(0.05 * round_)  # some rounds start from idle (batch-waiting) workers
    async with asyncio.timeout(5):
        while not (pool.owed == [] and len(pool.idle) == pool.threads):
            await asyncio.sleep(0.01)


async def test_a_job_cancelled_before_a_waiting_worker_takes_it_is_skipped() -> None:
    pool = Workers(max_workers=1)
    gate = threading.Event()
    ran: list[str] = []
    held = pool.run(gate.wait, timeout=30)
    queued = pool.run(lambda: ran.append("ran"))
    queued.cancel()  # before the only worker is free
    gate.set()
    await held
    assert await pool.run(lambda: "next") == "next"
    assert ran == [] and pool.skipped == 1


async def test_idle_workers_retire_from_their_batch_wait() -> None:
    pool = Workers(max_workers=3, idle_timeout=0.1)
    assert await asyncio.gather(*[pool.run(lambda i=i: i) for i in range(30)]) == list(range(30))
    await _until(lambda: pool.threads == 0)
    assert pool.idle == []
    assert await pool.run(lambda: "again") == "again"  # a new worker starts on demand


async def test_the_shutdown_check_sees_a_batch_waiting_worker_as_idle() -> None:
    pool = Workers(max_workers=1)
    (tid,) = await _burst(pool) if CAN_SWITCH else {await pool.run(threading.get_native_id)}
    if CAN_SWITCH:
        await _until(lambda: _policy(tid) == os.SCHED_BATCH)
    names = {t.native_id: t.name for t in threading.enumerate()}
    assert names[tid] == "nimblemcp-worker"
    ident = next(t.ident for t in threading.enumerate() if t.native_id == tid)
    assert ident is not None
    frames = sys._current_frames()
    assert frames[ident].f_code.co_name == "_work"  # waiting in its loop, not in a helper
    busy_before = busy_pool_threads()
    gate = threading.Event()
    job = pool.run(gate.wait, timeout=30)
    await asyncio.sleep(0.1)
    assert busy_pool_threads().count("nimblemcp-worker") == busy_before.count("nimblemcp-worker") + 1
    gate.set()
    await job


SERVER = '''
import os
import subprocess
import sys
import threading

import nimblemcp as m

server = m.Server("hop6")


@server.tool
def policies() -> str:
    seen = []
    t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
    t.start()
    t.join(10)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                           capture_output=True, text=True, timeout=30, check=True)
    return f"{os.sched_getscheduler(0)} {seen[0]} {int(child.stdout)}"


@server.tool(run_in_thread=False)
def loop_policy() -> str:
    return str(os.sched_getscheduler(0))


@server.tool
def echo(text: str) -> str:
    return text
'''


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="no sched_getscheduler")
async def test_a_served_sync_tool_runs_under_the_servers_own_policy(tmp_path: Path) -> None:
    src = tmp_path / "hop6_server.py"
    src.write_text(SERVER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = launch(src, port, tmp_path / "server.log", "--log-level", "warning")
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            loop_policy = (await call(c, url, "loop_policy")).json()["result"]["content"][0]["text"]
            for _ in range(3):  # each after the workers went back to their wait
                answers = await asyncio.gather(*[call(c, url, "echo", {"text": f"t{i}"}) for i in range(40)])
                assert [json.loads(a.text)["result"]["content"][0]["text"] for a in answers] == \
                    [f"t{i}" for i in range(40)]
                await asyncio.sleep(0.2)
                got = (await call(c, url, "policies")).json()["result"]["content"][0]["text"]
                assert got == " ".join([loop_policy] * 3)
    finally:
        assert stop(proc) == 0


@pytest.mark.parametrize("fails_on", ["to batch", "back"])
async def test_a_refused_switch_loses_no_job_and_stops_switching(
        monkeypatch: pytest.MonkeyPatch, fails_on: str) -> None:
    # The system refusing a switch after the probe passed (a seccomp filter installed
    # later, say): cannot be made to happen for real as root, so the switch raises here.
    calls: list[int] = []

    def refusing(_tid: int, policy: int, _param: object) -> None:
        calls.append(policy)
        if (policy == BATCH) == (fails_on == "to batch"):
            raise PermissionError("refused")

    BATCH = getattr(os, "SCHED_BATCH", 3)
    monkeypatch.setattr("nimblemcp.server._workers._calm_policy", lambda: (refusing, 0, None))
    pool = Workers(max_workers=1)
    for _ in range(3):  # busy, sleep, busy, sleep...: at most one refused attempt
        loop = asyncio.get_running_loop()
        got = await asyncio.wait_for(asyncio.gather(*[pool.submit(loop, lambda i: i, {"i": i})
                                                      for i in range(20)]), 10)
        assert got == list(range(20))
        await asyncio.sleep(0.05)
    assert calls in ([BATCH], [BATCH, 0])  # refused once, never tried again
    assert pool.threads == 1 and len(pool.idle) == 1 and pool.owed == []
