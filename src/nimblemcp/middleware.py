"""Ready-made server middleware: request logging, timing, rate limiting per caller.

A middleware is `async def mw(ctx, call_next) -> result`; add it with
`Server(middleware=[...])` or `server.add_middleware(mw)` (see
`nimblemcp.server._middleware` for the contract). The ones here:

- `RequestLogging()`: one log line per request: method, target, caller, outcome, time.
- `Timing()`: per-method count, total and slowest duration (`stats`), and an optional
  callback per request.
- `RateLimit(rate, burst)`: a token bucket per caller (the authenticated subject, else
  the client's self-reported name, else "anonymous"; or your own `key`); a caller over
  its rate gets `RateLimited` (-32000, `data: {"retryAfterMs": n}`).
- `Tracing()`: one OpenTelemetry SERVER span per request, parented from the trace
  context in the request's `_meta`, with the MCP semantic-convention attributes (needs
  the `[otel]` extra; opt-in: a server without it never imports OpenTelemetry).

Imports the server's types only; never a transport.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nimblemcp.errors import ProtocolError, RateLimited
from nimblemcp.server._context import Context
from nimblemcp.server._middleware import CallNext, Middleware
from nimblemcp.server._mrtr import InputRequired
from nimblemcp.server._tracing import Tracing

__all__ = ["CallNext", "MethodStats", "Middleware", "RateLimit", "RequestLogging", "Timing", "Tracing", "caller_of"]

_clock = time.perf_counter


def _target(ctx: Context) -> str | None:
    params = ctx.params
    target = params.get("name") if "name" in params else params.get("uri")
    return target if isinstance(target, str) else None


def caller_of(ctx: Context) -> str:
    """Who is calling: the authenticated subject, else the client's self-reported name
    (unverified: fine for fairness, not for security), else "anonymous"."""
    if ctx.subject is not None:
        return ctx.subject
    info = ctx.client_info
    name = info.get("name") if isinstance(info, dict) else None
    return f"client:{name}" if isinstance(name, str) else "anonymous"


class RequestLogging:
    """Logs each request once it is answered: method, target, caller, outcome, time."""

    __slots__ = ("level", "logger")

    def __init__(self, logger: logging.Logger | str = "nimblemcp.requests", level: int = logging.INFO) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.level = level

    async def __call__(self, ctx: Context, call_next: CallNext) -> dict[str, Any]:
        if not self.logger.isEnabledFor(self.level):
            return await call_next()
        start = _clock()
        outcome = "ok"
        try:
            result = await call_next()
            if result.get("resultType") == "input_required" or result.get("isError"):
                outcome = "input_required" if result.get("resultType") == "input_required" else "tool_error"
            return result
        except InputRequired:
            outcome = "input_required"
            raise
        except ProtocolError as exc:
            outcome = f"error {exc.code}"
            raise
        except BaseException as exc:
            outcome = f"failed {type(exc).__name__}"
            raise
        finally:
            target = _target(ctx)
            self.logger.log(
                self.level, "%s%s id=%r caller=%s -> %s in %.1f ms",
                ctx.method, f" {target}" if target else "", ctx.request_id, caller_of(ctx),
                outcome, (_clock() - start) * 1000,
            )


@dataclass
class MethodStats:
    """Durations of one method's requests, in seconds."""

    count: int = 0
    total: float = 0.0
    slowest: float = 0.0

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


class Timing:
    """Measures every request: `stats[method]` and, if given, `on_timing(ctx, seconds)`."""

    __slots__ = ("on_timing", "stats")

    def __init__(self, on_timing: Callable[[Context, float], None] | None = None) -> None:
        self.on_timing = on_timing
        self.stats: dict[str, MethodStats] = {}

    async def __call__(self, ctx: Context, call_next: CallNext) -> dict[str, Any]:
        start = _clock()
        try:
            return await call_next()
        finally:
            elapsed = _clock() - start
            stats = self.stats.get(ctx.method)
            if stats is None:
                stats = self.stats[ctx.method] = MethodStats()
            stats.count += 1
            stats.total += elapsed
            if elapsed > stats.slowest:
                stats.slowest = elapsed
            if self.on_timing is not None:
                self.on_timing(ctx, elapsed)


class RateLimit:
    """A token bucket per caller: `rate` requests per second on average, bursts up to
    `burst`. `key(ctx)` names the caller (default `caller_of`); `methods` limits only
    those methods (default: all but `subscriptions/listen`). Per process: behind a
    load balancer each instance keeps its own buckets. At most `max_callers` buckets
    are kept (the longest idle are dropped first)."""

    __slots__ = ("_buckets", "burst", "key", "max_callers", "methods", "rate")

    def __init__(
        self, rate: float, burst: int | None = None, *, key: Callable[[Context], str] = caller_of,
        methods: frozenset[str] | set[str] | None = None, max_callers: int = 10_000,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0 (requests per second)")
        self.rate = rate
        self.burst = float(burst if burst is not None else max(1, round(rate)))
        if self.burst < 1:
            raise ValueError("burst must be >= 1")
        self.key = key
        self.methods = frozenset(methods) if methods is not None else None
        self.max_callers = max_callers
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, last refill)

    def _limited(self, method: str) -> bool:
        if self.methods is not None:
            return method in self.methods
        return method != "subscriptions/listen"

    async def __call__(self, ctx: Context, call_next: CallNext) -> dict[str, Any]:
        if not self._limited(ctx.method):
            return await call_next()
        caller = self.key(ctx)
        now = _clock()
        buckets = self._buckets
        tokens, last = buckets.pop(caller, (self.burst, now))  # re-inserted: most recent last
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1:
            buckets[caller] = (tokens, now)
            wait_ms = max(1, round((1 - tokens) / self.rate * 1000))
            raise RateLimited(f"Rate limit exceeded for {caller}", {"retryAfterMs": wait_ms})
        buckets[caller] = (tokens - 1, now)
        if len(buckets) > self.max_callers:
            del buckets[next(iter(buckets))]
        return await call_next()
