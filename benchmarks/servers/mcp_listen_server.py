"""Official MCP Python SDK (mcp 2.3.0): the listen fan-out benchmark's server
(benchmarks/listen_fanout.py --server mcp), beside servers/nimble_listen_server.py.

    uvicorn mcp_listen_server:http_app --factory --port PORT     (from .venv-peers)

Listeners subscribe to `bench://t/0`; the `burst` tool publishes `n` resource-updated
events for it (the SDK matches a subscribed URI exactly, so every event carries the same
URI) and returns each event's publish time (`time.monotonic_ns()`, the clock of every
process here): the client pairs the k-th event on a stream with the k-th time. The SDK
caps listens at 1,024 and each stream's backlog at 1,024 events by default; the handler
is registered again with `BENCH_LISTEN_MAX` streams and `BENCH_LISTEN_QUEUE` events
(the lowlevel server's `add_request_handler`, reaching two private attributes of
`MCPServer`: the SDK offers no option for it).
"""

import os
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.subscriptions import ListenHandler
from mcp_types import SubscriptionsListenRequestParams

mcp = MCPServer("bench-listen-mcp")


@mcp.resource("bench://t/0")
def topic() -> str:
    """The topic every listener subscribes to."""
    return "topic"


@mcp.tool()
async def burst(n: int, ctx: Context) -> list[int]:
    """Publish `n` resource-updated events for `bench://t/0`; their publish times."""
    stamps = []
    for _ in range(n):
        stamps.append(time.monotonic_ns())
        await ctx.notify_resource_updated("bench://t/0")
    return stamps


def http_app():
    handler = ListenHandler(mcp._subscriptions, max_subscriptions=int(os.environ.get("BENCH_LISTEN_MAX", "20000")),
                            max_buffered_events=int(os.environ.get("BENCH_LISTEN_QUEUE", "1024")))
    mcp._lowlevel_server.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams, handler)
    return mcp.streamable_http_app(streamable_http_path="/mcp", stateless_http=True)
