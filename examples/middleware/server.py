"""Middleware around every request: logging, timing, rate limiting and a policy of our own.

`RequestLogging` writes one line per request to the `nimblemcp.requests` logger
(stderr here), `Timing` keeps per-method statistics (the `stats` tool shows them),
`RateLimit` lets each caller make 5 requests per second with bursts of 10, and
`read_only` is a custom middleware that refuses destructive tools when
READ_ONLY=1, before they run.

Run it:  python -m nimblemcp run examples/middleware/server.py                 (stdio)
         python -m nimblemcp run examples/middleware/server.py --transport http
"""

from __future__ import annotations

import logging
import os
from typing import Any

from nimblemcp import Context, InvalidParams, Server
from nimblemcp.middleware import CallNext, RateLimit, RequestLogging, Timing

logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

timing = Timing()


async def read_only(ctx: Context, call_next: CallNext) -> dict[str, Any]:
    """Refuse destructive tools when READ_ONLY=1 (a short-circuit with an error)."""
    if ctx.method == "tools/call" and os.environ.get("READ_ONLY") == "1":
        tool = ctx.server.tools.get(str(ctx.params.get("name")))
        if tool is not None and tool.definition.get("annotations", {}).get("destructiveHint"):
            raise InvalidParams(f"{tool.name} is disabled: this server is read-only")
    return await call_next()


server = Server("guarded", middleware=[RequestLogging(), timing, RateLimit(rate=5, burst=10), read_only])
ITEMS: list[str] = []


@server.tool(annotations={"destructiveHint": False})
def add(item: str) -> int:
    """Add an item; returns how many there are."""
    ITEMS.append(item)
    return len(ITEMS)


@server.tool(annotations={"destructiveHint": True})
def clear() -> str:
    """Remove every item."""
    ITEMS.clear()
    return "cleared"


@server.tool(annotations={"readOnlyHint": True})
def stats() -> dict[str, dict[str, float]]:
    """Requests per method so far: count and mean milliseconds."""
    return {method: {"count": s.count, "mean_ms": round(s.mean * 1000, 3)} for method, s in timing.stats.items()}


if __name__ == "__main__":
    server.run()
