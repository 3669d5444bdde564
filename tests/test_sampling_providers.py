"""Sampling handlers (issue 35, item 5): `OpenAISampler` and `AnthropicSampler` drive
the real `openai` and `anthropic` SDKs against local servers speaking each provider's
API (tests/_fake_llm.py, which checks every request's shape), and map a
`sampling/createMessage` request onto it and the answer back: messages with text, images
and audio, the system prompt, model hints, maxTokens, temperature, stop sequences, tools
and tool choice, tool results, and every stop reason (SAMP-*).

The same samplers answering a real nimblemcp server's questions: tests/test_sampling_e2e.py.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from _fake_llm import KEY, FakeApi, anthropic_app, anthropic_reply, openai_app, openai_reply
from _serving import serving

from nimblemcp.errors import InputRequestRefused, MissingExtraError
from nimblemcp.sampling import AnthropicSampler, OpenAISampler

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really").decode()
WAV = base64.b64encode(b"RIFF....WAVEfmt ").decode()
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
async def fake_openai() -> AsyncIterator[tuple[FakeApi, openai.AsyncOpenAI]]:
    fake = FakeApi()
    async with serving(openai_app(fake)) as url:
        client = openai.AsyncOpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0)
        yield fake, client
        await client.close()
    assert fake.refused == [], "a request broke the API's shape"


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[tuple[FakeApi, anthropic.AsyncAnthropic]]:
    fake = FakeApi()
    async with serving(anthropic_app(fake)) as url:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=url, max_retries=0)
        yield fake, client
        await client.close()
    assert fake.refused == [], "a request broke the API's shape"


def asking(**params: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": "Hello"}}], "maxTokens": 50, **params}


async def test_openai_maps_the_request_and_the_answer(fake_openai: tuple[FakeApi, openai.AsyncOpenAI]) -> None:
    fake, client = fake_openai
    sampler = OpenAISampler("gpt-small", models=["gpt-large", "gpt-small"], aliases={"opus": "gpt-large"},
                            client=client)
    fake.replies.append(openai_reply("A cat on a mat.", model="gpt-large-2026"))
    answer = await sampler({
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in the picture, and what do you hear?"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "audio", "data": WAV, "mimeType": "audio/wav"}]},
            {"role": "assistant", "content": {"type": "text", "text": "Let me look."}},
            {"role": "user", "content": {"type": "text", "text": "Go on."}}],
        "systemPrompt": "Be brief.", "maxTokens": 123, "temperature": 0.2, "stopSequences": ["END"],
        "modelPreferences": {"hints": [{"name": "claude-3-opus"}], "intelligencePriority": 0.9},
        "includeContext": "none", "metadata": {"anything": "not forwarded"},
    })
    assert answer == {"role": "assistant", "content": {"type": "text", "text": "A cat on a mat."},
                      "model": "gpt-large-2026", "stopReason": "endTurn"}
    sent = fake.requests[0]
    assert sent["model"] == "gpt-large"  # the hint names Opus: its alias
    assert sent["max_completion_tokens"] == 123 and sent["temperature"] == 0.2 and sent["stop"] == ["END"]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "text", "text": "What is in the picture, and what do you hear?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}]},
        {"role": "assistant", "content": "Let me look."},
        {"role": "user", "content": "Go on."}]
    assert "tools" not in sent and "metadata" not in sent


async def test_openai_tool_loop_and_stop_reasons(fake_openai: tuple[FakeApi, openai.AsyncOpenAI]) -> None:
    fake, client = fake_openai
    sampler = OpenAISampler("gpt-small", client=client)
    assert sampler.capabilities == {"tools": {}}
    fake.replies.append(openai_reply(None, tool_calls=[("call_1", "get_weather", {"city": "Paris"}),
                                                       ("call_2", "get_weather", {"city": "London"})],
                                     finish="tool_calls"))
    first = await sampler(asking(tools=[WEATHER], toolChoice={"mode": "required"},
                                 modelPreferences={"hints": [{"name": "unknown-model"}]}))
    assert first["stopReason"] == "toolUse" and first["model"] == "gpt-test-1"
    assert first["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "London"}}]
    assert fake.requests[0]["model"] == "gpt-small"  # no hint matched: the default
    assert fake.requests[0]["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER["inputSchema"]}}]
    assert fake.requests[0]["tool_choice"] == "required"
    # The server answers the tool uses; the history goes back with its tool results.
    history = [asking()["messages"][0], {"role": "assistant", "content": first["content"]},
               {"role": "user", "content": [
                   {"type": "tool_result", "toolUseId": "call_1", "content": [{"type": "text", "text": "18 C"}]},
                   {"type": "tool_result", "toolUseId": "call_2", "content": [], "structuredContent": {"c": 15}}]}]
    fake.replies.append(openai_reply("Paris is warmer.", finish="stop"))
    final = await sampler({"messages": history, "maxTokens": 50, "tools": [WEATHER], "toolChoice": {"mode": "none"}})
    assert final["content"] == {"type": "text", "text": "Paris is warmer."} and final["stopReason"] == "endTurn"
    sent = fake.requests[1]["messages"]
    assert sent[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "London"}'}}]}
    assert sent[2:] == [{"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
                        {"role": "tool", "tool_call_id": "call_2", "content": '{"c": 15}'}]
    assert fake.requests[1]["tool_choice"] == "none"
    for finish, reason in (("length", "maxTokens"), ("content_filter", "content_filter")):
        fake.replies.append(openai_reply("cut", finish=finish))
        assert (await sampler(asking()))["stopReason"] == reason


async def test_openai_refuses_what_it_cannot_send_and_reports_api_errors(
        fake_openai: tuple[FakeApi, openai.AsyncOpenAI]) -> None:
    fake, client = fake_openai
    sampler = OpenAISampler("gpt-small", client=client)
    with pytest.raises(InputRequestRefused, match="audio of type 'audio/ogg'"):
        await sampler({"messages": [{"role": "user", "content": {"type": "audio", "data": WAV,
                                                                  "mimeType": "audio/ogg"}}], "maxTokens": 5})
    with pytest.raises(InputRequestRefused, match="assistant message block of type 'image'"):
        await sampler({"messages": [{"role": "assistant", "content": {"type": "image", "data": PNG,
                                                                       "mimeType": "image/png"}}], "maxTokens": 5})
    assert fake.requests == []  # refused before any request
    fake.replies.append((429, {"error": {"message": "slow down", "type": "rate_limit"}}))
    with pytest.raises(InputRequestRefused, match="slow down") as caught:
        await sampler(asking())
    assert isinstance(caught.value.__cause__, openai.RateLimitError)
    # A default answer after an error: the sampler goes on.
    assert (await sampler(asking()))["content"]["text"] == "echo: Hello"


async def test_anthropic_maps_the_request_and_the_answer(
        fake_anthropic: tuple[FakeApi, anthropic.AsyncAnthropic]) -> None:
    fake, client = fake_anthropic
    sampler = AnthropicSampler("claude-small", models=["claude-opus-9", "claude-small"], client=client)
    fake.replies.append(anthropic_reply([{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                         {"type": "text", "text": "A cat."}], model="claude-opus-9-2026"))
    answer = await sampler({
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                  {"type": "image", "data": PNG, "mimeType": "image/png"}]}],
        "systemPrompt": "Be brief.", "maxTokens": 77, "temperature": 0.3, "stopSequences": ["END", "STOP"],
        "modelPreferences": {"hints": [{"name": "opus"}, {"name": "small"}]},
    })
    assert answer == {"role": "assistant", "content": {"type": "text", "text": "A cat."},
                      "model": "claude-opus-9-2026", "stopReason": "endTurn"}
    sent = fake.requests[0]
    assert sent["model"] == "claude-opus-9" and sent["max_tokens"] == 77 and sent["system"] == "Be brief."
    assert sent["stop_sequences"] == ["END", "STOP"]
    assert "temperature" not in sent  # this SDK's messages.create no longer takes it
    assert sent["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]
    assert KEY in (fake.headers[0].get("x-api-key"), fake.headers[0].get("authorization", "").removeprefix("Bearer "))


async def test_anthropic_tool_loop_and_stop_reasons(fake_anthropic: tuple[FakeApi, anthropic.AsyncAnthropic]) -> None:
    fake, client = fake_anthropic
    sampler = AnthropicSampler("claude-small", client=client)
    fake.replies.append(anthropic_reply([
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}], stop="tool_use"))
    first = await sampler(asking(tools=[WEATHER], toolChoice={"mode": "required"}))
    assert first["stopReason"] == "toolUse"
    assert first["content"] == [{"type": "text", "text": "Checking."},
                                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                 "input": {"city": "Paris"}}]
    assert fake.requests[0]["tools"] == [{"name": "get_weather", "description": "Weather in a city",
                                          "input_schema": WEATHER["inputSchema"]}]
    assert fake.requests[0]["tool_choice"] == {"type": "any"}
    history = [asking()["messages"][0], {"role": "assistant", "content": first["content"]},
               {"role": "user", "content": {"type": "tool_result", "toolUseId": "toolu_1", "isError": True,
                                            "content": [{"type": "text", "text": "no data"},
                                                        {"type": "image", "data": PNG, "mimeType": "image/png"}]}}]
    fake.replies.append(anthropic_reply("Sorry, no weather.", stop="stop_sequence"))
    final = await sampler({"messages": history, "maxTokens": 50, "tools": [WEATHER], "toolChoice": {"mode": "auto"}})
    assert final["stopReason"] == "stopSequence" and final["content"]["text"] == "Sorry, no weather."
    assert fake.requests[1]["messages"][2] == {"role": "user", "content": [{
        "type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
        "content": [{"type": "text", "text": "no data"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]}
    assert fake.requests[1]["tool_choice"] == {"type": "auto"}
    for stop, reason in (("max_tokens", "maxTokens"), ("end_turn", "endTurn"), ("refusal", "refusal")):
        fake.replies.append(anthropic_reply("x", stop=stop))
        assert (await sampler(asking(toolChoice={"mode": "none"})))["stopReason"] == reason
    assert fake.requests[-1]["tool_choice"] == {"type": "none"}


async def test_anthropic_refuses_audio_and_reports_api_errors(
        fake_anthropic: tuple[FakeApi, anthropic.AsyncAnthropic]) -> None:
    fake, client = fake_anthropic
    sampler = AnthropicSampler("claude-small", client=client)
    with pytest.raises(InputRequestRefused, match="audio"):
        await sampler({"messages": [{"role": "user", "content": {"type": "audio", "data": WAV,
                                                                  "mimeType": "audio/wav"}}], "maxTokens": 5})
    with pytest.raises(InputRequestRefused, match="image/bmp"):
        await sampler({"messages": [{"role": "user", "content": {"type": "image", "data": PNG,
                                                                  "mimeType": "image/bmp"}}], "maxTokens": 5})
    assert fake.requests == []
    fake.replies.append((500, {"type": "error", "error": {"type": "api_error", "message": "overloaded"}}))
    with pytest.raises(InputRequestRefused, match="overloaded"):
        await sampler(asking())


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(MissingExtraError, match=r"OpenAISampler needs the \[openai\] extra") as caught:
        OpenAISampler("gpt-small")
    assert caught.value.extra == "openai"
    with pytest.raises(MissingExtraError, match=r"pip install 'nimblemcp\[anthropic\]'"):
        AnthropicSampler("claude-small")


def test_a_sampler_needs_a_default_model() -> None:
    with pytest.raises(ValueError, match="default model"):
        OpenAISampler("")
