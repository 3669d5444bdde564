"""Client.listen over in-memory, a real stdio subprocess and a real uvicorn subprocess.

Ack exposed (SUB-04), events after `add_tool`/`notify_resource_updated` (SUB-05),
cache eviction (CACHE-08), two concurrent listens on one stdio pipe (SUB-06), cancel
on exit (SUB-08), graceful close at shutdown (SUB-09), re-listen after the HTTP server
is killed and restarted on the same port with a `missed` event (SUB-10).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from pathlib import Path

import nimblemcp as m
from nimblemcp.client import Client, ListenEvent
from nimblemcp.transports.stdio.client import StdioTransport

SOURCE = """
import nimblemcp as m

server = m.Server("listen-client-test")

@server.resource("docs://brief.md", mime_type="text/markdown")
def brief() -> str:
    return "# Brief"

@server.tool
def add_tool(name: str) -> str:
    server.add_tool(lambda: "hi", name=name)
    return "added"

@server.tool
def touch(uri: str) -> str:
    server.notify_resource_updated(uri)
    return "touched"

if __name__ == "__main__":
    server.run()
"""


def build_server() -> m.Server:
    namespace: dict[str, object] = {"__name__": "listen_server"}
    exec(SOURCE, namespace)
    server = namespace["server"]
    assert isinstance(server, m.Server)
    return server


async def _next(events: object, *kinds: str) -> ListenEvent:
    return await asyncio.wait_for(events.next(kinds or None), 20)  # type: ignore[attr-defined]


async def test_memory_ack_events_eviction_and_close() -> None:
    """SUB-04/05, CACHE-08, SUB-09: ack first, events, cache evicted, graceful close."""
    server = build_server()
    async with Client(server) as client, \
            client.listen(tools=True, prompts=True, resources=["docs://brief.md", "x://nope"]) as events:
        first = await _next(events)
        assert first.kind == "acknowledged"
        assert events.acknowledged is not None and events.acknowledged.get("toolsListChanged") is True
        assert "docs://brief.md" in events.acknowledged["resourceSubscriptions"]
        # SUB-04: prompts were asked for but the server has none to change
        assert "promptsListChanged" in events.declined
        await client.list_tools()
        assert client.cache.get("tools/list", {}, client.version) is not None  # ttlMs 60000
        assert (await client.call_tool("add_tool", {"name": "late"}))["content"][0]["text"] == "added"
        changed = await _next(events)
        assert changed.kind == "tools_changed"
        assert changed.subscription_id == events.subscription_id
        assert client.cache.get("tools/list", {}, client.version) is None  # CACHE-08
        assert "late" in [t["name"] for t in await client.list_tools()]
        await client.call_tool("touch", {"uri": "docs://brief.md"})
        updated = await _next(events)
        assert (updated.kind, updated.uri) == ("resource_updated", "docs://brief.md")
        server.close_listeners()
        closed = await _next(events)
        assert closed.kind == "closed"
        assert [e async for e in events] == []  # iteration has ended


async def test_stdio_two_concurrent_listens_and_cancel(tmp_path: Path) -> None:
    """SUB-06: two listens on one pipe are demultiplexed by subscription id; SUB-08:
    leaving one cancels it on the wire while the other keeps receiving."""
    script = tmp_path / "listen_server.py"
    script.write_text(SOURCE)
    transport = StdioTransport(sys.executable, [str(script)])
    sent: list[dict[str, object]] = []
    original = transport._write

    async def spy(message: dict[str, object]) -> None:
        sent.append(message)
        await original(message)

    transport._write = spy  # type: ignore[method-assign]
    async with Client(transport) as client:
        async with client.listen(tools=True) as tools_events, \
                client.listen(resources=["docs://brief.md"]) as doc_events:
            assert tools_events.subscription_id != doc_events.subscription_id
            assert (await _next(tools_events)).kind == "acknowledged"
            assert (await _next(doc_events)).kind == "acknowledged"
            await client.call_tool("touch", {"uri": "docs://brief.md"})
            await client.call_tool("add_tool", {"name": "one"})
            assert (await _next(tools_events)).kind == "tools_changed"  # not the update
            event = await _next(doc_events)
            assert (event.kind, event.uri) == ("resource_updated", "docs://brief.md")
            async with client.listen(tools=True) as third:
                third_id = third.subscription_id
            cancels = [m for m in sent if m.get("method") == "notifications/cancelled"]
            assert [c["params"]["requestId"] for c in cancels] == [third_id]  # type: ignore[index]
            await client.call_tool("add_tool", {"name": "two"})
            assert (await _next(tools_events)).kind == "tools_changed"
        await client.call_tool("add_tool", {"name": "three"})  # nobody listens: no crash


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_http(script: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "nimblemcp", "run", str(script), "--transport", "http",
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return proc


async def _wait_port(port: int) -> None:
    for _ in range(400):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise AssertionError("server did not start")


async def test_http_relisten_after_restart_and_graceful_close(tmp_path: Path) -> None:
    """SUB-10: a killed server drops the stream; the client re-listens once the server is
    back on the same port and yields `missed`, then events flow again; SUB-09: a
    shutdown sends the closing result, which ends iteration."""
    script = tmp_path / "listen_server.py"
    script.write_text(SOURCE)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    procs = [_serve_http(script, port)]
    try:
        await _wait_port(port)
        async with Client(url) as client, \
                client.listen(tools=True, backoff=0.05, max_backoff=0.5, max_reconnects=200) as events:
            assert (await _next(events)).kind == "acknowledged"
            first_id = events.subscription_id
            await client.call_tool("add_tool", {"name": "late"})
            assert (await _next(events)).kind == "tools_changed"
            procs[0].kill()
            procs[0].wait()
            procs.append(_serve_http(script, port))
            missed = await asyncio.wait_for(events.next(), 60)
            assert missed.kind == "missed"
            assert events.reconnects == 1 and events.subscription_id != first_id
            assert events.acknowledged == {"toolsListChanged": True}
            await client.call_tool("add_tool", {"name": "again"})
            assert (await _next(events)).kind == "tools_changed"
            procs[-1].send_signal(signal.SIGINT)
            closed = await _next(events)
            assert closed.kind == "closed"
            assert closed.raw is not None and closed.raw["id"] == events.subscription_id
            assert [e async for e in events] == []
        assert procs[-1].wait(timeout=20) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
