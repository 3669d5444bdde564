"""Subprocess stdio client transport: spawn a server, newline-delimited JSON-RPC.

The child's stdout is demultiplexed as it arrives: responses by `id`, progress by
`progressToken`, other request-scoped notifications to the single in-flight request
(or to `on_notification` when it is ambiguous); server-to-client requests go to
`on_request` (legacy sessions, LEGC-03) and its answer is written back. The child's stderr is forwarded to
logging, never treated as an error signal (STDIO-02); its last lines and the exit status
go into the TransportError of a child that died. Lines on stdout that are not JSON are
logged, at most `NOISE_LINES` per `NOISE_WINDOW` seconds, the rest counted (issue 37). Abandoning a stream sends
`notifications/cancelled` (STDIO-05). Shutdown closes stdin, waits, then SIGTERM,
then SIGKILL (STDIO-06). Must not import `nimblemcp.client` or `nimblemcp.server`.

Lines are cut (by the stdio server's `LineSplitter`) and routed in the loop's read
callback for stdout (issue 18, session 12). On POSIX stdout is a pipe of our own, read
by the loop directly: no StreamReader, no reader task and none of the `call_soon` by
which asyncio's subprocess transport hands on each read, so a response costs two loop
passes less. A request waits on a small inbox, not an `asyncio.Queue`, and the pipe is
read 64 KiB at a time (`small_reads`). Together: 242k -> 180k instructions per
`tools/call` in the client process (callgrind), three system calls fewer per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from nimblemcp.errors import TransportError
from nimblemcp.jsonrpc import decode, encode, notification
from nimblemcp.transports._limits import MAX_MESSAGE_BYTES
from nimblemcp.transports._read_size import small_reads
from nimblemcp.transports.client._router import Router, answer
from nimblemcp.transports.stdio._lines import LineSplitter

# What `shlex.quote` leaves as it is (its `[^\w@%+=:,./-]` with `re.ASCII`).
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def _quote(arg: str) -> str:
    """`shlex.quote(arg)`, loading shlex (and compiling its pattern) only for an argument
    that needs quoting (issue 18: a client's first call)."""
    if arg and _PLAIN.issuperset(arg):
        return arg
    import shlex

    return shlex.quote(arg)

__all__ = ["StdioTransport"]

logger = logging.getLogger("nimblemcp.stdio_client")
MAX_LINE = MAX_MESSAGE_BYTES
STDERR_TAIL = 20  # lines of a dead child's stderr kept for the TransportError
# Non-JSON stdout lines logged per window; the rest are counted and said in one line
# (issue 37: 40 MB of garbage was 10.7 MB of warnings).
NOISE_LINES = 5
NOISE_WINDOW = 10.0


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's own protocol for a child with pipes (stdin's writer, stderr's reader,
    the exit), except for stdout, whose bytes go to the line splitter as they arrive
    (where stdout is the subprocess transport's pipe, not our own; see `open`)."""

    def __init__(self, lines: LineSplitter, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.lines = lines

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # None when stdout is our own pipe. (uvloop's process transport is no
        # `asyncio.SubprocessTransport` subclass, hence no isinstance test.)
        small_reads(cast("asyncio.SubprocessTransport", transport).get_pipe_transport(1))

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if fd == 1:
            self.lines.data_received(data)  # type: ignore[arg-type]  # pipes give bytes
        else:
            super().pipe_data_received(fd, data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.lines.eof_received()
        super().pipe_connection_lost(fd, exc)


class StdioTransport:
    """Talks to a server process it spawns; `open()` starts it, `close()` stops it."""

    carries_param_headers = False
    wire = "stdio"
    # Read the child's stdout through a pipe of our own (see `open`); False takes the
    # subprocess transport's pipe, as on Windows, where a plain pipe cannot be polled.
    _own_stdout_pipe = os.name == "posix"

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        inherit_env: bool = True,
        shutdown_timeout: float = 2.0,
        on_notification: Callable[[dict[str, Any]], None] | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.command = command
        #: The longest line read from the server's stdout; a longer one ends the connection.
        self.max_message_bytes = max_message_bytes
        self.args = list(args)
        self.env = dict(env or {})
        self.inherit_env = inherit_env
        self.cwd = cwd
        self.shutdown_timeout = shutdown_timeout
        self.on_notification = on_notification
        #: Answers a server-to-client request (legacy sessions); the result is written back.
        self.on_request: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
        #: Request ids whose abandonment must not send `notifications/cancelled` (the era
        #: probe: a legacy server may see nothing but `ping` before `initialize`, LEGC-01).
        self.quiet_ids: set[Any] = set()
        self.peer = "stdio:" + " ".join(map(_quote, [command, *self.args]))
        self.process: asyncio.subprocess.Process | None = None
        # Where each message read goes; a log message to the one request in flight.
        self._router = Router(lone_logs=True)
        self._tasks: list[asyncio.Task[None]] = []
        self._write_lock = asyncio.Lock()
        self._lost: str | None = None
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._stderr_task: asyncio.Task[None] | None = None
        self._stdout: asyncio.BaseTransport | None = None  # our own stdout pipe (POSIX)
        self._lines: LineSplitter | None = None  # cuts stdout into lines (made by `open`)
        # non-JSON stdout lines: the window's start, lines logged in it, lines suppressed
        self._noise_since, self._noise_shown, self._noise_hidden = 0.0, 0, 0

    async def open(self) -> None:
        if self.process is not None:
            return
        env = {**os.environ, **self.env} if self.inherit_env else dict(self.env)
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        lines = self._lines = LineSplitter(self._line, ended, self.max_message_bytes)
        # What `asyncio.create_subprocess_exec` does, with stdout handed to `lines`: on
        # POSIX through a pipe of our own, read by the loop directly (asyncio's subprocess
        # transport delivers each read one loop pass later, with `call_soon`); elsewhere
        # through the subprocess transport's own pipe.
        own = self._own_stdout_pipe
        read_fd, write_fd = os.pipe() if own else (-1, -1)
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _Protocol(lines, self.max_message_bytes, loop), self.command, *self.args,
                stdin=asyncio.subprocess.PIPE, stdout=write_fd if own else asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, cwd=self.cwd,
            )
        except OSError as exc:
            if own:
                os.close(read_fd)
            raise TransportError(f"cannot start {self.peer}: {exc}") from exc
        finally:
            if own:
                os.close(write_fd)  # the child has its copy: EOF comes when it closes it
        if own:
            pipe = open(read_fd, "rb", buffering=0)  # noqa: SIM115 - the transport closes it
            try:
                self._stdout, _ = await loop.connect_read_pipe(lambda: lines, pipe)
            except OSError as exc:  # not expected: a child we cannot hear is stopped at once
                pipe.close()
                transport.kill()
                transport.close()
                raise TransportError(f"cannot read from {self.peer}: {exc}") from exc
            small_reads(self._stdout)
        self.process = asyncio.subprocess.Process(transport, protocol, loop)
        self._lost = None
        self._stderr_tail.clear()
        self._stderr_task = asyncio.create_task(self._read_stderr())
        self._tasks = [asyncio.create_task(self._watch_stdout(ended)), self._stderr_task]

    async def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        name = os.path.basename(self.command)
        while line := await self.process.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            self._stderr_tail.append(text)
            logger.info("[%s] %s", name, text)

    async def _watch_stdout(self, ended: asyncio.Future[None]) -> None:
        """When stdout closes: say why (the exit status and stderr tail of a child that
        died) and end every pending request with it."""
        await ended
        self._say_suppressed()
        if self._lost is None:  # not already over the cap (`_line`)
            self._lost = await self._why_lost("the server closed its stdout")
        self._router.end_all()

    def _line(self, line: bytes | None) -> None:
        """One line of the child's stdout, from the splitter; None: a line over
        `max_message_bytes`, which ends the connection (nothing after it is read)."""
        if line is None:
            assert self._lines is not None  # the splitter calling us
            self._lines.stopped = True
            self._lost = (f"the server sent a line larger than {self.max_message_bytes} bytes "
                          "(the client's max_message_bytes); the connection is closed")
            self._router.end_all()
        elif line.strip():
            try:
                self._route(line)
            except Exception:  # an `on_notification` that raised: the stream goes on
                logger.exception("error routing a message from the server")

    async def _why_lost(self, reason: str) -> str:
        """`reason`, plus the exit status and stderr tail of a child that died."""
        process = self.process
        if process is None:  # close() is stopping it: nothing to explain
            return reason
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 1.0)
        if process.returncode is None:
            return reason
        if self._stderr_task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 0.5)
        text = f"{reason}; it exited with status {process.returncode}"
        if self._stderr_tail:
            text += "; the end of its stderr:\n" + "\n".join(f"  {t}" for t in self._stderr_tail)
        return text

    def _route(self, line: bytes) -> None:
        try:
            message = decode(line)
        except Exception:
            self._ignore(line)
            return
        serve = self._serve if self.on_request is not None else None
        self._router.route(message, serve=serve, on_notification=self.on_notification)

    def _ignore(self, line: bytes) -> None:
        """A non-JSON stdout line: a warning for the first few of each window, a count
        of the others (said when the next window opens, or when stdout ends)."""
        now = time.monotonic()
        if now - self._noise_since >= NOISE_WINDOW:
            self._say_suppressed()
            self._noise_since, self._noise_shown = now, 0
        if self._noise_shown < NOISE_LINES:
            self._noise_shown += 1
            logger.warning("ignoring a non-JSON line from the server: %r", line[:200])
        else:
            self._noise_hidden += 1

    def _say_suppressed(self) -> None:
        if self._noise_hidden:
            logger.warning("ignored %d more non-JSON lines from the server (not shown)",
                           self._noise_hidden)
            self._noise_hidden = 0

    def _serve(self, message: dict[str, Any]) -> None:
        assert self.on_request is not None
        task = answer(message, self.on_request, self._write)
        self._tasks.append(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)

    async def _write(self, message: dict[str, Any]) -> None:
        if self.process is None or self.process.stdin is None:
            raise TransportError("transport is not open")
        if self._lost is not None:
            raise TransportError(self._lost)
        async with self._write_lock:
            try:
                self.process.stdin.write(encode(message) + b"\n")
                await self.process.stdin.drain()
            except (ConnectionError, RuntimeError) as exc:
                # A child that died before reading: say why (its status and stderr), as
                # a closed stdout does, whichever of the two the loop noticed first.
                why = self._lost or await self._why_lost(f"cannot write to the server: {exc}")
                raise TransportError(why) from exc

    async def send(
        self, request: dict[str, Any], *, param_headers: Mapping[str, Any] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        await self.open()
        rid = request["id"]
        queue = self._router.open(request)
        finished = False
        try:
            await self._write(request)
            while True:
                message = await queue.get()
                if message is None:
                    raise TransportError(self._lost or "connection lost")
                if "method" not in message:
                    finished = True
                    yield message
                    return
                yield message
        finally:
            self._router.close(request)
            quiet = rid in self.quiet_ids
            self.quiet_ids.discard(rid)
            if not finished and not quiet and self._lost is None and self.process is not None:
                # CANC-01/STDIO-05: tell the server we gave up on this request.
                with contextlib.suppress(TransportError):
                    await asyncio.shield(self._write(notification(
                        "notifications/cancelled",
                        {"requestId": rid, "reason": "the client abandoned the request"},
                    )))

    async def notify(self, message: dict[str, Any]) -> None:
        await self.open()
        await self._write(message)

    async def close(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
        for stop in (None, process.terminate, process.kill):
            if stop is not None:
                with contextlib.suppress(ProcessLookupError):
                    stop()
            try:
                await asyncio.wait_for(process.wait(), self.shutdown_timeout)
                break
            except TimeoutError:
                continue
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, self.shutdown_timeout)
        self._tasks = []
        stdout, self._stdout = self._stdout, None
        if stdout is not None:  # still open: a grandchild holds the pipe's other end
            stdout.close()
