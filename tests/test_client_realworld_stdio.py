"""The client against stdio servers that misbehave the way real ones do (issue 17, issue
12's client items): raw subprocess servers (a few lines of Python each) that log while
several requests are pending, log outside any request in a 2025-11-25 session, send a
line over the size cap, or die mid-request.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nimblemcp.client import Client, Limits, TransportError
from nimblemcp.transports.stdio.client import StdioTransport

PRELUDE = '''
import json, sys

def write(message):
    sys.stdout.write(json.dumps(message) + "\\n")
    sys.stdout.flush()

def result(rid, value):
    write({"jsonrpc": "2.0", "id": rid, "result": value})

DISCOVERED = {"resultType": "complete", "supportedVersions": ["2026-07-28"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "0"}}

def log(text):
    write({"jsonrpc": "2.0", "method": "notifications/message",
           "params": {"level": "info", "data": text}})
'''


def script(tmp_path: Path, body: str) -> StdioTransport:
    path = tmp_path / "server.py"
    path.write_text(PRELUDE + textwrap.dedent(body))
    return StdioTransport(sys.executable, [str(path)])


MODERN_LOGGER = '''
pending = []
for line in sys.stdin:
    message = json.loads(line)
    method, rid = message.get("method"), message.get("id")
    if method == "server/discover":
        result(rid, DISCOVERED)
    elif method == "tools/call":
        pending.append(message)
        want = message["params"]["arguments"]["together"]
        if len(pending) == want:
            for waiting in pending:
                log("working on " + waiting["params"]["name"])
            for waiting in pending:
                result(waiting["id"], {"resultType": "complete", "content": []})
            pending = []
'''


async def test_logs_reach_on_log_with_several_requests_pending(tmp_path: Path) -> None:
    logs: list[dict[str, Any]] = []
    async with Client(script(tmp_path, MODERN_LOGGER), log_level="info", on_log=logs.append) as client:
        await asyncio.gather(client.call_tool("a", {"together": 2}), client.call_tool("b", {"together": 2}))
        await asyncio.sleep(0)  # a stray log is delivered by the reader task
    assert sorted(entry["data"] for entry in logs) == ["working on a", "working on b"]
    assert all("requestId" not in entry for entry in logs)  # stdio cannot tell whose they are


async def test_a_log_with_one_request_pending_is_tagged_with_it(tmp_path: Path) -> None:
    logs: list[dict[str, Any]] = []
    async with Client(script(tmp_path, MODERN_LOGGER), log_level="info", on_log=logs.append) as client:
        await client.call_tool("a", {"together": 1})
    assert len(logs) == 1 and logs[0]["data"] == "working on a"
    assert isinstance(logs[0]["requestId"], int)


LEGACY_LOGGER = '''
for line in sys.stdin:
    message = json.loads(line)
    method, rid = message.get("method"), message.get("id")
    if method == "server/discover":
        write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
    elif method == "initialize":
        result(rid, {"protocolVersion": "2025-11-25", "capabilities": {"logging": {}},
                     "serverInfo": {"name": "old", "version": "1"}})
    elif method == "notifications/initialized":
        log("session ready")  # outside any request
    elif method == "ping":
        result(rid, {})
'''


async def test_legacy_logs_outside_a_request_reach_on_log(tmp_path: Path) -> None:
    logs: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    heard = asyncio.Event()

    def on_log(params: dict[str, Any]) -> None:
        logs.append(params)
        heard.set()

    async with Client(script(tmp_path, LEGACY_LOGGER), on_log=on_log, on_notification=others.append) as client:
        assert await client.ensure_era() == "legacy"
        await asyncio.wait_for(heard.wait(), 10)
    assert logs == [{"level": "info", "data": "session ready"}]
    assert others == []


OVERSIZED = '''
for line in sys.stdin:
    message = json.loads(line)
    method, rid = message.get("method"), message.get("id")
    if method == "server/discover":
        result(rid, DISCOVERED)
    elif method == "tools/call":
        result(rid, {"resultType": "complete", "content": [{"type": "text", "text": "x" * 300000}]})
'''


async def test_a_line_over_the_cap_is_a_clear_transport_error(tmp_path: Path) -> None:
    transport = script(tmp_path, OVERSIZED)
    limit = 64 * 1024
    async with Client([transport.command, *transport.args], limits=Limits(max_message_bytes=limit)) as client:
        assert client.transport.max_message_bytes == limit  # type: ignore[attr-defined]
        with pytest.raises(TransportError) as caught:
            await client.call_tool("big", {})
        assert "max_message_bytes" in str(caught.value) and str(limit) in str(caught.value)
        with pytest.raises(TransportError, match="max_message_bytes"):  # closed, and says why
            await client.call_tool("again", {})


DIES = '''
for line in sys.stdin:
    message = json.loads(line)
    method, rid = message.get("method"), message.get("id")
    if method == "server/discover":
        result(rid, DISCOVERED)
    elif method == "tools/call":
        sys.stderr.write("fatal: out of cheese\\n")
        sys.stderr.flush()
        sys.exit(3)
'''


async def _transport_says(transport: StdioTransport) -> str:
    """What the transport itself raises for a request on the dead connection."""
    with pytest.raises(TransportError) as caught:
        async for _ in transport.send({"jsonrpc": "2.0", "id": 999, "method": "ping"}):
            pass
    return str(caught.value)


async def test_death_mid_request_surfaces_the_transports_message_unchanged(tmp_path: Path) -> None:
    transport = script(tmp_path, DIES)
    async with Client(transport) as client:
        await client.ensure_era()
        with pytest.raises(TransportError) as caught:
            await client.call_tool("crash", {})
        assert str(caught.value) == await _transport_says(transport)
        with pytest.raises(TransportError) as listing:  # idempotent, but a dead peer is no retry
            await client.list_tools()
        assert str(listing.value) == str(caught.value)


async def test_death_at_start_up_surfaces_the_transports_message_unchanged(tmp_path: Path) -> None:
    transport = script(tmp_path, 'sys.stderr.write("cannot bind\\\\n"); sys.exit(2)\n')
    async with Client(transport) as client:
        with pytest.raises(TransportError) as caught:
            await client.list_tools()
        assert str(caught.value) == await _transport_says(transport)
