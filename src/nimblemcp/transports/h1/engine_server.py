"""nimblemcp's own HTTP/1.1 serving engine: listening, lifespan, timers, shutdown.

`run(app, config)` serves any ASGI app (`nimblemcp run --transport http --engine
nimblemcp` gives it the guarded app, so every security check stays in the app) on
asyncio (on the loop its caller's factory makes: `serving` picks uvloop when it is
installed), and returns when the process is told to stop. The connections are
`engine.Connection`; this module owns what is shared between them:

- the ASGI lifespan (startup must complete before the port is bound; a failed startup
  makes `run` return False, and the process should exit non-zero);
- one sweep timer (`_TICK`) that moves a coarse clock and the `date` header and
  closes connections past their head deadline or idle timeout, so that no timer is
  armed or cancelled per request;
- graceful shutdown on SIGTERM/SIGINT: stop accepting, `before_stop(signal)` (the
  caller ends listen streams there), close idle connections, let requests in flight
  finish for up to `shutdown_timeout` seconds, cancel what is left, then the lifespan
  shutdown. A second signal skips the wait;
- TLS (`tls_context`): a certificate and key, and client certificates verified
  against `ssl_ca_certs` when given; the handshake must end within the head deadline.

Imports `engine` (hence `httptools`) and the stdlib only. Never uvicorn, never the
server.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nimblemcp.transports.h1.engine import Connection, EngineExtension, _Cycle
from nimblemcp.transports.h1.proxies import TrustedProxies

__all__ = ["Engine", "EngineConfig", "run", "serve", "tls_context"]

logger = logging.getLogger("nimblemcp.http")
access_logger = logging.getLogger("nimblemcp.http.access")

_TICK = 0.25  # seconds between sweeps: the precision of every connection timeout
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _date_header(now: float) -> bytes:
    t = time.gmtime(now)
    return (f"date: {_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT\r\n").encode("ascii")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Where and how the engine serves (`serving.run_http` builds it from its options)."""

    host: str = "127.0.0.1"
    port: int = 8000
    sockets: tuple[Any, ...] = ()  # bound, listening sockets to serve on instead of host:port
    root_path: str = ""
    proxy_headers: bool = True
    forwarded_allow_ips: str | None = None
    head_timeout: float = 10.0
    max_head: int = 40 * 1024
    idle_timeout: float = 5.0
    shutdown_timeout: float = 10.0
    access_log: bool = False
    backlog: int = 2048
    # TLS (`tls_context`): a certificate chain and its key (and the key's password);
    # `ssl_ca_certs` asks every client for a certificate signed by one of these CAs.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_keyfile_password: str | None = None
    ssl_ca_certs: str | None = None


def tls_context(config: EngineConfig) -> ssl.SSLContext | None:
    """The server's TLS context for `config`, or None for plain HTTP. Raises OSError or
    `ssl.SSLError` for a file that cannot be read or a key that does not fit."""
    if config.ssl_certfile is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # no system CAs: clients are checked against ssl_ca_certs only
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile, config.ssl_keyfile_password)
    if config.ssl_ca_certs is not None:
        context.load_verify_locations(cafile=config.ssl_ca_certs)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class Engine:
    """The state the connections of one running engine share."""

    def __init__(self, app: Any, config: EngineConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.config = config
        self.loop = loop
        self.root_path = config.root_path
        self.root_path_raw = config.root_path.encode("ascii")
        self.head_timeout = config.head_timeout
        self.idle_timeout = config.idle_timeout
        self.max_head = config.max_head
        self.proxies = TrustedProxies(config.forwarded_allow_ips) if config.proxy_headers else None
        self.access_log = config.access_log
        self.state: dict[str, Any] = {}
        self.paths: dict[bytes, str] = {}  # plain request targets (no query, no escapes) -> path
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.now = loop.time()
        self._second = int(time.time())
        self.date_header = _date_header(self._second)
        self._sweeper: asyncio.TimerHandle | None = None
        self.plain_tasks = False  # see `use_plain_tasks`
        self.extension = EngineExtension(loop)  # in every request's scope["extensions"]
        self.answers: list[tuple[_Cycle, bytes]] = []  # the one-step answers of this loop pass (`engine._answer`)

    # -- per request ---------------------------------------------------------------------

    def use_plain_tasks(self) -> None:
        """Create request tasks as `asyncio.Task(..., name=...)` when no task factory is set.

        Called once the lifespan startup is over (the app may install a factory there).
        What it saves per request: the loop's `create_task` wrapper and, on 3.11, the
        `Task-<n>` name formatted for every task."""
        self.plain_tasks = self.loop.get_task_factory() is None

    def start(self, conn: Connection, cycle: _Cycle) -> None:
        """Start `cycle` as a task whose first step runs on a later loop pass (always
        so from `Connection.response_done`, which may run inside a request's task).
        `Connection.on_headers_complete` does the first branch itself (a call per request)."""
        if self.plain_tasks:  # called directly: a `partial` with keywords builds a dict per call
            task = asyncio.Task(self._run(conn, cycle), loop=self.loop, name="nimblemcp-request")
        else:  # the factory may start it eagerly (`asyncio.eager_task_factory`): done already
            cycle.task = None
            task = self.loop.create_task(self._run(conn, cycle))
            if task.done():
                return
        cycle.task = task
        self.tasks.add(task)  # dropped by `_run` itself: a done callback costs a loop pass

    def flush_answers(self) -> None:
        answers = self.answers
        self.answers = []
        for cycle, body in answers:
            try:  # `_deliver`, without the call
                cycle.deliver(body)
            except Exception:  # not expected; one answer must not stop the rest
                logger.exception("error writing an answer")
                cycle.conn.transport.close()

    async def _run(self, conn: Connection, cycle: _Cycle) -> None:
        try:
            await self.app(cycle.scope, cycle.receive, cycle.send)
        except asyncio.CancelledError:
            conn.transport.close()
            raise
        except BaseException as exc:
            conn.app_failed(cycle, exc)
        else:
            if not cycle.response_complete:
                conn.app_failed(cycle, None)
        finally:
            task = cycle.task
            if task is not None:  # None: a task factory ran it to its end where it was made
                self.tasks.discard(task)
        if self.access_log:
            scope = cycle.scope
            client = scope["client"]
            access_logger.info('%s - "%s %s HTTP/%s" %d', f"{client[0]}:{client[1]}" if client else "-",
                               scope["method"], scope["path"], scope["http_version"], cycle.status)

    # -- timers --------------------------------------------------------------------------

    def start_sweeping(self) -> None:
        self._sweeper = self.loop.call_later(_TICK, self._sweep)

    def stop_sweeping(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def _sweep(self) -> None:
        self.now = now = self.loop.time()
        second = int(time.time())
        if second != self._second:
            self._second = second
            self.date_header = _date_header(second)
        for conn in [c for c in self.connections if 0.0 < c.deadline <= now]:
            conn.expire()
        self._sweeper = self.loop.call_later(_TICK, self._sweep)


class _Lifespan:
    """The ASGI lifespan protocol, driven from the engine's side."""

    def __init__(self, app: Any, state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.supported = True

    async def _main(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        try:
            await self.app(scope, self.inbox.get, self.outbox.put)
        except BaseException as exc:
            logger.error("Exception in the ASGI lifespan", exc_info=exc)
            await self.outbox.put({"type": "lifespan.startup.failed", "message": str(exc), "crashed": True})
        finally:
            await self.outbox.put({"type": "_ended"})

    async def _exchange(self, kind: str) -> bool:
        await self.inbox.put({"type": f"lifespan.{kind}"})
        reply = await self.outbox.get()
        if reply["type"] == "_ended":  # the app does not speak lifespan: serve without it
            self.supported = False
            return True
        if reply["type"] == f"lifespan.{kind}.failed" or reply.get("crashed"):
            if reply.get("message"):
                logger.error("%s", reply["message"])
            return False
        return True

    async def startup(self) -> bool:
        self.task = asyncio.get_running_loop().create_task(self._main())
        ok = await self._exchange("startup")
        if not ok:
            logger.error("Application startup failed. Exiting.")
        return ok

    async def shutdown(self) -> None:
        if not self.supported or self.task is None or self.task.done():
            return
        if not await self._exchange("shutdown"):
            logger.error("Application shutdown failed.")


async def serve(app: Any, config: EngineConfig,
                before_stop: Callable[[int], Awaitable[None]] | None = None, *,
                stop_event: asyncio.Event | None = None,
                started: Callable[[tuple[str, int]], None] | None = None) -> bool:
    """Serve `app` until SIGTERM/SIGINT; False if the lifespan startup failed.

    Embedded (a test, another loop's thread): `stop_event` set stops it as SIGINT
    would, and `started((host, port))` is called once it listens. Signal handlers are
    installed only on the main thread. A TLS file that cannot be used raises OSError or
    `ssl.SSLError` before the app starts."""
    tls = tls_context(config)
    loop = asyncio.get_running_loop()
    engine = Engine(app, config, loop)
    lifespan = _Lifespan(app, engine.state)
    # Handlers before the lifespan: the port may already be bound (and connectable), so
    # a SIGTERM during start-up must stop the server cleanly, not kill it.
    signals: list[int] = []
    stop = loop.create_future()
    forced = loop.create_future()

    def on_signal(signum: int) -> None:
        signals.append(signum)
        target = stop if not stop.done() else forced
        if not target.done():
            target.set_result(None)

    installed = []
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(signum, on_signal, signum)
                installed.append(signum)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
    started_ok = False
    try:
        started_ok = await lifespan.startup()
    finally:
        if not started_ok:
            for signum in installed:
                loop.remove_signal_handler(signum)
    if not started_ok:
        return False
    engine.use_plain_tasks()
    options: dict[str, Any] = {"backlog": config.backlog}
    if tls is not None:  # a handshake is part of the head: it gets the head's deadline
        options.update(ssl=tls, ssl_handshake_timeout=config.head_timeout)
    if config.sockets:
        listeners = [await loop.create_server(lambda: Connection(engine), sock=sock, **options)
                     for sock in config.sockets]
    else:
        listeners = [await loop.create_server(lambda: Connection(engine), config.host, config.port,
                                              reuse_address=True, **options)]
    engine.start_sweeping()
    first = listeners[0].sockets
    name = first[0].getsockname() if first else (config.host, config.port)
    host = f"[{name[0]}]" if ":" in str(name[0]) else name[0]
    logger.info("running on %s://%s:%d (Press CTRL+C to quit)", "https" if tls else "http", host, name[1])
    if started is not None:
        started((str(name[0]), int(name[1])))

    watcher = None
    if stop_event is not None:
        async def watch() -> None:
            await stop_event.wait()
            on_signal(signal.SIGINT)

        watcher = loop.create_task(watch())
    try:
        await stop
        logger.info("shutting down")
        for listener in listeners:
            listener.close()
        if before_stop is not None:
            await before_stop(signals[0])
        for conn in list(engine.connections):
            conn.shutdown()
        pending = set(engine.tasks)
        if pending:
            logger.info("waiting for %d request(s) to finish", len(pending))
        deadline = loop.time() + config.shutdown_timeout
        while not forced.done():
            left = [t for t in pending if not t.done()]
            remaining = deadline - loop.time()
            if not left or remaining <= 0:
                break
            await asyncio.wait([*left, forced], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        for task in list(engine.tasks):
            task.cancel()
        if engine.tasks:
            await asyncio.wait(list(engine.tasks), timeout=1.0)
        if engine.connections:
            for conn in list(engine.connections):
                conn.transport.close()
            await asyncio.sleep(0.05)  # let the closes flush what is buffered
        engine.stop_sweeping()
        await lifespan.shutdown()
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
        if watcher is not None:
            watcher.cancel()
        engine.stop_sweeping()
    return True


def run(app: Any, config: EngineConfig, before_stop: Callable[[int], Awaitable[None]] | None = None,
        started: Callable[[tuple[str, int]], None] | None = None,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> bool:
    """Serve `app` (blocking) on a new event loop made by `loop_factory` (default:
    asyncio's); see `serve`."""
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(serve(app, config, before_stop, started=started))
