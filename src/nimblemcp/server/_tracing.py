"""OpenTelemetry server spans: the `Tracing()` middleware (public in `nimblemcp.middleware`).

One SERVER span per request, named `{mcp.method.name} {target}` (the tool or prompt
name; the bare method otherwise), parented from the `traceparent`/`tracestate` (and
`baggage`) the client put in the request's `_meta`, with the attribute names of the
OpenTelemetry semantic conventions for MCP: `mcp.method.name`, `jsonrpc.request.id`,
`mcp.protocol.version` (the request's era), `mcp.session.id` (a 2025-11-25 HTTP
session: the first 16 hex digits of its SHA-256, never the id itself, which is a
credential; it still tells one session's spans from another's), `mcp.resource.uri`, `gen_ai.tool.name` + `gen_ai.operation.name`,
`gen_ai.prompt.name`, `network.transport` (`tcp` on HTTP), and on failure `error.type`
(the JSON-RPC code, `tool_error` for a tool result with `isError`, or the exception's
class) with `rpc.response.status_code` for a JSON-RPC error.

Opt-in: `Server(middleware=[Tracing()])`. Nothing here runs, and `opentelemetry` is
never imported, unless a `Tracing()` is created: a server without it pays nothing. The
spans go to the tracer provider given, else the global one at the time of each request
(so configuring OpenTelemetry after building the server works). Imports the server's
types only; `opentelemetry` lazily, naming the `[otel]` extra when it is missing.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from nimblemcp._extras import needs_extra
from nimblemcp.errors import ProtocolError
from nimblemcp.server._middleware import CallNext
from nimblemcp.server._mrtr import InputRequired

if TYPE_CHECKING:
    from nimblemcp.server._context import Context

__all__ = ["Tracing", "session_label", "span_name_and_attributes"]

_INSTRUMENTATION = "nimblemcp"


def span_name_and_attributes(method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The semantic-convention span name and the attributes the method and params give."""
    attributes: dict[str, Any] = {"mcp.method.name": method}
    target = None
    if method == "tools/call":
        name = params.get("name")
        if isinstance(name, str):
            target = name
            attributes["gen_ai.tool.name"] = name
        attributes["gen_ai.operation.name"] = "execute_tool"
    elif method == "prompts/get":
        name = params.get("name")
        if isinstance(name, str):
            target = name
            attributes["gen_ai.prompt.name"] = name
    elif "uri" in params and isinstance(params["uri"], str):
        attributes["mcp.resource.uri"] = params["uri"]  # not in the name: high cardinality
    return (f"{method} {target}" if target else method), attributes


def session_label(session_id: str) -> str:
    """What a span records of a session id: enough to correlate, useless to replay."""
    return hashlib.sha256(session_id.encode()).hexdigest()[:16]


def error_type_of(result: dict[str, Any]) -> str | None:
    """`tool_error` for a tool result that reports a failure, else None."""
    return "tool_error" if result.get("isError") is True else None


class Tracing:
    """Server middleware: one OpenTelemetry span per request (see the module docstring).

    `tracer_provider`: where the spans go (default: the global provider, looked up per
    request). Add it first (outermost) to time everything, including other middleware.
    """

    __slots__ = ("_extract", "_kind", "_provider", "_status", "_trace", "_tracer")

    def __init__(self, tracer_provider: Any = None) -> None:
        with needs_extra("otel", "OpenTelemetry tracing"):
            from opentelemetry import propagate, trace
        self._trace = trace
        self._extract = propagate.extract
        self._kind = trace.SpanKind.SERVER
        self._status = trace.Status
        self._provider = tracer_provider
        self._tracer = None if tracer_provider is None else tracer_provider.get_tracer(_INSTRUMENTATION)

    def _current_tracer(self) -> Any:
        if self._tracer is not None:
            return self._tracer
        return self._trace.get_tracer(_INSTRUMENTATION)  # the global provider, as it is now

    async def __call__(self, ctx: Context, call_next: CallNext) -> dict[str, Any]:
        name, attributes = span_name_and_attributes(ctx.method, ctx.params)
        attributes["jsonrpc.request.id"] = str(ctx.request_id)
        attributes["mcp.protocol.version"] = ctx.protocol_version
        headers = ctx.headers
        if headers:
            attributes["network.transport"] = "tcp"
            session = headers.get("mcp-session-id")
            if session:
                attributes["mcp.session.id"] = session_label(session)
        parent = self._extract(ctx.meta)  # traceparent / tracestate / baggage from _meta
        tracer = self._current_tracer()
        with tracer.start_as_current_span(
            name, context=parent, kind=self._kind, attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                result = await call_next()
            except InputRequired:
                raise  # an input_required answer, not a failure
            except ProtocolError as exc:
                code = str(exc.code)
                span.set_attribute("error.type", code)
                span.set_attribute("rpc.response.status_code", code)
                span.set_status(self._status(self._trace.StatusCode.ERROR, str(exc)))
                raise
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                span.record_exception(exc)
                span.set_status(self._status(self._trace.StatusCode.ERROR, str(exc)))
                raise
            error = error_type_of(result)
            if error is not None:
                span.set_attribute("error.type", error)
                span.set_status(self._status(self._trace.StatusCode.ERROR))
            return result
