"""`nimblemcp dev` on stdio reads the host's lines in pieces of at most 1 MiB and reads
ahead of the server by at most 16 pieces: a huge line from the host passes whole
without the relay holding all of it, and the request log still names a long request.
Before, the relay read each host line whole (`readline()` without a limit) into an
unbounded queue and parsed it whole."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from _waits import HANG

SERVER = '''
import nimblemcp as m

server = m.Server("dev-stdin")

@server.tool
def size(text: str) -> int:
    return len(text)

@server.tool
def hello(name: str) -> str:
    return "hi " + name
'''
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


class Dev:
    """`nimblemcp dev srv.py` on stdio, its output lines in a queue, its stderr kept."""

    def __init__(self, tmp_path: Path) -> None:
        (tmp_path / "srv.py").write_text(SERVER)
        self.proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "dev", "srv.py"], cwd=tmp_path,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=dict(os.environ))
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.err: list[bytes] = []
        out, errpipe = self.proc.stdout, self.proc.stderr
        self.readers = [
            threading.Thread(target=lambda: [self.lines.put(line) for line in iter(out.readline, b"")], daemon=True),
            threading.Thread(target=lambda: self.err.extend(iter(errpipe.readline, b"")), daemon=True)]
        for t in self.readers:
            t.start()

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def answer(self, rid: int) -> dict[str, Any]:
        while True:
            message: dict[str, Any] = json.loads(self.lines.get(timeout=HANG))
            if message.get("id") == rid:
                return message

    def close(self) -> str:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            assert self.proc.wait(HANG) == 0
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for t in self.readers:
                t.join(HANG)
            assert self.proc.stdout is not None and self.proc.stderr is not None
            self.proc.stdout.close()
            self.proc.stderr.close()
        return b"".join(self.err).decode(errors="replace")

    def status(self, field: str) -> int:
        """A memory figure of the relay process itself, in KiB (/proc/PID/status)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(field)


def call(rid: int, tool: str, **arguments: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": META}}).encode() + b"\n"


def test_a_request_longer_than_a_piece_passes_whole_and_is_logged(tmp_path: Path) -> None:
    dev = Dev(tmp_path)
    try:
        text = "y" * (3 * 1024 * 1024 + 5)  # four pieces
        dev.send(call(1, "size", text=text))
        answer = dev.answer(1)
        assert answer["result"]["structuredContent"] == {"result": len(text)}, answer
        dev.send(call(2, "hello", name="after"))  # the next line starts clean
        assert dev.answer(2)["result"]["content"][0]["text"] == "hi after"
    finally:
        log = dev.close()
    # The long request's log line comes from its head (id and method), ended by its answer.
    assert log.count("tools/call") >= 2, log
    assert "unchecked" not in log and "not JSON" not in log, log


def test_a_huge_host_line_does_not_grow_the_relay(tmp_path: Path) -> None:
    """150 MiB in one line: the relay holds at most its read-ahead, not the line."""
    dev = Dev(tmp_path)
    try:
        dev.send(call(1, "hello", name="first"))
        assert dev.answer(1)["result"]["content"][0]["text"] == "hi first"
        before = dev.status("VmRSS")
        huge = call(2, "size", text="z" * (150 * 1024 * 1024))
        writer = threading.Thread(target=dev.send, args=(huge,), daemon=True)
        writer.start()  # the server skips a line over its own 16 MiB limit
        writer.join(HANG)
        assert not writer.is_alive()
        del huge
        dev.send(call(3, "hello", name="after"))
        assert dev.answer(3)["result"]["content"][0]["text"] == "hi after"
        grown = dev.status("VmHWM") - before
    finally:
        log = dev.close()
    assert grown < 60 * 1024, (grown, log)  # KiB; reading the line whole took over 150 MiB
    assert "server exited" not in log, log
