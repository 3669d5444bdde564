"""Tasks across instances (issue 13; CHECKLIST TASK-05, TASK-06, TASK-08, TASK-10, TASK-11).

Unit level, on the memory store and a real `redis-server`: `compare_and_set` (one of
racing writers wins), and the task lease: a record whose instance stopped renewing its
lease is marked failed by whichever reader sees it first, exactly once, with one bus
event; a live lease keeps it working.

Process level: two real `nimblemcp run --transport http` instances (uvicorn on
loopback, separate processes) sharing one Redis. (1) A long task runs on A; A is
killed with SIGKILL; `tasks/get` on B reports it failed within a few lease periods
(not its one-hour TTL), and a listen on B watching the task hears `failed`.
(2) A long task runs on A; `tasks/cancel` goes to B; the job on A sees the
cancellation (its `except CancelledError` and `finally` write marker files) well
before A's next heartbeat, so the bus delivered it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson
import pytest
from _deploy import headers, launch
from _redis import RedisServer, free_port
from _task_http import HANG_GUARD, META, Instance, Notes, get_task, rpc, wait_for_file

from nimblemcp import Backends, Server, TaskOptions
from nimblemcp.backends import KeyValueStore, MemoryStore
from nimblemcp.backends.bus import Event
from nimblemcp.backends.redis import RedisBus, RedisStore
from nimblemcp.server._sealing import new_key

T = TypeVar("T")

# -- compare_and_set, on every store ----------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest, redis_server: RedisServer) -> AsyncIterator[KeyValueStore]:
    s: KeyValueStore
    if request.param == "memory":
        s = MemoryStore()
    else:
        s = RedisStore(redis_server.url, prefix=f"t-{uuid.uuid4().hex}:")
    yield s
    await s.close()


async def test_compare_and_set_replaces_only_the_expected_value(store: KeyValueStore) -> None:
    assert await store.compare_and_set("k", b"a", b"b", 60) is False  # absent: nothing to compare
    assert await store.get("k") is None
    raw = bytes(range(256))
    await store.set("k", raw, 60)
    assert await store.compare_and_set("k", b"other", b"x", 60) is False
    assert await store.get("k") == raw
    assert await store.compare_and_set("k", raw, b"second", 60) is True
    assert await store.get("k") == b"second"
    assert await store.compare_and_set("k", raw, b"third", 60) is False  # stale expectation


async def test_compare_and_set_is_atomic_under_concurrency(store: KeyValueStore) -> None:
    await store.set("race", b"v0", 60)
    results = await asyncio.gather(*(store.compare_and_set("race", b"v0", f"w{i}".encode(), 60)
                                     for i in range(25)))
    assert results.count(True) == 1
    assert await store.get("race") == f"w{results.index(True)}".encode()


async def test_compare_and_set_sets_the_ttl(store: KeyValueStore) -> None:
    await store.set("t", b"1", 60)
    assert await store.compare_and_set("t", b"1", b"2", 0.05) is True
    await asyncio.sleep(0.3)
    assert await store.get("t") is None
    await store.set("z", b"1", 60)
    assert await store.compare_and_set("z", b"1", b"2", 0) is True  # expired at once, as set()
    assert await store.get("z") is None


async def test_redis_compare_and_set_across_clients(redis_server: RedisServer) -> None:
    prefix = f"t-{uuid.uuid4().hex}:"
    stores = [RedisStore(redis_server.url, prefix=prefix) for _ in range(3)]
    try:
        await stores[0].set("shared", b"v", 60)
        results = await asyncio.gather(*(s.compare_and_set("shared", b"v", str(i).encode(), 60)
                                         for i, s in enumerate(stores)))
        assert results.count(True) == 1
    finally:
        for s in stores:
            await s.close()


# -- the lease, in process --------------------------------------------------------------


def _record(task_id: str, owner: str | None) -> bytes:
    now = "2026-11-30T00:00:00.000Z"
    record: dict[str, Any] = {"taskId": task_id, "status": "working", "createdAt": now, "lastUpdatedAt": now,
                              "ttlMs": 3_600_000, "pollIntervalMs": 500, "sub": None, "answers": {}, "asked": 0}
    if owner is not None:
        record["owner"] = owner
    return orjson.dumps(record)


async def test_memory_lease_a_dead_owner_is_marked_failed_once() -> None:
    server = Server("lease")
    await server.store.set("task:t1", _record("t1", "gone"), 60)
    async with server.bus.subscribe() as events:
        seen = await asyncio.gather(*(server.tasks.read("t1", None) for _ in range(5)))
        assert {r["status"] for r in seen} == {"failed"}
        assert {r["lastUpdatedAt"] for r in seen} == {seen[0]["lastUpdatedAt"]}  # one writer
        assert seen[0]["error"]["code"] == -32603 and "stopped" in seen[0]["statusMessage"]
        assert await asyncio.wait_for(events.__anext__(), HANG_GUARD) == Event("task", "t1")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(events.__anext__(), 0.3)
    # A record without an owner (one process, or made before leases) never lapses.
    await server.store.set("task:t2", _record("t2", None), 60)
    assert (await server.tasks.read("t2", None))["status"] == "working"


async def test_redis_lease_racing_readers_on_two_instances_fail_it_once(redis_server: RedisServer) -> None:
    prefix = f"t-{uuid.uuid4().hex}:"
    b = Server("b", backends=Backends.from_url(redis_server.url, prefix=prefix))
    c = Server("c", backends=Backends.from_url(redis_server.url, prefix=prefix))
    watcher = RedisBus(redis_server.url, channel=prefix + "events")
    try:
        await b.store.set("task:dead", _record("dead", "instance-that-was-killed"), 60)
        await b.store.set("task:live", _record("live", "instance-still-running"), 60)
        await b.store.set("task-lease:live", b"instance-still-running", 60)
        async with watcher.subscribe() as events:
            readers = [s.tasks.read("dead", None) for s in (b, c) for _ in range(10)]
            seen = await asyncio.gather(*readers)
            assert {r["status"] for r in seen} == {"failed"}
            assert {r["lastUpdatedAt"] for r in seen} == {seen[0]["lastUpdatedAt"]}
            assert seen[0]["error"] == {"code": -32603, "message": seen[0]["statusMessage"]}
            assert (await c.tasks.read("live", None))["status"] == "working"  # its lease holds
            got = [await asyncio.wait_for(events.__anext__(), HANG_GUARD)]
            with contextlib.suppress(TimeoutError):
                while True:
                    got.append(await asyncio.wait_for(events.__anext__(), 0.5))
            assert got == [Event("task", "dead")]  # one status change, published once
    finally:
        watcher.close()
        for s in (b, c):
            s.bus.close()  # type: ignore[attr-defined]
            await s.store.close()


def endless_job(ended: list[str]) -> Callable[[], Awaitable[str]]:
    """A task tool named `job` that runs until cancelled, noting "cancelled" in `ended`."""

    async def job() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        return "never"

    return job


async def test_redis_lease_is_renewed_while_the_job_runs(redis_server: RedisServer) -> None:
    """Two servers in one process: a task running on A stays working as seen from B
    for many lease periods; tasks/cancel on B stops the job on A through the bus."""
    prefix = f"t-{uuid.uuid4().hex}:"
    options = TaskOptions(heartbeat=0.1, lease=0.5)
    a = Server("a", backends=Backends.from_url(redis_server.url, prefix=prefix), task_options=options)
    b = Server("b", backends=Backends.from_url(redis_server.url, prefix=prefix), task_options=options)
    ended: list[str] = []
    job = endless_job(ended)

    for s in (a, b):  # the same code on every instance
        s.add_tool(job, task="required")

    try:
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "job", "arguments": {}, "_meta": META}}
        created = await a.handle(call)
        assert created is not None
        task_id = created["result"]["taskId"]
        await asyncio.sleep(2.0)  # four lease periods
        get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": task_id, "_meta": META}}
        seen = await b.handle(get)
        assert seen is not None and seen["result"]["status"] == "working", seen
        cancel = {**get, "method": "tasks/cancel"}
        runners = list(a.tasks.running.values())
        assert runners and (await b.handle(cancel)) is not None
        async with asyncio.timeout(HANG_GUARD):
            await asyncio.gather(*runners)  # the job on A ends (its final write done)
        assert ended == ["cancelled"]
        after = await a.handle(get)
        assert after is not None and after["result"]["status"] == "cancelled"
    finally:
        for s in (a, b):
            s.bus.close()  # type: ignore[attr-defined]
            await s.store.close()


class Elsewhere:
    """Another instance's event loop, on a thread of its own: it can answer while the
    test's loop (instance A's) is kept busy."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro` run there; this thread (and its loop) blocks until it is done."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(HANG_GUARD)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(HANG_GUARD)
        self.loop.close()


async def test_redis_a_cancel_sent_elsewhere_at_once_reaches_the_job(redis_server: RedisServer) -> None:
    """TASK-08 across instances, the race of issue 18's flake: B answers a tasks/cancel
    the moment A has answered the task, while A's loop is busy (as on a loaded machine);
    B's bus message has left before A runs again. Redis pub/sub keeps nothing for a
    subscriber that comes later, so A must hear cancellations before it answers the
    task. The heartbeat (120 s) is far beyond the wait: only the bus can stop the job."""
    prefix = f"t-{uuid.uuid4().hex}:"
    options = TaskOptions(heartbeat=120.0, lease=360.0)
    ended: list[str] = []
    job = endless_job(ended)

    def instance(name: str) -> Server:
        server = Server(name, backends=Backends.from_url(redis_server.url, prefix=prefix), task_options=options)
        server.add_tool(job, task="required")
        return server

    async def make_b() -> Server:
        return instance("b")  # its store's connections belong to that loop

    a, other = instance("a"), Elsewhere()
    b = other.run(make_b())
    try:
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "job", "arguments": {}, "_meta": META}}
        created = await a.handle(call)
        assert created is not None and created["result"]["resultType"] == "task"
        task_id = created["result"]["taskId"]
        runners = list(a.tasks.running.values())
        cancel = {"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": {"taskId": task_id, "_meta": META}}

        async def cancel_on_b() -> dict[str, Any] | None:
            reply = await b.handle(cancel)
            assert await b.bus.flush()  # type: ignore[attr-defined]  # the message went out
            return reply

        reply = other.run(cancel_on_b())  # A's loop does not run meanwhile
        assert reply is not None and reply["result"]["resultType"] == "complete"
        done, _ = await asyncio.wait(runners, timeout=HANG_GUARD)
        assert ended == ["cancelled"] and len(done) == len(runners), "the cancel never reached the job on A"
        after = await a.handle({**cancel, "method": "tasks/get"})
        assert after is not None and after["result"]["status"] == "cancelled"
    finally:
        async def close_b() -> None:
            b.bus.close()  # type: ignore[attr-defined]
            await b.store.close()

        other.run(close_b())
        other.close()
        a.bus.close()  # type: ignore[attr-defined]
        await a.store.close()


# -- two real instances -------------------------------------------------------------------

SOURCE = '''
import asyncio
import os
from pathlib import Path

import nimblemcp as m

ME = os.environ["TASKS_INSTANCE"]
MARKS = Path(os.environ["TASKS_MARKS"])
server = m.Server("tasks-scaleout", task_options=m.TaskOptions(
    heartbeat=float(os.environ["TASKS_HEARTBEAT"]), lease=float(os.environ["TASKS_LEASE"])))


@server.tool(task="required")
async def long_job(tag: str) -> str:
    (MARKS / f"{tag}.started").write_text(ME)
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        (MARKS / f"{tag}.cancelled").write_text(ME)
        raise
    finally:
        (MARKS / f"{tag}.finally").write_text(ME)
    return "finished"
'''


def _launch(src: Path, name: str, env: dict[str, str], log: Path) -> Instance:
    port = free_port()
    return Instance(name, launch(src, port, log, env={**env, "TASKS_INSTANCE": name}), port, log)


class Cluster:
    def __init__(self, a: Instance, b: Instance, marks: Path, lease: float) -> None:
        self.a, self.b, self.marks, self.lease = a, b, marks, lease


@contextlib.contextmanager
def cluster(redis: RedisServer, tmp: Path, heartbeat: float, lease: float) -> Iterator[Cluster]:
    src = tmp / "tasks_server.py"
    src.write_text(SOURCE)
    marks = tmp / "marks"
    marks.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NIMBLEMCP_STATE_KEYS": new_key(),
           "NIMBLEMCP_REDIS_URL": redis.url, "TASKS_MARKS": str(marks),
           "TASKS_HEARTBEAT": str(heartbeat), "TASKS_LEASE": str(lease)}
    instances: list[Instance] = []
    try:
        for name in ("A", "B"):
            instances.append(_launch(src, name, env, tmp / f"{name}.log"))
        yield Cluster(instances[0], instances[1], marks, lease)
        for inst in instances:
            if inst.proc.poll() is None:  # graceful exit still works with tasks around
                inst.proc.send_signal(signal.SIGINT)
                assert inst.proc.wait(timeout=HANG_GUARD) == 0, inst.log.read_text()
    finally:
        for inst in instances:
            if inst.proc.poll() is None:
                inst.proc.kill()
                inst.proc.wait()


async def start_job(c: httpx.AsyncClient, inst: Instance, tag: str) -> str:
    created = await rpc(c, inst.url, "tools/call", {"name": "long_job", "arguments": {"tag": tag}}, "long_job")
    assert created["resultType"] == "task" and created["status"] == "working"  # TASK-04
    return str(created["taskId"])


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=HANG_GUARD, headers={"connection": "close"}) as c:
        yield c


async def test_task_of_a_killed_instance_fails_within_a_few_leases(
        redis_server: RedisServer, tmp_path: Path, http: httpx.AsyncClient) -> None:
    with cluster(redis_server, tmp_path, heartbeat=0.25, lease=1.5) as c:
        task_id = await start_job(http, c.a, "doomed")
        await wait_for_file(c.marks / "doomed.started")
        listen = {"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen",
                  "params": {"_meta": META, "notifications": {"taskIds": [task_id]}}}
        async with http.stream("POST", c.b.url, content=orjson.dumps(listen),
                               headers=headers("subscriptions/listen")) as stream:
            notes = Notes(stream.aiter_bytes())
            ack = await notes.next()
            assert ack["params"]["notifications"]["taskIds"] == [task_id]  # TASK-10
            first = await notes.next()
            assert first["method"] == "notifications/tasks" and first["params"]["status"] == "working"

            # A is alive: its heartbeat renews the lease, so B keeps seeing it working
            # long after the first lease would have lapsed.
            await asyncio.sleep(3 * c.lease)
            assert (await get_task(http, c.b, task_id))["status"] == "working"

            c.a.proc.send_signal(signal.SIGKILL)
            assert c.a.proc.wait(timeout=HANG_GUARD) == -signal.SIGKILL
            killed = time.monotonic()
            async with asyncio.timeout(HANG_GUARD):
                while (task := await get_task(http, c.b, task_id))["status"] == "working":
                    await asyncio.sleep(0.1)
            took = time.monotonic() - killed
            assert task["status"] == "failed", task  # TASK-05: terminal, with the JSON-RPC error
            assert task["error"]["code"] == -32603 and "stopped" in task["statusMessage"]
            assert "result" not in task
            # "Within a few lease periods", against a TTL of an hour.
            assert took < 6 * c.lease, f"failed only {took:.1f} s after the kill"

            # The listen on B hears it too (its watchdog or the reader's publish).
            while True:
                note = await notes.next()
                if note["method"] == "notifications/tasks" and note["params"]["status"] != "working":
                    break
            assert note["params"]["status"] == "failed" and note["params"]["taskId"] == task_id
        # Terminal stays terminal: a cancel now changes nothing (TASK-05, TASK-08).
        await rpc(http, c.b.url, "tasks/cancel", {"taskId": task_id}, task_id)
        assert (await get_task(http, c.b, task_id))["status"] == "failed"
        assert not (c.marks / "doomed.finally").exists()  # SIGKILL: no cleanup ran on A


async def test_task_of_a_killed_instance_fails_for_a_listener_alone(
        redis_server: RedisServer, tmp_path: Path, http: httpx.AsyncClient) -> None:
    """Nobody polls: the listen's watchdog on B is what notices, and notifies."""
    with cluster(redis_server, tmp_path, heartbeat=0.25, lease=1.5) as c:
        task_id = await start_job(http, c.a, "quiet")
        await wait_for_file(c.marks / "quiet.started")
        listen = {"jsonrpc": "2.0", "id": "L2", "method": "subscriptions/listen",
                  "params": {"_meta": META, "notifications": {"taskIds": [task_id]}}}
        async with http.stream("POST", c.b.url, content=orjson.dumps(listen),
                               headers=headers("subscriptions/listen")) as stream:
            notes = Notes(stream.aiter_bytes())
            assert (await notes.next())["method"] == "notifications/subscriptions/acknowledged"
            assert (await notes.next())["params"]["status"] == "working"
            c.a.proc.send_signal(signal.SIGKILL)
            c.a.proc.wait(timeout=HANG_GUARD)
            note = await notes.next()
            assert note["method"] == "notifications/tasks"
            assert note["params"]["status"] == "failed" and note["params"]["error"]["code"] == -32603


async def test_cancel_sent_to_another_instance_stops_the_job_where_it_runs(
        redis_server: RedisServer, tmp_path: Path, http: httpx.AsyncClient) -> None:
    # A's first heartbeat (which would also notice the cancelled record) comes 120 s
    # after the job starts: a cancellation landing before that came over the bus.
    heartbeat = 120.0
    with cluster(redis_server, tmp_path, heartbeat=heartbeat, lease=3 * heartbeat) as c:
        started = time.monotonic()
        task_id = await start_job(http, c.a, "stopme")
        await wait_for_file(c.marks / "stopme.started")
        assert (await get_task(http, c.b, task_id))["status"] == "working"
        ack = await rpc(http, c.b.url, "tasks/cancel", {"taskId": task_id}, task_id)
        assert ack["resultType"] == "complete" and "taskId" not in ack  # TASK-08
        await wait_for_file(c.marks / "stopme.finally")
        assert time.monotonic() - started < heartbeat
        assert (c.marks / "stopme.cancelled").read_text() == "A"  # the handler saw CancelledError, on A
        assert (c.marks / "stopme.finally").read_text() == "A"
        for inst in (c.a, c.b):
            task = await get_task(http, inst, task_id)
            assert task["status"] == "cancelled" and "result" not in task
        # A is healthy and runs the next task as usual.
        again = await start_job(http, c.a, "next")
        await wait_for_file(c.marks / "next.started")
        await rpc(http, c.a.url, "tasks/cancel", {"taskId": again}, again)  # local cancel, as before
        await wait_for_file(c.marks / "next.finally")
