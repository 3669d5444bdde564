"""`nimblemcp dev` (issue 14) as a real subprocess: reload on change, the request log,
tracebacks in full, a crashed child, stdio and HTTP, `--inspector`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from tests._serving import serving

import nimblemcp as m
from nimblemcp import Client
from nimblemcp.cli._devlog import RequestLog

SERVER = '''
import nimblemcp as m

server = m.Server("dev-demo")

@server.tool
def hello(name: str) -> str:
    return "hi " + name

@server.tool
def boom() -> str:
    raise RuntimeError("kaboom from the tool")
'''
ADDED = '''
@server.tool
def added_later() -> str:
    return "fresh"
'''
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}


class Lines:
    """Collects a pipe's lines in a thread; `wait_for` polls them."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.lines: list[str] = []
        self.pipe = pipe

        def read() -> None:
            for raw in iter(pipe.readline, b""):
                self.lines.append(raw.decode("utf-8", "replace"))

        self.thread = threading.Thread(target=read, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """After the process ended: the reader has seen EOF, unless a process it left
        behind still holds the pipe (closing it then would block on the reader)."""
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "a process left behind still writes to the pipe"
        self.pipe.close()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in list(self.lines) if predicate(line)]
            if found:
                return found[-1]
            time.sleep(0.05)
        raise AssertionError(f"not seen in time; got:\n{self.text}")


class StdioDev:
    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "dev", *args], cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.out = Lines(self.proc.stdout)
        self.err = Lines(self.proc.stderr)
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None, *,
                meta: bool = True) -> dict[str, Any]:
        self.next_id += 1
        rid = self.next_id
        body = dict(params or {})
        if meta:
            body["_meta"] = META
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": body})
        line = self.out.wait_for(lambda text: _id_of(text) == rid)
        message: dict[str, Any] = json.loads(line)
        return message

    def close(self) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            status = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            status = self.proc.wait()
        self.out.close()
        self.err.close()
        return status


def _id_of(text: str) -> Any:
    try:
        message = json.loads(text)
    except ValueError:
        return None
    return message.get("id") if isinstance(message, dict) and "method" not in message else None


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    path = tmp_path / "demo.py"
    path.write_text(SERVER)
    return path


@pytest.fixture
def stdio_dev(server_file: Path) -> Iterator[StdioDev]:
    dev = StdioDev([str(server_file)], cwd=server_file.parent)
    try:
        yield dev
    finally:
        dev.close()


def _tool_names(response: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in response["result"]["tools"]}


def test_stdio_logs_requests_shows_tracebacks_and_reloads(stdio_dev: StdioDev,
                                                         server_file: Path) -> None:
    hi = stdio_dev.request("tools/call", {"name": "hello", "arguments": {"name": "Ada"}})
    assert hi["result"]["content"][0]["text"] == "hi Ada"
    logged = stdio_dev.err.wait_for(lambda text: 'tools/call "hello"' in text)
    assert logged.startswith("[dev] ") and " ms -> complete" in logged

    failed = stdio_dev.request("tools/call", {"name": "boom", "arguments": {}})
    assert failed["result"]["isError"] is True
    stdio_dev.err.wait_for(lambda text: 'tools/call "boom"' in text and "isError" in text)
    assert "Traceback (most recent call last)" in stdio_dev.err.text
    assert 'raise RuntimeError("kaboom from the tool")' in stdio_dev.err.text

    unknown = stdio_dev.request("tools/call", {"name": "nope", "arguments": {}})
    assert unknown["error"]["code"] == -32602
    stdio_dev.err.wait_for(lambda text: 'tools/call "nope"' in text and "error -32602" in text)

    assert "added_later" not in _tool_names(stdio_dev.request("tools/list"))
    server_file.write_text(SERVER + ADDED)
    stdio_dev.err.wait_for(lambda text: "reloading (demo.py changed)" in text)
    assert "added_later" in _tool_names(stdio_dev.request("tools/list"))
    fresh = stdio_dev.request("tools/call", {"name": "added_later", "arguments": {}})
    assert fresh["result"]["content"][0]["text"] == "fresh"
    assert stdio_dev.close() == 0


def test_a_broken_edit_answers_errors_until_fixed(stdio_dev: StdioDev, server_file: Path) -> None:
    assert stdio_dev.request("tools/list")["result"]
    server_file.write_text(SERVER + "\ndef broken(:\n")
    stdio_dev.err.wait_for(lambda text: "exited with status" in text)
    assert "SyntaxError" in stdio_dev.err.text
    down = stdio_dev.request("tools/list")
    assert down["error"]["code"] == -32603 and "Save a change" in down["error"]["message"]
    server_file.write_text(SERVER + ADDED)
    stdio_dev.err.wait_for(lambda _text: stdio_dev.err.text.count("reloading (") >= 2)
    assert "added_later" in _tool_names(stdio_dev.request("tools/list"))


def test_a_legacy_session_survives_a_reload(stdio_dev: StdioDev, server_file: Path) -> None:
    init = stdio_dev.request("initialize", {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old-host", "version": "1"}}, meta=False)
    assert init["result"]["protocolVersion"] == "2025-11-25"
    stdio_dev.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert "hello" in _tool_names(stdio_dev.request("tools/list", meta=False))
    server_file.write_text(SERVER + ADDED)
    stdio_dev.err.wait_for(lambda text: "reloading" in text)
    after = stdio_dev.request("tools/list", meta=False)
    assert "added_later" in _tool_names(after), after
    # The replayed initialize's answer is not relayed to the host.
    assert sum('"protocolVersion"' in line for line in stdio_dev.out.lines) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "dev server did not start"
            time.sleep(0.05)


async def test_http_logs_requests_and_reloads(server_file: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "dev", str(server_file),
                             "--transport", "http", "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = Lines(proc.stderr)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        err.wait_for(lambda text: url in text)
        _wait_port(port, proc)
        async with Client(url) as client:
            result = await client.call_tool("hello", {"name": "Grace"})
            assert result["content"][0]["text"] == "hi Grace"
        err.wait_for(lambda text: 'tools/call "hello"' in text and "-> complete" in text)
        server_file.write_text(SERVER + ADDED)
        err.wait_for(lambda text: "reloading (demo.py changed)" in text)
        err.wait_for(lambda text: "reloaded (generation 2)" in text)  # and listening
        async with Client(url) as client:
            names = {tool["name"] for tool in await client.list_tools()}
        assert "added_later" in names
        err.wait_for(lambda text: "tools/list" in text and "-> complete" in text)
    finally:
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=20)
        err.close()
    assert status == 0, err.text


def test_inspector_without_node_says_how_to_get_it(server_file: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    out = subprocess.run([sys.executable, "-m", "nimblemcp", "dev", str(server_file),
                          "--inspector"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": str(empty)}, stdin=subprocess.DEVNULL)
    assert out.returncode == 1
    assert "needs Node.js" in out.stderr and "https://nodejs.org/" in out.stderr


def test_inspector_is_given_the_dev_command(server_file: Path, tmp_path: Path) -> None:
    """npx is replaced by a script that records its arguments (the real Inspector is a
    download and a browser UI); what matters here is what we ask it to run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "npx-args.json"
    npx = bin_dir / "npx"
    npx.write_text(f"#!{sys.executable}\nimport json, sys\n"
                   f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    npx.chmod(0o755)
    out = subprocess.run([sys.executable, "-m", "nimblemcp", "dev", str(server_file),
                          "--inspector"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    args = json.loads(record.read_text())
    assert args[:2] == ["-y", "@modelcontextprotocol/inspector"]
    assert args[-2:] == ["dev", str(server_file.resolve())]
    # What the Inspector will spawn is this environment's nimblemcp.
    assert args[2].startswith(str(Path(sys.executable).parent))


def test_without_watchfiles_the_extra_is_named(server_file: Path) -> None:
    code = ("import sys\nsys.modules['watchfiles'] = None\n"
            "from nimblemcp.cli import main\nmain(sys.argv[1:])\n")
    out = subprocess.run([sys.executable, "-c", code, "dev", str(server_file)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 1
    assert "needs the [dev-server] extra: pip install 'nimblemcp[dev-server]'" in out.stderr
    assert "Traceback" not in out.stderr


def test_stopping_during_a_reload_leaves_no_server_behind(server_file: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "dev", str(server_file),
                             "--transport", "http", "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = Lines(proc.stderr)
    try:
        _wait_port(port, proc)
        err.wait_for(lambda text: "watching" in text)
        # The watcher starts watching a moment after it says so (watchfiles gives no
        # signal): a change made before is not seen, so the edit is made again until
        # the reload starts.
        for attempt in range(6):
            server_file.write_text(SERVER + ADDED + f"\n# edit {attempt}\n")
            try:
                err.wait_for(lambda text: "reloading" in text, timeout=5)
                break
            except AssertionError:
                continue
        err.wait_for(lambda text: "reloading" in text, timeout=1)
    finally:
        proc.send_signal(signal.SIGINT)  # while the new generation is starting
        status = proc.wait(timeout=30)
    err.close()  # EOF: no child of it still holds its stderr
    assert status == 0, err.text
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()


async def test_the_asgi_request_log_reads_json_and_sse_responses() -> None:
    """`RequestLog` around the real endpoint under uvicorn: a plain JSON answer, an SSE
    answer (the tool reports progress), an error, and a notification."""
    server = m.Server("logged")

    @server.tool
    async def slow(ctx: m.Context) -> str:
        await ctx.report_progress(1, 1, "done")
        return "ok"

    lines: list[str] = []
    async with (serving(RequestLog(server.asgi_app(), log=lines.append)) as base,
                Client(base + "/mcp") as client):
        await client.list_tools()
        progress: list[float] = []
        result = await client.call_tool("slow", {}, on_progress=lambda p, t, msg: progress.append(p))
        assert result["content"][0]["text"] == "ok" and progress == [1]
        with pytest.raises(m.McpError):
            await client.read_resource("nothing://here")
    assert any(text.startswith("tools/list ") and text.endswith("-> complete") for text in lines), lines
    assert any(text.startswith('tools/call "slow" ') and text.endswith("-> complete")
               for text in lines), lines
    assert any(text.startswith('resources/read "nothing://here" ') and "-> error -3" in text
               for text in lines), lines
