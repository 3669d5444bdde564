"""The Streamable HTTP transport under a real uvicorn, started the way users start it:
`python -m nimblemcp run server.py --transport http --port N` in a subprocess on a free
127.0.0.1 port. Covers JSON and SSE answers, progress arriving while the handler still
runs, cancellation by closing the stream, concurrent streams, Origin and size guards
(server healthy after each), the event loop choice, gc.freeze and graceful shutdown.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from _sse_parser import SSEParser

from nimblemcp.transports.http.app import YOUNG_GC_THRESHOLD

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}

SERVER_SOURCE = '''
import asyncio
import gc

import nimblemcp as m

server = m.Server("uvicorn-test", "0.1")
gate = asyncio.Event()
stats = {"started": 0, "cancelled": 0, "finished": 0}


@server.tool()
async def echo(message: str) -> str:
    return message


@server.tool()
async def steps(n: int, ctx: m.Context) -> str:
    for i in range(1, n + 1):
        await ctx.report_progress(i, n)
        await asyncio.sleep(0.001)
    return f"steps {n}"


@server.tool()
async def gated(ctx: m.Context) -> str:
    """Emit progress, then wait for `release`: proves the stream is flushed early."""
    await ctx.report_progress(1, 2, "waiting")
    await gate.wait()
    return "released"


@server.tool()
async def release() -> str:
    gate.set()
    return "ok"


@server.tool()
async def forever(ctx: m.Context) -> str:
    stats["started"] += 1
    await ctx.report_progress(1)
    try:
        while True:
            await asyncio.sleep(0.01)
    except asyncio.CancelledError:
        stats["cancelled"] += 1
        raise
    finally:
        stats["finished"] += 1


@server.tool()
async def slow(seconds: float, ctx: m.Context) -> str:
    await ctx.report_progress(0.5)
    await asyncio.sleep(seconds)
    return "slow done"


@server.tool()
async def status() -> dict:
    loop = type(asyncio.get_running_loop()).__module__
    return {**stats, "loop": loop, "frozen": gc.get_freeze_count(), "gc": list(gc.get_threshold())}
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Running:
    def __init__(self, proc: subprocess.Popen[bytes], url: str) -> None:
        self.proc = proc
        self.url = url


def start(tmp: Path) -> Running:
    src = tmp / "uv_server.py"
    src.write_text(SERVER_SOURCE)
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = tmp / "server.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "run", str(src), "--transport", "http", "--port", str(port)],
            stdout=sink, stderr=sink, env=env,
        )
    for _ in range(300):  # wait until the port accepts connections
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        raise RuntimeError("server did not start")
    return Running(proc, f"http://127.0.0.1:{port}/mcp")


def stop(run: Running) -> int:
    run.proc.send_signal(signal.SIGINT)
    try:
        return run.proc.wait(timeout=30)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    run = start(tmp_path_factory.mktemp("live"))
    yield run
    assert stop(run) == 0


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as c:
        yield c


def call(name: str, rid: int | str = 1, token: str | int | None = None, **arguments: Any) -> dict[str, Any]:
    meta: dict[str, Any] = dict(META)
    if token is not None:
        meta["progressToken"] = token
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta}}


def headers(body: dict[str, Any], **extra: str) -> dict[str, str]:
    h = {"accept": "application/json, text/event-stream", "content-type": "application/json",
         "mcp-protocol-version": V, "mcp-method": body["method"], "mcp-name": body["params"]["name"]}
    h.update(extra)
    return h


async def post(c: httpx.AsyncClient, url: str, body: dict[str, Any], **extra: str) -> httpx.Response:
    return await c.post(url, content=orjson.dumps(body), headers=headers(body, **extra))


async def tool_text(c: httpx.AsyncClient, url: str, name: str, **arguments: Any) -> Any:
    r = await post(c, url, call(name, **arguments))
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    return result.get("structuredContent", result["content"][0]["text"])


async def healthy(c: httpx.AsyncClient, url: str) -> None:
    assert await tool_text(c, url, "echo", message="still here") == "still here"


async def read_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    parser = SSEParser()
    async for chunk in response.aiter_bytes():
        for event in parser.feed(chunk):
            yield orjson.loads(event)


async def test_http_06_json_response_over_uvicorn(live: Running, client: httpx.AsyncClient) -> None:
    r = await post(client, live.url, call("echo", message="hello"))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json()["result"]["content"] == [{"type": "text", "text": "hello"}]
    assert "server" not in r.headers


async def test_http_07_progress_streams_before_the_handler_finishes(live: Running, client: httpx.AsyncClient) -> None:
    body = call("gated", token="g1")
    async with client.stream("POST", live.url, content=orjson.dumps(body), headers=headers(body)) as r:
        assert r.headers["content-type"] == "text/event-stream"
        assert r.headers["x-accel-buffering"] == "no"
        seen: list[dict[str, Any]] = []
        async for message in read_events(r):
            seen.append(message)
            if message.get("method") == "notifications/progress":
                # The handler is blocked on the gate: this event was flushed early.
                assert await tool_text(client, live.url, "release") == "ok"
    assert seen[0]["params"] == {"progressToken": "g1", "progress": 1, "total": 2, "message": "waiting"}
    assert seen[-1]["id"] == 1 and seen[-1]["result"]["content"][0]["text"] == "released"


async def test_http_10_closing_the_stream_stops_the_handler(live: Running, client: httpx.AsyncClient) -> None:
    before = await tool_text(client, live.url, "status")
    body = call("forever", token="f")
    async with client.stream("POST", live.url, content=orjson.dumps(body), headers=headers(body)) as r:
        async for message in read_events(r):
            assert message["method"] == "notifications/progress"
            break  # the handler is running; now hang up
    for _ in range(600):
        after = await tool_text(client, live.url, "status")
        if after["finished"] > before["finished"]:
            break
        await asyncio.sleep(0.05)
    assert after["started"] == before["started"] + 1
    assert after["cancelled"] == before["cancelled"] + 1  # it really stopped, by cancellation
    await healthy(client, live.url)


async def test_http_07_concurrent_streams_keep_their_own_notifications(live: Running, client: httpx.AsyncClient) -> None:
    async def one(i: int) -> list[dict[str, Any]]:
        body = call("steps", rid=f"r{i}", token=f"t{i}", n=5)
        async with client.stream("POST", live.url, content=orjson.dumps(body), headers=headers(body)) as r:
            return [m async for m in read_events(r)]

    results = await asyncio.gather(*(one(i) for i in range(12)))
    for i, messages in enumerate(results):
        assert [m["params"]["progressToken"] for m in messages[:-1]] == [f"t{i}"] * 5
        assert messages[-1]["id"] == f"r{i}"
        assert messages[-1]["result"]["content"][0]["text"] == "steps 5"


async def test_http_02_foreign_origin_403_over_uvicorn(live: Running, client: httpx.AsyncClient) -> None:
    r = await post(client, live.url, call("echo", message="x"), origin="https://evil.example")
    assert r.status_code == 403
    await healthy(client, live.url)
    r = await post(client, live.url, call("echo", message="x"), origin="http://localhost:6274")
    assert r.status_code == 200


async def test_oversized_body_rejected_over_uvicorn(live: Running, client: httpx.AsyncClient) -> None:
    r = await post(client, live.url, call("echo", message="x" * (5 * 1024 * 1024)))
    assert r.status_code == 413
    await healthy(client, live.url)


async def test_bad_requests_leave_the_server_healthy(live: Running, client: httpx.AsyncClient) -> None:
    h = headers(call("echo", message="x"))
    r = await client.post(live.url, content=b"\xff not json", headers=h)
    assert r.status_code == 400 and r.json()["error"]["code"] == -32700
    r = await client.get(live.url)
    assert r.status_code == 405
    r = await post(client, live.url, call("echo", message="x"), **{"mcp-name": "other"})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32020
    await healthy(client, live.url)


async def test_run_http_uses_uvloop_and_freezes_gc(live: Running, client: httpx.AsyncClient) -> None:
    status = await tool_text(client, live.url, "status")
    assert status["loop"].startswith("uvloop")
    assert status["frozen"] > 0
    # Serving tunes the young generation (in-flight requests, never garbage) only.
    assert status["gc"][0] == YOUNG_GC_THRESHOLD
    assert status["gc"][1:] == [10, 10]  # CPython's defaults, untouched


async def test_graceful_shutdown_lets_inflight_request_finish(tmp_path: Path) -> None:
    run = start(tmp_path)
    try:
        body = call("slow", token="s", seconds=0.5)
        async with httpx.AsyncClient(timeout=30) as c, c.stream(
            "POST", run.url, content=orjson.dumps(body), headers=headers(body)
        ) as r:
            messages: list[dict[str, Any]] = []
            async for message in read_events(r):
                messages.append(message)
                if len(messages) == 1:
                    run.proc.send_signal(signal.SIGINT)  # shut down mid-request
        assert messages[-1]["result"]["content"][0]["text"] == "slow done"
        assert run.proc.wait(timeout=30) == 0
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
