"""An instance cut off from Redis tells its listens (issue 34, point 3; SUB-10): events
published while an instance's connection to Redis is cut never reach it, so the Redis
bus sends its listens a `GAP` when the subscription is lost and again when it is back;
each listen ends with its closing result and the "listen again" hint, and the client
re-listens and yields `missed` before the first event after the gap. Before, the
listen stayed open and the lost events were lost silently. A real `nimblemcp run`
instance reaching a real Redis through a TCP proxy that the test cuts (connections
reset, new ones refused), events published by the test's own Redis bus."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from _deploy import HANG_GUARD, launch, stop, write_server
from _redis import RedisServer, free_port, shared

from nimblemcp import Client
from nimblemcp.backends.bus import Event


class CuttableProxy:
    """Loopback TCP proxy to `port`; `cut()` resets its connections and refuses new ones."""

    def __init__(self, port: int) -> None:
        self.port, self.cut_off = port, False
        self.conns: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.conns.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.conns.difference_update((writer, up_writer))

    def cut(self) -> None:
        self.cut_off = True
        for conn in list(self.conns):
            conn.transport.abort()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_events_lost_while_cut_off_from_redis_are_signalled_by_missed(
    tmp_path: Path, redis: RedisServer,
) -> None:
    proxy = CuttableProxy(redis.port)
    through = await proxy.start()
    port = free_port()
    log = tmp_path / "a.log"
    proc = await asyncio.to_thread(launch, write_server(tmp_path), port, log,
                                   env={"NIMBLEMCP_REDIS_URL": f"redis://127.0.0.1:{through}/0"})
    heard: list[str] = []
    try:
        async with shared(redis) as (_store, bus), Client(f"http://127.0.0.1:{port}/mcp") as client, \
                client.listen(resources=["test://doc"], backoff=0.05, max_backoff=0.5) as events:
            assert (await asyncio.wait_for(events.next(), HANG_GUARD)).kind == "acknowledged"

            async def until(uri: str) -> None:
                """Publish `uri` until the listen hears it (the instance may be re-subscribing)."""
                while True:
                    bus.publish(Event("updated", uri))
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.3):
                            while True:
                                event = await events.next()
                                heard.append(event.kind if event.kind != "resource_updated" else str(event.uri))
                                if event.uri == uri:
                                    return

            await asyncio.wait_for(until("test://doc/before"), HANG_GUARD)
            proxy.cut()
            await asyncio.sleep(1.0)
            for i in range(5):  # published while the instance cannot hear Redis
                bus.publish(Event("updated", f"test://doc/lost/{i}"))
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            proxy.cut_off = False  # the network is back
            await asyncio.wait_for(until("test://doc/after"), HANG_GUARD)
        cut = heard.index("test://doc/before")
        back = heard.index("test://doc/after")
        assert "missed" in heard[cut:back], heard  # the gap was signalled
        assert not any(h.startswith("test://doc/lost/") for h in heard), heard
    finally:
        proxy.close()
        await asyncio.to_thread(stop, proc)
