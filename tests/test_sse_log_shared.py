"""SSE resumability across instances (issue 15; 2025-11-25 transports, "Resumability
and Redelivery"; SEP-1699): two real `nimblemcp run --transport http` processes share
one real Redis (`NIMBLEMCP_REDIS_URL`). A 2025-11-25 client's POST stream on instance A
is broken mid-call; it reconnects with `Last-Event-ID` to instance B, which replays
exactly the events it missed (from the shared log), then the events A goes on logging
live, then the response, and ends the stream. Also: a stream is only resumed for its
own session, an unknown stream on B is still 404, and the Redis log is bounded (events
per stream, TTL).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from _deploy import launch
from _redis import RedisServer, free_port

from nimblemcp.transports._sse import ServerSentEvent, iter_sse

V = "2025-11-25"
HANG_GUARD = 20.0  # only so a failure cannot hang the run

SOURCE = '''
import asyncio
import os
from pathlib import Path

import nimblemcp as m

server = m.Server("resume-shared")


@server.tool
async def steps(gate: str, ctx: m.Context) -> str:
    """Logs 1 and 2, waits for the file `gate`, then logs 3, 4, 5 and answers."""
    for n in (1, 2):
        ctx.info(f"step {n} on {os.environ['INSTANCE']}")
    while not Path(gate).exists():
        await asyncio.sleep(0.02)
    for n in (3, 4, 5):
        ctx.info(f"step {n} on {os.environ['INSTANCE']}")
        await asyncio.sleep(0.01)
    return "finished on " + os.environ["INSTANCE"]
'''


class Instance:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.name, self.proc, self.port, self.log = name, proc, port, log
        self.url = f"http://127.0.0.1:{port}/mcp"


def _launch(src: Path, name: str, env: dict[str, str], log: Path) -> Instance:
    port = free_port()
    return Instance(name, launch(src, port, log, env={**env, "INSTANCE": name}), port, log)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, redis: RedisServer) -> Iterator[list[Instance]]:
    tmp = tmp_path_factory.mktemp("resume_shared")
    src = tmp / "resume_server.py"
    src.write_text(SOURCE)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NIMBLEMCP_REDIS_URL": redis.url}
    instances: list[Instance] = []
    try:
        for name in ("A", "B"):
            instances.append(_launch(src, name, env, tmp / f"{name}.log"))
        yield instances
        for inst in instances:
            inst.proc.send_signal(signal.SIGINT)
            assert inst.proc.wait(timeout=HANG_GUARD) == 0, inst.log.read_text()
    finally:
        for inst in instances:
            if inst.proc.poll() is None:
                inst.proc.kill()
                inst.proc.wait()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=HANG_GUARD) as c:
        yield c


async def initialize(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = await http.post(url, json=body, headers={"accept": "application/json, text/event-stream"})
    assert r.status_code == 200, r.text
    headers = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": V}
    r = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert r.status_code == 202
    return headers


def payload(event: ServerSentEvent) -> Any:
    """What one event carries: a log line's text, the response's text, or None (priming)."""
    if not event.data:
        return None
    message = orjson.loads(event.data)
    if "result" in message:
        return ("result", message["result"]["content"][0]["text"])
    return message["params"]["data"]


async def start_and_break(http: httpx.AsyncClient, url: str, headers: dict[str, str],
                          gate: Path) -> list[ServerSentEvent]:
    """POST `steps` and read until "step 2" arrives, then hang up (the request goes on)."""
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "steps", "arguments": {"gate": str(gate)}}}
    seen: list[ServerSentEvent] = []
    async with http.stream("POST", url, json=body, headers={
            **headers, "accept": "application/json, text/event-stream"}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        async for event in iter_sse(r.aiter_lines()):
            seen.append(event)
            if payload(event) == "step 2 on A":
                break  # leaving the block closes the connection mid-stream
    return seen


async def resume(http: httpx.AsyncClient, url: str, headers: dict[str, str], last: str,
                 gate: Path | None = None) -> tuple[int, list[ServerSentEvent]]:
    """GET with Last-Event-ID; the status and every event until the stream ends.
    `gate` is created once the stream is open (so what follows arrives live)."""
    async with http.stream("GET", url, headers={**headers, "accept": "text/event-stream",
                                                "last-event-id": last}) as r:
        if r.status_code != 200:
            await r.aread()
            return r.status_code, []
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["mcp-session-id"] == headers["mcp-session-id"]
        if gate is not None:
            gate.touch()
        events = [e async for e in iter_sse(r.aiter_lines())]
        return r.status_code, events


async def test_stream_broken_on_a_resumes_on_b_with_exactly_the_missed_events(
        pair: list[Instance], http: httpx.AsyncClient, tmp_path: Path) -> None:
    a, b = pair
    headers = await initialize(http, a.url)
    gate = tmp_path / "gate"
    seen = await start_and_break(http, a.url, headers, gate)
    assert [payload(e) for e in seen] == [None, "step 1 on A", "step 2 on A"]  # priming first
    assert all(e.id for e in seen)
    gate.touch()  # A goes on: 3, 4, 5 and the response are logged, nobody listening
    await asyncio.sleep(0.5)
    status, replayed = await asyncio.wait_for(resume(http, b.url, headers, seen[-1].id or ""), HANG_GUARD)
    assert status == 200
    assert [payload(e) for e in replayed] == [
        "step 3 on A", "step 4 on A", "step 5 on A", ("result", "finished on A")]
    ids = [e.id for e in seen + replayed]
    assert len(set(ids)) == len(ids)  # nothing twice, nothing of before
    stream = (seen[0].id or "").rpartition("-")[0]
    assert all((i or "").rpartition("-")[0] == stream for i in ids)
    # from the priming id B replays the whole stream
    status, whole = await asyncio.wait_for(resume(http, b.url, headers, seen[0].id or ""), HANG_GUARD)
    assert [payload(e) for e in whole] == [f"step {n} on A" for n in range(1, 6)] + [("result", "finished on A")]


async def test_resumed_on_b_before_a_finishes_the_rest_arrives_live(
        pair: list[Instance], http: httpx.AsyncClient, tmp_path: Path) -> None:
    a, b = pair
    headers = await initialize(http, a.url)
    gate = tmp_path / "gate"
    seen = await start_and_break(http, a.url, headers, gate)
    await asyncio.sleep(1.0)  # time for A to write 1 and 2 to Redis (a resume also allows for lag)
    # B holds the stream open; A is still waiting at the gate, released only now
    status, rest = await asyncio.wait_for(resume(http, b.url, headers, seen[-1].id or "", gate), HANG_GUARD)
    assert status == 200
    assert [payload(e) for e in rest] == [
        "step 3 on A", "step 4 on A", "step 5 on A", ("result", "finished on A")]


async def test_only_the_owning_session_resumes_elsewhere(
        pair: list[Instance], http: httpx.AsyncClient, tmp_path: Path) -> None:
    a, b = pair
    owner = await initialize(http, a.url)
    gate = tmp_path / "gate"
    seen = await start_and_break(http, a.url, owner, gate)
    gate.touch()
    other = await initialize(http, a.url)  # another session of the same instance
    last = seen[-1].id or ""
    status, _ = await resume(http, b.url, other, last)
    assert status == 404  # B knows neither that session nor a stream of it
    status, _ = await resume(http, b.url, {**owner, "mcp-session-id": "forged"}, last)
    assert status == 404
    stream = last.rpartition("-")[0]
    status, _ = await resume(http, b.url, owner, f"{stream}-99")  # past the end of the stream
    assert status == 404
    status, _ = await resume(http, b.url, owner, "no-such-stream-1")
    assert status == 404
    status, events = await asyncio.wait_for(resume(http, b.url, owner, last), HANG_GUARD)
    assert status == 200 and payload(events[-1]) == ("result", "finished on A")


async def test_the_redis_log_is_bounded_per_stream_in_count_and_time(redis: RedisServer) -> None:
    from nimblemcp.backends._redis_events import RedisEventLog
    from nimblemcp.backends.redis import RedisStore

    store = RedisStore(redis.url, prefix="bounds:")
    log = RedisEventLog(store, max_events=10, ttl=30.0)
    log.opened("s1", "session", None)
    for seq in range(1, 26):
        log.logged("s1", seq, f"id: s1-{seq}\ndata: {seq}\n\n".encode())
    log.ended("s1", 25)
    await log.close()  # flushes what is queued
    owner = await log.owner_of("s1")
    assert owner == ("session", None, 25)
    frames, position, done = await log.read("s1", 0, 0.1)
    # only the newest events are kept (the end marker takes one place of the cap's + 1)
    assert [f.split(b"\n")[0] for f in frames] == [f"id: s1-{n}".encode() for n in range(16, 26)]
    assert position == 25 and done
    client = store._client
    assert 0 < await client.pttl("bounds:sse:s1") <= 30_000
    assert 0 < await client.pttl("bounds:sse:s1:meta") <= 30_000
    assert await log.owner_of("unknown") is None
    await store.close()


async def test_a_stream_past_its_byte_budget_ends_in_the_shared_log(redis: RedisServer) -> None:
    from nimblemcp.backends._redis_events import RedisEventLog
    from nimblemcp.backends.redis import RedisStore

    store = RedisStore(redis.url, prefix="budget:")
    log = RedisEventLog(store, max_bytes=100)
    log.opened("s2", "session", "alice")
    log.logged("s2", 1, b"x" * 60)
    log.logged("s2", 2, b"y" * 60)  # over the budget: the shared copy ends before it
    log.logged("s2", 3, b"z")
    log.ended("s2", 3)  # already ended: no second marker
    await log.close()
    assert await log.owner_of("s2") == ("session", "alice", 1)
    assert tuple(await log.read("s2", 0, 0.1)) == ([b"x" * 60], 1, True)
    await store.close()
