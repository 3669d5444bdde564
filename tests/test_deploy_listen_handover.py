"""Rolling restarts lose nothing (issue 34, point 1; SUB-09, SUB-10): make-before-break
listens through the deployment kit. Three `nimblemcp run --transport http` instances
share one real Redis, Debian's nginx runs `deploy/nginx/nimblemcp.conf` in front. A
`Client.listen()` through nginx lands on one instance; while events are published on
the bus (from the test's own Redis bus, as an instance would, each exactly once), that
instance gets SIGTERM. It tells the listen to move and keeps delivering; the client opens
a new listen (nginx sends it to another instance), which marks its start on the bus; the
old stream ends with its closing result once that marker reaches it. Every event arrives
exactly once, in publish order, with no `missed`, and the stopped instance exits long
before its shutdown deadline. On both engines.

Without the hand-over (before issue 34) the stream was dropped at the signal and the
events published until the client had re-listened elsewhere were lost (4 of 5 in
issue 13's test). nginx comes from `scripts/test`; without it this test is skipped with a
message saying so, never silently."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _deploy import HANG_GUARD, NGINX, Nginx, call, launch, stop, text
from _redis import RedisServer, free_port, shared

from nimblemcp import Client
from nimblemcp.backends.bus import Event
from nimblemcp.server._sealing import new_key

pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (apt-get install -y nginx-light; scripts/test "
                          "does this on CI or as root): the listen hand-over test did not run")

SOURCE = '''
import nimblemcp as m

server = m.Server("handover")
listening = 0


@server.add_middleware
async def count_listens(ctx, call_next):
    global listening
    if ctx.method != "subscriptions/listen":
        return await call_next()
    listening += 1
    try:
        return await call_next()
    finally:
        listening -= 1


@server.tool
def holding() -> int:
    """How many listen streams this instance holds now."""
    return listening


@server.resource("test://doc")
def doc() -> str:
    return "doc"
'''
DEADLINE = 30  # --shutdown-timeout: the hand-over must not wait for it
BEFORE, AFTER = 10, 40  # events published before and after the signal


class Fleet:
    def __init__(self, procs: dict[str, subprocess.Popen[bytes]], ports: dict[str, int], nginx: Nginx,
                 logs: dict[str, Path]) -> None:
        self.procs, self.ports, self.nginx, self.logs = procs, ports, nginx, logs


@pytest.fixture(params=["uvicorn", "nimblemcp"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer) -> Iterator[Fleet]:
    src = tmp_path / "handover_server.py"
    src.write_text(SOURCE)
    env = {"NIMBLEMCP_STATE_KEYS": new_key(), "NIMBLEMCP_REDIS_URL": redis.url,
           "NIMBLEMCP_ALLOWED_HOSTS": "nimblemcp,nimblemcp_sticky", "NIMBLEMCP_LOG_LEVEL": "warning"}
    ports = {name: free_port() for name in "ABC"}
    logs = {name: tmp_path / f"{name}.log" for name in ports}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    nginx: Nginx | None = None
    try:
        for name, port in ports.items():
            procs[name] = launch(src, port, logs[name], "--engine", request.param,
                                 "--shutdown-timeout", str(DEADLINE), env=env)
        nginx = Nginx(tmp_path, list(ports.values()))
        yield Fleet(procs, ports, nginx, logs)
    finally:
        if nginx is not None:
            nginx.close()
        for proc in procs.values():
            stop(proc)


async def _holder(fleet: Fleet) -> str:
    """The instance holding the one listen (the running ones asked directly, not through nginx)."""
    async with httpx.AsyncClient(timeout=HANG_GUARD) as c:
        held = {name: text(await call(c, f"http://127.0.0.1:{port}/mcp", "holding"))["result"]
                for name, port in fleet.ports.items() if fleet.procs[name].poll() is None}
    holders = [name for name, n in held.items() if n == 1]
    assert len(holders) == 1 and sum(held.values()) == 1, held
    return holders[0]


async def test_a_listen_moves_off_a_stopping_instance_losing_nothing(fleet: Fleet, redis: RedisServer) -> None:
    published = [f"test://doc/{i}" for i in range(BEFORE + AFTER)]
    got: list[str] = []
    async with Client(fleet.nginx.url) as client, \
            client.listen(resources=["test://doc"], backoff=0.05, max_backoff=0.5) as events, \
            shared(redis) as (_store, bus):
        assert (await asyncio.wait_for(events.next(), HANG_GUARD)).kind == "acknowledged"
        first_id = events.subscription_id
        holder = await _holder(fleet)

        async def collect() -> None:
            while len(got) < len(published):
                event = await events.next()
                assert event.kind == "resource_updated", event  # no `missed`, no `closed`
                assert event.uri is not None
                got.append(event.uri)

        collecting = asyncio.create_task(collect())
        for uri in published[:BEFORE]:
            bus.publish(Event("updated", uri))
            await asyncio.sleep(0.01)
        began = time.monotonic()
        fleet.procs[holder].send_signal(signal.SIGTERM)
        for uri in published[BEFORE:]:  # right after the signal, while the listen moves
            bus.publish(Event("updated", uri))
            await asyncio.sleep(0.02)
        await asyncio.wait_for(collecting, HANG_GUARD)
        code = await asyncio.to_thread(fleet.procs[holder].wait, HANG_GUARD)
        took = time.monotonic() - began
        # Late duplicates would come now: a last event must be the next one to arrive.
        await asyncio.sleep(0.5)
        bus.publish(Event("updated", "test://doc/last"))
        last = await asyncio.wait_for(events.next(), HANG_GUARD)
        assert (last.kind, last.uri) == ("resource_updated", "test://doc/last")
        assert got == published  # each once, in publish order: nothing lost, nothing twice
        assert events.handovers == 1 and events.reconnects == 0
        assert events.subscription_id != first_id
        assert await _holder(fleet) != holder  # the listen lives on another instance now
    assert code == 0, fleet.logs[holder].read_text()
    assert took < DEADLINE / 2, (took, fleet.logs[holder].read_text())  # moved, not waited for
    for log in fleet.logs.values():
        assert "Traceback" not in log.read_text()
