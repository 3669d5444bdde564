"""A stdio server against a careless or hostile peer, in a real subprocess.

- A peer that floods requests and never reads the answers: once more than 16 MiB of
  output waits unread, the server stops reading stdin (no new work, bounded memory),
  and reads again once the peer catches up; no answer is lost.
- Its listen streams do not wait for requests: past 64 MiB of unread output they
  end with `notifications/cancelled` (as an HTTP stream past its buffer does).
- A peer that reuses the id of a request still running: the second request is refused
  (-32600), so a cancellation names one request and every running one stays known.
"""

from __future__ import annotations

import contextlib
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
from _waits import HANG, wait_for_file

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}

SOURCE = textwrap.dedent('''
    import asyncio, os
    from pathlib import Path
    import nimblemcp as m

    MARKS = Path(os.environ["MARKS"])
    server = m.Server("stdio-hostile")


    @server.tool()
    async def big(n: int, pad: str = "") -> str:
        return "x" * n


    @server.tool()
    async def nap(tag: str, seconds: float) -> str:
        (MARKS / f"{tag}.started").write_text("1")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            (MARKS / f"{tag}.cancelled").write_text("1")
            raise
        return tag


    @server.tool()
    async def storm(n: int, size: int) -> str:
        pad = "p" * size
        for i in range(n):
            server.notify_resource_updated(f"notes://x/{pad}/{i}")
            if i % 32 == 0:
                await asyncio.sleep(0)  # let the listen keep up with its queue
        (MARKS / "storm.done").write_text("1")
        return "calm"


    @server.resource("notes://{name}")
    def note(name: str) -> str:
        return name
''')


class Proc:
    def __init__(self, tmp: Path) -> None:
        src = tmp / "hostile_server.py"
        src.write_text(SOURCE)
        self.marks = tmp / "marks"
        self.marks.mkdir()
        base = {k: v for k, v in os.environ.items() if not k.startswith("NIMBLEMCP_")}
        self.p = subprocess.Popen([sys.executable, "-m", "nimblemcp", "run", str(src)], cwd=tmp,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  env={**base, "MARKS": str(self.marks)})
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.reading = threading.Event()  # set: read stdout (the flood test starts without)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.p.stdout is not None
        self.reading.wait()
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def line(self, rid: Any, name: str, **arguments: Any) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                           "params": {"name": name, "arguments": arguments, "_meta": META}}).encode() + b"\n"

    def send(self, data: bytes) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def recv(self) -> dict[str, Any]:
        self.reading.set()
        line = self.lines.get(timeout=HANG)
        assert line, "the server closed stdout"
        message: dict[str, Any] = json.loads(line)
        return message


@pytest.fixture
def proc(tmp_path: Path) -> Iterator[Proc]:
    p = Proc(tmp_path)
    yield p
    if p.p.poll() is None:
        p.p.kill()
    p.p.wait()
    for f in (p.p.stdin, p.p.stdout):
        if f is not None:
            with contextlib.suppress(BrokenPipeError):
                f.close()


FLOOD = 400  # requests of 8 KiB, answers of 128 KiB: 50 MiB of output in all
ANSWER = 128 * 1024


def test_a_peer_that_does_not_read_stops_the_server_reading(proc: Proc) -> None:
    lines = [proc.line(i, "big", n=ANSWER, pad="y" * 8192) for i in range(FLOOD)]
    written = threading.Event()

    def flood() -> None:
        for data in lines:
            proc.send(data)
        written.set()

    writer = threading.Thread(target=flood, daemon=True)
    writer.start()
    # A server that kept reading would take all of it in well under this (3 MiB of
    # input): the flood cannot finish while the server holds back its reading.
    assert not written.wait(3.0), "the server read every request while nobody read its output"
    seen = set()
    for _ in range(FLOOD):  # now read: the server catches up and reads on
        message = proc.recv()
        assert len(message["result"]["content"][0]["text"]) == ANSWER
        seen.add(message["id"])
    assert seen == set(range(FLOOD))
    assert written.wait(HANG)
    writer.join(HANG)
    assert proc.p.stdin is not None
    proc.p.stdin.close()
    assert proc.p.wait(HANG) == 0


def test_the_id_of_a_running_request_is_refused(proc: Proc) -> None:
    proc.send(proc.line(7, "nap", tag="first", seconds=600))
    wait_for_file(proc.marks / "first.started")
    proc.send(proc.line(7, "nap", tag="second", seconds=600))
    refused = proc.recv()
    assert refused["id"] == 7 and refused["error"]["code"] == -32600
    assert "already in use" in refused["error"]["message"]
    proc.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 7}}).encode() + b"\n")
    wait_for_file(proc.marks / "first.cancelled")  # the cancel reached the running one
    assert not (proc.marks / "second.started").exists()
    proc.send(proc.line(7, "nap", tag="third", seconds=0))  # the id is free again
    answer = proc.recv()
    assert answer["id"] == 7 and answer["result"]["content"][0]["text"] == "third"
    assert proc.p.stdin is not None
    proc.p.stdin.close()
    assert proc.p.wait(HANG) == 0
    assert not (proc.marks / "second.started").exists()


def test_a_listen_nobody_reads_is_ended_past_its_backlog(proc: Proc) -> None:
    events, size = 12_000, 8192  # about 100 MiB of notifications if nothing ended the listen
    proc.send(json.dumps({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": {
        "notifications": {"resourceSubscriptions": ["notes://x"]}, "_meta": META}}).encode() + b"\n")
    proc.send(proc.line("S", "storm", n=events, size=size))
    wait_for_file(proc.marks / "storm.done")  # nobody read meanwhile
    updated = 0
    cancelled: dict[str, Any] | None = None
    answered = False
    while cancelled is None or not answered:
        message = proc.recv()
        if message.get("method") == "notifications/resources/updated":
            updated += 1
        elif message.get("method") == "notifications/cancelled":
            cancelled = message["params"]
        elif message.get("id") == "S":
            answered = message["result"]["content"][0]["text"] == "calm"
        elif message.get("id") == "L":
            raise AssertionError(f"the listen ended with a result: {message}")
    assert cancelled["requestId"] == "L" and "did not read" in cancelled["reason"]
    assert 0 < updated < events  # the backlog, then nothing more
    proc.send(proc.line("after", "nap", tag="after", seconds=0))  # the server serves on
    answer = proc.recv()
    assert answer["id"] == "after" and answer["result"]["content"][0]["text"] == "after"
    assert proc.p.stdin is not None
    proc.p.stdin.close()
    assert proc.p.wait(HANG) == 0
