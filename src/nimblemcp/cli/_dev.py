"""`nimblemcp dev server.py`: a server for development.

A supervisor process runs the server as a child (`_dev_child`: errors unmasked) and
starts a new child when a Python file under the server's folder (or a `--watch` path)
changes (watchfiles, from the `[dev-server]` extra). A child that fails to start or
crashes leaves its traceback on stderr (relayed by the supervisor, which keeps its last
line); the supervisor waits for the next change and meanwhile answers every request
with a JSON-RPC error naming that line, over either transport.

- stdio: the supervisor relays the host's lines to the child and back, and logs each
  request when its response passes (`_devlog`). Requests a dying child leaves
  unanswered, and requests while no child runs, get a JSON-RPC error instead of a
  hang. A session survives a reload: the supervisor replays the host's `initialize`
  (2025-11-25) and its open `subscriptions/listen` requests to the new child, swallows
  their answers, and tells the host the lists changed (untagged for a legacy session,
  tagged with the listen's id on a listen stream): its cached lists are stale.
- http: the supervisor binds the port and holds it; each child serves it (the socket
  is inherited), so connections are never refused across reloads: they wait for the
  new child, and while none runs the supervisor's `_Fallback` answers them. Listen
  streams of the old child end; a client listens again and the new child tells it the
  lists changed (`_dev_child.ReloadNotice`).
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
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nimblemcp._extras import needs_extra
from nimblemcp.cli import _devlog
from nimblemcp.types._meta import SUBSCRIPTION_ID

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
        self.tail: list[str] = []  # the last lines of its stderr
        self.ready_fd: int | None = None  # http: the child writes a byte once it serves
        self.err_task: asyncio.Task[None] | None = None  # relays its stderr
        self.replayed: set[tuple[type, Any]] = set()  # listens replayed to it, not yet acknowledged


def _error_line(tail: Sequence[str]) -> str | None:
    """What a dying child's stderr ends with: its exception, and where the traceback
    ends (`SyntaxError: invalid syntax (server.py, line 12)`)."""
    error = where = None
    for text in reversed(tail):
        text = text.strip()
        if error is None and text and not text.startswith(("File ", "^", "~", "Traceback")):
            error = text
        elif error is not None and text.startswith('File "'):
            name, _, rest = text[6:].partition('", line ')
            where = f"{os.path.basename(name)}, line {rest.split(',')[0]}"
            break
    return None if error is None else error + (f" ({where})" if where else "")


class _Fallback:
    """Answers on the port while no child serves it (it crashed, or a broken edit keeps
    it from starting): a POSTed request gets a JSON-RPC error saying why, a notification
    202, anything else 503. One request per connection."""

    def __init__(self, sock: socket.socket, why: Callable[[], str]) -> None:
        self.sock = sock
        self.why = why
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        if self.server is None:
            self.server = await asyncio.start_server(self._answer, sock=self.sock.dup())

    async def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.close()  # closes the duplicate; the child serves the socket itself
            await server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method = head.split(b" ", 1)[0]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip() or b"0")
            body = await asyncio.wait_for(reader.readexactly(min(length, _PIECE)), 10) if length else b""
            try:
                message = json.loads(body) if body else None
            except ValueError:
                message = None
            if method == b"POST" and isinstance(message, dict) and "id" in message:
                status, ctype, answer = "200 OK", "application/json", _error(message["id"], self.why())
            elif method == b"POST" and isinstance(message, dict):
                status, ctype, answer = "202 Accepted", "application/json", b""
            else:
                status, ctype, answer = "503 Service Unavailable", "text/plain", self.why().encode() + b"\n"
            writer.write(f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(answer)}\r\n"
                         "connection: close\r\n\r\n".encode() + answer)
            await writer.drain()
        except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


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
        self.listens: dict[tuple[type, Any], bytes] = {}  # stdio: the host's open listens
        self.last_exit: int | None = None
        self.last_error: str | None = None  # the exception the last child died of
        self.sock: socket.socket | None = None  # http: the listening socket, held throughout
        self.fallback: _Fallback | None = None
        self.closing = False  # set once: no child is started after it
        self.tasks: set[asyncio.Task[None]] = set()  # strong references until done

    def spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def command(self, ready_fd: int | None = None) -> list[str]:
        child = [sys.executable, "-m", "nimblemcp.cli._dev_child", self.target]
        if self.args.transport == "http":
            assert self.sock is not None and ready_fd is not None
            child += ["--transport", "http", "--fd", str(self.sock.fileno()), "--ready-fd", str(ready_fd),
                      "--path", self.args.path]
            if self.generation > 1:
                child.append("--reloaded")
        return child

    def down(self) -> str:
        """Why no server answers: what a request gets meanwhile."""
        if self.last_exit is None:
            return "the server is not running. Save a change to restart it."
        died = f": {self.last_error}" if self.last_error else "; see its stderr"
        return f"the server exited with status {self.last_exit}{died}. Save a change to restart it."

    async def start(self) -> None:
        if self.closing:
            return
        self.generation += 1
        stdio = self.args.transport == "stdio"
        ready_r = ready_w = None
        if not stdio:
            if self.fallback is not None:
                await self.fallback.stop()  # the new child takes the waiting connections
            ready_r, ready_w = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command(ready_w), stdin=subprocess.PIPE if stdio else subprocess.DEVNULL,
                stdout=subprocess.PIPE if stdio else None, stderr=subprocess.PIPE,
                limit=64 * 1024 * 1024,
                pass_fds=() if self.sock is None or ready_w is None else (self.sock.fileno(), ready_w))
        finally:
            if ready_w is not None:
                os.close(ready_w)
        child = self.child = _Child(process, self.generation)
        child.ready_fd = ready_r
        child.err_task = self.spawn(self._relay_err(child))
        self.spawn(self._watch_exit(child))
        if stdio:
            self.spawn(self._relay_out(child))
            if self.initialize is not None:  # keep a legacy session across the reload
                message = json.loads(self.initialize)
                message["id"] = f"{REPLAY_ID}-{child.generation}"
                await self._write(child, json.dumps(message).encode() + b"\n")
                if self.initialized is not None:
                    await self._write(child, self.initialized)
            for key, line in self.listens.items():  # and the host's listen streams
                child.replayed.add(key)
                entry = self.pending.get(key)
                if entry is not None:
                    self.pending[key] = (*entry[:3], child.generation)
                await self._write(child, line)

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

    async def ready(self, timeout: float = 60.0) -> bool:
        """Whether the current child came up: over HTTP, once it serves the port (it
        writes a byte on its ready pipe; the pipe ends empty if it exits first)."""
        child = self.child
        if child is None:
            return False
        if child.ready_fd is None:
            return True
        fd, child.ready_fd = child.ready_fd, None
        reading = asyncio.get_running_loop().run_in_executor(None, os.read, fd, 1)
        reading.add_done_callback(lambda _done: os.close(fd))
        try:
            return await asyncio.wait_for(asyncio.shield(reading), timeout) == b"1"
        except TimeoutError:
            return False

    async def _relay_err(self, child: _Child) -> None:
        """The child's stderr to ours, its last lines kept (for `down`)."""
        stderr = child.process.stderr
        assert stderr is not None
        while data := await _line_or_piece(stderr):
            sys.stderr.buffer.write(data)
            sys.stderr.buffer.flush()
            child.tail.append(data.decode("utf-8", "replace"))
            del child.tail[:-40]

    async def _watch_exit(self, child: _Child) -> None:
        status = await child.process.wait()
        if child.stopping:  # a reload: open listens go on with the next child
            self._fail_pending(child.generation, "the server stopped (reloading) before answering",
                               keep=set(self.listens))
            return
        if child.err_task is not None:  # its last words first
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(child.err_task), 5)
        self.last_exit = status
        self.last_error = _error_line(child.tail)
        self.listens.clear()
        self._fail_pending(child.generation, f"the server exited with status {status} before answering"
                           + (f" ({self.last_error})" if self.last_error else " (see its stderr)"))
        if self.child is child:
            self.child = None
            if self.sock is not None and not self.closing:
                self.fallback = self.fallback or _Fallback(self.sock, self.down)
                await self.fallback.start()
        _devlog.emit(f"server exited with status {status}; waiting for a change to restart")

    def _fail_pending(self, generation: int, text: str, keep: set[tuple[type, Any]] | None = None) -> None:
        for key, (method, name, started, gen) in list(self.pending.items()):
            if gen == generation and key not in (keep or ()):
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
                    self._tell_changed(message.get("result"), None)  # the session's lists
                    continue
                if child.stopping and _key(message["id"]) in self.listens:
                    continue  # the listen goes on with the next child (a reload)
                self.listens.pop(_key(message["id"]), None)  # a listen ended
                entry = self.pending.pop(_key(message["id"]), None)
                if entry is not None:
                    method, name, started, _gen = entry
                    _devlog.emit(_devlog.line(method, name, time.perf_counter() - started,
                                              _devlog.outcome(message)))
            elif begins and starts and _acknowledges(message, child.replayed):
                # The new child acknowledged a replayed listen: the host has had its
                # acknowledgement; tell it instead that its lists changed.
                assert isinstance(message, dict)
                key = _key(message["params"]["_meta"][SUBSCRIPTION_ID])
                child.replayed.discard(key)
                self._tell_changed(None, key)
                continue
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def _tell_changed(self, initialized: Any, listen: tuple[type, Any] | None) -> None:
        """`notifications/*/list_changed` to the host after a reload: for a legacy
        session (untagged, the lists the new child's `initialize` answer declares), or
        for the listen `listen` (tagged, the lists it asked about)."""
        kinds: list[str] = []
        meta: dict[str, Any] = {}
        if listen is None:
            caps = initialized.get("capabilities") if isinstance(initialized, dict) else None
            if isinstance(caps, dict):
                kinds = [k for k in ("tools", "prompts", "resources")
                         if isinstance(caps.get(k), dict) and caps[k].get("listChanged")]
        else:
            line = self.listens.get(listen)
            try:
                asked = json.loads(line or b"{}").get("params", {}).get("notifications", {})
            except (ValueError, AttributeError):
                asked = {}
            kinds = [k for k in ("tools", "prompts", "resources") if asked.get(f"{k}ListChanged") is True]
            meta = {"_meta": {SUBSCRIPTION_ID: listen[1]}}
        for kind in kinds:
            note = {"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed", "params": meta}
            sys.stdout.buffer.write(json.dumps(note).encode() + b"\n")
        sys.stdout.buffer.flush()
        if kinds:
            _devlog.emit(f"told the host its {', '.join(kinds)} changed")

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
        elif whole and is_request and message.get("method") == "subscriptions/listen":
            self.listens[_key(message["id"])] = data  # replayed to the next child
        elif whole and isinstance(message, dict) and message.get("method") == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict) and "requestId" in params:
                self.listens.pop(_key(params["requestId"]), None)
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
                    self.listens.pop(_key(message["id"]), None)
                    self._answer_locally(message["id"], method, name, time.perf_counter(), self.down())
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


def _acknowledges(message: Any, replayed: set[tuple[type, Any]]) -> bool:
    """Whether `message` is the acknowledgement of one of the `replayed` listens."""
    if not replayed or not isinstance(message, dict):
        return False
    if message.get("method") != "notifications/subscriptions/acknowledged":
        return False
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and SUBSCRIPTION_ID in meta and _key(meta[SUBSCRIPTION_ID]) in replayed


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
    if args.transport == "http":
        try:
            supervisor.sock = _listen(args.host, args.port)
        except OSError as exc:
            print(f"nimblemcp dev: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; "
                  "choose another port with --port", file=sys.stderr)
            return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    watcher = loop.create_task(_watch(supervisor, paths, stop))
    await supervisor.start()
    inspector: subprocess.Popen[bytes] | None = None
    if args.transport == "http":
        url = _url(args)
        await supervisor.ready()  # when it fails, the fallback answers meanwhile
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
        if supervisor.fallback is not None:
            await supervisor.fallback.stop()
        if supervisor.sock is not None:
            supervisor.sock.close()
        if inspector is not None:
            inspector.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                inspector.wait(STOP_GRACE)
    if watcher.done() and not watcher.cancelled() and watcher.exception() is not None:
        raise watcher.exception()  # type: ignore[misc]
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """The port, bound and listening for the whole session (each child inherits it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


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
