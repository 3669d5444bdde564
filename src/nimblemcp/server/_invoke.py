"""The one way a registered function runs: tools, prompts, resources and templates.

`Invocable` is the base of every registry entry. At registration it decides how its
function is called (`run`, chosen once by `_runner`): an `async def` on the event loop;
a sync function in a worker thread (`_workers`), so it cannot stall the loop, or inline
when registered with `run_in_thread=False` (it never blocks). Its `invoke` is then the
same for every entry and every request:

1. `bind` turns the request's arguments into keyword arguments (a callable each kind
   sets at registration; a tool's is its argument validator);
2. the Context is added when the function asks for one;
3. `run` calls the function;
4. protocol errors and cancellation propagate; any other exception goes to `failed`,
   which by default propagates too (the dispatcher logs it and answers -32603) and
   which tools override to answer an `isError` result instead (TOOL-08);
5. `finish` (per kind) turns what the function returned into the result.

Must not import the registry, the dispatcher or transports.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import ProtocolError
from nimblemcp.server._depends import inject
from nimblemcp.server._mrtr import warn_dropped
from nimblemcp.server._workers import _workers

if TYPE_CHECKING:
    from nimblemcp.server._context import Context

__all__ = ["Invocable", "Runner"]

_NO_TAGS: frozenset[str] = frozenset()

# Calls a registered function with its keyword arguments, for the request of `ctx`.
Runner = Callable[["Context", dict[str, Any]], Awaitable[Any]]


def _by_name(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` itself, or, when it has positional-only parameters (`def f(a, /)`), a
    wrapper of the same kind (async or not) that passes those by position: arguments
    are bound by name, and such a function refused every call before."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature to read: called as it is
        return fn
    first = [(p.name, p.default) for p in params if p.kind is p.POSITIONAL_ONLY]
    if not first:
        return fn
    missing = inspect.Parameter.empty

    def split(kwargs: dict[str, Any]) -> list[Any]:
        values = []
        for name, default in first:
            value = kwargs.pop(name, default)
            if value is missing:  # the call then fails as Python says (bind checks first)
                break
            values.append(value)
        return values

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def call_async(**kwargs: Any) -> Any:
            return await fn(*split(kwargs), **kwargs)

        return call_async

    @functools.wraps(fn)
    def call(**kwargs: Any) -> Any:
        return fn(*split(kwargs), **kwargs)

    return call


def _runner(fn: Callable[..., Any], in_thread: bool) -> Runner:
    """How `fn` is called, chosen once: on the loop (async), in a worker thread on the
    request's own loop (sync), or inline (sync, never blocks)."""
    if inspect.iscoroutinefunction(fn):
        return lambda ctx, kwargs: fn(**kwargs)  # type: ignore[no-any-return]
    if in_thread:
        call = _workers.call
        return lambda ctx, kwargs: call(ctx._loop, fn, (), kwargs)

    async def inline(ctx: Context, kwargs: dict[str, Any]) -> Any:
        return fn(**kwargs)

    return inline


class Invocable:
    """A registered function with its run policy; subclasses set `bind` and may
    override `finish` and `failed`."""

    __slots__ = ("bind", "ctx_param", "fn", "run", "tags")

    fn: Callable[..., Any]
    # The request's arguments as a fresh dict of keyword arguments; raises a protocol
    # error (or, for tools, an argument error) when they do not fit.
    bind: Callable[[Any], dict[str, Any]]
    ctx_param: str | None  # the keyword the function takes the Context by, if any
    run: Runner

    def _set_fn(
        self, fn: Callable[..., Any], ctx_param: str | None, bind: Callable[[Any], dict[str, Any]],
        run_in_thread: bool = True,
    ) -> None:
        # Parameters resolved by providers (`_depends`): the function is wrapped once,
        # here; one without dependencies runs as it is. Positional-only parameters get
        # their values by position (every entry is called by name).
        fn, ctx_param = inject(_by_name(fn), ctx_param, run_in_thread)
        self.tags: frozenset[str] = _NO_TAGS  # what `_visibility` filters by; set by the entry
        self.fn = fn
        self.bind = bind
        self.ctx_param = ctx_param
        self.run = _runner(fn, run_in_thread)

    def finish(self, value: Any) -> Any:
        """What the function returned, as the result to answer."""
        return value

    def failed(self, exc: Exception) -> Any:
        """The function (or `bind`) raised `exc`; called inside the except block."""
        raise exc

    async def invoke(self, ctx: Context, arguments: Any) -> Any:
        try:
            kwargs = self.bind(arguments)
            if self.ctx_param is not None:
                kwargs[self.ctx_param] = ctx
            value = await self.run(ctx, kwargs)
        except (ProtocolError, asyncio.CancelledError):
            raise
        except Exception as exc:
            return self.failed(exc)
        if ctx._dropped:  # questions created and never asked (see _mrtr.Ask)
            warn_dropped(ctx._dropped)
        return self.finish(value)
