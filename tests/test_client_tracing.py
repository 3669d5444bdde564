"""Trace context from OpenTelemetry rides every request's `_meta` (META key table:
`traceparent`, `tracestate`, `baggage`; issue 7)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from nimblemcp import Client, Context, Server
from nimblemcp.transports.client.memory import MemoryTransport


def make_server() -> Server:
    server = Server("traced")

    @server.tool
    async def seen_trace(ctx: Context) -> str:
        return str(ctx.meta.get("traceparent", "none"))

    return server


async def test_active_span_is_propagated_and_none_without_one() -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    async with Client(MemoryTransport(make_server())) as client:
        with trace.use_span(tracer.start_span("outer"), end_on_exit=True) as span:
            inside = await client.call_tool("seen_trace", {})
            trace_id = format(span.get_span_context().trace_id, "032x")
        outside = await client.call_tool("seen_trace", {}, cache=False)
    header = inside["content"][0]["text"]
    assert header.startswith("00-") and header.split("-")[1] == trace_id
    assert outside["content"][0]["text"] == "none"
