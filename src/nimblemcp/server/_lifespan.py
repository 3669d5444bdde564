"""The server's lifespan: shared resources opened at start-up, closed at shut-down.

`Server(lifespan=factory)` takes `factory(server)` returning an async context manager
(typically an `@asynccontextmanager` function); what it yields is the lifespan value,
reachable from every handler as `ctx.lifespan` (or injected, see `_depends`). Every way
of serving enters `Server.lifespan_context()`: stdio and `run_http` (through
`nimblemcp.serving`), the ASGI app's `lifespan` scope, a host framework's own lifespan
(`Starlette(lifespan=server.lifespan_context)`) and `nimblemcp.testing.connect`.
Entering is counted, so a lifespan started by two of them (a host and the mounted app)
runs once and closes when the last one leaves. A failure at start-up becomes a
`StartupError` naming the server. Mounted servers' lifespans run inside their host's.
Must not import transports or the registry.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from nimblemcp.errors import StartupError

__all__ = ["Lifespan", "LifespanFactory"]

# `factory(server)`: an async context manager whose value is the lifespan value.
LifespanFactory = Callable[[Any], AbstractAsyncContextManager[Any]]


class Owner(Protocol):
    """The server a lifespan belongs to (a `nimblemcp.Server`)."""

    @property
    def name(self) -> str: ...
    @property
    def mounted(self) -> list[Any]: ...  # servers whose lifespans run inside this one's
    def _following(self) -> AbstractAsyncContextManager[None]: ...  # other instances' switches
    async def stopping(self) -> None: ...
    async def stopped(self) -> None: ...


class Lifespan:
    """Runs one server's lifespan factory once however many hosts enter it."""

    __slots__ = ("_depth", "_stack", "factory", "server", "started", "value")

    def __init__(self, server: Owner, factory: LifespanFactory | None) -> None:
        self.server = server
        self.factory = factory
        self.value: Any = None
        self.started = False
        self._depth = 0
        self._stack: contextlib.AsyncExitStack | None = None

    @contextlib.asynccontextmanager
    async def context(self, app: Any = None) -> AsyncIterator[Any]:
        """Start (first entry) and stop (last exit); yields the lifespan value, or None
        when a host framework enters it (`app` given): Starlette and FastAPI take a
        yielded value for their own request state."""
        if self._depth == 0:
            stack = contextlib.AsyncExitStack()
            try:
                if self.factory is not None:
                    self.value = await stack.enter_async_context(self.factory(self.server))
                for child in self.server.mounted:
                    await stack.enter_async_context(child.lifespan_context())
                await stack.enter_async_context(self.server._following())
            except BaseException as exc:
                self.value = None
                await stack.aclose()
                if isinstance(exc, StartupError) or not isinstance(exc, Exception):
                    raise
                raise StartupError(
                    f"server {self.server.name!r} failed to start: its lifespan raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            self._stack = stack
            self.started = True
        self._depth += 1
        try:
            yield self.value if app is None else None
        finally:
            self._depth -= 1
            if self._depth == 0:
                opened, self._stack = self._stack, None
                try:
                    await self.server.stopping()  # tasks settle while the lifespan's resources are open
                finally:
                    self.started = False
                    try:
                        if opened is not None:
                            await opened.aclose()
                    finally:
                        self.value = None
                        await self.server.stopped()  # what was published leaves the process

    @property
    def needed(self) -> bool:
        """Whether anything must start: this factory or a mounted server's lifespan."""
        return self.factory is not None or any(child._lifespan.needed for child in self.server.mounted)

    def current(self) -> Any:
        """The lifespan value; a clear error when the server has one but it never started."""
        if not self.started and self.factory is not None:
            raise RuntimeError(
                f"server {self.server.name!r} has a lifespan that has not started: serve it with "
                "server.run(), `nimblemcp run`, its ASGI app under a server that runs the ASGI "
                "lifespan, or enter `server.lifespan_context()` yourself (for a mounted app: "
                "Starlette(lifespan=server.lifespan_context))"
            )
        return self.value
