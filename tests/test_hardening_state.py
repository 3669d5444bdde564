"""Issue 12, part A: server-side state is bounded (state handles, sealed requestState)."""

from __future__ import annotations

from typing import Any

import pytest

from nimblemcp import Context, Server
from nimblemcp.errors import HandleLimitExceeded, ToolError
from nimblemcp.server._options import StateOptions
from nimblemcp.server._sealing import new_key
from nimblemcp.testing import connect

ALL_CAPS = {"elicitation": {"form": {}}}


def basket_server(**limits: Any) -> Server:
    server = Server("handles", state=StateOptions(**limits))

    @server.tool
    async def open_basket(ctx: Context, size: int = 0) -> str:
        return await ctx.handles.create({"items": "x" * size})

    @server.tool
    async def grow(ctx: Context, basket: str, size: int) -> str:
        await ctx.handles.update(basket, {"items": "x" * size})
        return "ok"

    @server.tool
    async def close_basket(ctx: Context, basket: str) -> str:
        await ctx.handles.drop(basket)
        return "closed"

    return server


async def test_handles_per_caller_are_counted_and_refused_with_a_tool_error() -> None:
    server = basket_server(handles_per_caller=3)
    async with connect(server) as client:
        handles = [(await client.call_tool("open_basket", {}))["content"][0]["text"] for _ in range(3)]
        over = await client.call_tool("open_basket", {})
        assert over["isError"] is True
        assert "Too many open handles" in over["content"][0]["text"]
        # Dropping one frees its slot.
        assert (await client.call_tool("close_basket", {"basket": handles[0]}))["content"][0]["text"] == "closed"
        again = await client.call_tool("open_basket", {})
        assert "isError" not in again or again["isError"] is False


async def test_one_callers_quota_does_not_block_another() -> None:
    server = basket_server(handles_per_caller=2)
    alice, bob = server.handles.bind("alice"), server.handles.bind("bob")
    await alice.create(1)
    await alice.create(2)
    with pytest.raises(HandleLimitExceeded):
        await alice.create(3)
    assert await bob.get(await bob.create(4)) == 4


async def test_one_handle_is_size_limited_on_create_and_update() -> None:
    server = basket_server(max_handle_size=1000)
    async with connect(server) as client:
        big = await client.call_tool("open_basket", {"size": 5000})
        assert big["isError"] is True and "a handle holds at most 1000" in big["content"][0]["text"]
        handle = (await client.call_tool("open_basket", {"size": 10}))["content"][0]["text"]
        grown = await client.call_tool("grow", {"basket": handle, "size": 5000})
        assert grown["isError"] is True and "at most 1000" in grown["content"][0]["text"]


async def test_bytes_per_caller_are_limited_and_updates_count_their_new_size() -> None:
    server = basket_server(handle_bytes_per_caller=3000, max_handle_size=2000)
    owner = server.handles.bind(None)
    first = await owner.create("x" * 1200)
    await owner.create("x" * 1200)
    with pytest.raises(HandleLimitExceeded, match="limit is 3000"):
        await owner.create("x" * 1200)
    with pytest.raises(HandleLimitExceeded):
        await owner.update(first, "x" * 1900)
    await owner.update(first, "x" * 10)  # shrinking frees room
    await owner.create("x" * 1200)
    assert issubclass(HandleLimitExceeded, ToolError)


async def test_index_key_is_not_a_handle() -> None:
    server = basket_server()
    owner = server.handles.bind("someone-long")
    await owner.create(1)
    with pytest.raises(ToolError):
        await owner.get("#s:someone-long")


def mrtr_server(limit: int | None = None) -> Server:
    opts = StateOptions(keys=(new_key(),)) if limit is None else StateOptions(keys=(new_key(),), max_state_size=limit)
    server = Server("mrtr", state=opts)

    @server.tool
    async def hoard(ctx: Context, size: int) -> str:
        ctx.state["blob"] = "y" * size
        answer = await ctx.elicit("ok", "Continue?", {"type": "object", "properties": {}})
        return f"{answer.action} {len(ctx.state['blob'])}"

    return server


async def test_the_server_never_seals_state_it_would_refuse() -> None:
    """60 KB of ctx.state used to seal a token the retry refused as too large."""
    async with connect(mrtr_server(), capabilities=ALL_CAPS) as client:
        ex = await client.exchange("tools/call", {"name": "hoard", "arguments": {"size": 60_000}})
        assert ex.error is not None and ex.error["code"] == -32603
        assert "max_state_size" in ex.error["message"] and "ctx.handles" in ex.error["message"]
        # Just under the limit: sealed, and the retry is accepted.
        first = await client.call_tool("hoard", {"size": 40_000}, manual=True)
        assert first["resultType"] == "input_required"
        assert len(first["requestState"]) <= 65_536
        done = await client.request("tools/call", {
            "name": "hoard", "arguments": {"size": 40_000}, "requestState": first["requestState"],
            "inputResponses": {"ok": {"action": "accept", "content": {}}}}, manual=True)
        assert done["content"][0]["text"] == "accept 40000"


async def test_the_state_limit_is_configurable_and_applies_both_ways() -> None:
    async with connect(mrtr_server(limit=2_000), capabilities=ALL_CAPS) as client:
        ex = await client.exchange("tools/call", {"name": "hoard", "arguments": {"size": 3_000}})
        assert ex.error is not None and "limit of 2000" in ex.error["message"]
        first = await client.call_tool("hoard", {"size": 100}, manual=True)
        assert len(first["requestState"]) <= 2_000
