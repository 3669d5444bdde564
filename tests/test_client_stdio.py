"""The Client over a real stdio subprocess: our docs example server.

Spawn, request, progress, stderr forwarding, cancellation on timeout (STDIO-05) and
clean shutdown (STDIO-06).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest

from nimblemcp.client import Client
from nimblemcp.errors import InvalidParams, RequestTimeout, TransportError
from nimblemcp.transports.stdio.client import StdioTransport

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "examples" / "docs_server" / "server.py"

SLOW = '''
import asyncio, sys
from nimblemcp import Server, Context
server = Server("slow")
@server.tool
async def hang() -> str:
    await asyncio.Event().wait()
    return "never"
@server.tool
async def steps(ctx: Context) -> str:
    await ctx.report_progress(1, 2)
    await ctx.report_progress(2, 2)
    return "ok"
@server.tool
def shout() -> str:
    print("to stderr please", file=sys.stderr, flush=True)
    return "done"
server.run()
'''


async def test_docs_server_over_stdio() -> None:
    """STDIO-01: list, call, read and a protocol error over a real pipe."""
    transport = StdioTransport(sys.executable, ["-m", "nimblemcp", "run", str(DOCS)], cwd=ROOT)
    async with Client(transport) as client:
        found = await client.discover()
        assert "2026-07-28" in found["supportedVersions"]
        names = [t["name"] for t in await client.list_tools()]
        assert {"list_docs", "read_doc", "search_docs"} <= set(names)
        resources = await client.list_resources()
        assert resources, "the docs server exposes its documents"
        read = await client.read_resource(resources[0]["uri"])
        assert read["contents"][0]["text"]
        with pytest.raises(InvalidParams):
            await client.read_resource("docs://does-not-exist")
        process = transport.process
        assert process is not None
    assert process.returncode is not None  # STDIO-06: the child is gone after close


async def test_progress_stderr_cancellation(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """PROG-01, STDIO-02, STDIO-05: progress routed by token; stderr logged; timeout cancels."""
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    caplog.set_level(logging.INFO, logger="nimblemcp.stdio_client")
    transport = StdioTransport(sys.executable, [str(script)])
    seen: list[float] = []
    async with Client(transport) as client:
        result = await client.call_tool("steps", {}, on_progress=lambda p, t, m: seen.append(p))
        assert result["content"][0]["text"] == "ok"
        with pytest.raises(RequestTimeout):
            await client.call_tool("hang", {}, timeout=0.2)
        assert (await client.call_tool("shout", {}))["content"][0]["text"] == "done"
    assert seen == [1, 2]
    assert any("to stderr please" in r.getMessage() for r in caplog.records)


async def test_dead_server_is_a_transport_error(tmp_path: Path) -> None:
    """STDIO-07, ERR-05: a server that exits is a TransportError for pending requests."""
    script = tmp_path / "dies.py"
    script.write_text("import sys; sys.stdin.readline(); sys.exit(3)\n")
    async with Client(StdioTransport(sys.executable, [str(script)])) as client:
        with pytest.raises(TransportError):
            await client.list_tools()


async def test_a_failed_write_to_a_dead_server_says_why(tmp_path: Path) -> None:
    """STDIO-07: when the write is what finds the child gone (its stdin closed first), the
    error still names its exit status and the end of its stderr, as a closed stdout does."""
    script = tmp_path / "closes_stdin.py"
    script.write_text("import os, sys, time\nos.close(0)\ntime.sleep(0.3)\n"
                      "print('FATAL: no config', file=sys.stderr)\nsys.exit(3)\n")
    transport = StdioTransport(sys.executable, [str(script)])
    await transport.open()
    try:
        await asyncio.sleep(0.1)  # stdin is closed, the child still runs
        with pytest.raises(TransportError) as caught:
            for _ in range(50):  # the first write may still fit the pipe's buffer
                async for _ in transport.send({"jsonrpc": "2.0", "id": 1, "method": "ping",
                                               "params": {"pad": "x" * 65536}}):
                    pass
        assert "exited with status 3" in str(caught.value)
        assert "FATAL: no config" in str(caught.value)
    finally:
        await transport.close()


async def test_missing_command_is_a_transport_error() -> None:
    with pytest.raises(TransportError):
        async with Client(StdioTransport("/nonexistent/definitely-not-here")):
            pass
