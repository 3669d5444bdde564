"""The client's MRTR loop: against our Server's ctx.elicit and a scripted peer.

MRTR-06/07/08/09/17, ELIC-03 (defaults), manual mode, round cap.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.test_client_memory import Scripted

from nimblemcp import Context, Server, StateOptions
from nimblemcp.client import Client, InputRequestRefused, RetryPolicy, fill_defaults
from nimblemcp.errors import ClientError
from nimblemcp.server._sealing import new_key
from nimblemcp.transports.client.memory import MemoryTransport

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_server() -> Server:
    server = Server("mrtr", state=StateOptions(keys=[new_key()]))

    @server.tool
    async def everything(ctx: Context) -> str:
        name, reply, roots = ctx.gather(
            ctx.elicit("user_name", "Your name?", NAME),
            ctx.sample("greeting", ["Say hi"], 50),
            ctx.roots("client_roots"),
        )
        return f"{name.content['name']}|{reply['content']['text']}|{roots[0]['uri']}"

    @server.tool
    async def wizard(ctx: Context) -> str:
        if "name" not in ctx.state:  # MRTR-10: progress lives in requestState
            step1 = await ctx.elicit("step1", "Name?", NAME)
            ctx.state["name"] = step1.content["name"]
        step2 = await ctx.elicit("step2", "Colour?", {"type": "object", "properties": {"c": {"type": "string"}}})
        return f"{ctx.state['name']} likes {step2.content['c']}"

    return server


async def test_all_three_kinds_answered_in_one_round() -> None:
    """MRTR-06: every input request of a round is answered before the retry."""
    async def sample(params: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"role": "assistant", "content": {"type": "text", "text": "hi"},
                "model": "m", "stopReason": "endTurn"}

    wire = MemoryTransport(make_server())
    async with Client(wire, on_elicit=lambda p: {"name": "Ada"}, on_sample=sample,
                      on_roots=lambda p: [{"uri": "file:///w", "name": "w"}]) as client:
        result = await client.call_tool("everything", {})
    assert result["content"][0]["text"] == "Ada|hi|file:///w"
    calls = [m for m in wire.sent if m["method"] == "tools/call"]
    assert len(calls) == 2
    assert set(calls[1]["params"]["inputResponses"]) == {"user_name", "greeting", "client_roots"}


async def test_multi_round_with_state_from_our_server() -> None:
    """MRTR-07/08: a changing requestState is echoed every round; ids are fresh."""
    answers = {"Name?": {"name": "Ada"}, "Colour?": {"c": "blue"}}
    wire = MemoryTransport(make_server())
    async with Client(wire, on_elicit=lambda p: answers[p["message"]]) as client:
        result = await client.call_tool("wizard", {})
    assert result["content"][0]["text"] == "Ada likes blue"
    calls = [m for m in wire.sent if m["method"] == "tools/call"]
    assert len(calls) == 3
    assert len({m["id"] for m in calls}) == 3


def _input_required(state: str | None = None, **requests: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"resultType": "input_required"}
    if requests:
        result["inputRequests"] = requests
    if state is not None:
        result["requestState"] = state
    return result


ASK = {"method": "elicitation/create", "params": {"message": "Who?", "requestedSchema": {
    "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "default": 30},
                                     "ok": {"type": "boolean", "default": True}}}}}


async def test_request_state_echoed_exactly_and_omitted_when_absent() -> None:
    """MRTR-07/09: state comes back byte-for-byte; none sent when none given; same params."""
    odd_state = "  ünïcode+/= state\n with spaces  "
    peer = Scripted(
        _input_required(None, q=ASK),
        _input_required(odd_state, q=ASK),
        {"resultType": "complete", "content": []},
    )
    async with Client(MemoryTransport(peer), on_elicit=lambda p: {"name": "Ada"}) as client:
        await client.request("tools/call", {"name": "t", "arguments": {"x": 1}})
    first, second, third = peer.seen
    assert "requestState" not in first["params"] and "inputResponses" not in first["params"]
    assert "requestState" not in second["params"]
    assert third["params"]["requestState"] == odd_state
    for message in peer.seen:
        assert message["params"]["name"] == "t" and message["params"]["arguments"] == {"x": 1}
    assert len({m["id"] for m in peer.seen}) == 3
    # ELIC-03: defaults filled for the fields the user left out
    assert second["params"]["inputResponses"]["q"] == {
        "action": "accept", "content": {"name": "Ada", "age": 30, "ok": True}}


async def test_state_only_round_retries_without_responses() -> None:
    """MRTR-06 (MAY retry at once when there are no inputRequests)."""
    peer = Scripted(_input_required("s1"), {"resultType": "complete", "messages": []})
    async with Client(MemoryTransport(peer)) as client:
        await client.get_prompt("p")
    assert peer.seen[1]["params"]["requestState"] == "s1"
    assert "inputResponses" not in peer.seen[1]["params"]


async def test_round_cap_and_manual_mode() -> None:
    """MRTR-17: the loop stops after max_rounds; manual mode returns input_required."""
    forever = Scripted(*[_input_required("s")] * 5)
    async with Client(MemoryTransport(forever), retry_policy=RetryPolicy(max_rounds=3)) as client:
        with pytest.raises(ClientError, match="input_required rounds"):
            await client.call_tool("t", {})
    assert len(forever.seen) == 3

    peer = Scripted(_input_required("s", q=ASK))
    async with Client(MemoryTransport(peer)) as client:
        result = await client.call_tool("t", {}, manual=True)
    assert result["resultType"] == "input_required" and result["requestState"] == "s"


async def test_missing_callback_refuses() -> None:
    """MRTR-17: a request nobody can answer aborts the loop with a ClientError."""
    peer = Scripted(_input_required(None, q=ASK))
    async with Client(MemoryTransport(peer)) as client:
        with pytest.raises(InputRequestRefused):
            await client.call_tool("t", {})
    assert len(peer.seen) == 1


def test_fill_defaults_keeps_given_values() -> None:
    """ELIC-03: user answers win over defaults."""
    schema = ASK["params"]["requestedSchema"]
    assert fill_defaults(schema, {"age": 5}) == {"age": 5, "ok": True}
    assert fill_defaults(None, {"a": 1}) == {"a": 1}
