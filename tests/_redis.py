"""A real, throw-away `redis-server` for tests: loopback only, a free port, no persistence.

`RedisServer.start()` FAILS (never skips) when `redis-server` is missing: `scripts/test`
installs it, and a skip would hide the loss of the scale-out tests. `stop()` and
`start()` again on the same port simulate Redis restarting under running instances.
`running()` is one started for a `with` block (the `redis_server`/`redis` fixtures of
conftest.py use it); `shared(redis)` is a RedisStore and a RedisBus on it, closed after.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when used: conftest.py imports this module for every test
    from nimblemcp.backends.redis import RedisBus, RedisStore


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server not found: install it (apt-get install -y redis-server); "
                "scripts/test does this when CI is set or when run as root")
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="nimblemcp-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with (self.dir / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", str(self.dir), "--protected-mode", "yes"],
                stdout=log, stderr=log)
        for _ in range(400):  # until it answers PING
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.dir / 'redis.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.025)
        self.stop()
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def running() -> Iterator[RedisServer]:
    """A started `RedisServer`, closed (stopped, its directory removed) afterwards."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@contextlib.asynccontextmanager
async def shared(redis: RedisServer) -> AsyncIterator[tuple[RedisStore, RedisBus]]:
    """A `RedisStore` and a `RedisBus` on `redis` (default prefix and channel), closed after."""
    from nimblemcp.backends.redis import RedisBus, RedisStore

    store, bus = RedisStore(redis.url), RedisBus(redis.url)
    try:
        yield store, bus
    finally:
        bus.close()
        await store.close()
