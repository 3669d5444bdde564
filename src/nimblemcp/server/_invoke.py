"""The one way a registered function runs: tools, prompts, resources and templates.

`Invocable` is the base of every registry entry. Its `invoke` binds the request's
arguments to keyword arguments (`bind`, a callable each kind sets at registration), adds the Context when the function
asks for one, runs the function by ONE policy, and turns what it returned into a
result (`finish`, per kind):
- an `async def` runs on the event loop;
- a sync function runs in a worker thread (`_workers`), so it cannot stall the loop,
  unless registered with `run_in_thread=False` (it never blocks: it runs inline);
- protocol errors and cancellation propagate; any other exception goes to `failed`,
  which by default propagates too (the dispatcher logs it and answers -32603) and
  which tools override to answer an `isError` result instead (TOOL-08).
Everything is decided at registration; a call costs one coroutine frame.

`lane` says how the dispatcher's lean lane (`_dispatch.Dispatcher.run`) may run the
function itself, without a Context and without the `invoke` frame: on the loop
(`LANE_ASYNC`), inline (`LANE_INLINE`) or in a worker thread (`LANE_THREAD`);
`NO_LANE` when the function takes a Context (or a provider-resolved parameter,
which needs one) or, for tools, may become a task. The lane repeats `invoke`'s
policy exactly.
Must not import the registry, the dispatcher or transports.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import ProtocolError
from nimblemcp.server._depends import inject
from nimblemcp.server._mrtr import warn_dropped
from nimblemcp.server._workers import _workers

_submit = _workers.call  # (loop, fn, (), kwargs) -> future: no wrapper frame per call

if TYPE_CHECKING:
    from nimblemcp.server._context import Context

__all__ = ["LANE_ASYNC", "LANE_INLINE", "LANE_THREAD", "NO_LANE", "Invocable"]

NO_LANE, LANE_ASYNC, LANE_INLINE, LANE_THREAD = 0, 1, 2, 3


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


class Invocable:
    """A registered function with its run policy; subclasses set `bind` and may
    override `finish` and `failed`."""

    __slots__ = ("bind", "ctx_param", "fn", "inline", "is_async", "lane")

    fn: Callable[..., Any]
    # The request's arguments as a fresh dict of keyword arguments; raises a protocol
    # error (or, for tools, an argument error) when they do not fit. An attribute, not
    # a method: a tool's is its validator itself, with no call in between.
    bind: Callable[[Any], dict[str, Any]]
    ctx_param: str | None
    is_async: bool
    inline: bool
    lane: int  # NO_LANE or how the lean lane runs it (see the module's docstring)

    def _set_fn(
        self, fn: Callable[..., Any], ctx_param: str | None, bind: Callable[[Any], dict[str, Any]],
        run_in_thread: bool = True,
    ) -> None:
        # Parameters resolved by providers (`_depends`): the function is wrapped once,
        # here; one without dependencies runs as it is. Positional-only parameters get
        # their values by position (every entry is called by name).
        fn, ctx_param = inject(_by_name(fn), ctx_param, run_in_thread)
        self.fn = fn
        self.bind = bind
        self.ctx_param = ctx_param
        self.is_async = inspect.iscoroutinefunction(fn)
        # A sync function known never to block (pure computation, microseconds) may
        # skip the thread hop.
        self.inline = not self.is_async and not run_in_thread
        self.lane = NO_LANE if ctx_param is not None \
            else LANE_ASYNC if self.is_async else LANE_INLINE if self.inline else LANE_THREAD

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
            if self.is_async:
                value = await self.fn(**kwargs)
            elif self.inline:
                value = self.fn(**kwargs)
            else:
                value = await _submit(ctx._loop, self.fn, (), kwargs)  # the request's own loop
        except (ProtocolError, asyncio.CancelledError):
            raise
        except Exception as exc:
            return self.failed(exc)
        if ctx._dropped:  # questions created and never asked (see _mrtr.Ask)
            warn_dropped(ctx._dropped)
        return self.finish(value)
