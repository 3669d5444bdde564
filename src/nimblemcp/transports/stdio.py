"""stdio server transport: newline-delimited JSON-RPC on stdin/stdout (STDIO-01..06).

While it runs, stdout belongs to the protocol alone: fd 1 is pointed at stderr and
`sys.stdout` is replaced, so a stray `print()` or a C library writing to fd 1 lands on
stderr; protocol messages go to a private duplicate of the original stdout.
Requests run concurrently as tasks; `notifications/cancelled` cancels one.
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
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from nimblemcp._loop import running_loop
from nimblemcp._port import Core, Emit
from nimblemcp.errors import InternalError, ParseError, ProtocolError
from nimblemcp.jsonrpc import classify, decode_request, encode_reply, error_response, request_id_of
from nimblemcp.transports._legacy import LegacySession, is_enveloped
from nimblemcp.transports._stdio_lines import pollable, read_lines

logger = logging.getLogger("nimblemcp.stdio")

MAX_LINE = 16 * 1024 * 1024
SHUTDOWN_GRACE = 2.0


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


class _Writer:
    """Writes whole lines to the protocol fd; never interleaves two messages."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.transport: asyncio.WriteTransport | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        if not pollable(self.fd):
            return  # a regular file: plain blocking writes are fine
        try:
            pipe = os.fdopen(self.fd, "wb", buffering=0, closefd=False)
            self.transport, _ = await loop.connect_write_pipe(asyncio.Protocol, pipe)
        except (ValueError, OSError):
            self.transport = None  # a regular file: plain blocking writes are fine

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


async def serve_stdio(server: Core, in_fd: int = 0, out_fd: int | None = None) -> int:
    """Serve one client on the given fds until stdin reaches EOF.

    Returns how many requests were still running after the shutdown grace period;
    their worker threads (sync tools) cannot be stopped from here.
    """
    writer = _Writer(out_fd if out_fd is not None else protect_stdout())
    await writer.open()
    inflight: dict[tuple[type, Any], asyncio.Task[None]] = {}
    loop = running_loop()  # once: asyncio's own lookup costs a getpid() per call on 3.11

    async def run(respond: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        try:
            response = await respond()
        except asyncio.CancelledError:
            return  # cancelled requests get no response (CANC-03)
        writer.write(response)

    def start(rid: Any, respond: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """Run a request as a task (cancellable by id); its response is written at the end."""
        key = (type(rid), rid)
        task = inflight[key] = loop.create_task(run(respond))
        task.add_done_callback(lambda _t: inflight.pop(key, None))

    io = _StdioIO(writer.write, loop)
    legacy: LegacySession | None = None  # set by the peer's `initialize`
    forwarder: asyncio.Task[None] | None = None

    def on_legacy_request(message: dict[str, Any]) -> bool:
        """Serve a request of the legacy era; False = not one (no session yet)."""
        nonlocal legacy, forwarder
        rid = message["id"]
        if message["method"] == "initialize":
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
        start(req.id, lambda: server.execute(req, io))

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
            on_message(message)
        except Exception:  # one bad message must never stop the server, nor go unanswered
            logger.exception("failed to handle a message")
            rid = request_id_of(message)
            if rid is not None and type(message) is dict and "method" in message:
                writer.write(error_response(rid, InternalError("Internal error")))

    await (await read_lines(in_fd, on_line, MAX_LINE))

    if forwarder is not None:
        forwarder.cancel()
    if legacy is not None:
        legacy.close(stop_requests=False)  # running requests get the grace period below
    # stdin closed (STDIO-06): give in-flight work a moment, then stop.
    pending: set[asyncio.Task[None]] = set()
    if inflight:
        _done, pending = await asyncio.wait(list(inflight.values()), timeout=SHUTDOWN_GRACE)
        for task in pending:
            task.cancel()
    transport = writer.transport
    if transport is not None:
        # Let buffered responses reach the pipe before the loop goes away.
        for _ in range(int(SHUTDOWN_GRACE / 0.005)):
            if transport.is_closing() or not transport.get_write_buffer_size():
                break
            await asyncio.sleep(0.005)
        transport.close()
    return len(pending)


async def _serve_in_lifespan(server: Core) -> int:
    """`serve_stdio` inside the server's lifespan; stdout is protected first, so a
    lifespan that prints cannot corrupt the protocol stream."""
    out_fd = protect_stdout()
    async with server.lifespan_context():
        return await serve_stdio(server, out_fd=out_fd)


def run_stdio(server: Core) -> None:
    """Run `server` on this process's stdin/stdout (blocking)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if sys.stdin.isatty():  # a person started it by hand: say what is going on
        print(f"{server.name}: MCP server on stdio. Connect a host (it spawns this command), "
              "or type one JSON-RPC message per line; Ctrl-D to stop.", file=sys.stderr)
    runner = asyncio.Runner()
    abandoned = 0
    with contextlib.suppress(KeyboardInterrupt):
        abandoned = runner.run(_serve_in_lifespan(server))
    if abandoned:
        # A sync tool is still running in a worker thread; waiting for it would keep
        # the process alive after stdin closed (STDIO-06), so leave without it.
        logger.warning("exiting with %d request(s) still running", abandoned)
        logging.shutdown()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(0)
    runner.close()
