"""`nimblemcp dev server.py`: a server for development.

A supervisor process runs the server as a child and starts a new child when a Python
file under the server's folder (or a `--watch` path) changes (watchfiles, from the
`[dev-server]` extra). A child that fails to start or crashes leaves its traceback on
stderr; the supervisor waits for the next change.

- stdio: the supervisor relays the host's lines to the child and back, and logs each
  request when its response passes (`_devlog`). Requests a dying child leaves
  unanswered, and requests while no child runs, get a JSON-RPC error instead of a
  hang. A legacy (2025-11-25) session survives a reload: the supervisor replays the
  host's `initialize` to the new child and swallows its answer.
- http: each child is `_dev_http` (the endpoint wrapped in the ASGI request log).
- `--inspector` starts `npx @modelcontextprotocol/inspector` against the server.

Loaded only for `nimblemcp dev`; must not import the server or the client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nimblemcp._extras import needs_extra
from nimblemcp.cli import _devlog

__all__ = ["main"]

NODE_HINT = ("the MCP Inspector needs Node.js (it runs with npx): install Node 22 or newer "
             "from https://nodejs.org/ (or `brew install node`, `apt install nodejs npm`, "
             "`nvm install 22`), then run `nimblemcp dev --inspector` again")
STOP_GRACE = 3.0
REPLAY_ID = "nimblemcp-dev-replay"
_PIECE = 1 << 20  # the host's lines are read and relayed in pieces of at most 1 MiB
_QUEUED = 16  # pieces read ahead of the child at most: past that, reading waits


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nimblemcp dev",
        description="Run a server for development: restart it when a .py file changes, "
        "log each request on stderr, show unexpected errors in full.")
    parser.add_argument("target", help="path/to/server.py[:object]")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    parser.add_argument("--path", default="/mcp", help="HTTP endpoint path (default /mcp)")
    parser.add_argument("--watch", action="append", default=[], type=Path, metavar="PATH",
                        help="also watch this file or folder (repeatable; default: the "
                        "server file's folder)")
    parser.add_argument("--inspector", action="store_true",
                        help="start the MCP Inspector (npx @modelcontextprotocol/inspector)")
    return parser


def _key(rid: Any) -> tuple[type, Any]:
    return (type(rid), rid)


def _error(rid: Any, text: str) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", "id": rid,
                        "error": {"code": -32603, "message": f"nimblemcp dev: {text}"}})
            + "\n").encode()


class _Child:
    """One server generation."""

    def __init__(self, process: asyncio.subprocess.Process, generation: int) -> None:
        self.process = process
        self.generation = generation
        self.stopping = False


class Supervisor:
    """Runs, relays (stdio) and restarts the server child."""

    def __init__(self, args: argparse.Namespace, target: str) -> None:
        self.args = args
        self.target = target
        self.child: _Child | None = None
        self.line_child: _Child | None = None  # the child the host's current line began on
        self.generation = 0
        self.lock = asyncio.Lock()
        self.pending: dict[tuple[type, Any], tuple[str, str, float, int]] = {}
        self.initialize: bytes | None = None
        self.initialized: bytes | None = None
        self.last_exit: int | None = None
        self.closing = False  # set once: no child is started after it
        self.tasks: set[asyncio.Task[None]] = set()  # strong references until done

    def spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def command(self) -> list[str]:
        if self.args.transport == "http":
            return [sys.executable, "-m", "nimblemcp.cli._dev_http", self.target,
                    "--host", self.args.host, "--port", str(self.args.port),
                    "--path", self.args.path]
        return [sys.executable, "-m", "nimblemcp", "run", self.target]

    async def start(self) -> None:
        if self.closing:
            return
        self.generation += 1
        stdio = self.args.transport == "stdio"
        process = await asyncio.create_subprocess_exec(
            *self.command(), stdin=subprocess.PIPE if stdio else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdio else None, stderr=None,
            limit=64 * 1024 * 1024)
        child = self.child = _Child(process, self.generation)
        self.spawn(self._watch_exit(child))
        if stdio:
            self.spawn(self._relay_out(child))
            if self.initialize is not None:  # keep a legacy session across the reload
                message = json.loads(self.initialize)
                message["id"] = f"{REPLAY_ID}-{child.generation}"
                await self._write(child, json.dumps(message).encode() + b"\n")
                if self.initialized is not None:
                    await self._write(child, self.initialized)

    async def stop(self) -> None:
        child, self.child = self.child, None
        if child is None or child.process.returncode is not None:
            return
        child.stopping = True
        process = child.process
        if process.stdin is not None:  # stdio: end of input lets in-flight work finish
            process.stdin.close()
        else:
            process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE)
        except TimeoutError:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), STOP_GRACE)
            except TimeoutError:
                process.kill()
                await process.wait()

    async def reload(self, changed: Sequence[str]) -> None:
        async with self.lock:
            if self.closing:
                return
            names = ", ".join(sorted({os.path.basename(p) for p in changed}))
            _devlog.emit(f"reloading ({names} changed)")
            await self.stop()
            await self.start()
            if await self.ready():
                _devlog.emit(f"reloaded (generation {self.generation})")

    async def ready(self, timeout: float = 15.0) -> bool:
        """Whether the current child came up: over HTTP, once its port accepts."""
        child = self.child
        if child is None:
            return False
        if self.args.transport != "http":
            return True
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(
            self.args.host, self.args.host)
        deadline = time.monotonic() + timeout
        while child.process.returncode is None and time.monotonic() < deadline:
            try:
                _reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, self.args.port), 1.0)
            except (OSError, TimeoutError):
                await asyncio.sleep(0.05)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        return False

    async def _watch_exit(self, child: _Child) -> None:
        status = await child.process.wait()
        self._fail_pending(child.generation, "the server stopped (reloading) before answering"
                           if child.stopping else f"the server exited with status {status} "
                           "before answering (see its stderr)")
        if not child.stopping:
            self.last_exit = status
            if self.child is child:
                self.child = None
            _devlog.emit(f"server exited with status {status}; waiting for a change to restart")

    def _fail_pending(self, generation: int, text: str) -> None:
        for key, (method, name, started, gen) in list(self.pending.items()):
            if gen == generation:
                del self.pending[key]
                self._answer_locally(key[1], method, name, started, text)

    def _answer_locally(self, rid: Any, method: str, name: str, started: float, text: str) -> None:
        sys.stdout.buffer.write(_error(rid, text))
        sys.stdout.buffer.flush()
        _devlog.emit(_devlog.line(method, name, time.perf_counter() - started,
                                  f"error -32603: {text}"))

    async def _write(self, child: _Child, data: bytes) -> None:
        stdin = child.process.stdin
        if stdin is None or stdin.is_closing():
            return
        stdin.write(data)
        with contextlib.suppress(ConnectionError):
            await stdin.drain()

    async def _relay_out(self, child: _Child) -> None:
        stdout = child.process.stdout
        assert stdout is not None
        replay = f"{REPLAY_ID}-{child.generation}"
        starts = True  # `data` begins a line
        while data := await _line_or_piece(stdout):
            begins, starts = starts, data.endswith(b"\n")
            try:
                message = (json.loads(data) if starts else _head(data)) if begins else None
            except ValueError:
                message = None
            if isinstance(message, dict) and "method" not in message and "id" in message:
                if message["id"] == replay:
                    continue
                entry = self.pending.pop(_key(message["id"]), None)
                if entry is not None:
                    method, name, started, _gen = entry
                    _devlog.emit(_devlog.line(method, name, time.perf_counter() - started,
                                              _devlog.outcome(message)))
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    async def relay_in(self, data: bytes, begins: bool = True) -> None:
        """One piece of a line from the host, to the current child.

        A line comes in pieces of at most `_PIECE` bytes (`_read_stdin`); `begins` says
        whether this piece starts one. Only a whole line is parsed; the first piece of a
        longer one is read for its id and method, the rest pass unread. A piece whose
        line began on another child (one that stopped meanwhile) is dropped: the new
        child never saw that line's start."""
        whole = begins and data.endswith(b"\n")
        message: Any = None
        if whole:
            try:
                message = json.loads(data)
            except ValueError:
                message = None
        elif begins:
            message = _request_head(data)
        is_request = isinstance(message, dict) and "method" in message and "id" in message
        if whole and isinstance(message, dict) and message.get("method") == "initialize":
            self.initialize = data
        elif whole and isinstance(message, dict) and message.get("method") == "notifications/initialized":
            self.initialized = data
        async with self.lock:
            child = self.child
            if not begins:
                if child is not None and child is self.line_child:
                    await self._write(child, data)
                return
            self.line_child = child
            if is_request:
                method, name = _devlog.label(message)
                if child is None:
                    why = (f"exited with status {self.last_exit}; see its stderr"
                           if self.last_exit is not None else "is not running")
                    self._answer_locally(message["id"], method, name, time.perf_counter(),
                                         f"the server {why}. Save a change to restart it.")
                    return
                self.pending[_key(message["id"])] = (method, name, time.perf_counter(),
                                                     child.generation)
            elif message is None and whole and data.strip():
                _devlog.emit("relaying a line that is not JSON (the server will answer a parse error)")
            elif not whole and not is_request:
                _devlog.emit(f"relaying a line over {_PIECE >> 20} MiB unchecked (no id or method "
                             "near its start)")
            if child is not None:
                await self._write(child, data)


_ABSENT = object()


def _field(piece: bytes, key: str, within: int) -> Any:
    """The JSON value of `"key":` starting in the first `within` bytes of a piece of a
    line too long to parse whole (`_ABSENT` if it is not there or does not parse)."""
    name = b'"%s":' % key.encode()
    at = piece.find(name, 0, within)
    if at < 0:
        return _ABSENT
    start = at + len(name)
    try:
        value, _end = json.JSONDecoder().raw_decode(piece[start:start + 4096].decode("utf-8", "replace").lstrip())
    except ValueError:
        return _ABSENT
    return value


def _request_head(piece: bytes) -> dict[str, Any] | None:
    """The id and method of a request too long for one piece, from its first 4 KiB
    (hosts write `"id"` and `"method"` before `"params"`), so the request log and the
    answer for a dying child still know it."""
    rid, method = _field(piece, "id", 4096), _field(piece, "method", 4096)
    if rid is _ABSENT or not isinstance(method, str):
        return None
    return {"id": rid, "method": method}


def _head(piece: bytes) -> dict[str, Any] | None:
    """The id of a response too long for one read, from its first piece (the server
    writes `{"jsonrpc":"2.0","id":...` first), so the request log still ends it."""
    rid = _field(piece, "id", 64)
    if rid is _ABSENT:
        return None
    return {"id": rid, "result": {"resultType": "complete (a line too long to check)"}}


async def _line_or_piece(stream: asyncio.StreamReader) -> bytes:
    """The next line, with its newline (b"" at the end); a line longer than the
    stream's limit comes in pieces (the last one ends with the newline), relayed as
    they come instead of ending the relay with a ValueError."""
    try:
        return await stream.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial  # the last line had no newline, or b"" at the end
    except asyncio.LimitOverrunError as exc:
        return await stream.read(max(exc.consumed, 1))


def _read_stdin(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes | None]) -> None:
    """A daemon thread: works for pipes, terminals and files alike.

    Reads pieces of at most `_PIECE` bytes (a longer line comes in several) and waits
    while the queue is full, so a host that writes huge lines, or faster than the
    server reads, holds the relay to `_QUEUED` pieces instead of growing its memory."""
    read = sys.stdin.buffer.readline
    try:
        while data := read(_PIECE):
            asyncio.run_coroutine_threadsafe(queue.put(data), loop).result()
        asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()
    except RuntimeError:  # the loop has closed: the relay is over
        return


async def _watch(supervisor: Supervisor, paths: list[Path], stop: asyncio.Event) -> None:
    with needs_extra("dev-server", "Reload on change (nimblemcp dev)"):
        import watchfiles

    async for changes in watchfiles.awatch(*paths, watch_filter=watchfiles.PythonFilter(),
                                           stop_event=stop):
        await supervisor.reload([path for _change, path in changes])


async def _serve(args: argparse.Namespace, target: str, paths: list[Path]) -> int:
    supervisor = Supervisor(args, target)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    watcher = loop.create_task(_watch(supervisor, paths, stop))
    await supervisor.start()
    inspector: subprocess.Popen[bytes] | None = None
    if args.transport == "http":
        url = _url(args)
        await supervisor.ready()
        _devlog.emit(f"serving {target} at {url}; watching {', '.join(map(str, paths))}")
        if args.inspector:
            inspector = _start_inspector(["--transport", "http", "--server-url", url])
    else:
        _devlog.emit(f"serving {target} on stdio; watching {', '.join(map(str, paths))}")
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(_QUEUED)
        threading.Thread(target=_read_stdin, args=(loop, queue), daemon=True).start()

        async def pump() -> None:
            starts = True  # the next piece begins a line
            while (data := await queue.get()) is not None:
                begins, starts = starts, data.endswith(b"\n")
                await supervisor.relay_in(data, begins)
            stop.set()

        supervisor.spawn(pump())
    stopped = loop.create_task(stop.wait())
    try:
        await asyncio.wait([stopped, watcher], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.set()
        # No new generation after this; a reload in progress finishes first (it holds
        # the lock), so the last stop below also ends the child it started.
        supervisor.closing = True
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(watcher), 3 * STOP_GRACE)
        async with supervisor.lock:
            await supervisor.stop()
        if inspector is not None:
            inspector.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                inspector.wait(STOP_GRACE)
    if watcher.done() and not watcher.cancelled() and watcher.exception() is not None:
        raise watcher.exception()  # type: ignore[misc]
    return 0


def _url(args: argparse.Namespace) -> str:
    from nimblemcp.cli import endpoint_url

    return endpoint_url(args.host, args.port, args.path)


def _start_inspector(server_args: list[str]) -> subprocess.Popen[bytes] | None:
    npx = shutil.which("npx")
    if npx is None:
        _devlog.emit(NODE_HINT)
        return None
    command = [npx, "-y", "@modelcontextprotocol/inspector", *server_args]
    _devlog.emit("starting the MCP Inspector: " + " ".join(command))
    return subprocess.Popen(command)


def _inspect_stdio(args: argparse.Namespace, target: str) -> int:
    """The Inspector spawns stdio servers itself: give it this dev command."""
    npx = shutil.which("npx")
    if npx is None:
        _devlog.emit(NODE_HINT)
        return 1
    script = Path(sys.executable).parent / "nimblemcp"
    dev = ([str(script)] if script.is_file() else [sys.executable, "--", "-m", "nimblemcp"])
    dev += ["dev", target,
            *(arg for path in args.watch for arg in ("--watch", str(path.resolve())))]
    command = [npx, "-y", "@modelcontextprotocol/inspector", *dev]
    _devlog.emit("starting the MCP Inspector: " + " ".join(command))
    with contextlib.suppress(KeyboardInterrupt):
        return subprocess.call(command)
    return 130


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    file_part, sep, attr = args.target.partition(":")
    path = Path(file_part)
    if not path.is_file():
        print(f"nimblemcp dev: no such file: {file_part} (dev takes a path/to/server.py)",
              file=sys.stderr)
        return 1
    target = str(path.resolve()) + (f":{attr}" if sep else "")
    paths = [p.resolve() for p in args.watch] or [path.resolve().parent]
    with needs_extra("dev-server", "Reload on change (nimblemcp dev)"):
        import watchfiles  # noqa: F401  # fail before starting anything
    if args.inspector and args.transport == "stdio":
        return _inspect_stdio(args, target)
    return asyncio.run(_serve(args, target, paths))
