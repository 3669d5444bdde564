"""Our Client against the npm reference server `@modelcontextprotocol/server-everything`
over stdio: an independent legacy-era peer (COMPAT-C02/C06, LEGC-01/07)."""

from __future__ import annotations

import _peers

from nimblemcp import Client
from nimblemcp.client import RetryPolicy
from nimblemcp.transports.stdio.client import StdioTransport


async def test_client_falls_back_to_legacy_and_uses_the_reference_server() -> None:
    command, *args = _peers.server_everything()
    async with Client(StdioTransport(command, args), retry_policy=RetryPolicy(probe_timeout=5)) as client:
        tools = {t["name"]: t for t in await client.list_tools()}
        assert client.era == "legacy"  # it answers server/discover with -32601
        assert {"echo", "get-sum", "get-structured-content"} <= set(tools)
        echo = await client.call_tool("echo", {"message": "hello"})
        assert echo["content"][0]["text"] == "Echo: hello"
        total = await client.call_tool("get-sum", {"a": 2, "b": 40})
        assert "42" in total["content"][0]["text"]
        # structuredContent is validated against the tool's outputSchema by our client
        structured = await client.call_tool("get-structured-content", {"location": "New York"})
        assert isinstance(structured["structuredContent"], dict)
        resources = await client.list_resources()
        read = await client.read_resource(resources[0]["uri"])
        assert read["contents"][0]["uri"] == resources[0]["uri"]
        prompts = {p["name"] for p in await client.list_prompts()}
        assert "simple-prompt" in prompts
        prompt = await client.get_prompt("simple-prompt")
        assert prompt["messages"][0]["role"] == "user"
