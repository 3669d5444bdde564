"""nimblemcp's own HTTP/1.1 serving engine: listening, lifespan, timers, shutdown.

`run(app, config)` serves any ASGI app (`nimblemcp run --transport http` gives it the
guarded app, so every security check stays in the app) on asyncio, with uvloop when
it is installed, and returns when the process is told to stop. The connections are
`_engine.Connection`; this module owns what is shared between them:

- the ASGI lifespan (startup must complete before the port is bound; a failed startup
  makes `run` return False, and the process should exit non-zero);
- one sweep timer (`_TICK`) that moves a coarse clock and the `date` header and
  closes connections past their head deadline or idle timeout, so that no timer is
  armed or cancelled per request;
- graceful shutdown on SIGTERM/SIGINT: stop accepting, `before_stop(signal)` (the
  caller ends listen streams there), close idle connections, let requests in flight
  finish for up to `shutdown_timeout` seconds, cancel what is left, then the lifespan
  shutdown. A second signal skips the wait.

Imports `_engine` (hence `httptools`) and the stdlib; uvloop if installed. Never
uvicorn, never the server.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nimblemcp.transports._engine import ANSWER, Connection, _Cycle
from nimblemcp.transports._engine_proxy import TrustedProxies

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # the same frozen records, built without dataclass's `exec` (start-up cost; issue 18)
    from nimblemcp.types._records import dataclass

__all__ = ["Engine", "EngineConfig", "run"]

logger = logging.getLogger("nimblemcp.http")
access_logger = logging.getLogger("nimblemcp.http.access")

# Python 3.12+: `asyncio.Task(..., eager_start=True)` runs a task's first step at once.
_EAGER = sys.version_info >= (3, 12)
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
    # 3.12+: start a request's task eagerly, inside the read that completed it. Off by
    # default: ~4% fewer instructions per request, but fewer req/s and a higher p99 at
    # 64 connections in every wall-clock pair measured (benchmarks/README.md, "Served
    # path, round five" and "Session 8's closing run").
    eager_start: bool = False


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
        self.eager = False  # start requests with `start_now` (see `use_plain_tasks`)
        self.at_once = False  # inside `start_now`'s first step: its answer is held, then written
        self.held: tuple[_Cycle, bytes] | None = None  # that answer
        self.answers: list[tuple[_Cycle, bytes]] = []  # `_Cycle.answer`s of this loop pass

    # -- per request ---------------------------------------------------------------------

    def use_plain_tasks(self) -> None:
        """Create request tasks as `asyncio.Task(..., name=...)` when no task factory is set.

        Called once the lifespan startup is over (the app may install a factory there).
        What it saves per request: the loop's `create_task` wrapper and, on 3.11, the
        `Task-<n>` name formatted for every task. On 3.12+ with `EngineConfig.eager_start`
        the connection then starts a request that began in a read with `start_now`, at
        the end of that read."""
        self.plain_tasks = self.loop.get_task_factory() is None
        self.eager = self.plain_tasks and _EAGER and self.config.eager_start

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

    def start_now(self, conn: Connection, cycle: _Cycle) -> None:
        """Start `cycle` as a task whose first step runs now (3.12+, no task factory):
        called by `Connection.data_received` once its read is parsed, so the request's
        body is there, and an app that never suspends has answered when this returns,
        with no task step scheduled. A task that ended in that step is never added to
        `tasks` (nothing would take it out); `cycle.task` is None while the step runs.

        An answer given in that step (`_Cycle.answer`) is written when the step ends (the
        app has returned or failed, as on the next pass), not queued for the loop's next
        pass: holding the answers of eager requests for the next pass raised p99 at 64
        connections by ~2 ms (3.12; see benchmarks/README.md, "Served path, round five")."""
        cycle.task = None
        self.at_once = True
        try:
            task = asyncio.Task(self._run(conn, cycle), loop=self.loop, name="nimblemcp-request",
                                eager_start=True)  # type: ignore[call-arg]  # 3.12+ only
        finally:
            self.at_once = False
        held = self.held
        if held is not None:
            self.held = None
            self._deliver(*held)
        if not task.done():
            cycle.task = task
            self.tasks.add(task)

    def flush_answers(self) -> None:
        answers = self.answers
        self.answers = []
        for cycle, body in answers:
            try:  # `_deliver`, without the call
                cycle.deliver(body)
            except Exception:  # not expected; one answer must not stop the rest
                logger.exception("error writing an answer")
                cycle.conn.transport.close()

    @staticmethod
    def _deliver(cycle: _Cycle, body: bytes) -> None:
        try:
            cycle.deliver(body)
        except Exception:  # not expected; one answer must not stop the rest
            logger.exception("error writing an answer")
            cycle.conn.transport.close()

    async def _run(self, conn: Connection, cycle: _Cycle) -> None:
        scope = cycle.scope
        # The very `send` handed to the app, offered with `_Cycle.answer` (see there).
        # Taken out again after: the scope is the cycle's, and would hold it in a loop.
        scope[ANSWER] = send = cycle.send
        try:
            await self.app(scope, cycle.receive, send)
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
            if task is not None:  # None: ending in the eager first step (`start_now`)
                self.tasks.discard(task)
            try:  # noqa: SIM105  (no context manager per request)
                del scope[ANSWER]
            except KeyError:  # the app took it out
                pass
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
    installed only on the main thread."""
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
    if config.sockets:
        listeners = [await loop.create_server(lambda: Connection(engine), sock=sock, backlog=config.backlog)
                     for sock in config.sockets]
    else:
        listeners = [await loop.create_server(lambda: Connection(engine), config.host, config.port,
                                              backlog=config.backlog, reuse_address=True)]
    engine.start_sweeping()
    first = listeners[0].sockets
    name = first[0].getsockname() if first else (config.host, config.port)
    host = f"[{name[0]}]" if ":" in str(name[0]) else name[0]
    logger.info("running on http://%s:%d (Press CTRL+C to quit)", host, name[1])
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


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(app: Any, config: EngineConfig, before_stop: Callable[[int], Awaitable[None]] | None = None,
        started: Callable[[tuple[str, int]], None] | None = None) -> bool:
    """Serve `app` (blocking) on a new event loop; see `serve`."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(serve(app, config, before_stop, started=started))
