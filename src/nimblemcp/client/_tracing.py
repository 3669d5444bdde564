"""W3C Trace Context for requests, taken from OpenTelemetry when the app uses it.

Only consulted when `opentelemetry` is already imported by the application, so a
client that does not trace pays nothing (no import, no lookup). The keys go into the
request `_meta` as the spec reserves them: `traceparent`, `tracestate`, `baggage`.
"""

from __future__ import annotations

from typing import Any

_KEYS = ("traceparent", "tracestate", "baggage")


def trace_context() -> dict[str, str]:
    """The current span's trace context as `_meta` entries (empty when none is active)."""
    try:
        from opentelemetry import propagate
    except ImportError:
        return {}
    carrier: dict[str, Any] = {}
    propagate.inject(carrier)
    return {k: str(carrier[k]) for k in _KEYS if k in carrier}
