"""A small nimblemcp server for the official clients to drive (tests/test_interop_server_*.py).

One of each: a plain tool, a structured-output tool, a tool that reports progress, a tool
that asks the user (MRTR elicitation), a failing tool, a static resource, a resource
template with completion, and a prompt with a completable argument.
"""

from __future__ import annotations

from typing import Any, TypedDict

from nimblemcp import Context, Server, ToolError, assistant, user

server = Server("interop-target", "0.9.0", instructions="Interop target for the official clients.")

CONFIRM = {
    "type": "object",
    "properties": {"colour": {"type": "string", "title": "Favourite colour"}},
    "required": ["colour"],
}


class Weather(TypedDict):
    city: str
    celsius: float


@server.tool(annotations={"readOnlyHint": True, "idempotentHint": True})
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


@server.tool
def weather(city: str) -> Weather:
    """Structured weather for a city."""
    return {"city": city, "celsius": 21.5}


@server.tool
async def slow_count(n: int, ctx: Context) -> str:
    """Count to n, reporting progress at each step."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
    return f"counted to {n}"


@server.tool
async def ask_colour(ctx: Context) -> str:
    """Ask the user for a favourite colour (elicitation)."""
    answer = await ctx.elicit("colour", "What is your favourite colour?", CONFIRM)
    if not answer.accepted or not answer.content:
        return f"no colour ({answer.action})"
    return f"colour={answer.content['colour']}"


@server.tool
def fail(reason: str) -> str:
    """Always fails with the reason."""
    raise ToolError(reason)


@server.resource("notes://readme", mime_type="text/plain", description="The readme note")
def readme() -> str:
    return "read me first"


def _complete_topic(value: str, _context: Any) -> list[str]:
    return [t for t in ("alpha", "almond", "beta") if t.startswith(value)]


@server.resource("notes://topics/{topic}", mime_type="text/plain",
                 complete={"topic": _complete_topic})
def topic_note(topic: str) -> str:
    return f"note about {topic}"


@server.prompt(complete={"topic": _complete_topic})
def review(topic: str) -> list[dict[str, Any]]:
    """Review a topic.

    Args:
        topic: what to review
    """
    return [user(f"Review {topic}"), assistant("Sure.")]


if __name__ == "__main__":
    server.run()
