"""`Server.changes()`, the 2025-11-25 adapter's change feed (LEG-08, LEG-12, LEGC-05):
it subscribes to the bus with a `Match` for the kinds it turns into notifications
(list changes, resource updates), so other bus traffic (task changes, cancellations)
neither wakes a session nor fills its bounded queue. A 2025-11-25 client still gets
`list_changed` and `resources/updated`, even after a burst of task events larger than
its queue (which, delivered to it, would end the feed as a slow listener): a real stdio
subprocess and a real `nimblemcp run --transport http` (the session's GET stream)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _deploy import launch, stop
from _redis import free_port

from nimblemcp import ListenOptions, Server
from nimblemcp.backends.bus import Event
from nimblemcp.client import Client

HANG_GUARD = 30.0


async def test_changes_gets_only_list_changes_and_resource_updates() -> None:
    server = Server("feed", listen=ListenOptions(queue=8))
    changes = server.changes()
    assert changes is not None
    async with changes as events:
        for i in range(50):  # far more than the queue holds
            server.bus.publish(Event("task", f"t{i}"))
            server.bus.publish(Event("task-cancel", f"t{i}"))
        wanted = [Event("tools"), Event("updated", "docs://a"), Event("prompts"), Event("resources")]
        for event in wanted:
            server.bus.publish(event)
        got = [await asyncio.wait_for(events.__anext__(), HANG_GUARD) for _ in wanted]
        assert got == wanted
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(events.__anext__(), 0.2)


def test_changes_is_none_without_subscriptions() -> None:
    assert Server("quiet", listen=ListenOptions(enabled=False)).changes() is None


SERVER = '''
import nimblemcp as m
from nimblemcp.backends.bus import Event

server = m.Server("legacy-feed", "1.0", listen=m.ListenOptions(queue=16))


@server.resource("docs://a", mime_type="text/plain")
def a() -> str:
    return "A"


@server.tool
async def noisy_touch(uri: str) -> str:
    for i in range(500):  # task traffic on the same bus, in one go
        server.bus.publish(Event("task", f"task-{i}"))
    server.notify_resource_updated(uri)
    return "ok"


@server.tool
async def shrink(name: str) -> str:
    for i in range(500):
        server.bus.publish(Event("task", f"task-{i}"))
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
    path = tmp_path / "legacy_feed_server.py"
    path.write_text(SERVER)
    return path


async def exercise(client: Client) -> None:
    async with client.listen(tools=True, resources=["docs://a"]) as events:
        assert (await events.next()).kind == "acknowledged"
        await client.call_tool("noisy_touch", {"uri": "docs://a"})
        updated = await events.next()
        assert (updated.kind, updated.uri) == ("resource_updated", "docs://a")
        await client.call_tool("shrink", {"name": "spare"})
        assert (await events.next()).kind == "tools_changed"
        await client.call_tool("noisy_touch", {"uri": "docs://a"})  # the feed is still alive
        assert (await events.next()).uri == "docs://a"
    assert client.era == "legacy"


async def test_a_legacy_stdio_client_still_hears_changes(script: Path) -> None:
    async with Client([sys.executable, str(script)], mode="legacy") as client:
        await asyncio.wait_for(exercise(client), HANG_GUARD)


@contextlib.contextmanager
def running(script: Path, tmp: Path) -> Iterator[str]:
    port = free_port()
    proc = launch(script, port, tmp / "server.log")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


async def test_a_legacy_http_client_still_hears_changes_on_its_get_stream(script: Path, tmp_path: Path) -> None:
    with running(script, tmp_path) as url:
        async with Client(url, mode="legacy") as client:
            await asyncio.wait_for(exercise(client), HANG_GUARD)
            assert client.transport.session_id  # type: ignore[attr-defined]
