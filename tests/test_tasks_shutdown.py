"""Running tasks when the server stops (tasks extension; CHECKLIST TASK-05, TASK-06, TASK-10).

A graceful stop (SIGTERM under `nimblemcp run --transport http`) gives running tasks
the drain's grace time (`--shutdown-timeout`) to finish; a task that finishes in time
reports `completed`. Those still running when it ends are marked `failed` at once
(-32603, "shut down"), the change is published, the lease released and the job
cancelled (its `finally` runs), instead of staying `working` until the lease lapses.
A stop without a drain (the lifespan simply ends) fails them at once.

In process: a `Server` on the in-memory store, its lifespan entered and left.
Real processes: two `nimblemcp run` instances sharing one real Redis (a poll and a
listen on B see A's task fail well before its 60 s lease would lapse; a restarted A
reads the same), and one instance on the in-memory store (its lifespan's exit writes
what the records say).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from _deploy import headers, launch, stop
from _redis import RedisServer, free_port
from _task_http import HANG_GUARD, META, Instance, Notes, get_task, rpc, wait_for_file

from nimblemcp import Server
from nimblemcp.backends.bus import Event, Match
from nimblemcp.server._sealing import new_key
from nimblemcp.server._tasks import STOPPED

LEASE = 60.0  # far longer than any wait below: a lapse cannot explain a failed task


# -- in process -----------------------------------------------------------------------


def _server(marks: list[str]) -> Server:
    server = Server("settle")

    @server.tool(task="required")
    async def job(seconds: float, tag: str) -> str:
        marks.append(f"{tag}.started")
        try:
            await asyncio.sleep(seconds)
        finally:
            marks.append(f"{tag}.finally")
        return f"{tag} done"

    return server


async def _start(server: Server, seconds: float, tag: str) -> str:
    call = {"jsonrpc": "2.0", "id": tag, "method": "tools/call",
            "params": {"name": "job", "arguments": {"seconds": seconds, "tag": tag}, "_meta": META}}
    created = await server.handle(call)
    assert created is not None and created["result"]["resultType"] == "task", created
    return str(created["result"]["taskId"])


def _assert_stopped(record: dict[str, Any]) -> None:
    assert record["status"] == "failed", record
    assert record["error"] == {"code": -32603, "message": STOPPED}  # the JSON-RPC error (TASK-05)
    assert record["statusMessage"] == STOPPED and "shut down" in STOPPED
    assert "result" not in record and "inputRequests" not in record


async def test_drain_lets_a_quick_task_finish_and_fails_the_slow_one_at_its_end() -> None:
    marks: list[str] = []
    server = _server(marks)
    async with server.lifespan_context():
        quick = await _start(server, 0.3, "quick")
        slow = await _start(server, 3600, "slow")
        await asyncio.sleep(0.05)
        events = server.bus.subscribe(match=Match(tasks=(slow,)))
        server.drain(1.0)
        began = time.monotonic()
    took = time.monotonic() - began
    async with events:
        assert 0.9 < took < 5, took  # the grace, then at once (not the lease, not the TTL)
        assert (await server.tasks.read(quick, None))["status"] == "completed"
        _assert_stopped(await server.tasks.read(slow, None))
        assert "slow.finally" in marks  # the job was cancelled: its cleanup ran
        assert not server.tasks.running
        # A listener (in-process bus) was told, once.
        assert await asyncio.wait_for(events.__anext__(), HANG_GUARD) == Event("task", slow)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(events.__anext__(), 0.2)


async def test_a_stop_without_a_drain_fails_running_tasks_at_once() -> None:
    marks: list[str] = []
    server = _server(marks)
    async with server.lifespan_context():
        slow = await _start(server, 3600, "slow")
        await asyncio.sleep(0.05)
        began = time.monotonic()
    assert time.monotonic() - began < 5  # at once: no grace (and never the lease or the TTL)
    _assert_stopped(await server.tasks.read(slow, None))
    assert marks == ["slow.started", "slow.finally"]


async def test_tasks_that_all_finish_in_the_grace_end_the_wait_early() -> None:
    server = _server([])
    async with server.lifespan_context():
        quick = await _start(server, 0.2, "quick")
        server.drain(30.0)
        began = time.monotonic()
    assert time.monotonic() - began < 5  # not the 30 s grace
    assert (await server.tasks.read(quick, None))["status"] == "completed"


async def test_a_task_created_during_the_drain_gets_the_same_deadline() -> None:
    server = _server([])
    async with server.lifespan_context():
        server.drain(30.0)  # before any task exists (a request still in flight makes one)
        late = await _start(server, 0.3, "late")
    assert (await server.tasks.read(late, None))["status"] == "completed"


async def test_a_cancelled_task_stays_cancelled_at_shutdown() -> None:
    server = _server([])
    async with server.lifespan_context():
        slow = await _start(server, 3600, "slow")
        cancel = {"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel", "params": {"taskId": slow, "_meta": META}}
        assert await server.handle(cancel) is not None
    assert (await server.tasks.read(slow, None))["status"] == "cancelled"  # terminal stays (TASK-05)


# -- real processes -------------------------------------------------------------------

SOURCE = '''
import asyncio
import contextlib
import json
import os
from pathlib import Path

import nimblemcp as m

ME = os.environ["TASKS_INSTANCE"]
MARKS = Path(os.environ["TASKS_MARKS"])


@contextlib.asynccontextmanager
async def lifespan(server):
    yield
    # Runs after the server settled its tasks: write what their records say.
    ids = MARKS / "ids.txt"
    if ids.exists():
        seen = {}
        for task_id in ids.read_text().split():
            record = await server.tasks.read(task_id, None)
            seen[task_id] = server.tasks.public(record)
        (MARKS / f"records.{ME}.json").write_text(json.dumps(seen))


server = m.Server("tasks-shutdown", lifespan=lifespan, task_options=m.TaskOptions(
    heartbeat=float(os.environ["TASKS_HEARTBEAT"]), lease=float(os.environ["TASKS_LEASE"])))


@server.tool(task="required")
async def job(tag: str, seconds: float) -> str:
    (MARKS / f"{tag}.started").write_text(ME)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        (MARKS / f"{tag}.cancelled").write_text(ME)
        raise
    finally:
        (MARKS / f"{tag}.finally").write_text(ME)
    return f"{tag} finished"
'''


class World:
    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.src = tmp / "tasks_shutdown_server.py"
        self.src.write_text(SOURCE)
        self.marks = tmp / "marks"
        self.marks.mkdir()
        self.tmp = tmp
        self.env = {**env, "TASKS_MARKS": str(self.marks), "TASKS_HEARTBEAT": "0.5", "TASKS_LEASE": str(LEASE)}
        self.instances: list[Instance] = []

    def start(self, name: str, port: int | None = None, grace: float = 3.0) -> Instance:
        port = port or free_port()
        log = self.tmp / f"{name}.log"
        proc = launch(self.src, port, log, "--shutdown-timeout", str(grace),
                      env={**self.env, "TASKS_INSTANCE": name})
        inst = Instance(name, proc, port, log)
        self.instances.append(inst)
        return inst


@contextlib.contextmanager
def world(tmp: Path, env: dict[str, str]) -> Iterator[World]:
    w = World(tmp, env)
    try:
        yield w
    finally:
        for inst in w.instances:
            if inst.proc.poll() is None:
                inst.proc.kill()
                inst.proc.wait()


async def start_job(c: httpx.AsyncClient, inst: Instance, tag: str, seconds: float) -> str:
    created = await rpc(c, inst.url, "tools/call", {"name": "job", "arguments": {"tag": tag, "seconds": seconds}},
                        "job")
    assert created["resultType"] == "task" and created["status"] == "working"
    return str(created["taskId"])


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=HANG_GUARD, headers={"connection": "close"}) as c:
        yield c


async def test_sigterm_fails_a_running_task_for_the_other_instance_and_after_restart(
        redis_server: RedisServer, tmp_path: Path, http: httpx.AsyncClient) -> None:
    env = {**os.environ, "NIMBLEMCP_STATE_KEYS": new_key(), "NIMBLEMCP_REDIS_URL": redis_server.url}
    grace = 3.0
    with world(tmp_path, env) as w:
        a, b = w.start("A", grace=grace), w.start("B")
        slow = await start_job(http, a, "slow", 3600)
        quick = await start_job(http, a, "quick", 1.0)
        await wait_for_file(w.marks / "slow.started")
        await wait_for_file(w.marks / "quick.started")
        listen = {"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen",
                  "params": {"_meta": META, "notifications": {"taskIds": [slow]}}}
        async with http.stream("POST", b.url, content=orjson.dumps(listen),
                               headers=headers("subscriptions/listen")) as stream:
            notes = Notes(stream.aiter_bytes())
            assert (await notes.next())["params"]["notifications"]["taskIds"] == [slow]
            assert (await notes.next())["params"]["status"] == "working"

            a.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            # During the grace the task is still running on A (its lease holds).
            assert (await get_task(http, b, slow))["status"] == "working"
            async with asyncio.timeout(HANG_GUARD):
                while (task := await get_task(http, b, slow))["status"] == "working":
                    await asyncio.sleep(0.1)
            took = time.monotonic() - signalled
            _assert_stopped(task)
            assert took < LEASE / 3, f"failed {took:.1f} s after SIGTERM"  # not a lapsed lease
            assert took > grace * 0.8, f"failed {took:.1f} s after SIGTERM: before the grace ended"

            # The listener on B hears it (A's publish crossed Redis before A exited).
            note = await notes.next()
            assert note["method"] == "notifications/tasks"
            assert note["params"]["taskId"] == slow and note["params"]["status"] == "failed"

        # The task that finished within the grace reports its result.
        done = await get_task(http, b, quick)
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "quick finished"
        assert (w.marks / "quick.finally").exists() and not (w.marks / "quick.cancelled").exists()
        # The slow job was cancelled on A, so its cleanup ran there.
        assert (w.marks / "slow.cancelled").read_text() == "A"
        assert stop(a.proc) in (0, -signal.SIGTERM), a.log.read_text()
        assert "marked failed" in a.log.read_text()
        assert "could not confirm" not in a.log.read_text()  # the notice crossed Redis before A exited

        # A restarted on the same port with the same store reads the same.
        again = w.start("A2", port=a.port)
        _assert_stopped(await get_task(http, again, slow))
        assert (await get_task(http, again, quick))["status"] == "completed"
        for inst in (b, again):
            assert stop(inst.proc, signal.SIGINT) == 0, inst.log.read_text()


@pytest.mark.parametrize("engine", ["nimblemcp", "uvicorn"])
async def test_sigterm_settles_tasks_of_a_single_in_memory_instance(
        tmp_path: Path, http: httpx.AsyncClient, engine: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NIMBLEMCP_REDIS_URL"}
    grace = 2.0
    with world(tmp_path, {**env, "NIMBLEMCP_ENGINE": engine}) as w:
        a = w.start("A", grace=grace)
        slow = await start_job(http, a, "slow", 3600)
        quick = await start_job(http, a, "quick", 0.8)
        await wait_for_file(w.marks / "quick.started")
        (w.marks / "ids.txt").write_text(f"{slow} {quick}")
        signalled = time.monotonic()
        assert stop(a.proc) in (0, -signal.SIGTERM), a.log.read_text()
        took = time.monotonic() - signalled
        assert took < grace + 8, took  # the grace and a little, never the lease or the TTL
        seen = json.loads((w.marks / "records.A.json").read_text())
        assert seen[quick]["status"] == "completed", seen
        _assert_stopped(seen[slow])
        assert (w.marks / "slow.cancelled").exists() and (w.marks / "slow.finally").exists()
