"""Graceful shutdown for rolling restarts (issues 13 and 34): on SIGTERM an instance
stops accepting, lets in-flight requests finish, and ends its listen streams with the
closing result (SUB-09) carrying the "listen again elsewhere" hint in `_meta`
(`com.github.nimblemcp/listenAgain`): at once for a client that offers no hand-over,
after the hand-over window for nimblemcp's client when no other instance takes its
listen (it keeps re-listening). A listen through a round-robin proxy survives a rolling
restart of both instances: later updates arrive (the make-before-break hand-over itself,
exactly once, is tests/test_deploy_listen_handover.py). Real `nimblemcp run`
subprocesses, one real Redis, loopback only."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from pathlib import Path

import httpx
import orjson
import pytest
from _deploy import HANG_GUARD, META, call, headers, launch, stop, text, write_server
from _redis import RedisServer, free_port
from _task_http import Notes

from nimblemcp import Client
from nimblemcp.server._sealing import new_key


class FailoverProxy:
    """Loopback TCP proxy: round-robin per connection, skipping a backend that refuses
    the connection (as nginx tries the next upstream)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.count = 0
        self.server: asyncio.Server | None = None
        self.pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/mcp"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.count += 1
        for i in range(len(self.ports)):
            port = self.ports[(self.count + i) % len(self.ports)]
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                continue
        else:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()


async def test_sigterm_finishes_in_flight_stops_accepting_and_ends_listens_with_the_hint(tmp_path: Path) -> None:
    src = write_server(tmp_path)
    port = free_port()
    log = tmp_path / "a.log"
    proc = launch(src, port, log, "--shutdown-timeout", "20")
    url = f"http://127.0.0.1:{port}/mcp"
    listen = {"jsonrpc": "2.0", "id": "plain", "method": "subscriptions/listen",
              "params": {"_meta": META, "notifications": {"resourceSubscriptions": ["test://doc"]}}}
    try:
        async with Client(url) as client, client.listen(resources=["test://doc"], backoff=5.0) as events, \
                httpx.AsyncClient(timeout=HANG_GUARD) as c, httpx.AsyncClient(timeout=HANG_GUARD) as other, \
                other.stream("POST", url, content=orjson.dumps(listen),
                             headers=headers("subscriptions/listen")) as plain:
            assert (await events.next()).kind == "acknowledged"
            notes = Notes(plain.aiter_bytes())
            ack = await notes.next()  # a client that offers no hand-over gets no token
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            assert ack["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "plain"}
            slow = asyncio.create_task(call(c, url, "slow", {"seconds": 1.5}))
            await asyncio.sleep(0.5)
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            # The plain listen ends at once with the closing result and the hint (SUB-09).
            closing = await notes.next()
            assert closing["id"] == "plain" and closing["result"]["resultType"] == "complete", closing
            meta = closing["result"]["_meta"]
            assert meta["io.modelcontextprotocol/subscriptionId"] == "plain"
            assert meta["com.github.nimblemcp/listenAgain"] is True
            assert time.monotonic() - began < 5
            await asyncio.sleep(0.3)
            with pytest.raises(httpx.ConnectError):  # no longer accepting
                await c.post(url, content=b"{}", headers={"connection": "close"})
            assert text(await slow) == "finished"  # in flight: allowed to finish
            await asyncio.to_thread(proc.wait, HANG_GUARD)
            # Not the 20 s deadline: nimblemcp's listen had nowhere to move and ended
            # with the hand-over window (5 s).
            assert time.monotonic() - began < 15, log.read_text()
            # It ended with the hint, not as closed: the listener is re-listening.
            assert events.reconnects == 0 and events.handovers == 0
            assert not events._finished and events._task is not None and not events._task.done()
    finally:
        stop(proc)


async def test_listen_survives_a_rolling_restart_behind_a_balancer(tmp_path: Path, redis: RedisServer) -> None:
    src = write_server(tmp_path)
    env = {"NIMBLEMCP_STATE_KEYS": new_key(), "NIMBLEMCP_REDIS_URL": redis.url}
    ports = {"A": free_port(), "B": free_port()}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> None:
        procs[name] = launch(src, ports[name], tmp_path / f"{name}.log", env={**env, "INSTANCE": name})

    for name in ports:
        start(name)
    proxy = FailoverProxy(list(ports.values()))
    url = await proxy.start()
    delivered = 0
    try:
        async with Client(url) as client, httpx.AsyncClient(
                timeout=HANG_GUARD, headers={"connection": "close"}) as side, client.listen(
                resources=["test://doc"], backoff=0.05, max_backoff=0.5, max_reconnects=100) as events:
            assert (await events.next()).kind == "acknowledged"

            async def update_arrives() -> None:
                """Touch the resource (on any instance) until the listener hears it."""
                nonlocal delivered
                for _ in range(40):
                    # A new connection each time (a pooled one to a stopped instance
                    # would fail the call: that is the balancer's job in production).
                    assert (await call(side, url, "touch", {"uri": "test://doc"})).status_code == 200
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):
                            while True:
                                event = await events.next()
                                assert event.kind != "closed"
                                if event.kind == "resource_updated":
                                    delivered += 1
                                    return
                raise AssertionError("no update reached the listener")

            await update_arrives()
            for name in ("A", "B"):  # one at a time, as a rolling deploy does
                assert stop(procs[name]) in (0, -signal.SIGTERM)
                await update_arrives()
                start(name)
                await update_arrives()
            assert delivered == 5
            assert events.reconnects + events.handovers >= 1  # the instance holding the listen went away
    finally:
        await proxy.close()
        for proc in procs.values():
            stop(proc)
    for name in ports:
        assert "Traceback" not in (tmp_path / f"{name}.log").read_text()
