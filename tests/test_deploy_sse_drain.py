"""Graceful shutdown and the 2024-11-05 HTTP+SSE transport (`nimblemcp run --legacy-sse`;
issue 13, as LEG-08 for the 2025-11-25 GET streams): on SIGTERM each `/sse` stream
delivers the answers of its session's requests in flight, then ends cleanly (the
chunked body is terminated: the client sees an end, not a cut connection, and connects
again elsewhere), and the process exits long before its shutdown deadline. Both
engines. Real subprocesses, raw httpx, loopback only."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from _deploy import HANG_GUARD, launch, stop, write_server
from _redis import free_port

OLD = "2024-11-05"
DEADLINE = 30  # --shutdown-timeout: the drain must not wait for it


class SseStream:
    """The events of one `/sse` GET, as (event name, data) pairs, and its whole end."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self.chunks = chunks
        self.pending: list[tuple[str, bytes]] = []
        self.raw: list[bytes] = []

    async def next(self) -> tuple[str, bytes]:
        async def read() -> tuple[str, bytes]:
            while not self.pending:
                chunk = await self.chunks.__anext__()
                self.raw.append(chunk)
                for block in chunk.split(b"\n\n"):
                    lines = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
                    if b"data" in lines:
                        self.pending.append((lines.get(b"event", b"message").decode(), lines[b"data"]))
            return self.pending.pop(0)

        return await asyncio.wait_for(read(), HANG_GUARD)

    async def rest(self) -> list[bytes]:
        """Every chunk until the body ends; a cut connection raises (RemoteProtocolError)."""
        return [chunk async for chunk in self.chunks]


async def _open(c: httpx.AsyncClient, base: str, stream: Any) -> tuple[SseStream, str]:
    assert stream.status_code == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    events = SseStream(stream.aiter_bytes())
    name, data = await events.next()
    assert name == "endpoint"
    endpoint = base + data.decode()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": OLD, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    assert (await c.post(endpoint, json=init)).status_code == 202
    name, data = await events.next()
    assert name == "message" and orjson.loads(data)["result"]["protocolVersion"] == OLD
    assert (await c.post(endpoint, json={"jsonrpc": "2.0", "method": "notifications/initialized"})).status_code == 202
    return events, endpoint


@pytest.mark.parametrize("engine", ["nimblemcp", "uvicorn"])
async def test_sigterm_ends_sse_streams_after_their_answers_and_exits_promptly(tmp_path: Path, engine: str) -> None:
    src = write_server(tmp_path)
    port = free_port()
    log = tmp_path / "a.log"
    proc = launch(src, port, log, "--legacy-sse", "--shutdown-timeout", str(DEADLINE), "--engine", engine)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=HANG_GUARD) as c, httpx.AsyncClient(timeout=HANG_GUARD) as side:
            async with c.stream("GET", f"{base}/sse", headers={"accept": "text/event-stream"}) as busy_get, \
                    side.stream("GET", f"{base}/sse", headers={"accept": "text/event-stream"}) as idle_get:
                busy, endpoint = await _open(c, base, busy_get)
                idle, _ = await _open(side, base, idle_get)
                slow_call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                             "params": {"name": "slow", "arguments": {"seconds": 1.5}}}
                assert (await c.post(endpoint, json=slow_call)).status_code == 202
                await asyncio.sleep(0.5)
                began = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                # The idle stream ends cleanly at once (the read raises on a cut body).
                idle_rest = await asyncio.wait_for(idle.rest(), HANG_GUARD)
                idle_ended = time.monotonic() - began
                # The busy one first delivers the answer in flight, then ends cleanly.
                name, data = await busy.next()
                answer = orjson.loads(data)
                assert name == "message" and answer["id"] == 7, answer
                assert answer["result"]["content"][0]["text"] == "finished"
                busy_rest = await asyncio.wait_for(busy.rest(), HANG_GUARD)
                busy_ended = time.monotonic() - began
                assert all(chunk.startswith(b":") for chunk in [*idle_rest, *busy_rest])  # keep-alives only
                assert idle_ended < DEADLINE / 5, idle_ended  # ended, not left for the deadline
                assert busy_ended < DEADLINE / 2, busy_ended
            code = await asyncio.to_thread(proc.wait, HANG_GUARD)
            took = time.monotonic() - began
            assert code in (0, -signal.SIGTERM), log.read_text()
            # Not the deadline: the streams were ended, not waited for or cut.
            assert took < DEADLINE / 2, (took, log.read_text())
    finally:
        stop(proc)



@pytest.mark.parametrize("engine", ["nimblemcp", "uvicorn"])
async def test_sigint_ends_sse_streams_at_once_and_exits_promptly(tmp_path: Path, engine: str) -> None:
    """Any stop other than SIGTERM (Ctrl-C) does not wait for the answers in flight: each
    `/sse` stream ends at once, cleanly, and its session's requests are cancelled (issue
    34). Before, the stream stayed open until the shutdown deadline cut it."""
    src = write_server(tmp_path)
    port = free_port()
    log = tmp_path / "a.log"
    proc = launch(src, port, log, "--legacy-sse", "--shutdown-timeout", str(DEADLINE), "--engine", engine)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=HANG_GUARD) as c, \
                c.stream("GET", f"{base}/sse", headers={"accept": "text/event-stream"}) as get:
            events, endpoint = await _open(c, base, get)
            slow_call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                         "params": {"name": "slow", "arguments": {"seconds": DEADLINE}}}
            assert (await c.post(endpoint, json=slow_call)).status_code == 202
            await asyncio.sleep(0.5)
            began = time.monotonic()
            proc.send_signal(signal.SIGINT)
            rest = await asyncio.wait_for(events.rest(), HANG_GUARD)  # raises on a cut body
            ended = time.monotonic() - began
            assert all(chunk.startswith(b":") for chunk in rest)  # no answer: the call was cancelled
            code = await asyncio.to_thread(proc.wait, HANG_GUARD)
            took = time.monotonic() - began
        assert code in (0, -signal.SIGINT), log.read_text()
        assert ended < DEADLINE / 5 and took < DEADLINE / 5, (ended, took, log.read_text())
    finally:
        stop(proc)
