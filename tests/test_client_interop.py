"""Our Client against an independent peer: the official `mcp` 2.3.0 `MCPServer`, over
stdio and over streamable HTTP (VER-01, RT-02, SUB-04/05/06, TOOL-04).

The SDK is installed into a private venv under `.cache/` (gitignored) once per session
with pip; when that is impossible (no index), the tests fail loudly rather than skip.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _peers import mcp_python

from nimblemcp.client import Client
from nimblemcp.transports.stdio.client import StdioTransport

ROOT = Path(__file__).resolve().parents[1]

PEER = '''
import sys
from mcp.server.mcpserver import MCPServer, Context

server = MCPServer("official-peer", version="2.3.0")

@server.tool(annotations={"idempotentHint": True})
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b

@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Register another tool and tell listeners."""
    server.add_tool(lambda: "hi", name=name)
    await ctx.notify_tools_changed()
    return "grown"

@server.resource("docs://brief.md", mime_type="text/markdown")
def brief() -> str:
    return "# Brief"

@server.prompt()
def review(topic: str) -> str:
    return f"Review {topic}"

if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), stateless_http=True)
    else:
        server.run()
'''


@pytest.fixture(scope="session")
def peer_python() -> Path:
    return mcp_python()


@pytest.fixture
def peer_script(tmp_path: Path) -> Path:
    script = tmp_path / "official_peer.py"
    script.write_text(PEER)
    return script


async def _exercise(client: Client) -> None:
    found = await client.discover()
    assert "2026-07-28" in found["supportedVersions"]
    tools = {t["name"]: t for t in await client.list_tools()}
    assert {"add", "grow"} <= set(tools)
    result = await client.call_tool("add", {"a": 2, "b": 3})
    assert result.get("isError") is not True
    assert result["content"][0]["text"] == "5"
    read = await client.read_resource("docs://brief.md")
    assert read["contents"][0]["text"] == "# Brief"
    prompt = await client.get_prompt("review", {"topic": "risks"})
    assert "Review risks" in prompt["messages"][0]["content"]["text"]


async def _listen_roundtrip(client: Client) -> None:
    async with client.listen(tools=True) as events:
        ack = await asyncio.wait_for(events.next(), 20)
        assert ack.kind == "acknowledged"
        assert events.acknowledged is not None and events.acknowledged.get("toolsListChanged")
        await client.call_tool("grow", {"name": f"extra_{events.subscription_id}"})
        changed = await asyncio.wait_for(events.next(["tools_changed"]), 20)
        assert changed.subscription_id == events.subscription_id
    assert f"extra_{events.subscription_id}" in [t["name"] for t in await client.list_tools()]


async def test_official_server_over_stdio(peer_python: Path, peer_script: Path) -> None:
    transport = StdioTransport(str(peer_python), [str(peer_script)])
    async with Client(transport) as client:
        await _exercise(client)
        await _listen_roundtrip(client)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_peer(peer_python: Path, peer_script: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([str(peer_python), str(peer_script), "http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": ""})
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, "the official server exited"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def test_official_server_over_http(http_peer: str) -> None:
    async with Client(http_peer) as client:
        await _exercise(client)
        await _listen_roundtrip(client)
