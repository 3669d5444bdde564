"""A server closes the Redis store and bus it opened itself for `NIMBLEMCP_REDIS_URL`
when it stops, not only at interpreter exit (SUB-11, TASK-10); backends the code
passed in belong to the caller and stay open.

Real processes on a real `redis-server`: the server's connections carry a client name
(`?client_name=` in the URL), and an `atexit` hook the server registers after its
backends were opened (so it runs before the bus's own exit hook) lists the names
Redis still sees connected. After a graceful stop (the end of stdin, SIGTERM on stdio
or HTTP) there are none, and the burst the lifespan published at its very end reached
another subscriber first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _deploy import wait_port
from _redis import RedisServer, free_port
from _waits import HANG, wait_for_file

import nimblemcp as m
from nimblemcp import Backends
from nimblemcp.backends.bus import Event
from nimblemcp.backends.redis import RedisBus, RedisStore
from nimblemcp.server._options import ServerSettings
from nimblemcp.serving import configure

BURST = 500
NAME = "env-opened"

SOURCE = textwrap.dedent('''
    import atexit, contextlib, json, os
    from pathlib import Path
    import redis
    import nimblemcp as m

    MARKS = Path(os.environ["MARKS"])
    PROBE = os.environ["PROBE_URL"]


    def connected_at_exit():
        probe = redis.Redis.from_url(PROBE)
        names = [c.get("name", "") for c in probe.client_list()]
        probe.close()
        (MARKS / "at_exit.json").write_text(json.dumps(names))


    @contextlib.asynccontextmanager
    async def lifespan(server):
        atexit.register(connected_at_exit)  # after the backends' own exit hook: runs first
        await server.store.set("opened", b"1", 60)  # the store's connection is open
        server.notify_resource_updated("notes://first")  # and the bus's
        (MARKS / "serving").write_text("1")
        yield
        for i in range(int(os.environ["BURST"])):  # at the very last moment
            server.notify_resource_updated(f"notes://last/{i}")


    server = m.Server("env-backends", lifespan=lifespan)


    @server.resource("notes://{name}")
    def note(name: str) -> str:
        return name
''')


async def _last_burst(sub: Any) -> list[Event]:
    got: list[Event] = []
    async with asyncio.timeout(HANG):
        while len(got) < BURST:
            event = await sub.__anext__()
            if (event.uri or "").startswith("notes://last/"):
                got.append(event)
    return got


def _server(tmp: Path, redis: RedisServer, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    src = tmp / "env_backends_server.py"
    src.write_text(SOURCE)
    marks = tmp / "marks"
    marks.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith("NIMBLEMCP_")}
    env = {**base, "NIMBLEMCP_REDIS_URL": f"{redis.url}?client_name={NAME}", "PROBE_URL": redis.url,
           "MARKS": str(marks), "BURST": str(BURST)}
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "run", str(src), *args], cwd=tmp, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, marks


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            with contextlib.suppress(BrokenPipeError):
                f.close()


async def _stopped(proc: subprocess.Popen[bytes], marks: Path, stop: str) -> None:
    """Stop `proc` the way `stop` says; its exit status is 0 and, at its exit, Redis saw
    none of its connections any more."""
    wait_for_file(marks / "serving", why=lambda: f"exit status {proc.poll()}")
    if stop == "eof":  # communicate() closes stdin
        _, err = await asyncio.to_thread(proc.communicate, timeout=HANG)
    else:  # stdin stays open
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, timeout=HANG)
        assert proc.stderr is not None
        err = proc.stderr.read()
    assert proc.returncode == 0, err.decode()
    names = json.loads((marks / "at_exit.json").read_text())
    assert NAME not in names, (names, err.decode())


@pytest.mark.parametrize("stop", ["eof", "sigterm"])
async def test_a_stdio_server_closes_the_redis_backends_it_opened(
        tmp_path: Path, fresh_redis: RedisServer, stop: str) -> None:
    listener = RedisBus(fresh_redis.url)  # the default channel: the server's
    try:
        async with listener.subscribe(max_queue=4 * BURST) as sub:
            proc, marks = _server(tmp_path, fresh_redis)
            try:
                await _stopped(proc, marks, stop)
            finally:
                _reap(proc)
            got = await _last_burst(sub)
    finally:
        listener.close()
    assert got == [Event("updated", f"notes://last/{i}") for i in range(BURST)]


async def test_an_http_server_closes_the_redis_backends_it_opened(tmp_path: Path, fresh_redis: RedisServer) -> None:
    port = free_port()
    listener = RedisBus(fresh_redis.url)
    try:
        async with listener.subscribe(max_queue=4 * BURST) as sub:
            proc, marks = _server(tmp_path, fresh_redis, "--transport", "http", "--port", str(port))
            try:
                await asyncio.to_thread(wait_port, port, proc)
                await _stopped(proc, marks, "sigterm")
            finally:
                _reap(proc)
            got = await _last_burst(sub)
    finally:
        listener.close()
    assert got == [Event("updated", f"notes://last/{i}") for i in range(BURST)]


# -- in one process: what is closed, what is not, serving again ---------------------------


def _names(redis: RedisServer) -> list[str]:
    import redis as redis_py

    probe = redis_py.Redis.from_url(redis.url)
    try:
        return [c.get("name", "") for c in probe.client_list()]
    finally:
        probe.close()


async def test_the_server_opens_fresh_backends_to_be_served_again(fresh_redis: RedisServer) -> None:
    server = m.Server("again")
    configure(server, ServerSettings(redis_url=f"{fresh_redis.url}?client_name={NAME}"))
    listener = RedisBus(fresh_redis.url)
    try:
        async with listener.subscribe() as sub:
            for round_ in range(2):
                bus, store = server.bus, server.store
                assert isinstance(bus, RedisBus) and isinstance(store, RedisStore)
                async with server.lifespan_context():
                    await server.store.set("k", b"v", 60)
                    server.notify_resource_updated(f"notes://{round_}")
                    async with asyncio.timeout(HANG):
                        assert await sub.__anext__() == Event("updated", f"notes://{round_}")
                    assert _names(fresh_redis).count(NAME) >= 2
                assert NAME not in _names(fresh_redis)  # closed when the server stopped
                assert server.bus is not bus and server.store is not store  # fresh, not yet connected
    finally:
        listener.close()


async def test_backends_the_code_passed_in_stay_open(fresh_redis: RedisServer) -> None:
    url = f"{fresh_redis.url}?client_name={NAME}"
    backends = m.Backends.from_url(url)
    server = m.Server("given", backends=backends)
    configure(server, ServerSettings(redis_url=f"{fresh_redis.url}?client_name=other"))  # given wins
    listener = RedisBus(fresh_redis.url)
    try:
        async with listener.subscribe() as sub:
            async with server.lifespan_context():
                await server.store.set("k", b"v", 60)
                server.notify_resource_updated("notes://during")
                async with asyncio.timeout(HANG):
                    assert await sub.__anext__() == Event("updated", "notes://during")
            assert server.bus is backends.bus and server.store is backends.store
            assert _names(fresh_redis).count(NAME) >= 2 and "other" not in _names(fresh_redis)
            assert await server.store.get("k") == b"v"  # still usable by its owner
            server.bus.publish(Event("updated", "notes://after"))
            async with asyncio.timeout(HANG):
                assert await sub.__anext__() == Event("updated", "notes://after")
    finally:
        listener.close()
        assert backends.bus is not None and backends.store is not None
        backends.bus.close()  # type: ignore[attr-defined]
        await backends.store.close()


async def test_a_store_given_in_code_stays_open_while_the_env_bus_is_closed(fresh_redis: RedisServer) -> None:
    store = RedisStore(f"{fresh_redis.url}?client_name=mine")
    server = m.Server("half", backends=Backends(store=store))
    configure(server, ServerSettings(redis_url=f"{fresh_redis.url}?client_name={NAME}"))
    try:
        assert isinstance(server.bus, RedisBus) and server.store is store
        async with server.lifespan_context():
            await server.store.set("k", b"v", 60)
            server.notify_resource_updated("notes://x")
            await server.bus.flush()  # type: ignore[attr-defined]
            assert NAME in _names(fresh_redis)
        names = _names(fresh_redis)
        assert NAME not in names and "mine" in names
        assert server.store is store and await store.get("k") == b"v"
    finally:
        await store.close()
