"""Sampling handlers end to end (issue 35, item 5): a real nimblemcp server in its own
process (tests/interop/sampling_server.py under `nimblemcp run --transport http`) asks
its client's model with `ctx.sample`; a real nimblemcp `Client` answers with
`OpenAISampler` or `AnthropicSampler`, whose SDK talks to a local server speaking the
provider's API (tests/_fake_llm.py). Both eras: 2026-07-28 (the questions come as MRTR
`input_required` rounds) and 2025-11-25 (as requests on the session). SAMP-01 (the
client declares sampling and tool use), MRTR rounds.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from _fake_llm import KEY, FakeApi, anthropic_app, anthropic_reply, openai_app, openai_reply
from _peers import free_port, running
from _serving import serving

from nimblemcp import Client
from nimblemcp.sampling import AnthropicSampler, OpenAISampler

SERVER = Path(__file__).parent / "interop" / "sampling_server.py"


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    port = free_port()
    with running([sys.executable, "-m", "nimblemcp", "run", str(SERVER), "--transport", "http", "--port", str(port)],
                 port, "the asking server"):
        yield f"http://127.0.0.1:{port}/mcp"


Provider = tuple[str, FakeApi, Any]


@pytest.fixture(params=["openai", "anthropic"])
async def provider(request: pytest.FixtureRequest) -> AsyncIterator[Provider]:
    fake = FakeApi()
    name = request.param
    async with serving(openai_app(fake) if name == "openai" else anthropic_app(fake)) as url:
        if name == "openai":
            client: Any = openai.AsyncOpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0)
            sampler: Any = OpenAISampler("small-model", models=["large-model", "small-model"], client=client)
        else:
            client = anthropic.AsyncAnthropic(api_key=KEY, base_url=url, max_retries=0)
            sampler = AnthropicSampler("small-model", models=["large-model", "small-model"], client=client)
        yield name, fake, sampler
        await client.close()
    assert fake.refused == [], "a request broke the API's shape"


def tool_call_reply(name: str, calls: list[tuple[str, str]]) -> dict[str, Any]:
    if name == "openai":
        return openai_reply(None, tool_calls=[(i, "get_weather", {"city": c}) for i, c in calls],
                            finish="tool_calls", model="large-model-1")
    return anthropic_reply([{"type": "tool_use", "id": i, "name": "get_weather", "input": {"city": c}}
                            for i, c in calls], stop="tool_use", model="large-model-1")


def text_reply(name: str, said: str) -> dict[str, Any]:
    if name == "openai":
        return openai_reply(said, model="large-model-1")
    return anthropic_reply(said, model="large-model-1")


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_a_server_asks_and_the_provider_answers(mcp_url: str, provider: Provider, mode: str) -> None:
    name, fake, sampler = provider
    fake.replies.append(text_reply(name, "Old pond; a frog jumps"))
    async with Client(mcp_url, mode=mode, on_sample=sampler, sampling_capabilities=sampler.capabilities) as client:
        result = await client.call_tool("haiku", {"topic": "ponds"})
    assert result["content"][0]["text"] == "large-model-1 (endTurn): Old pond; a frog jumps"
    assert len(fake.requests) == 1
    sent = fake.requests[0]
    assert sent["model"] == "large-model"  # the server's hint "large"
    if name == "openai":
        assert sent["messages"] == [{"role": "system", "content": "You are a poet."},
                                    {"role": "user", "content": "Write a haiku about ponds"}]
        assert sent["max_completion_tokens"] == 60 and sent["temperature"] == 0.7
    else:
        assert sent["system"] == "You are a poet." and sent["max_tokens"] == 60
        assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Write a haiku about ponds"}]}]


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_a_tool_loop_through_the_provider(mcp_url: str, provider: Provider, mode: str) -> None:
    name, fake, sampler = provider
    fake.replies.append(tool_call_reply(name, [("call_p", "Paris"), ("call_l", "London")]))
    fake.replies.append(text_reply(name, "Paris is warmer than London."))
    async with Client(mcp_url, mode=mode, on_sample=sampler, sampling_capabilities=sampler.capabilities) as client:
        result = await client.call_tool("weather_report", {"question": "Is Paris warmer than London?"})
    assert result["content"][0]["text"] == "after 1 tool round(s): Paris is warmer than London."
    assert len(fake.requests) == 2  # each question asked once, over however many rounds
    second = fake.requests[1]
    if name == "openai":
        assert second["tool_choice"] == "auto" and second["tools"][0]["function"]["name"] == "get_weather"
        assert second["messages"][-2:] == [{"role": "tool", "tool_call_id": "call_p", "content": "Paris: 18 C"},
                                           {"role": "tool", "tool_call_id": "call_l", "content": "London: 15 C"}]
    else:
        assert second["tool_choice"] == {"type": "auto"} and second["tools"][0]["name"] == "get_weather"
        assert second["messages"][-1] == {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_p", "content": [{"type": "text", "text": "Paris: 18 C"}]},
            {"type": "tool_result", "tool_use_id": "call_l", "content": [{"type": "text", "text": "London: 15 C"}]}]}


async def test_without_the_tools_capability_the_server_may_not_send_tools(mcp_url: str, provider: Provider) -> None:
    _, fake, sampler = provider
    async with Client(mcp_url, mode="modern", on_sample=sampler) as client:
        from nimblemcp import MissingClientCapability

        with pytest.raises(MissingClientCapability):
            await client.call_tool("weather_report", {"question": "Warm?"})
    assert fake.requests == []
