"""`Client.listen()` on a 2025-11-25 connection (LEGC-05): `resources/subscribe` plus the
session's notifications, against our own dual-era server as a real stdio subprocess and
under a real uvicorn (the session's GET stream)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from nimblemcp.client import Client

SERVER = '''
import nimblemcp as m

server = m.Server("legacy-listen", "1.0")

@server.resource("docs://a", mime_type="text/plain")
def a() -> str:
    return "A"

@server.resource("docs://b", mime_type="text/plain")
def b() -> str:
    return "B"

@server.tool
def touch(uri: str) -> str:
    server.notify_resource_updated(uri)
    return "ok"

@server.tool
def shrink(name: str) -> str:
    server.remove_tool(name)
    return "ok"

@server.tool
def spare() -> str:
    return "spare"

if __name__ == "__main__":
    server.run()
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "legacy_listen_server.py"
    path.write_text(SERVER)
    return path


class Notes:
    """An `on_notification` callback that lets a test wait for a method."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.changed = asyncio.Event()

    def __call__(self, note: dict[str, Any]) -> None:
        self.seen.append(note)
        if note.get("method") == "notifications/tools/list_changed":
            self.changed.set()


async def exercise(client: Client, notes: Notes) -> None:
    async with client.listen(tools=True, prompts=True, resources=["docs://a"]) as events:
        ack = await events.next()
        assert ack.kind == "acknowledged" and events.subscription_id is None
        assert events.acknowledged == {"toolsListChanged": True, "resourceSubscriptions": ["docs://a"]}
        assert events.declined == {"promptsListChanged": True}  # the server has no prompts
        async with client.listen(resources=["docs://a", "docs://b"]) as second:
            assert (await second.next()).kind == "acknowledged"
            await client.call_tool("touch", {"uri": "docs://b"})  # not for the first listener
            await client.call_tool("touch", {"uri": "docs://a"})
            assert (await second.next()).uri == "docs://b"
            assert (await second.next()).uri == "docs://a"
        updated = await events.next()  # docs://a is still subscribed for the first one
        assert (updated.kind, updated.uri) == ("resource_updated", "docs://a")
        await client.call_tool("touch", {"uri": "docs://a"})
        assert (await events.next()).uri == "docs://a"
        await client.call_tool("shrink", {"name": "spare"})
        assert (await events.next()).kind == "tools_changed"
    # Both listeners are gone: docs://a and docs://b were unsubscribed on the server.
    notes.changed.clear()
    before = len(notes.seen)
    await client.call_tool("touch", {"uri": "docs://a"})
    await client.call_tool("shrink", {"name": "shrink"})
    await notes.changed.wait()
    later = [n.get("method") for n in notes.seen[before:]]
    assert later == ["notifications/tools/list_changed"]


async def test_legacy_listen_over_stdio(script: Path) -> None:
    notes = Notes()
    async with Client([sys.executable, str(script)], mode="legacy", on_notification=notes) as client:
        await asyncio.wait_for(exercise(client, notes), 30)
        assert client.era == "legacy"


@pytest.fixture
async def served(script: Path) -> AsyncIterator[str]:
    namespace: dict[str, Any] = {"__name__": "legacy_listen_server"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    from nimblemcp.transports.http.app import asgi_app

    config = uvicorn.Config(asgi_app(namespace["server"]), host="127.0.0.1", port=0,
                            log_level="warning", lifespan="off")
    uv = uvicorn.Server(config)
    task = asyncio.create_task(uv.serve())
    while not uv.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = uv.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        uv.should_exit = True
        await task


async def test_legacy_listen_over_http_uses_the_get_stream(served: str) -> None:
    notes = Notes()
    async with Client(served, mode="legacy", on_notification=notes) as client:
        await asyncio.wait_for(exercise(client, notes), 30)
        assert client.transport.session_id  # type: ignore[attr-defined]
