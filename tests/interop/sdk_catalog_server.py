"""A server written with the official Python SDK (`mcp` 2.3.0) for the catalog tests:
typed arguments of every kind pydantic writes (enums, nested models with $defs,
optional with defaults, lists, maps, unions), a structured result, a resource, a
resource template and prompts. Run: python sdk_catalog_server.py [http PORT]."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Literal

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

server = MCPServer("sdk-catalog", version="1.2.0", instructions="Orders and notes.")


class Colour(StrEnum):
    red = "red"
    green = "green"


class Address(BaseModel):
    street: str
    city: str = Field(description="The city")
    zip: str | None = None


class Order(BaseModel):
    id: int
    items: list[str]
    ship_to: Address
    total: float


@server.tool(annotations={"readOnlyHint": True})
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def place_order(items: list[str], ship_to: Address, colour: Colour = Colour.red,
                priority: Literal["low", "high"] = "low", note: str | None = None,
                weights: dict[str, float] | None = None, code: int | str = 0) -> Order:
    """Place an order; returns it."""
    return Order(id=7, items=[*items, colour.value, priority, str(code)], ship_to=ship_to,
                 total=float(len(items)) + sum((weights or {}).values()))


@server.resource("notes://readme", mime_type="text/plain")
def readme() -> str:
    """The readme."""
    return "read me"


@server.resource("notes://topics/{topic}", mime_type="text/plain")
def topic_note(topic: str) -> str:
    """A note about a topic."""
    return f"note on {topic}"


@server.prompt()
def review(topic: str, tone: str = "kind") -> str:
    """Review a topic."""
    return f"Review {topic}, {tone}ly"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), stateless_http=True)
    else:
        server.run()
