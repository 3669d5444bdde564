"""The middleware chain: `async def mw(ctx, call_next)` around every request.

A middleware gets the request's `Context` (method, params, request id, subject,
headers...) and `call_next`, a no-argument callable whose awaitable is the result of
everything after it. It may return that result (or a changed one), return a result of
its own without calling `call_next` (short-circuit), or raise a `ProtocolError` (an
error answer). Middleware run in the order added, the first outermost, around every
method of the handler table (discover, lists, call, read, get, complete, listen,
tasks), for both eras and every transport: the legacy adapter runs requests through
the same `Core.execute`.

The chain is built into the handler table when middleware is added, never per request;
with none, the table holds the bare handlers (no extra frame). Must not import the
registry or transports.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nimblemcp.server._context import Context

__all__ = ["CallNext", "Middleware", "chain"]

Result = dict[str, Any]
CallNext = Callable[[], Awaitable[Result]]
"""What a middleware awaits to run the rest of the chain and the handler."""
Middleware = Callable[["Context", CallNext], Awaitable[Result]]
"""`async def mw(ctx, call_next) -> result`: runs around every request; call
`await call_next()` to go on, or return a result (or raise) to answer instead."""
Handler = Callable[[Any, dict[str, Any]], Awaitable[Result]]


def _wrap(mw: Middleware, inner: Handler) -> Handler:
    async def run(ctx: Context, params: dict[str, Any]) -> Result:
        return await mw(ctx, lambda: inner(ctx, params))

    return run


def chain(handler: Handler, middleware: list[Middleware]) -> Handler:
    """`handler` inside `middleware` (the first one outermost)."""
    for mw in reversed(middleware):
        handler = _wrap(mw, handler)
    return handler
