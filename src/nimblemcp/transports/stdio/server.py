"""stdio server transport: newline-delimited JSON-RPC on stdin/stdout (STDIO-01..06).

While it runs, stdout belongs to the protocol alone: fd 1 is pointed at stderr and
`sys.stdout` is replaced, so a stray `print()` or a C library writing to fd 1 lands on
stderr; protocol messages go to a private duplicate of the original stdout.
Requests run concurrently as tasks; `notifications/cancelled` cancels one. On 3.12+
(no task factory) a request's first step runs in the line that carried it, so a
handler that never suspends has answered before the next line is read.
A peer that sends `initialize` gets a legacy (2025-11-25) session from `_legacy`:
its requests without the modern `_meta` envelope run with the session's metadata,
a handler's questions go out as server-to-client requests on stdout and come back
as responses on stdin (LEG-09), and list changes and subscribed resource updates
are written as untagged notifications (LEG-12). Enveloped (modern) requests keep
working on the same connection (COMPAT-S01).

Talks to the server through the port (`nimblemcp._port.Core`) only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nimblemcp._loop import running_loop
from nimblemcp._port import Core, Emit
from nimblemcp.errors import InternalError, InvalidRequest, ParseError, ProtocolError
from nimblemcp.jsonrpc import classify, decode_request, encode_reply, error_response, request_id_of
from nimblemcp.transports._envelope import is_enveloped
from nimblemcp.transports.stdio._lines import ReadGate, pollable, start_reading

if TYPE_CHECKING:
    from nimblemcp.transports._legacy import LegacySession

logger = logging.getLogger("nimblemcp.stdio")

MAX_LINE = 16 * 1024 * 1024
SHUTDOWN_GRACE = 2.0  # default seconds running requests and tasks get when the server stops
_LISTEN_CLOSE = 1.0  # seconds for listen streams to write their closing result
_OUTPUT_FLUSH = 2.0  # seconds buffered output gets to reach the pipe at the end
_EAGER = sys.version_info >= (3, 12)  # `asyncio.Task(..., eager_start=True)` exists
_SETTLE = 1.0  # seconds work cancelled at the grace's end gets to wind down (`run_stdio`)
_POLL = 0.02  # seconds between looks at the pool threads while waiting for them
# Output waiting for a peer that does not read: above `_OUT_HIGH` bytes, stdin is no
# longer read (no new work) until it is back under `_OUT_LOW`; memory stays bounded.
_OUT_HIGH = 16 * 1024 * 1024
_OUT_LOW = 4 * 1024 * 1024
# Listen streams do not wait for requests: past `_OUT_CUT` unread bytes they are ended
# with `notifications/cancelled` (as an HTTP stream is past its buffer), looked at every
# `_OUT_WATCH` seconds while reading is paused.
_OUT_CUT = 64 * 1024 * 1024
_OUT_WATCH = 0.05
BACKLOG = "The client did not read the server's output; the listen was ended"
SHUTTING_DOWN = "The server is shutting down; send the request again once it has restarted"


_proto_fd: int | None = None


def protect_stdout() -> int:
    """Reserve the real stdout for the protocol; return the fd to write messages to.

    Once per process: `nimblemcp run` calls it before importing the server's module
    (whose import-time `print()` would otherwise corrupt the stream), the transport
    again when it starts, and both get the same fd."""
    global _proto_fd
    if _proto_fd is None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        _proto_fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    return _proto_fd


class _Backpressure(asyncio.Protocol):
    """The output pipe's flow control, handed to the writer."""

    def __init__(self, writer: _Writer) -> None:
        self.writer = writer

    def pause_writing(self) -> None:
        self.writer.backed_up()

    def resume_writing(self) -> None:
        self.writer.caught_up()


class _Writer:
    """Writes whole lines to the protocol fd; never interleaves two messages. With
    `gate`, reading stops while the peer leaves more than `_OUT_HIGH` bytes unread (a
    pipe), and `on_backlog()` is called once past `_OUT_CUT`."""

    def __init__(self, fd: int, gate: ReadGate | None = None) -> None:
        self.fd = fd
        self.gate = gate
        self.transport: asyncio.WriteTransport | None = None
        self.on_backlog: Callable[[], None] | None = None
        self.watchdog: asyncio.Task[None] | None = None

    def backed_up(self) -> None:
        if self.gate is not None:
            self.gate.pause()
        if self.watchdog is None and self.on_backlog is not None:
            self.watchdog = asyncio.get_running_loop().create_task(self._watch())

    def caught_up(self) -> None:
        if self.gate is not None:
            self.gate.resume()

    async def _watch(self) -> None:
        """While reading is paused: once the backlog passes `_OUT_CUT`, `on_backlog()`."""
        transport, gate = self.transport, self.gate
        try:
            while transport is not None and gate is not None and gate.paused and not transport.is_closing():
                if transport.get_write_buffer_size() > _OUT_CUT:
                    if self.on_backlog is not None:
                        self.on_backlog()
                    return
                await asyncio.sleep(_OUT_WATCH)
        finally:
            self.watchdog = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        if not pollable(self.fd):
            return  # a regular file: plain blocking writes are fine
        try:
            pipe = os.fdopen(self.fd, "wb", buffering=0, closefd=False)
            self.transport, _ = await loop.connect_write_pipe(
                asyncio.Protocol if self.gate is None else lambda: _Backpressure(self), pipe)
        except (ValueError, OSError):
            self.transport = None  # a regular file: plain blocking writes are fine
        else:
            self.transport.set_write_buffer_limits(_OUT_HIGH, _OUT_LOW)

    async def close(self) -> None:
        """Let buffered output reach the pipe (at most `_OUTPUT_FLUSH` seconds), then close."""
        if self.watchdog is not None:
            self.watchdog.cancel()
        transport = self.transport
        if transport is None:
            return
        for _ in range(int(_OUTPUT_FLUSH / 0.005)):
            if transport.is_closing() or not transport.get_write_buffer_size():
                break
            await asyncio.sleep(0.005)
        transport.close()

    def write(self, message: dict[str, Any]) -> None:
        data = encode_reply(message) + b"\n"
        if self.transport is not None:
            if not self.transport.is_closing():
                self.transport.write(data)
            return
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]


class _StdioIO:
    """The `RequestIO` of every modern request of one connection: notifications go
    to stdout; no subject, no back channel."""

    __slots__ = ("emit", "loop")
    subject = None
    ask = None
    close_stream = None

    def __init__(self, emit: Emit, loop: asyncio.AbstractEventLoop) -> None:
        self.emit = emit
        self.loop = loop


class StopSignal:
    """Asks a stdio server to stop; `run_stdio` calls it on SIGTERM. The first call
    (or the end of stdin) begins a graceful stop; any later call cuts its waiting short
    (as a second signal does under `run_http`)."""

    __slots__ = ("begun", "hurried", "on_hurry")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.begun: asyncio.Future[None] = loop.create_future()
        self.hurried: asyncio.Future[None] = loop.create_future()
        self.on_hurry: Callable[[], None] | None = None

    def begin(self) -> None:
        """The stop began (stdin ended): from now on a call cuts it short."""
        if not self.begun.done():
            self.begun.set_result(None)

    def __call__(self) -> None:
        if not self.begun.done():
            self.begun.set_result(None)
        elif not self.hurried.done():
            self.hurried.set_result(None)
            if self.on_hurry is not None:
                self.on_hurry()


async def serve_stdio(server: Core, in_fd: int = 0, out_fd: int | None = None, *,
                      stop: StopSignal | None = None, shutdown_timeout: float = SHUTDOWN_GRACE) -> int:
    """Serve one client on the given fds until stdin reaches EOF or `stop` is called
    (see `_serve`; no lifespan; running requests get `shutdown_timeout` seconds).

    Returns how many requests were still running after the shutdown grace period
    (then cancelled); their worker threads (sync tools) cannot be stopped from here.
    """
    return await _serve(server, in_fd, out_fd, stop or StopSignal(running_loop()), lifespan=False,
                        grace=_check_grace(shutdown_timeout))


def _check_grace(seconds: float) -> float:
    grace = float(seconds)
    if not grace >= 0:  # also NaN
        raise ValueError(f"shutdown_timeout must be a number of seconds >= 0, not {seconds!r}")
    return grace


async def _serve(server: Core, in_fd: int, out_fd: int | None, stop: StopSignal, *, lifespan: bool,
                 grace: float, busy: Callable[[], list[str]] | None = None) -> int:
    """Serve until stdin ends or `stop()`; then stop gracefully (STDIO-06, TASK-05):

    1. No new request is accepted: one that still arrives is answered at once with
       -32603 (`SHUTTING_DOWN`); cancellations and a legacy client's answers to the
       server's questions are still read while stdin is open.
    2. Running requests (not listen streams) and background tasks (`Core.drain`) get
       `grace` seconds (and, given `busy`, so do the pool threads it names: a sync tool
       whose request was cancelled may still run); another `stop()` ends the wait at
       once. Requests still running then are cancelled (no response, as for a cancel)
       and stdin is no longer read.
    3. The lifespan ends (`lifespan=True`): tasks still running are marked failed and
       the change is published, so an open listen stream hears it.
    4. Listen streams end with their closing result (SUB-09); buffered output reaches
       the pipe; stdout carries nothing but protocol messages throughout.
    """
    gate = ReadGate()
    writer = _Writer(out_fd if out_fd is not None else protect_stdout(), gate)
    await writer.open()
    inflight: dict[tuple[type, Any], asyncio.Task[None]] = {}
    listens: dict[asyncio.Task[None], Any] = {}  # -> request id; never end by themselves: not waited for
    loop = running_loop()  # once: asyncio's own lookup costs a getpid() per call on 3.11

    # 3.12+ with no task factory (decided once the lifespan has started: it may set
    # one): `start` runs a request's first step at once, in the line that carried it.
    eager = False

    async def run(respond: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        try:
            response = await respond()
        except asyncio.CancelledError:
            return  # cancelled requests get no response (CANC-03)
        writer.write(response)

    def start(rid: Any, respond: Callable[[], Awaitable[dict[str, Any]]]) -> asyncio.Task[None] | None:
        """Run a request as a task (cancellable by id); its response is written at the
        end. The id of a request still running is refused (-32600): a cancellation
        names one request, and every running one must stay known (None then)."""
        key = (type(rid), rid)
        if key in inflight:
            writer.write(error_response(rid, InvalidRequest(f"Request id {rid!r} is already in use by a running request")))
            return None
        if eager:  # its first step runs now: a request that ends there is never in flight
            task = asyncio.Task(run(respond), loop=loop, eager_start=True)  # type: ignore[call-arg]
            if task.done():
                return task
            inflight[key] = task
        else:
            task = inflight[key] = loop.create_task(run(respond))
        task.add_done_callback(lambda _t: inflight.pop(key, None))
        return task

    io = _StdioIO(writer.write, loop)
    legacy: LegacySession | None = None  # set by the peer's `initialize`
    forwarder: asyncio.Task[None] | None = None

    def on_legacy_request(message: dict[str, Any]) -> bool:
        """Serve a request of the legacy era; False = not one (no session yet)."""
        nonlocal legacy, forwarder
        rid = message["id"]
        if message["method"] == "initialize":
            # Loaded for a 2025-11-25 peer only (start-up, issue 18).
            from nimblemcp.transports._legacy import LegacySession

            session = legacy if legacy is not None else LegacySession(server)
            try:
                result = session.initialize(message.get("params"))
            except ProtocolError as exc:
                writer.write(error_response(rid, exc))
                return True
            legacy = session
            writer.write({"jsonrpc": "2.0", "id": rid, "result": result})
            if forwarder is None:
                changes = server.changes()
                if changes is not None:
                    forwarder = loop.create_task(session.forward(changes, writer.write))
            return True
        if legacy is None:
            return False
        prepared = legacy.prepare(message)
        if isinstance(prepared, dict):
            writer.write(prepared)
        else:
            session, req = legacy, prepared
            start(rid, lambda: session.run(req, writer.write))
        return True

    def on_message(message: Any) -> None:
        try:
            kind = classify(message)
        except ProtocolError as exc:
            writer.write(error_response(request_id_of(message), exc))
            return
        if kind == "notification":
            if message["method"] == "notifications/cancelled":
                params = message.get("params") or {}
                rid = params.get("requestId")
                # Malformed or unknown ids are ignored (CANC-05); `1` != `"1"` (BASE-11).
                if type(rid) is str or type(rid) is int:
                    task = inflight.get((type(rid), rid))
                    if task is not None:
                        task.cancel()
            return
        if kind == "response":  # a legacy client answering one of our requests
            if legacy is not None:
                legacy.answer(message)
            return
        if not is_enveloped(message) and on_legacy_request(message):
            return
        try:
            req = server.prepare(message)
        except ProtocolError as exc:
            writer.write(error_response(message["id"], exc))
            return
        task = start(req.id, lambda: server.execute(req, io))
        if task is not None and req.method == "subscriptions/listen":
            listens[task] = req.id
            task.add_done_callback(lambda t: listens.pop(t, None))

    def while_stopping(message: Any) -> None:
        """`handle` once the stop began: a request is refused at once, the rest is
        served as before (cancellations, a legacy client's answers)."""
        try:
            kind = classify(message)
        except ProtocolError:
            kind = None
        if kind == "request":
            writer.write(error_response(message["id"], InternalError(SHUTTING_DOWN)))
        else:
            on_message(message)

    handle = on_message  # rebound, not tested per message, when the stop begins

    def cut_listens() -> None:
        """The peer left `_OUT_CUT` bytes unread: end its listen streams, which would
        otherwise write on (requests wait: stdin is paused)."""
        for task, rid in list(listens.items()):
            task.cancel()
            logger.warning("ending listen %r: the client does not read its output", rid)
            writer.write({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": rid, "reason": BACKLOG}})

    writer.on_backlog = cut_listens

    def on_line(line: bytes | None) -> None:
        if line is None:
            writer.write(error_response(None, ParseError("Message too large")))
            return
        if not line.strip():
            return
        try:
            message = decode_request(line)
        except ParseError as exc:
            writer.write(error_response(None, exc))
            return
        try:
            handle(message)
        except Exception:  # one bad message must never stop the server, nor go unanswered
            logger.exception("failed to handle a message")
            rid = request_id_of(message)
            if rid is not None and type(message) is dict and "method" in message:
                writer.write(error_response(rid, InternalError("Internal error")))

    stop_reading: Callable[[], None] | None = None
    abandoned = 0
    stop.on_hurry = lambda: server.drain(0)  # tasks too: stop waiting for them
    try:
        async with server.lifespan_context() if lifespan else contextlib.nullcontext():
            eager = _EAGER and loop.get_task_factory() is None
            ended, stop_reading = await start_reading(in_fd, on_line, MAX_LINE, gate)
            await asyncio.wait([ended, stop.begun], return_when=asyncio.FIRST_COMPLETED)
            handle = while_stopping
            eof = ended.done()
            stop.begin()  # also at the end of stdin: a SIGTERM now cuts the stop short
            if eof and legacy is not None:
                legacy.close(stop_requests=False)  # no answer can come any more
            server.drain(grace)
            abandoned = await _grace(inflight, listens, stop.hurried, grace, busy)
            stop_reading()
    finally:
        # The lifespan has ended: tasks are settled and their changes published.
        if stop_reading is not None:
            stop_reading()
        await _close(server, inflight, listens, forwarder, legacy, stop.hurried)
        await writer.close()
    return abandoned


async def _grace(inflight: dict[Any, asyncio.Task[None]], listens: dict[asyncio.Task[None], Any],
                 hurried: asyncio.Future[None], grace: float, busy: Callable[[], list[str]] | None) -> int:
    """Wait for running requests (listens aside), then for the pool threads `busy`
    names, until `grace` ends or `hurried`; cancel the requests still running and
    return how many they were."""
    loop = running_loop()
    deadline = loop.time() + grace
    await _wait_all([task for task in inflight.values() if task not in listens], hurried, grace)
    if busy is not None:
        await _wait_threads(busy, hurried, deadline)
    late = [task for task in inflight.values() if task not in listens and not task.done()]
    for task in late:
        task.cancel()
    return len(late)


async def _wait_all(tasks: list[asyncio.Task[None]], hurried: asyncio.Future[None], timeout: float) -> None:
    """Wait until every task of `tasks` is done, `timeout` seconds pass or `hurried`
    (one wait for them all: thousands may still run when stdin ends)."""
    running = [task for task in tasks if not task.done()]
    if not running or hurried.done():
        return
    everything: asyncio.Future[Any] = asyncio.ensure_future(asyncio.wait(running))
    try:
        await asyncio.wait([everything, hurried], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        everything.cancel()  # stops the waiting only, never the tasks


async def _wait_threads(busy: Callable[[], list[str]], hurried: asyncio.Future[None], deadline: float) -> None:
    """Look at the pool threads every `_POLL` seconds until none runs work, the loop's
    clock reaches `deadline` or `hurried`."""
    loop = running_loop()
    while not hurried.done() and busy():
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.wait([hurried], timeout=min(_POLL, left))


async def _close(server: Core, inflight: dict[Any, asyncio.Task[None]], listens: dict[asyncio.Task[None], Any],
                 forwarder: asyncio.Task[None] | None, legacy: LegacySession | None,
                 hurried: asyncio.Future[None]) -> None:
    """End the connection's listen streams with their closing result (SUB-09), then
    whatever still runs."""
    if listens or forwarder is not None:
        server.close_listeners()
        await _wait_all(list(listens), hurried, _LISTEN_CLOSE)
    if forwarder is not None:
        forwarder.cancel()
    if legacy is not None:
        legacy.close(stop_requests=False)
    for task in list(inflight.values()):
        task.cancel()


async def _serve_in_lifespan(server: Core, grace: float) -> int:
    """`_serve` inside the server's lifespan; stdout is protected first, so a lifespan
    that prints cannot corrupt the protocol stream. SIGTERM stops it gracefully.

    This loop is the process's own (`run_stdio`): afterwards whatever still runs on it
    is cancelled and gets `_SETTLE` seconds to end, and so do busy pool threads.
    Returns how many tasks and threads can still keep the process alive: a sync tool
    in a worker thread (nobody can stop it), work handed to `asyncio.to_thread`, a task
    that ignores its cancellation."""
    from nimblemcp.transports.stdio._stuck import busy_pool_threads

    out_fd = protect_stdout()
    loop = running_loop()
    stop = StopSignal(loop)
    handled = False
    if threading.current_thread() is threading.main_thread():
        try:
            loop.add_signal_handler(signal.SIGTERM, stop)
            handled = True
        except (NotImplementedError, RuntimeError, ValueError):  # not on this platform
            pass
    try:
        await _serve(server, 0, out_fd, stop, lifespan=True, grace=grace, busy=busy_pool_threads)
        return await _settle(stop.hurried, busy_pool_threads)
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGTERM)


async def _settle(hurried: asyncio.Future[None], busy: Callable[[], list[str]]) -> int:
    """Cancel every other task of this loop and give them and the busy pool threads
    `_SETTLE` seconds (`_POLL` once `hurried`: a cancelled task needs a loop pass or
    two to end); return how many of either remain, named in the log."""
    loop = running_loop()
    wait = _POLL if hurried.done() else _SETTLE
    deadline = loop.time() + wait
    never: asyncio.Future[None] = loop.create_future()
    me = asyncio.current_task()
    left = [task for task in asyncio.all_tasks(loop) if task is not me]
    for task in left:
        task.cancel()
    await _wait_all(left, never, wait)
    await _wait_threads(busy, never, deadline)
    stuck = [repr(task.get_coro()) for task in left if not task.done()] + busy()
    if stuck:
        logger.warning("exiting at once: %d piece(s) of work still running (%s)", len(stuck), ", ".join(stuck))
    return len(stuck)


def run_stdio(server: Core, *, shutdown_timeout: float | None = None) -> None:
    """Run `server` on this process's stdin/stdout (blocking) until stdin ends or
    SIGTERM; both stop it gracefully (see `_serve`): running requests and tasks get
    `shutdown_timeout` seconds (default `SHUTDOWN_GRACE`), then are cancelled.

    The exit status is 0. The process then exits normally (the loop closed, `atexit`
    handlers run, logs flushed) unless work that cannot be stopped still runs (a sync
    tool in a worker thread, see `_serve_in_lifespan`): then it leaves at once with
    `os._exit(0)`, after flushing the logs, so that work cannot keep it alive after
    stdin closed (STDIO-06)."""
    grace = SHUTDOWN_GRACE if shutdown_timeout is None else _check_grace(shutdown_timeout)
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if sys.stdin.isatty():  # a person started it by hand: say what is going on
        print(f"{server.name}: MCP server on stdio. Connect a host (it spawns this command), "
              "or type one JSON-RPC message per line; Ctrl-D to stop.", file=sys.stderr)
    runner = asyncio.Runner()
    stuck = 0
    with contextlib.suppress(KeyboardInterrupt):
        stuck = runner.run(_serve_in_lifespan(server, grace))
    if stuck:
        # Waiting for that work would keep the process alive after stdin closed
        # (STDIO-06): closing the runner waits for `to_thread` work, the interpreter's
        # exit for thread pools; a sync tool's worker is a daemon thread, but one that
        # writes to stderr during the interpreter's finalization can abort it.
        logging.shutdown()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(0)
    runner.close()
