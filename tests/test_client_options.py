"""Issue 11: the Client's option groups, its declared transport capabilities, the
package's import order, and `nimblemcp.testing` over the real Client."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import nimblemcp
from nimblemcp import Context, Server
from nimblemcp.client import (
    CachePolicy,
    Client,
    LegacySessions,
    PeerRequests,
    QuietAbandon,
    RemotePeer,
    RetryPolicy,
    StrayNotifications,
    TaskPolicy,
    Transport,
)
from nimblemcp.errors import RequestTimeout
from nimblemcp.testing import connect
from nimblemcp.transports.client.http import HttpTransport
from nimblemcp.transports.client.memory import MemoryTransport
from nimblemcp.transports.stdio.client import StdioTransport

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_server() -> Server:
    server = Server("options")

    @server.tool()
    async def greet(ctx: Context) -> str:
        answer = await ctx.elicit("who", "Your name?", NAME)
        return f"hello {answer.content['name']}"

    @server.tool()
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    return server


def test_each_option_has_one_spelling() -> None:
    """Issue 32: everyday options are keywords, the rest live in one group each."""
    ask = lambda p: {"name": "Ada"}  # noqa: E731
    client = Client(make_server(), on_elicit=ask, timeout=5.0, tasks=True, cache=False,
                    retry_policy=RetryPolicy(max_retries=1), task_policy=TaskPolicy(poll_cap=2.0))
    assert client.callbacks.on_elicit is ask
    assert client.retry_policy == RetryPolicy(max_retries=1)
    assert client.task_policy == TaskPolicy(poll_cap=2.0)
    assert client.cache_policy == CachePolicy()
    assert client.timeout == 5.0
    assert Client(make_server()).retry_policy == RetryPolicy()  # defaults in one place
    for gone in ("callbacks", "max_retries", "retry_backoff", "max_rounds", "probe_timeout",
                 "task_poll_floor", "task_poll_cap", "cache_store", "auth_context"):
        with pytest.raises(TypeError, match=gone):
            Client(make_server(), **{gone: None})
    for group, field in ((RetryPolicy, "timeout"), (TaskPolicy, "enabled"), (CachePolicy, "enabled")):
        with pytest.raises(TypeError):
            group(**{field: True})  # the keyword's, not the group's
    with pytest.raises(ValueError):
        TaskPolicy(poll_floor=1.0, poll_cap=0.5)


async def test_options_drive_the_request_path() -> None:
    """The callbacks answer an MRTR round and declare elicitation (ELIC-01); the timeout
    bounds a request."""
    wire = MemoryTransport(make_server())
    async with Client(wire, on_elicit=lambda p: {"name": "Ada"}, timeout=0.3) as client:
        result = await client.call_tool("greet")
        assert result["content"][0]["text"] == "hello Ada"
        assert wire.sent[0]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {
            "elicitation": {"form": {}}}
        with pytest.raises(RequestTimeout):
            await client.call_tool("slow", {"seconds": 2})


def test_transports_declare_their_capabilities() -> None:
    http = HttpTransport("http://127.0.0.1:1/mcp")
    stdio = StdioTransport("true")
    memory = MemoryTransport(make_server())
    for transport in (http, stdio, memory):
        assert isinstance(transport, Transport)
    assert [isinstance(http, c) for c in (RemotePeer, StrayNotifications, PeerRequests,
                                          QuietAbandon, LegacySessions)] == [True, True, True, False, True]
    assert [isinstance(stdio, c) for c in (RemotePeer, StrayNotifications, PeerRequests,
                                           QuietAbandon, LegacySessions)] == [True, True, True, True, False]
    assert not any(isinstance(memory, c) for c in (RemotePeer, StrayNotifications, PeerRequests,
                                                    QuietAbandon, LegacySessions))


class _Relay:
    """A custom transport over a memory one that declares only `StrayNotifications`."""

    carries_param_headers = False

    def __init__(self, server: Server) -> None:
        self.inner = MemoryTransport(server)
        self.peer = "relay"
        self.on_notification: Any = None

    async def open(self) -> None:
        await self.inner.open()

    async def send(self, request: dict[str, Any], *,
                   param_headers: Mapping[str, Any] | None = None) -> AsyncIterator[dict[str, Any]]:
        async for item in self.inner.send(request, param_headers=param_headers):
            yield item

    async def notify(self, message: dict[str, Any]) -> None:
        await self.inner.notify(message)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_custom_transport_gets_what_it_declares() -> None:
    """No `wire`: no probe in "auto" (modern at once); `on_notification` is set on open
    and stray notifications reach the application's callback."""
    relay = _Relay(make_server())
    heard: list[dict[str, Any]] = []
    async with Client(relay, on_notification=heard.append) as client:
        assert relay.on_notification is not None
        assert await client.ensure_era() == "modern"
        assert [m["method"] for m in relay.inner.sent] == []  # no server/discover probe
        relay.on_notification({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    assert [n["method"] for n in heard] == ["notifications/tools/list_changed"]


def test_client_modules_import_in_one_direction() -> None:
    """Issue 11: no import cycle inside `nimblemcp.client` (TYPE_CHECKING imports count)."""
    package = Path(nimblemcp.__file__).parent / "client"
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                name = node.module.rsplit(".", 1)[-1] if node.module.startswith(
                    "nimblemcp.client.") else node.module if node.level else ""
                if name:
                    found.add(name)
        graph[path.stem] = found & {p.stem for p in package.glob("*.py")}
    assert all("_client" not in deps for name, deps in graph.items() if name != "__init__")
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> None:
        assert name not in trail, f"import cycle: {' -> '.join((*trail, name))}"
        if name in done:
            return
        for dep in graph.get(name, ()):
            visit(dep, (*trail, name))
        done.add(name)

    for name in graph:
        visit(name, ())


async def test_testing_connect_is_over_the_real_client() -> None:
    """`nimblemcp.testing.connect` gives a real Client (issue 32): its requests, raw
    (`manual=True`: no MRTR loop) or not, go over one transport with one id sequence."""
    async with connect(make_server(), capabilities={"elicitation": {"form": {}}}) as c:
        assert isinstance(c, Client)
        raw = await c.call_tool("greet", manual=True)
        assert raw["resultType"] == "input_required"  # wire-level: no MRTR loop
        high = await c.call_tool("slow", {"seconds": 0})
        assert high["content"][0]["text"] == "done"
        ids = [m["id"] for m in c.transport.sent]
        assert len(ids) == len(set(ids)) == 2
