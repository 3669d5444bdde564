"""Issue 19: `nimblemcp.proxy.proxy(target)` serves another MCP server as a stateless
2026-07-28 server: a stdio backend reached in the 2025-11-25 era (legacy handshake),
fronted over real HTTP (uvicorn on loopback, ASGI lifespan) to a 2026-07-28 client."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

import nimblemcp as m
from nimblemcp.client import Client
from nimblemcp.proxy import proxy

BACKEND = """
from typing import TypedDict
import nimblemcp as m

server = m.Server("backend")

class Sum(TypedDict):
    total: int

@server.tool(annotations={"readOnlyHint": True}, title="Add")
def add(a: int, b: int) -> Sum:
    '''Add two numbers.'''
    return {"total": a + b}

@server.tool()
def fails() -> str:
    raise m.ToolError("backend says no")

@server.prompt(complete={"topic": lambda value, ctx: ["cats", "cars"]})
def brainstorm(topic: str, style: str = "short") -> str:
    return f"ideas about {topic} ({style})"

@server.resource("memo://readme", mime_type="text/plain")
def readme() -> str:
    return "read me"

@server.resource("memo://notes/{name}")
def note(name: str) -> str:
    return f"note {name}"

if __name__ == "__main__":
    server.run()
"""


@contextlib.asynccontextmanager
async def _uvicorn(app: Any) -> AsyncIterator[str]:
    served = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    task = asyncio.create_task(served.serve())
    while not served.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.01)
    port = served.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        served.should_exit = True
        await task


@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_proxy_of_a_stdio_server_over_http(tmp_path: Path, mode: str) -> None:
    src = tmp_path / "backend.py"
    src.write_text(BACKEND)
    front = proxy([sys.executable, str(src)], name="front", mode=mode)
    async with _uvicorn(front.asgi_app()) as base, Client(base + "/mcp", mode="modern") as client:
        tools = {t["name"]: t for t in await client.list_tools()}
        assert set(tools) == {"add", "fails"}
        assert tools["add"]["annotations"] == {"readOnlyHint": True} and tools["add"]["title"] == "Add"
        assert tools["add"]["outputSchema"]["properties"]["total"] == {"type": "integer"}
        assert tools["add"]["inputSchema"]["required"] == ["a", "b"]
        added = await client.call_tool("add", {"a": 2, "b": 3})
        assert added["structuredContent"] == {"total": 5}
        failed = await client.call_tool("fails", {})
        assert failed["isError"] is True and "backend says no" in failed["content"][0]["text"]
        bad = await client.call_tool("add", {"a": "x", "b": 1})
        assert bad["isError"] is True
        prompt = await client.get_prompt("brainstorm", {"topic": "cats"})
        assert prompt["messages"][0]["content"]["text"] == "ideas about cats (short)"
        with pytest.raises(m.InvalidParams):
            await client.get_prompt("brainstorm", {})  # the required argument is checked in front
        read = await client.read_resource("memo://readme")
        assert read["contents"][0] == {"uri": "memo://readme", "mimeType": "text/plain", "text": "read me"}
        templated = await client.read_resource("memo://notes/a b")
        assert templated["contents"][0]["text"] == "note a b"
        done = await client.complete({"type": "ref/prompt", "name": "brainstorm"}, "topic", "ca")
        assert done["completion"]["values"] == ["cats", "cars"]
        with pytest.raises(m.InvalidParams):
            await client.call_tool("missing", {})


async def test_a_proxy_started_again_after_a_stop_serves_the_target(tmp_path: Path) -> None:
    """A stopped front starts again (tests do, and so does a host that restarts its app):
    the second start brings the first one's mirror up to date instead of failing on names
    it already holds, and calls go through the second start's client."""
    from nimblemcp.testing import connect

    backend = tmp_path / "backend.py"
    backend.write_text(BACKEND)
    front = proxy([sys.executable, str(backend)])
    for _ in range(2):
        async with connect(front) as client:
            result = await client.call_tool("add", {"a": 2, "b": 3})
            prompts = await client.list_prompts()
        assert result["structuredContent"] == {"total": 5}
        assert [p["name"] for p in prompts] == ["brainstorm"]


async def test_proxy_fails_to_start_when_the_target_is_unreachable() -> None:
    front = proxy("http://127.0.0.1:9/mcp", name="nowhere", timeout=2)
    with pytest.raises(m.StartupError, match="'nowhere' failed to start"):
        async with front.lifespan_context():
            pass


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_nimblemcp_proxy_command(tmp_path: Path) -> None:
    import os
    import signal
    import socket
    import subprocess
    import time

    src = tmp_path / "backend.py"
    src.write_text(BACKEND)
    port = _free_port()
    log = tmp_path / "proxy.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "proxy", "--port", str(port), "--mode", "legacy",
             "--", sys.executable, str(src)],
            stdout=sink, stderr=sink, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        for _ in range(400):
            assert proc.poll() is None, log.read_text()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="modern") as client:
            added = await client.call_tool("add", {"a": 20, "b": 22})
            assert added["structuredContent"] == {"total": 42}
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_nimblemcp_proxy_needs_a_target() -> None:
    import subprocess

    done = subprocess.run([sys.executable, "-m", "nimblemcp", "proxy", "not-a-url"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "http(s):// URL or `-- command args...`" in done.stderr
