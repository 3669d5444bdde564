"""`nimblemcp dev` on stdio relays a response longer than its read limit (64 MiB) whole,
and goes on relaying: before, the relay's `readline()` raised and the host never heard
from the server again. The request log still ends that request by its id."""

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

server = m.Server("dev-huge")

@server.tool
def huge(n: int) -> str:
    return "x" * n

@server.tool
def hello(name: str) -> str:
    return "hi " + name
'''
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
HUGE = 65 * 1024 * 1024 + 17  # over the relay's 64 MiB read limit


def test_a_response_over_the_relays_limit_passes_whole(tmp_path: Path) -> None:
    (tmp_path / "srv.py").write_text(SERVER)
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "dev", "srv.py"], cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    lines: queue.Queue[bytes] = queue.Queue()
    err: list[bytes] = []
    out, errpipe = proc.stdout, proc.stderr

    def pump() -> None:
        for line in iter(out.readline, b""):
            lines.put(line)

    readers = [threading.Thread(target=pump, daemon=True),
               threading.Thread(target=lambda: err.extend(iter(errpipe.readline, b"")), daemon=True)]
    for t in readers:
        t.start()

    def call(rid: int, tool: str, **arguments: Any) -> dict[str, Any]:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments, "_meta": META}}).encode() + b"\n")
        proc.stdin.flush()
        message: dict[str, Any] = json.loads(lines.get(timeout=HANG))
        return message

    try:
        big = call(1, "huge", n=HUGE)
        assert big["id"] == 1 and len(big["result"]["content"][0]["text"]) == HUGE
        del big
        hello = call(2, "hello", name="again")  # the relay goes on
        assert hello["id"] == 2 and hello["result"]["content"][0]["text"] == "hi again"
        proc.stdin.close()
        assert proc.wait(HANG) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for t in readers:
            t.join(HANG)
        out.close()
        errpipe.close()
    log = b"".join(err).decode(errors="replace")
    assert "huge" in log and "too long to check" in log, log
    assert "server exited" not in log
