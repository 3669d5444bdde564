"""Graceful shutdown and 2025-11-25 GET streams (issues 13 and 34, LEG-08): on SIGTERM a
`nimblemcp run` instance ends each legacy session's standalone GET stream cleanly (the
chunked body is terminated: the client sees an end, not a cut connection, and opens a
new GET elsewhere), finishes the legacy requests in flight, and exits long before its
shutdown deadline, whether or not the server offers subscriptions (without them nothing
else would ever end the stream). On SIGINT the streams end at once too. Real
subprocesses, raw httpx, loopback only."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from _deploy import HANG_GUARD, launch, stop, write_server
from _redis import free_port

LEGACY = "2025-11-25"
DEADLINE = 30  # --shutdown-timeout: the drain must not wait for it


async def _session(c: httpx.AsyncClient, url: str) -> dict[str, str]:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = await c.post(url, json=init, headers={"accept": "application/json, text/event-stream"})
    assert r.status_code == 200, r.text
    h = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": LEGACY,
         "accept": "application/json, text/event-stream"}
    r = await c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
    assert r.status_code == 202
    return h


async def _read_to_end(chunks: Any) -> list[bytes]:
    """Every chunk until the body ends; a cut connection raises (RemoteProtocolError)."""
    return [chunk async for chunk in chunks]


@pytest.mark.parametrize("subscriptions", [True, False])
async def test_sigterm_ends_legacy_get_streams_cleanly_and_exits_promptly(
    tmp_path: Path, subscriptions: bool,
) -> None:
    src = write_server(tmp_path)
    if not subscriptions:
        src.write_text(src.read_text().replace('m.Server("deploy")', 'm.Server("deploy", listen=m.ListenOptions(enabled=False))'))
    port = free_port()
    log = tmp_path / "a.log"
    proc = launch(src, port, log, "--shutdown-timeout", str(DEADLINE))
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient(timeout=HANG_GUARD) as c, httpx.AsyncClient(timeout=HANG_GUARD) as side:
            h = await _session(c, url)
            h2 = await _session(side, url)
            slow_call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                         "params": {"name": "slow", "arguments": {"seconds": 1.5}}}
            async with c.stream("GET", url, headers={**h, "accept": "text/event-stream"}) as get, \
                    side.stream("GET", url, headers={**h2, "accept": "text/event-stream"}) as get2:
                assert get.status_code == 200 and get2.status_code == 200
                assert get.headers["content-type"].startswith("text/event-stream")
                first = get.aiter_bytes()
                assert (await first.__anext__()).startswith(b":")  # the opening keep-alive
                slow = asyncio.create_task(side.post(url, json=slow_call, headers=h2))
                await asyncio.sleep(0.5)
                began = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                # Both GET streams end cleanly (the read would raise on a cut body).
                rest = await asyncio.wait_for(_read_to_end(first), HANG_GUARD)
                rest2 = await asyncio.wait_for(_read_to_end(get2.aiter_bytes()), HANG_GUARD)
                ended = time.monotonic() - began
                assert all(chunk.startswith(b":") for chunk in [*rest, *rest2])  # keep-alives only
                reply = await slow  # in flight: allowed to finish
                assert reply.status_code == 200, reply.text
                assert "finished" in reply.text
            await asyncio.to_thread(proc.wait, HANG_GUARD)
            took = time.monotonic() - began
            # Not the deadline: the streams were ended at once, not waited for or cut.
            assert ended < DEADLINE / 2 and took < DEADLINE / 2, (ended, took, log.read_text())
    finally:
        stop(proc)


@pytest.mark.parametrize("subscriptions", [True, False])
async def test_sigint_ends_legacy_get_streams_at_once(tmp_path: Path, subscriptions: bool) -> None:
    """Ctrl-C (issue 34): each GET stream ends cleanly at once, with or without
    subscriptions (without them nothing but the stop ended it: it stayed open until the
    shutdown deadline cut it), and the process exits long before that deadline."""
    src = write_server(tmp_path)
    if not subscriptions:
        src.write_text(src.read_text().replace('m.Server("deploy")', 'm.Server("deploy", listen=m.ListenOptions(enabled=False))'))
    port = free_port()
    log = tmp_path / "a.log"
    proc = launch(src, port, log, "--shutdown-timeout", str(DEADLINE))
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient(timeout=HANG_GUARD) as c:
            h = await _session(c, url)
            async with c.stream("GET", url, headers={**h, "accept": "text/event-stream"}) as get:
                chunks = get.aiter_bytes()
                assert (await chunks.__anext__()).startswith(b":")  # the opening keep-alive
                began = time.monotonic()
                proc.send_signal(signal.SIGINT)
                rest = await asyncio.wait_for(_read_to_end(chunks), HANG_GUARD)  # raises on a cut body
                ended = time.monotonic() - began
                assert all(chunk.startswith(b":") for chunk in rest)
            code = await asyncio.to_thread(proc.wait, HANG_GUARD)
            took = time.monotonic() - began
        assert code in (0, -signal.SIGINT), log.read_text()
        assert ended < DEADLINE / 5 and took < DEADLINE / 5, (ended, took, log.read_text())
    finally:
        stop(proc)
