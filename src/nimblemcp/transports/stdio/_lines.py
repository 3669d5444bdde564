"""Newline-delimited input for the stdio server, one callback per line.

Each complete line goes to `on_line` from the read callback itself, so a request is
dispatched in the loop pass that read it (an async reader would wake a second
coroutine one pass later). A line longer than `max_line` is skipped whole and
reported as `None` (as soon as it is known to be over). The stdio client cuts its
server's stdout with the same splitter. Pipes and sockets are read by the event loop; anything else
(a regular file, /dev/null) by a daemon thread that hands the bytes over.
`start_reading` also returns `stop()`: no more lines after it (the pipe is closed
for reading; a reader thread's later chunks are dropped). Given a `ReadGate`, reading
a pipe can be paused and resumed (the stdio server pauses while its output is backed up).
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from collections.abc import Callable

from nimblemcp.transports._read_size import READ_SIZE, small_reads

__all__ = ["LineSplitter", "ReadGate", "pollable", "read_lines", "start_reading"]

OnLine = Callable[[bytes | None], None]


def pollable(fd: int) -> bool:
    """Pipes and sockets work with the event loop; files and /dev/null do not."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class ReadGate:
    """Pause and resume reading the input `start_reading` reads (a pipe or socket;
    input read by a thread, a regular file, is not paused)."""

    __slots__ = ("paused", "transport")

    def __init__(self) -> None:
        self.transport: asyncio.ReadTransport | None = None
        self.paused = False

    def pause(self) -> None:
        if not self.paused:
            self.paused = True
            if self.transport is not None and not self.transport.is_closing():
                self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()


class LineSplitter(asyncio.Protocol):
    """Cuts the byte stream into lines; `closed` resolves at end of input.

    A line over `max_line` is reported (`None`) as soon as it is known to be over, then
    skipped to its newline. Once `stopped` is set, even by `on_line` itself, no further
    line of the read at hand or of later reads is handed over."""

    def __init__(self, on_line: OnLine, closed: asyncio.Future[None], max_line: int) -> None:
        self.on_line = on_line
        self.closed = closed
        self.max_line = max_line
        self.partial = bytearray()
        self.skipping = False  # inside a line that is over the limit (reported already)
        self.stopped = False

    def data_received(self, data: bytes) -> None:
        if self.stopped:
            return
        start, end = 0, data.find(b"\n")
        if self.partial or self.skipping:  # finish the line begun in earlier reads
            if end < 0:
                if not self.skipping:
                    self.partial += data
                    if len(self.partial) > self.max_line:
                        self._skip()
                return
            if self.skipping:
                self.skipping = False
            elif len(self.partial) + end > self.max_line:
                self.partial.clear()
                self.on_line(None)
            else:
                self.partial += data[:end + 1]
                line = bytes(self.partial)
                self.partial.clear()
                self.on_line(line)
            start, end = end + 1, data.find(b"\n", end + 1)
        while end >= 0:
            if self.stopped:
                return
            self.on_line(None if end - start > self.max_line else data[start:end + 1])
            start, end = end + 1, data.find(b"\n", end + 1)
        rest = len(data) - start
        if self.stopped:
            return
        if rest > self.max_line:
            self._skip()  # the rest is dropped as it comes, up to its newline
        elif rest:
            self.partial += data[start:]

    def _skip(self) -> None:
        self.skipping = True
        self.partial.clear()
        self.on_line(None)

    def eof_received(self) -> bool:
        if not self.stopped and not self.skipping and self.partial.strip():
            self.on_line(bytes(self.partial))  # a last message without its newline
        self.partial.clear()
        self.skipping = False
        if not self.closed.done():
            self.closed.set_result(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def read_lines(fd: int, on_line: OnLine, max_line: int) -> asyncio.Future[None]:
    """Start feeding `on_line`; the returned future resolves when the input ends."""
    return (await start_reading(fd, on_line, max_line))[0]


async def start_reading(fd: int, on_line: OnLine, max_line: int, gate: ReadGate | None = None,
                        ) -> tuple[asyncio.Future[None], Callable[[], None]]:
    """Start feeding `on_line`; returns a future that resolves when the input ends,
    and `stop()`, after which no line is handed over any more. `gate` (optional)
    pauses and resumes the reading of a pipe."""
    loop = asyncio.get_running_loop()
    closed: asyncio.Future[None] = loop.create_future()
    splitter = LineSplitter(on_line, closed, max_line)
    reader: list[asyncio.BaseTransport] = []

    def stop() -> None:
        splitter.stopped = True
        splitter.partial.clear()
        for transport in reader:
            transport.close()
        if not closed.done():
            closed.set_result(None)

    if pollable(fd):
        try:
            pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)
            transport, _ = await loop.connect_read_pipe(lambda: splitter, pipe)
        except (ValueError, OSError):
            pass
        else:
            small_reads(transport)  # not 256 KiB a read: an mmap per message
            reader.append(transport)
            if gate is not None:
                gate.transport = transport  # type: ignore[assignment]
                if gate.paused:
                    transport.pause_reading()  # type: ignore[attr-defined]
            return closed, stop

    def pump() -> None:
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
            while chunk := f.read(READ_SIZE):
                loop.call_soon_threadsafe(splitter.data_received, chunk)
        loop.call_soon_threadsafe(splitter.eof_received)

    threading.Thread(target=pump, daemon=True, name="nimblemcp-stdin").start()
    return closed, stop
