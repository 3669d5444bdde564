"""A nimblemcp server that asks its client's model (tests/test_sampling_e2e.py): one tool
asks once, another runs a tool loop (the model calls `get_weather`, the server answers
with tool results, the model writes the report).
"""

from __future__ import annotations

from typing import Any

from nimblemcp import Context, Server, text

server = Server("asker", "1.0.0")

WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CELSIUS = {"Paris": 18, "London": 15}


@server.tool
async def haiku(topic: str, ctx: Context) -> str:
    """A haiku by the client's model."""
    reply = await ctx.sample("haiku", [f"Write a haiku about {topic}"], max_tokens=60,
                             system_prompt="You are a poet.", temperature=0.7,
                             model_preferences={"hints": [{"name": "large"}]})
    return f"{reply.model} ({reply.stop_reason}): {reply.text}"


@server.tool
async def weather_report(question: str, ctx: Context) -> str:
    """The model answers `question`, asking for the weather as it needs (at most 3 rounds)."""
    messages: list[Any] = [question]
    for round_ in range(3):
        reply = await ctx.sample(f"round{round_}", messages, max_tokens=200, tools=[WEATHER],
                                 tool_choice={"mode": "none" if round_ == 2 else "auto"})
        if reply.stop_reason != "toolUse":
            return f"after {round_} tool round(s): {reply.text}"
        uses = [b for b in reply.blocks if b.get("type") == "tool_use"]
        messages.append({"role": "assistant", "content": reply.blocks})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "toolUseId": use["id"],
             "content": [text(f"{use['input']['city']}: {CELSIUS.get(use['input']['city'], '?')} C")]}
            for use in uses]})
    return "no answer in 3 rounds"
