"""The stdio transport in a real subprocess: `python -m nimblemcp run server.py`
(STDIO-01..06, CANC-03, PROG-05, and bad input keeps the server serving)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _waits import wait_for_file

HANG = 30.0  # only a guard against a hung test, never a measurement

SERVER_SRC = textwrap.dedent('''
    import asyncio, os, sys, threading
    from pathlib import Path
    import nimblemcp as m

    server = m.Server("stdio-test", "1.0.0")
    MARK = Path(os.environ["MARK_DIR"])
    gate = asyncio.Event()
    sync_gate = threading.Event()

    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool()
    def length(text: str) -> int:
        return len(text)

    @server.tool()
    def noisy() -> str:
        print("PRINTED NOISE")
        sys.stdout.write("WRITTEN NOISE\\n")
        os.write(1, b"FD1 NOISE\\n")
        return "quiet"

    @server.tool()
    async def wait_gate() -> str:
        await gate.wait()
        return "opened"

    @server.tool()
    async def open_gate() -> str:
        gate.set()
        return "set"

    @server.tool()
    def sync_wait() -> str:
        return "sync opened" if sync_gate.wait(60) else "sync timed out"

    @server.tool()
    def sync_open() -> str:
        sync_gate.set()
        return "sync set"

    @server.tool()
    async def cancellable(ctx: m.Context) -> str:
        (MARK / "started").write_text("1")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            (MARK / "cancelled").write_text("1")
            raise
        (MARK / "finished").write_text("1")
        return "finished"

    @server.tool()
    async def steps(ctx: m.Context) -> str:
        for i in range(1, 4):
            await ctx.report_progress(i, 3)
            await asyncio.sleep(0)
        return "stepped"
''')


class Proc:
    def __init__(self, tmp: Path, *args: str) -> None:
        (tmp / "marks").mkdir(exist_ok=True)
        self.marks = tmp / "marks"
        env = {**os.environ, "MARK_DIR": str(self.marks), "PYTHONUNBUFFERED": "1"}
        self.p = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "run", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.raw_stdout: list[bytes] = []
        self.stderr = b""
        self._threads = [threading.Thread(target=self._pump, daemon=True),
                         threading.Thread(target=self._err, daemon=True)]
        for t in self._threads:
            t.start()
        self._ids = 0

    def _pump(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.raw_stdout.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _err(self) -> None:
        assert self.p.stderr is not None
        self.stderr = self.p.stderr.read()

    def send(self, message: Any) -> None:
        assert self.p.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.p.stdin.write(data + b"\n")
        self.p.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None, rid: Any = None,
                **meta: Any) -> Any:
        if rid is None:
            self._ids += 1
            rid = self._ids
        body = dict(params or {})
        body["_meta"] = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                         "io.modelcontextprotocol/clientCapabilities": {}, **meta}
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": body})
        return rid

    def recv(self) -> dict[str, Any]:
        line = self.lines.get(timeout=HANG)
        assert line is not None, f"server exited; stderr: {self.stderr[-2000:]!r}"
        message = json.loads(line)
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0"
        return message

    def call(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
        rid = self.request(method, params, **meta)
        message = self.recv()
        assert message.get("id") == rid, message
        return message

    def close(self) -> int:
        if self.p.stdin and not self.p.stdin.closed:
            self.p.stdin.close()
        try:
            code = self.p.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError("server did not exit after stdin EOF") from None
        finally:
            for t in self._threads:
                t.join(HANG)
            for f in (self.p.stdout, self.p.stderr):
                if f is not None:
                    f.close()
        return code

    def wait_for_file(self, name: str) -> None:
        wait_for_file(self.marks / name, hang=HANG)


@pytest.fixture
def proc(tmp_path: Path) -> Iterator[Proc]:
    (tmp_path / "srv.py").write_text(SERVER_SRC)
    p = Proc(tmp_path, "srv.py")
    yield p
    if p.p.poll() is None:
        p.close()


def test_stdio_01_requests_answered(proc: Proc) -> None:
    """STDIO-01: newline-delimited JSON-RPC; discover and a tool call work."""
    disc = proc.call("server/discover")
    assert disc["result"]["supportedVersions"] == ["2026-07-28"]
    assert disc["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "stdio-test"
    assert proc.call("tools/call", {"name": "add", "arguments": {"a": 2, "b": 40}})["result"]["structuredContent"] == {"result": 42}
    assert proc.close() == 0


BAD_INPUTS: list[tuple[str, bytes, int]] = [
    ("invalid-json", b"{this is not json", -32700),
    ("invalid-utf8", b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}', -32700),
    ("non-object", b'"hello"', -32600),
    ("number", b"17", -32600),
    ("array", b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]', -32600),
    ("empty-array", b"[]", -32600),
    ("no-jsonrpc", b'{"id": 1, "method": "tools/list", "params": {}}', -32600),
    ("missing-meta", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}', -32602),
    ("no-params", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}', -32602),
    ("unknown-version", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": '
     b'{"io.modelcontextprotocol/protocolVersion": "2025-11-25", "io.modelcontextprotocol/clientCapabilities": {}}}}', -32022),
    ("unknown-method", b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"_meta": '
     b'{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}', -32601),
    ("gated-method", b'{"jsonrpc": "2.0", "id": 1, "method": "prompts/list", "params": {"_meta": '
     b'{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}', -32601),
    ("unknown-tool", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "zzz", "_meta": '
     b'{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}', -32602),
]


@pytest.mark.parametrize(("label", "raw", "code"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_stdio_bad_input_gets_spec_error_and_next_request_works(proc: Proc, label: str, raw: bytes, code: int) -> None:
    """BASE-09 over stdio: each bad line gets its error and the server keeps serving."""
    proc.send(raw)
    err = proc.recv()
    assert err["error"]["code"] == code, err
    if code in (-32700,) or label in ("non-object", "number", "array", "empty-array"):
        assert "id" not in err
    else:
        assert err["id"] == 1
    ok = proc.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})
    assert ok["result"]["structuredContent"] == {"result": 2}


def test_stdio_wrong_argument_types_is_tool_error_and_serving_continues(proc: Proc) -> None:
    """TOOL-08 over stdio: wrong argument types -> isError result."""
    r = proc.call("tools/call", {"name": "add", "arguments": {"a": "one", "b": 2}})
    assert r["result"]["isError"] is True
    assert proc.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})["result"]["structuredContent"] == {"result": 3}


def test_stdio_huge_line_is_rejected_and_serving_continues(proc: Proc) -> None:
    """A line beyond the size limit gets a parse error; the next request still works."""
    proc.send(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"x": "' + b"a" * (17 * 1024 * 1024) + b'"}}')
    err = proc.recv()
    assert err["error"]["code"] == -32700 and "id" not in err
    ok = proc.call("tools/call", {"name": "add", "arguments": {"a": 5, "b": 5}})
    assert ok["result"]["structuredContent"] == {"result": 10}


def test_stdio_01_large_message_arrives_whole_across_many_pipe_reads(proc: Proc) -> None:
    """STDIO-01: a 1 MiB message (the server reads a pipe 64 KiB at a time) is one request."""
    text = "x" * (1 << 20)
    r = proc.call("tools/call", {"name": "length", "arguments": {"text": text}})
    assert r["result"]["structuredContent"] == {"result": 1 << 20}
    assert proc.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})["result"]["structuredContent"] == {"result": 2}


def test_stdio_02_stray_output_goes_to_stderr(proc: Proc) -> None:
    """STDIO-02: print(), sys.stdout.write and os.write(1) never corrupt stdout."""
    r = proc.call("tools/call", {"name": "noisy"})
    assert r["result"]["content"][0]["text"] == "quiet"
    assert proc.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})["result"]
    assert proc.close() == 0
    for line in proc.raw_stdout:
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0"
    assert len(proc.raw_stdout) == 2
    for noise in (b"PRINTED NOISE", b"WRITTEN NOISE", b"FD1 NOISE"):
        assert noise in proc.stderr


@pytest.mark.parametrize(("slow", "fast"), [("wait_gate", "open_gate"), ("sync_wait", "sync_open")])
def test_base_08_concurrent_requests_slow_does_not_block_fast(proc: Proc, slow: str, fast: str) -> None:
    """BASE-08: the slow tool can only finish "opened" if the fast one ran while it
    waited, so they were concurrent (the two responses may arrive in either order)."""
    slow_id = proc.request("tools/call", {"name": slow})
    fast_id = proc.request("tools/call", {"name": fast})
    got = {m["id"]: m for m in (proc.recv(), proc.recv())}
    assert set(got) == {slow_id, fast_id}
    assert got[slow_id]["result"]["content"][0]["text"] in ("opened", "sync opened")


@pytest.mark.parametrize("rid", ["c-1", 77])
def test_stdio_05_cancelled_stops_the_tool_and_sends_no_response(proc: Proc, rid: Any) -> None:
    """STDIO-05 / CANC-03 / BASE-11: cancel by id (same JSON type); the handler is
    cancelled and nothing is sent for it."""
    proc.request("tools/call", {"name": "cancellable"}, rid=rid)
    proc.wait_for_file("started")
    # an id of the other JSON type must not cancel it
    other = str(rid) if isinstance(rid, int) else 0
    proc.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": other}})
    proc.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1]}})
    proc.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {"x": 1}}})
    proc.send({"jsonrpc": "2.0", "method": "notifications/cancelled"})
    assert proc.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})["result"]
    assert not (proc.marks / "cancelled").exists()
    proc.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid, "reason": "user"}})
    proc.wait_for_file("cancelled")
    assert proc.call("tools/call", {"name": "add", "arguments": {"a": 2, "b": 2}})["result"]
    assert proc.close() == 0
    assert not (proc.marks / "finished").exists()
    ids = [json.loads(line).get("id") for line in proc.raw_stdout]
    assert rid not in ids and len(ids) == 2


def test_prog_05_progress_arrives_before_response(proc: Proc) -> None:
    """PROG-05: progress notifications interleave on stdout before the response."""
    rid = proc.request("tools/call", {"name": "steps"}, progressToken="tok")
    seen = [proc.recv() for _ in range(4)]
    assert [s.get("method") for s in seen[:3]] == ["notifications/progress"] * 3
    assert [s["params"]["progress"] for s in seen[:3]] == [1, 2, 3]
    assert all(s["params"]["progressToken"] == "tok" for s in seen[:3])
    assert seen[3]["id"] == rid and seen[3]["result"]["content"][0]["text"] == "stepped"


def test_stdio_06_exits_on_stdin_eof(proc: Proc) -> None:
    """STDIO-06: closing stdin ends the server, even with a request still running."""
    proc.call("server/discover")
    proc.request("tools/call", {"name": "sync_wait"})
    proc.request("tools/call", {"name": "wait_gate"})
    assert proc.close() == 0


def test_stdio_06_exits_on_eof_when_idle(tmp_path: Path) -> None:
    (tmp_path / "srv.py").write_text(SERVER_SRC)
    p = Proc(tmp_path, "srv.py")
    assert p.close() == 0
    assert p.raw_stdout == []
