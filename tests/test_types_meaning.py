"""Issue 19, types that mean what they say: content-block return types are content (also
the official SDK's pydantic block models), `ctx.sample(...)` gives a typed
`SampleResult`, a question created and never awaited warns, and a parameter type with no
JSON form is refused at registration with what to write instead."""

from __future__ import annotations

import socket
import warnings
from typing import Any, Literal

import pydantic
import pytest

from nimblemcp import ContentBlock, Context, SampleResult, Server, StateOptions
from nimblemcp.client import Client
from nimblemcp.content import image, text
from nimblemcp.server._sealing import new_key
from nimblemcp.testing import connect
from nimblemcp.transports.client.memory import MemoryTransport


class SdkText(pydantic.BaseModel):
    """Shaped like the official SDK's `mcp.types.TextContent`."""

    type: Literal["text"] = "text"
    text: str
    meta: dict[str, Any] | None = pydantic.Field(default=None, alias="_meta")


class SdkImage(pydantic.BaseModel):
    type: Literal["image"] = "image"
    data: str
    mimeType: str


class Reading(pydantic.BaseModel):
    """Data with a `type` field that is not a content type: stays structured output."""

    type: Literal["celsius"] = "celsius"
    value: float


def _blocks_server() -> Server:
    server = Server("blocks")

    @server.tool()
    def ours() -> list[ContentBlock]:
        return [text("a"), image(b"\x89PNG", "image/png")]

    @server.tool()
    def sdk_models() -> list[SdkText | SdkImage]:
        return [SdkText(text="hello"), SdkImage(data="AAAA", mimeType="image/png")]

    @server.tool()
    def one_model() -> SdkText:
        return SdkText(text="one", _meta={"k": 1})

    @server.tool()
    def reading() -> Reading:
        return Reading(value=21.5)

    return server


async def test_content_block_return_types_are_content_not_json_text() -> None:
    async with connect(_blocks_server()) as client:
        tools = {t["name"]: t for t in await client.list_tools()}
        for name in ("ours", "sdk_models", "one_model"):
            assert "outputSchema" not in tools[name], name
        assert "outputSchema" in tools["reading"]
        ours = await client.call_tool("ours")
        assert ours["content"] == [text("a"), image(b"\x89PNG", "image/png")]
        sdk = await client.call_tool("sdk_models")
        assert sdk["content"] == [{"type": "text", "text": "hello"},
                                  {"type": "image", "data": "AAAA", "mimeType": "image/png"}]
        assert "structuredContent" not in sdk
        one = await client.call_tool("one_model")
        assert one["content"] == [{"type": "text", "text": "one", "_meta": {"k": 1}}]
        data = await client.call_tool("reading")
        assert data["structuredContent"] == {"type": "celsius", "value": 21.5}


def _asking_server() -> Server:
    server = Server("asking", state=StateOptions(keys=[new_key()]))

    @server.tool()
    async def summarize(topic: str, ctx: Context) -> str:
        answer = await ctx.sample("summary", [f"Summarize {topic}"], 100)
        assert isinstance(answer, SampleResult)
        return f"{answer.role}|{answer.text}|{answer.model}|{answer.stop_reason}|{answer['content']['type']}"

    @server.tool()
    async def forgetful(ctx: Context) -> str:
        ctx.elicit("confirm", "Sure?")  # never awaited: the question is dropped
        return "done"

    @server.tool()
    async def sequential(ctx: Context) -> str:
        first = ctx.elicit("first", "First?")
        second = ctx.elicit("second", "Second?")   # dropped in round one, asked in round two
        a = await first
        b = await second
        return f"{a.action} {b.action}"

    @server.tool()
    async def refused(ctx: Context) -> str:
        ctx.elicit("never", "Never asked?")
        raise ValueError("failed before asking")

    return server


async def test_sample_returns_a_typed_result() -> None:
    def on_sample(params: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": {"type": "text", "text": "short"},
                "model": "tiny-1", "stopReason": "endTurn"}

    async with Client(MemoryTransport(_asking_server()), on_sample=on_sample) as client:
        result = await client.call_tool("summarize", {"topic": "notes"})
    assert result["content"][0]["text"] == "assistant|short|tiny-1|endTurn|text"
    raw = SampleResult({"role": "assistant", "content": [
        {"type": "text", "text": "a"}, {"type": "tool_use", "id": "1", "name": "f", "input": {}},
        {"type": "text", "text": "b"}]})
    assert raw.text == "ab" and len(raw.blocks) == 3 and raw.model is None and raw.stop_reason is None


async def test_a_question_never_awaited_warns_and_a_deferred_one_does_not() -> None:
    server = _asking_server()
    caps = {"elicitation": {"form": {}}}
    async with connect(server, capabilities=caps) as client:
        with pytest.warns(RuntimeWarning, match=r"ctx\.elicit\('confirm', \.\.\.\) was created but never"
                                                r" awaited.*write `await ctx\.elicit"):
            done = await client.call_tool("forgetful", manual=True)
        assert done["content"][0]["text"] == "done"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            first = await client.call_tool("sequential", manual=True)
            assert set(first["inputRequests"]) == {"first"}
            second = await client.request("tools/call", {
                "name": "sequential", "requestState": first["requestState"],
                "inputResponses": {"first": {"action": "decline"}}}, manual=True)
            assert set(second["inputRequests"]) == {"second"}
            third = await client.request("tools/call", {
                "name": "sequential", "requestState": second["requestState"],
                "inputResponses": {"second": {"action": "cancel"}}}, manual=True)
            assert third["content"][0]["text"] == "decline cancel"
            failed = await client.call_tool("refused", manual=True)
            assert failed["isError"] is True


def test_unsupported_parameter_types_say_what_to_write_instead() -> None:
    server = Server("mistakes")

    def uses_socket(conn: socket.socket, name: str) -> str:
        return name

    with pytest.raises(TypeError, match=r"uses_socket: parameter `conn: socket\.socket` has no JSON form"
                                        r".*Depends\(provider\).*ctx\.lifespan"):
        server.tool()(uses_socket)

    def returns_socket() -> socket.socket:
        raise NotImplementedError

    with pytest.raises(TypeError, match=r"returns_socket: the return type socket\.socket has no JSON form"
                                        r".*list\[ContentBlock\].*structured_output=False"):
        server.tool()(returns_socket)
