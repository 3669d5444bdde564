"""OpenTelemetry on the client: a CLIENT span per request, whose context is what goes
into the request's `_meta` (`traceparent`, `tracestate`, `baggage`, as the spec
reserves them), so the server's span is its child.

Only consulted when `opentelemetry` is already imported by the application (the
pipeline checks `sys.modules` first), so a client that does not trace pays nothing: no
import, no lookup. A span is made only when a tracer provider is configured
(`trace.set_tracer_provider(...)`); without one, the current span's context (if any) is
still propagated, as before. Names and attributes follow the OpenTelemetry semantic
conventions for MCP: `{mcp.method.name} {target}`, `mcp.method.name`,
`jsonrpc.request.id`, `mcp.protocol.version`, `gen_ai.tool.name`, `gen_ai.prompt.name`,
`mcp.resource.uri`, and `error.type` on failure. Imports nothing of nimblemcp but the
error types.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nimblemcp.errors import ProtocolError

_KEYS = ("traceparent", "tracestate", "baggage")
_INSTRUMENTATION = "nimblemcp"


def trace_context() -> dict[str, str]:
    """The current span's trace context as `_meta` entries (empty when none is active)."""
    try:
        from opentelemetry import propagate
    except ImportError:
        return {}
    carrier: dict[str, Any] = {}
    propagate.inject(carrier)
    return {k: str(carrier[k]) for k in _KEYS if k in carrier}


def _name_and_attributes(method: str, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    attributes: dict[str, Any] = {"mcp.method.name": method}
    target = None
    name = params.get("name")
    if method == "tools/call" and isinstance(name, str):
        target = attributes["gen_ai.tool.name"] = name
        attributes["gen_ai.operation.name"] = "execute_tool"
    elif method == "prompts/get" and isinstance(name, str):
        target = attributes["gen_ai.prompt.name"] = name
    elif isinstance(params.get("uri"), str):
        attributes["mcp.resource.uri"] = params["uri"]
    return (f"{method} {target}" if target else method), attributes


async def traced(
    method: str, params: Mapping[str, Any], request_id: int, version: str | None,
    send: Callable[[], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """Await `send()` inside a CLIENT span when a tracer provider is configured (the span
    is current, so the `_meta` built inside carries its context); else just `send()`."""
    try:
        from opentelemetry import trace
    except ImportError:
        return await send()
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return await send()  # nobody records: propagate the current context only
    name, attributes = _name_and_attributes(method, params)
    attributes["jsonrpc.request.id"] = str(request_id)
    if version and method != "initialize":  # initialize is where the version is agreed
        attributes["mcp.protocol.version"] = version
    tracer = provider.get_tracer(_INSTRUMENTATION)
    with tracer.start_as_current_span(
        name, kind=trace.SpanKind.CLIENT, attributes=attributes,
        record_exception=False, set_status_on_exception=False,
    ) as span:
        try:
            result = await send()
        except ProtocolError as exc:
            span.set_attribute("error.type", str(exc.code))
            span.set_attribute("rpc.response.status_code", str(exc.code))
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
            raise
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
            raise
        if result.get("isError") is True:
            span.set_attribute("error.type", "tool_error")
            span.set_status(trace.Status(trace.StatusCode.ERROR))
        return result
