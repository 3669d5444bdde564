"""Dependency injection: parameters resolved by provider functions, per request.

The one documented form is `Annotated[T, Depends(provider)]`:

    async def get_db(ctx: Context) -> Database:       # or sync, or a generator
        return ctx.lifespan["db"]

    @server.tool()
    async def search(query: str, db: Annotated[Database, Depends(get_db)]) -> list[str]: ...

A provider may take the `Context` and other dependencies the same way; it may be
sync, async, a generator or an async generator (the code after `yield` runs once the
handler has finished, even when it failed). Within one request a provider runs once,
however many parameters ask for it. Injected parameters are left out of the input
schema and the prompt arguments. Sync providers (and a sync generator's steps before
and after `yield`) run in the worker threads sync tools run in, as FastAPI runs them,
so one that opens a database connection never stalls other requests;
`Depends(provider, run_in_thread=False)` runs a quick one inline instead, as the
built-in providers do.

Built-in providers: `get_lifespan` (the lifespan value), `get_headers` (the HTTP
request headers, empty off HTTP) and `get_principal` (the verified access token of an
authenticated HTTP request, else None); `Headers` is the ready alias for headers.

Everything is planned at registration; a function with no dependency is not wrapped
and pays nothing. Must not import transports or the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from nimblemcp.server._context import is_context, type_hints
from nimblemcp.server._workers import _workers, run_sync_on

if TYPE_CHECKING:
    from nimblemcp.server._context import Context

__all__ = [
    "CTX",
    "Depends",
    "Headers",
    "get_headers",
    "get_lifespan",
    "get_principal",
    "inject",
    "injected_params",
]

# The keyword under which a wrapped function receives the Context when the function
# itself did not ask for one.
CTX = "__nimblemcp_ctx__"


class Depends:
    """Marks a parameter as resolved by `provider`: `Annotated[T, Depends(provider)]`.
    A sync provider runs in a worker thread unless `run_in_thread=False` (it never
    blocks: it runs on the event loop)."""

    __slots__ = ("provider", "run_in_thread")

    def __init__(self, provider: Callable[..., Any], *, run_in_thread: bool = True) -> None:
        if not callable(provider):
            raise TypeError(f"Depends() needs a callable provider, got {provider!r}")
        self.provider = provider
        self.run_in_thread = run_in_thread

    def __repr__(self) -> str:
        return f"Depends({getattr(self.provider, '__qualname__', self.provider)!r})"


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return type_hints(fn)
    except Exception:  # unresolvable forward references: the raw annotations
        return dict(getattr(fn, "__annotations__", {}))


def _marker(hint: Any) -> Depends | None:
    if typing.get_origin(hint) is Annotated:
        for extra in hint.__metadata__:
            if isinstance(extra, Depends):
                return extra
    return None


def dependencies(fn: Callable[..., Any]) -> dict[str, Depends]:
    """The parameters of `fn` marked `Depends(...)`, by name."""
    found: dict[str, Depends] = {}
    for name, hint in _hints(fn).items():
        if name != "return":
            marker = _marker(hint)
            if marker is not None:
                found[name] = marker
    return found


def injected_params(fn: Callable[..., Any]) -> frozenset[str]:
    """Parameters the framework fills (the Context and dependencies): never arguments."""
    hints = _hints(fn)
    return frozenset(n for n, h in hints.items() if n != "return" and (is_context(h) or _marker(h)))


class _Plan:
    """How to resolve one provider: its kind and how to fill its own parameters."""

    __slots__ = ("ctx_param", "inline", "kind", "provider", "subs")

    def __init__(self, marker: Depends, seen: tuple[Callable[..., Any], ...] = ()) -> None:
        provider = marker.provider
        if provider in seen:
            raise TypeError(f"dependency cycle through provider {provider!r}")
        self.provider = provider
        self.inline = not marker.run_in_thread or provider in _INLINE
        if inspect.isasyncgenfunction(provider):
            self.kind = "agen"
        elif inspect.isgeneratorfunction(provider):
            self.kind = "gen"
        elif inspect.iscoroutinefunction(provider):
            self.kind = "async"
        else:
            self.kind = "sync"
        hints = _hints(provider)
        self.ctx_param: str | None = None
        self.subs: dict[str, _Plan] = {}
        for p in inspect.signature(provider).parameters.values():
            hint = hints.get(p.name)
            sub = _marker(hint)
            if is_context(hint):
                self.ctx_param = p.name
            elif sub is not None:
                self.subs[p.name] = _Plan(sub, (*seen, provider))
            elif p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(
                    f"provider {getattr(provider, '__qualname__', provider)!r}: parameter {p.name!r} "
                    "needs a default, a `Context` annotation or `Annotated[T, Depends(...)]`"
                )

    @property
    def needs_stack(self) -> bool:
        return self.kind in ("gen", "agen") or any(s.needs_stack for s in self.subs.values())

    async def resolve(self, ctx: Context, stack: contextlib.AsyncExitStack | None,
                      cache: dict[Any, Any]) -> Any:
        if self.provider in cache:
            return cache[self.provider]
        kwargs: dict[str, Any] = {}
        if self.ctx_param is not None:
            kwargs[self.ctx_param] = ctx
        for name, sub in self.subs.items():
            kwargs[name] = await sub.resolve(ctx, stack, cache)
        kind = self.kind
        if kind == "async":
            value = await self.provider(**kwargs)
        elif kind == "sync":
            value = self.provider(**kwargs) if self.inline else await run_sync_on(ctx._loop, self.provider, kwargs)
        elif kind == "agen":
            assert stack is not None
            value = await stack.enter_async_context(contextlib.asynccontextmanager(self.provider)(**kwargs))
        else:
            assert stack is not None
            manager = contextlib.contextmanager(self.provider)(**kwargs)
            if self.inline:
                value = stack.enter_context(manager)
            else:  # both steps in a worker: the code before and after `yield` may block
                value = await _workers.call(ctx._loop, manager.__enter__, ())
                stack.push_async_exit(_exit_in_worker(ctx._loop, manager))
        cache[self.provider] = value
        return value


def _exit_in_worker(loop: asyncio.AbstractEventLoop, manager: contextlib.AbstractContextManager[Any]) -> Any:
    """An async exit callback that runs `manager.__exit__` in a worker; shielded, so a
    request cancelled meanwhile still closes what its provider opened."""

    async def leave(kind: Any, error: Any, trace: Any) -> bool:
        return bool(await asyncio.shield(_workers.call(loop, manager.__exit__, (kind, error, trace))))

    return leave


def inject(
    fn: Callable[..., Any], ctx_param: str | None, run_in_thread: bool = True,
) -> tuple[Callable[..., Any], str | None]:
    """`fn` and its Context parameter, or, when it has dependencies, an async wrapper
    that resolves them around each call and the keyword it takes the Context by."""
    deps = dependencies(fn)
    if not deps:
        return fn, ctx_param
    plans = tuple((name, _Plan(marker)) for name, marker in deps.items())
    needs_stack = any(plan.needs_stack for _, plan in plans)
    is_async = inspect.iscoroutinefunction(fn)
    own_ctx = ctx_param

    async def call(**kwargs: Any) -> Any:
        ctx: Context = kwargs[own_ctx] if own_ctx is not None else kwargs.pop(CTX)
        cache: dict[Any, Any] = {}
        async with contextlib.AsyncExitStack() if needs_stack else contextlib.nullcontext() as stack:
            for name, plan in plans:
                kwargs[name] = await plan.resolve(ctx, stack, cache)
            if is_async:
                return await fn(**kwargs)
            if not run_in_thread:
                return fn(**kwargs)
            return await run_sync_on(ctx._loop, fn, kwargs)

    call.__name__ = getattr(fn, "__name__", "call")
    call.__doc__ = fn.__doc__
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call, own_ctx if own_ctx is not None else CTX


# -- built-in providers ---------------------------------------------------------------


def get_lifespan(ctx: Context) -> Any:
    """The server's lifespan value (`Annotated[MyState, Depends(get_lifespan)]`)."""
    return ctx.lifespan


def get_headers(ctx: Context) -> Mapping[str, str]:
    """The HTTP request headers (names lowercased); empty off HTTP."""
    return ctx.headers


def get_principal(ctx: Context) -> Any:
    """The verified access token of an authenticated HTTP request (`subject`, `scopes`,
    `claims`, ...), or None."""
    return ctx.principal


# Quick reads of the Context: never worth a thread hop.
_INLINE = frozenset({get_lifespan, get_headers, get_principal})

Headers = Annotated[Mapping[str, str], Depends(get_headers)]
