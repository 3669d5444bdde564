"""Subprocess stdio client transport: spawn a server, newline-delimited JSON-RPC.

One reader task demultiplexes the child's stdout: responses by `id`, progress by
`progressToken`, other request-scoped notifications to the single in-flight request
(or to `on_notification` when it is ambiguous); server-to-client requests go to
`on_request` (legacy sessions, LEGC-03) and its answer is written back. The child's stderr is forwarded to
logging, never treated as an error signal (STDIO-02); its last lines and the exit status
go into the TransportError of a child that died. Abandoning a stream sends
`notifications/cancelled` (STDIO-05). Shutdown closes stdin, waits, then SIGTERM,
then SIGKILL (STDIO-06). Must not import `nimblemcp.client` or `nimblemcp.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from nimblemcp.errors import TransportError
from nimblemcp.jsonrpc import decode, encode, notification
from nimblemcp.types._meta import SUBSCRIPTION_ID

from ._limits import MAX_MESSAGE_BYTES

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


class StdioTransport:
    """Talks to a server process it spawns; `open()` starts it, `close()` stops it."""

    carries_param_headers = False
    wire = "stdio"

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
        self._pending: dict[tuple[type, Any], asyncio.Queue[dict[str, Any] | None]] = {}
        self._tokens: dict[tuple[type, Any], tuple[type, Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._write_lock = asyncio.Lock()
        self._lost: str | None = None
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._stderr_task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        if self.process is not None:
            return
        env = {**os.environ, **self.env} if self.inherit_env else dict(self.env)
        try:
            self.process = await asyncio.create_subprocess_exec(
                self.command, *self.args,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, cwd=self.cwd, limit=self.max_message_bytes,
            )
        except OSError as exc:
            raise TransportError(f"cannot start {self.peer}: {exc}") from exc
        self._lost = None
        self._stderr_tail.clear()
        self._stderr_task = asyncio.create_task(self._read_stderr())
        self._tasks = [asyncio.create_task(self._read_stdout()), self._stderr_task]

    async def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        name = os.path.basename(self.command)
        while line := await self.process.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            self._stderr_tail.append(text)
            logger.info("[%s] %s", name, text)

    async def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        reason = "the server closed its stdout"
        oversized = False
        try:
            while line := await self.process.stdout.readline():
                if line.strip():
                    self._route(line)
        except (ValueError, asyncio.LimitOverrunError):
            oversized = True
            reason = (f"the server sent a line larger than {self.max_message_bytes} bytes "
                      "(the client's max_message_bytes); the connection is closed")
        self._lost = reason if oversized else await self._why_lost(reason)
        for queue in self._pending.values():
            queue.put_nowait(None)
        if oversized:
            await self._discard_rest()

    async def _discard_rest(self) -> None:
        """After an oversized line: read stdout to its end unparsed, so the server never
        blocks on a full pipe and the pipe closes when the process ends."""
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout  # `close()` forgets the process while this runs
        with contextlib.suppress(Exception):
            while await stdout.read(65536):
                pass

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
            logger.warning("ignoring a non-JSON line from the server: %r", line[:200])
            return
        if not isinstance(message, dict):
            return
        if "method" not in message:
            rid = message.get("id")
            queue = self._pending.get((type(rid), rid))
            if queue is not None:
                queue.put_nowait(message)
            return
        if "id" in message:
            if self.on_request is None:
                logger.warning("ignoring a server-to-client request %s (BASE-06)",
                               message["method"])
            else:
                self._serve(message)
            return
        params = message.get("params")
        token = params.get("progressToken") if isinstance(params, dict) else None
        target = self._tokens.get((type(token), token)) if token is not None else None
        if target is None and isinstance(params, dict):
            target = self._subscription_of(message["method"], params)
        if target is None and message["method"] in ("notifications/message",) and len(self._pending) == 1:
            target = next(iter(self._pending))
        queue = self._pending.get(target) if target is not None else None
        if queue is not None:
            queue.put_nowait(message)
        elif self.on_notification is not None:
            self.on_notification(message)

    def _serve(self, message: dict[str, Any]) -> None:
        assert self.on_request is not None
        handler = self.on_request

        async def run() -> None:
            response = await handler(message)
            with contextlib.suppress(TransportError):
                await self._write(response)

        task = asyncio.create_task(run())
        self._tasks.append(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)

    def _subscription_of(self, method: str, params: dict[str, Any]) -> tuple[type, Any] | None:
        """SUB-06: listen traffic is routed by its subscription id (the listen's request
        id); a server-sent `notifications/cancelled` ends the listen it names."""
        meta = params.get("_meta")
        sid = meta.get(SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        if sid is None and method == "notifications/cancelled":
            sid = params.get("requestId")
        if sid is None or isinstance(sid, dict | list):
            return None
        key = (type(sid), sid)
        return key if key in self._pending else None

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
                raise TransportError(f"cannot write to the server: {exc}") from exc

    async def send(
        self, request: dict[str, Any], *, param_headers: Mapping[str, Any] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        await self.open()
        rid = request["id"]
        key = (type(rid), rid)
        if key in self._pending:
            raise TransportError(f"request id {rid!r} is already in flight")
        meta = (request.get("params") or {}).get("_meta") or {}
        token = meta.get("progressToken")
        token_key = (type(token), token)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._pending[key] = queue
        if token is not None:
            self._tokens[token_key] = key
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
            self._pending.pop(key, None)
            if token is not None:
                self._tokens.pop(token_key, None)
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
