"""The Redis bus sends what was published before the process stops (CHECKLIST SUB-11,
TASK-10: the change notifications every instance's listeners rely on).

An event published at the very last moment (a lifespan's shut-down, just before
`close()`, just before the interpreter exits) reaches the other instances: `close()`
sends what is queued before stopping the bus thread, a bus still running at exit is
closed then, and a server flushes its bus when its lifespan ends, which also covers a
stdio server that leaves with `os._exit` (a sync tool still running). A second
subscriber on the same real `redis-server` sees the last event.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

from _redis import RedisServer

from nimblemcp.backends.bus import Event, FlushingBus, InProcessBus
from nimblemcp.backends.redis import RedisBus

HANG = 30.0  # only a guard against a hung test, never a measurement
BURST = 2000  # several pipelines' worth: sending them takes a while


async def _collect(sub: object, want: int) -> list[Event]:
    got: list[Event] = []
    async with asyncio.timeout(HANG):
        async for event in sub:  # type: ignore[attr-defined]
            got.append(event)
            if len(got) == want:
                return got
    return got


async def test_close_sends_what_was_published_just_before(redis_server: RedisServer) -> None:
    channel = f"t-{uuid.uuid4().hex}"
    listener = RedisBus(redis_server.url, channel=channel)
    try:
        async with listener.subscribe(max_queue=4 * BURST) as sub:
            bus = RedisBus(redis_server.url, channel=channel)
            for i in range(BURST):
                bus.publish(Event("updated", f"notes://burst/{i}"))
            bus.close(HANG)  # at once: nothing has been sent yet (HANG: a loaded machine)
            got = await _collect(sub, BURST)
    finally:
        listener.close()
    assert got == [Event("updated", f"notes://burst/{i}") for i in range(BURST)]


async def test_flush_waits_until_sent_and_says_when_it_could_not(redis_server: RedisServer) -> None:
    channel = f"t-{uuid.uuid4().hex}"
    assert isinstance(RedisBus(redis_server.url, channel=channel), FlushingBus)
    assert not isinstance(InProcessBus(), FlushingBus)  # nothing to send elsewhere
    listener = RedisBus(redis_server.url, channel=channel)
    bus = RedisBus(redis_server.url, channel=channel)
    try:
        assert await bus.flush() is True  # never used: nothing to send
        async with listener.subscribe(max_queue=4 * BURST) as sub:
            for i in range(BURST):
                bus.publish(Event("updated", f"notes://flush/{i}"))
            assert await bus.flush(HANG) is True
            assert not bus._pending  # all of them went out before flush returned
            assert len(await _collect(sub, BURST)) == BURST
    finally:
        bus.close()
        listener.close()

    down = RedisServer()  # a port nothing listens on
    away = RedisBus(down.url, channel=channel)
    try:
        away.publish(Event("tools"))
        assert await away.flush(0.3) is False  # kept, not lost, not waited for forever
    finally:
        away.close(0.1)
        down.close()


EXITING = textwrap.dedent('''
    import sys
    from nimblemcp.backends.bus import Event
    from nimblemcp.backends.redis import RedisBus

    bus = RedisBus(sys.argv[1], channel=sys.argv[2])
    for i in range(int(sys.argv[3])):
        bus.publish(Event("updated", f"notes://exit/{i}"))
    # no close(): the interpreter exits now, with the bus thread just started
''')


async def test_a_bus_left_running_at_interpreter_exit_sends_what_was_published(
        redis_server: RedisServer, tmp_path: Path) -> None:
    channel = f"t-{uuid.uuid4().hex}"
    script = tmp_path / "exiting.py"
    script.write_text(EXITING)
    listener = RedisBus(redis_server.url, channel=channel)
    try:
        async with listener.subscribe(max_queue=4 * BURST) as sub:
            proc = await asyncio.create_subprocess_exec(sys.executable, str(script), redis_server.url, channel,
                                                        str(BURST), stderr=subprocess.PIPE)
            _, err = await asyncio.wait_for(proc.communicate(), HANG)
            assert proc.returncode == 0, err.decode()
            got = await _collect(sub, BURST)
    finally:
        listener.close()
    assert got == [Event("updated", f"notes://exit/{i}") for i in range(BURST)]


SERVER = textwrap.dedent('''
    import contextlib, os, threading
    from pathlib import Path
    import nimblemcp as m

    MARKS = Path(os.environ["MARKS"])


    @contextlib.asynccontextmanager
    async def lifespan(server):
        yield
        for i in range(int(os.environ["LAST_COUNT"])):  # at the very last moment
            server.notify_resource_updated(f"notes://last/{i}")


    server = m.Server("flush-at-exit", lifespan=lifespan)


    @server.tool()
    def block() -> str:
        (MARKS / "block.started").write_text("1")
        threading.Event().wait(60)  # still running at exit: the process leaves with os._exit
        return "unblocked"


    @server.resource("notes://{name}")
    def note(name: str) -> str:
        return name
''')


async def test_a_stdio_server_flushes_its_bus_when_its_lifespan_ends(
        redis_server: RedisServer, tmp_path: Path) -> None:
    src = tmp_path / "flush_server.py"
    src.write_text(SERVER)
    marks = tmp_path / "marks"
    marks.mkdir()
    listener = RedisBus(redis_server.url, channel="nimblemcp:events")  # the server's (NIMBLEMCP_REDIS_URL)
    env = {**os.environ, "NIMBLEMCP_REDIS_URL": redis_server.url, "MARKS": str(marks), "LAST_COUNT": str(BURST)}
    call = (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{},'
            b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            b'"io.modelcontextprotocol/clientCapabilities":{}}}}\n')
    try:
        async with listener.subscribe(max_queue=4 * BURST) as sub:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "nimblemcp", "run", str(src), env=env, cwd=tmp_path,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert proc.stdin is not None
            proc.stdin.write(call)
            await proc.stdin.drain()
            async with asyncio.timeout(HANG):
                while not (marks / "block.started").exists():
                    await asyncio.sleep(0.02)
            proc.stdin.close()  # the end of stdin: the grace, then exit without the blocked thread
            out, err = await asyncio.wait_for(proc.communicate(), HANG)
            assert proc.returncode == 0, err.decode()
            assert b"still running" in err  # it did leave through os._exit (no atexit hooks)
            assert out == b""  # the blocked call was never answered; nothing else on stdout
            began = time.monotonic()
            got = [e for e in await _collect(sub, BURST) if (e.uri or "").startswith("notes://last/")]
            assert time.monotonic() - began < HANG
    finally:
        listener.close()
    assert got == [Event("updated", f"notes://last/{i}") for i in range(BURST)]
