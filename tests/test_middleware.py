"""Issue 19: `async def mw(ctx, call_next)` around every request, both eras, every transport.

Order, short-circuit with a result or an error, timing; the three shipped middleware
(`RequestLogging`, `Timing`, `RateLimit`); nothing in the handler table when none is
added. Real stdio and real HTTP (uvicorn on loopback), modern and legacy clients.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from tests._serving import serving

import nimblemcp as m
from nimblemcp.client import Client
from nimblemcp.errors import InvalidParams, RateLimited
from nimblemcp.middleware import CallNext, RateLimit, RequestLogging, Timing
from nimblemcp.testing import connect
from nimblemcp.transports.stdio.client import StdioTransport


def _server(seen: list[str]) -> m.Server:
    async def outer(ctx: m.Context, call_next: CallNext) -> dict[str, Any]:
        seen.append("outer>" + ctx.method)
        result = await call_next()
        seen.append("outer<" + ctx.method)
        return result

    async def inner(ctx: m.Context, call_next: CallNext) -> dict[str, Any]:
        seen.append("inner>" + ctx.method)
        if ctx.params.get("name") == "blocked":
            raise InvalidParams("blocked by policy")
        if ctx.params.get("name") == "cached":
            return {"content": [{"type": "text", "text": "from middleware"}]}
        return await call_next()

    server = m.Server("mw", middleware=[outer, inner])

    @server.tool()
    def echo(text: str) -> str:
        seen.append("tool")
        return text

    @server.tool()
    def cached() -> str:
        raise AssertionError("short-circuited: never runs")

    @server.resource("notes://{id}")
    def note(id: str) -> str:
        return id

    @server.prompt()
    def greet(name: str) -> str:
        return f"hi {name}"

    return server


async def test_order_short_circuit_and_every_method() -> None:
    seen: list[str] = []
    server = _server(seen)
    async with connect(server) as client:
        assert (await client.call_tool("echo", {"text": "x"}))["content"][0]["text"] == "x"
        assert seen == ["outer>tools/call", "inner>tools/call", "tool", "outer<tools/call"]
        result = await client.call_tool("cached")
        assert result["content"][0]["text"] == "from middleware"
        assert result["resultType"] == "complete" and "_meta" in result  # shaped like any result
        with pytest.raises(InvalidParams, match="blocked by policy"):
            await client.call_tool("blocked")
        seen.clear()
        await client.discover()
        await client.list_tools()
        await client.list_prompts()
        await client.list_resource_templates()
        await client.read_resource("notes://1")
        await client.get_prompt("greet", {"name": "a"})
        await client.complete({"type": "ref/prompt", "name": "greet"}, "name", "a")
    methods = [s[len("outer>"):] for s in seen if s.startswith("outer>")]
    assert methods == ["server/discover", "tools/list", "prompts/list", "resources/templates/list",
                       "resources/read", "prompts/get", "completion/complete"]


def test_no_middleware_leaves_the_handler_table_bare() -> None:
    server = m.Server("plain")
    assert server.dispatcher.handlers == server.dispatcher.bare
    assert all(server.dispatcher.handlers[k] is v for k, v in server.dispatcher.bare.items())
    server.add_middleware(Timing())
    assert server.dispatcher.handlers["tools/list"] is not server.dispatcher.bare["tools/list"]
    with pytest.raises(TypeError, match="middleware"):
        server.add_middleware(42)  # type: ignore[arg-type]


async def test_timing_and_logging(caplog: pytest.LogCaptureFixture) -> None:
    timing = Timing()
    timed: list[float] = []
    timing.on_timing = lambda ctx, s: timed.append(s)
    server = m.Server("timed", middleware=[RequestLogging(), timing])

    @server.tool()
    async def nap() -> str:
        await asyncio.sleep(0.05)
        return "ok"

    caplog.set_level(logging.INFO, logger="nimblemcp.requests")
    async with connect(server) as client:
        await client.call_tool("nap")
        await client.list_tools()
        with pytest.raises(InvalidParams):
            await client.call_tool("missing")
    stats = timing.stats["tools/call"]
    assert stats.count == 2 and stats.slowest >= 0.05 and stats.mean > 0
    assert timing.stats["tools/list"].count == 1
    assert len(timed) == 3
    lines = [r.getMessage() for r in caplog.records if r.name == "nimblemcp.requests"]
    assert any(line.startswith("tools/call nap id=") and "-> ok in" in line for line in lines)
    assert any("tools/call missing" in line and "-> error -32602" in line for line in lines)
    assert any("caller=client:nimblemcp-testing" in line for line in lines)


async def test_rate_limit_per_caller() -> None:
    limit = RateLimit(rate=0.5, burst=2)
    server = m.Server("limited", middleware=[limit])

    @server.tool()
    def ping() -> str:
        return "pong"

    async with connect(server) as a, connect(server, client_info={"name": "other", "version": "1"}) as b:
        await a.call_tool("ping")
        await a.call_tool("ping")
        with pytest.raises(m.ProtocolError) as info:  # a peer's -32000 stays a ProtocolError
            await a.call_tool("ping")
        assert info.value.code == RateLimited.code == -32000
        assert info.value.data["retryAfterMs"] > 0
        assert (await b.call_tool("ping"))["content"][0]["text"] == "pong"  # another caller


SERVER = """
import sys
import nimblemcp as m

SEEN = []

async def record(ctx, call_next):
    SEEN.append(ctx.method)
    return await call_next()

server = m.Server("mw-wire", middleware=[record])

@server.tool()
def seen() -> str:
    return ",".join(SEEN)

@server.resource("notes://{id}")
def note(id: str) -> str:
    return id

if __name__ == "__main__":
    server.run(*sys.argv[1:2])
"""


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_middleware_over_stdio_both_eras(tmp_path: Path, mode: str) -> None:
    src = tmp_path / "mw_server.py"
    src.write_text(SERVER)
    async with Client(StdioTransport(sys.executable, [str(src)]), mode=mode) as client:  # type: ignore[arg-type]
        await client.list_tools()
        await client.read_resource("notes://7")
        text = (await client.call_tool("seen", {}))["content"][0]["text"]
    assert text.split(",")[-3:] == ["tools/list", "resources/read", "tools/call"]


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_middleware_over_http_both_eras(mode: str) -> None:
    seen: list[str] = []

    async def record(ctx: m.Context, call_next: CallNext) -> dict[str, Any]:
        seen.append(ctx.method)
        return await call_next()

    server = m.Server("mw-http", middleware=[record])

    @server.tool()
    def ping() -> str:
        return "pong"

    async with serving(server.asgi_app()) as base, Client(base + "/mcp", mode=mode) as client:  # type: ignore[arg-type]
        await client.list_tools()
        assert (await client.call_tool("ping", {}))["content"][0]["text"] == "pong"
    assert seen[-2:] == ["tools/list", "tools/call"]


async def test_listen_goes_through_middleware_over_http() -> None:
    seen: list[str] = []

    async def record(ctx: m.Context, call_next: CallNext) -> dict[str, Any]:
        seen.append(ctx.method)
        return await call_next()

    server = m.Server("mw-listen", middleware=[record])

    @server.tool()
    def ping() -> str:
        return "pong"

    async with serving(server.asgi_app()) as base, Client(base + "/mcp", mode="modern") as client, \
            client.listen(tools=True) as events:
        first = await asyncio.wait_for(events.next(None), 20)  # type: ignore[attr-defined]
        assert first.kind == "acknowledged"
        assert "subscriptions/listen" in seen
        server.close_listeners()
