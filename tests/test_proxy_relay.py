"""Issue 19, the proxy beyond start-up: a 2026-07-28 target's questions (elicitation,
sampling) reach the front's own client as MRTR rounds over real HTTP, with the front
client's capabilities forwarded; and list changes of the target after start-up (either
era, real stdio) update the front's mirror and notify the front's listeners."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from test_proxy import _uvicorn

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.client import Client
from nimblemcp.proxy import proxy

BACKEND = """
import nimblemcp as m

server = m.Server("asking-backend")

@server.tool()
async def plan_trip(city: str, ctx: m.Context) -> str:
    '''Ask the user, then the model.'''
    ok = await ctx.elicit("confirm", f"Plan a trip to {city}?",
                          {"type": "object", "properties": {"days": {"type": "integer"}}})
    if not ok.accepted:
        return "no trip"
    idea = await ctx.sample("idea", [f"One sight in {city}"], 50)
    return f"{city} for {ok.content['days']} days: {idea.text} ({idea.model})"

@server.prompt()
async def interview(ctx: m.Context) -> str:
    answer = await ctx.elicit("name", "Your name?", {"type": "object", "properties": {"name": {"type": "string"}}})
    return f"Interview {answer.content['name']}"

@server.tool()
def grow(name: str) -> str:
    def extra() -> str:
        return f"I am {name}"
    server.add_tool(extra, name=name)
    return "grown"

@server.tool()
def shrink(name: str) -> str:
    server.remove_tool(name)
    return "shrunk"

if __name__ == "__main__":
    server.run()
"""


@pytest.fixture
def backend(tmp_path: Path) -> list[str]:
    script = tmp_path / "backend.py"
    script.write_text(BACKEND)
    return [sys.executable, str(script)]


async def test_target_questions_reach_the_front_client_as_mrtr_rounds(backend: list[str]) -> None:
    front = proxy(backend, mode="modern", name="front")
    asked: list[str] = []

    def on_elicit(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params["message"])
        return {"days": 3} if "trip" in params["message"] else {"name": "Ada"}

    def on_sample(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params["messages"][0]["content"]["text"])
        return {"role": "assistant", "content": {"type": "text", "text": "the tower"},
                "model": "tiny-1", "stopReason": "endTurn"}

    async with _uvicorn(front.asgi_app(security=HttpSecurity(allowed_hosts=["*"]))) as base:
        async with Client(base + "/mcp", mode="modern", on_elicit=on_elicit, on_sample=on_sample) as client:
            result = await client.call_tool("plan_trip", {"city": "Lisbon"})
            assert result["content"][0]["text"] == "Lisbon for 3 days: the tower (tiny-1)"
            assert asked == ["Plan a trip to Lisbon?", "One sight in Lisbon"]
            prompt = await client.get_prompt("interview", {})
            assert prompt["messages"][0]["content"]["text"] == "Interview Ada"
            # Raw rounds: the front asks under the target's round number.
            first = await client.request("tools/call", {"name": "plan_trip", "arguments": {"city": "Oslo"}},
                                         manual=True)
            assert first["resultType"] == "input_required"
            assert list(first["inputRequests"]) == ["1.confirm"]
            assert first["inputRequests"]["1.confirm"]["method"] == "elicitation/create"
        # A front client that cannot sample: the target learns it and refuses to ask.
        async with Client(base + "/mcp", mode="modern", on_elicit=on_elicit) as limited:
            with pytest.raises(m.McpError) as info:
                await limited.call_tool("plan_trip", {"city": "Rome"})
            assert getattr(info.value, "code", None) == -32021


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_list_changes_after_start_up_reach_the_front(backend: list[str], mode: str) -> None:
    front = proxy(backend, mode=mode, name="front")
    async with _uvicorn(front.asgi_app(security=HttpSecurity(allowed_hosts=["*"]))) as base, \
            Client(base + "/mcp", mode="modern") as client:
        assert "late" not in [t["name"] for t in await client.list_tools(cache=False)]
        async with client.listen(tools=True) as events:
            ack = await asyncio.wait_for(events.next(), 20)
            assert ack.kind == "acknowledged"
            assert (await client.call_tool("grow", {"name": "late"}))["content"][0]["text"] == "grown"
            changed = await asyncio.wait_for(events.next(["tools_changed"]), 20)
            assert changed.kind == "tools_changed"
        names = [t["name"] for t in await client.list_tools(cache=False)]
        assert "late" in names
        assert (await client.call_tool("late", {}))["content"][0]["text"] == "I am late"
        await client.call_tool("shrink", {"name": "late"})
        for _ in range(200):
            if "late" not in [t["name"] for t in await client.list_tools(cache=False)]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the removed tool stayed on the front")


async def test_rounds_may_land_on_another_front_instance(backend: list[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fronts (each with its own backend process), one key ring: the first round on one
    instance, the retries on the other, as behind a round-robin balancer."""
    from nimblemcp import new_state_key

    monkeypatch.setenv("NIMBLEMCP_STATE_KEYS", new_state_key())
    one, two = proxy(backend, mode="modern"), proxy(backend, mode="modern")
    caps_meta = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}, "sampling": {}}}
    async with _uvicorn(one.asgi_app(security=HttpSecurity(allowed_hosts=["*"]))) as base_one, \
            _uvicorn(two.asgi_app(security=HttpSecurity(allowed_hosts=["*"]))) as base_two, \
            Client(base_one + "/mcp", mode="modern") as first_client, \
            Client(base_two + "/mcp", mode="modern") as second_client:
        params: dict[str, Any] = {"name": "plan_trip", "arguments": {"city": "Porto"}}
        first = await first_client.request("tools/call", params, manual=True, meta=caps_meta)
        assert list(first["inputRequests"]) == ["1.confirm"]
        second = await second_client.request("tools/call", {
            **params, "requestState": first["requestState"],
            "inputResponses": {"1.confirm": {"action": "accept", "content": {"days": 2}}}},
            manual=True, meta=caps_meta)
        assert list(second["inputRequests"]) == ["2.idea"]
        done = await first_client.request("tools/call", {
            **params, "requestState": second["requestState"],
            "inputResponses": {"2.idea": {"role": "assistant", "model": "m",
                                          "content": {"type": "text", "text": "the bridge"}}}},
            manual=True, meta=caps_meta)
        assert done["content"][0]["text"] == "Porto for 2 days: the bridge (m)"
