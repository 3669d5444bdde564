"""The port between the server core and the transports that carry it.

A transport decodes bytes into a JSON-RPC message, hands it to a `Core`, and writes
back what the core answers. Everything it may ask of the core is declared here;
`nimblemcp.server.Server` implements it. Transports import this module, never
`nimblemcp.server`; the server never imports a transport. Serving helpers that join
the two (`nimblemcp.serving`) sit above both.

The path of one request through the port:

1. `core.prepare(message)`: every check that needs no I/O (`_meta`, protocol
   version, method, capability gate). Raises a `ProtocolError` to answer at once;
   returns an opaque `Prepared` otherwise. The HTTP transport compares headers with
   the body between prepare and execute (`tool_header_rules`).
2. `await core.execute(prepared, io)`: runs the handler and always returns a response
   message (errors included). `io` is the request's `RequestIO`.

Cancellation contract: a transport cancels a request by cancelling the task that
awaits `execute`; the core marks the handler's Context cancelled and re-raises
`CancelledError`, and no response exists for it. Sync handlers running in a worker
thread cannot be stopped; they see `ctx.cancelled` become true.

Imports only the standard library, `types`, `jsonrpc` and `errors`. No postponed
annotations: a NamedTuple with postponed ones compiles a `ForwardRef` per field when
the class is made (start-up, issue 18); the few forward references are quoted.
"""

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NamedTuple, Protocol

from nimblemcp.types._meta import RequestMeta
from nimblemcp.types._tool_headers import HeaderRule
from nimblemcp.types.methods import MethodSpec

__all__ = [
    "Ask", "ChangeEvent", "Changes", "CloseStream", "Core", "Emit", "LegacyOptions", "NoIO",
    "Prepared", "RequestIO",
]

# Sends one request-scoped notification (progress, log, listen events) to the peer.
Emit = Callable[[dict[str, Any]], None]
# A back channel: sends one round of server-to-client requests (keyed input requests)
# and returns the client's answers by key. Only a legacy (2025-11-25) peer has one.
Ask = Callable[[dict[str, dict[str, Any]]], Awaitable[dict[str, Any]]]
# Ends the request's response stream now while the request goes on: a resumable
# stream, which the client reconnects to (`Last-Event-ID`) to get the rest. Returns
# False when there was nothing to close.
CloseStream = Callable[[], bool]
Handler = Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]


class Prepared(NamedTuple):
    """A request that passed every check that needs no I/O.

    Opaque to transports apart from `id`, `method`, `params` and `meta` (read-only);
    `meta` is what the request said about itself (`version`, `client_capabilities`,
    `client_info`, `log_level`, `progress_token`, `raw`)."""

    id: str | int
    method: str
    params: dict[str, Any]
    spec: MethodSpec
    handler: Handler
    meta: RequestMeta


class RequestIO(Protocol):
    """What one request may use of its transport.

    `emit` is called on the event loop thread only (the core hops there from worker
    threads) and must not block: it queues or writes. It may be called until
    `execute` returns, never after. `subject` is the authenticated subject (None when
    the transport has no authentication). `loop` is the running loop when the
    transport already holds it (saves a look-up), else None. `ask` is the back
    channel of a peer that accepts server-to-client requests, else None: with it the
    core answers a handler's questions inside `execute` instead of ending the round
    with `input_required`. `close_stream` is set only where the request's stream is
    resumable (a 2025-11-25 HTTP session); see `CloseStream`.

    Optional, read only when a handler asks (so a transport computes them lazily):
    `headers`, the request's headers as a mapping of lowercased names to values, and
    `auth`, the verified access token of an authenticated request. A transport
    without them simply lacks the attributes (stdio, in-memory). Optional too:
    `emit_json(data, subscription)`, a message already encoded as JSON (a listen's
    notification, whose shared part is encoded once for all listeners; `subscription`
    is its listen's id), used where present (HTTP)."""

    @property
    def subject(self) -> str | None: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...
    @property
    def ask(self) -> Ask | None: ...
    @property
    def close_stream(self) -> CloseStream | None: ...
    def emit(self, message: dict[str, Any], /) -> None: ...


class NoIO:
    """A `RequestIO` that goes nowhere: no notifications, no subject, no back channel."""

    __slots__ = ()
    subject = None
    loop = None
    ask = None
    close_stream = None

    def emit(self, message: dict[str, Any], /) -> None:
        return None


class ChangeEvent(Protocol):
    """A registry change: `kind` is "tools", "prompts", "resources" (a list changed)
    or "updated" (the resource `uri` changed)."""

    @property
    def kind(self) -> str: ...
    @property
    def uri(self) -> str | None: ...


class Changes(Protocol):
    """A subscription to change events, delivered on the loop that created it.

    Use as `async with changes as events: async for event in events`. Iteration ends
    when the server closes its listeners (`Core.close_listeners`) and raises when
    the subscriber fell too far behind. Leaving the `async with` or `close()`
    unsubscribes at once; `close()` is safe before the `async with` was entered."""

    def __aiter__(self) -> "Changes": ...
    async def __anext__(self) -> ChangeEvent: ...
    async def __aenter__(self) -> "Changes": ...
    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LegacyOptions:
    """Limits of 2025-11-25 (`initialize`-era) sessions, which the legacy adapter in
    the transports enforces; the server only carries them (`Server(legacy=...)`).

    `request_timeout`: seconds a server-to-client request (elicitation, sampling,
    roots) may wait for its answer; then the client is told the request was
    cancelled and the handler's ask raises `InputTimeout` (uncaught: -32603).
    `idle_timeout`: seconds an HTTP session with nothing in flight lives after its
    last message. `max_sessions`: HTTP sessions kept at once; when full, the least
    recently used session is evicted (an idle one first), so new clients are never
    locked out."""

    request_timeout: float = 300.0
    idle_timeout: float = 1800.0
    max_sessions: int = 10_000


class Core(Protocol):
    """The transport-agnostic server core, as the transports see it.

    `prepare` and `tool_header_rules` are synchronous and cheap (no I/O); `execute`
    may be awaited concurrently for many requests on one loop. All methods are called
    on the event loop thread."""

    @property
    def name(self) -> str:
        """The server's name (for a human-readable banner)."""
        ...

    def prepare(self, message: Any, meta: RequestMeta | None = None, /) -> Prepared:
        """Check a decoded request. `meta` given: the caller (a legacy session) built
        the request's metadata itself, so only the method and its capability gate are
        checked; `message["params"]` must then be an object."""
        ...

    def execute(self, request: Prepared, io: RequestIO, /) -> Awaitable[dict[str, Any]]:
        """Run a prepared request; always resolves to a response message."""
        ...

    def tool_header_rules(self, name: str, /) -> tuple[HeaderRule, ...]:
        """The `x-mcp-header` rules of tool `name`, computed at registration; `()`
        for an unknown tool."""
        ...

    def describe(self) -> dict[str, Any]:
        """What a handshake answer says of the server: `capabilities`, `serverInfo`
        and, when set, `instructions` (in that order)."""
        ...

    def changes(self) -> Changes | None:
        """A new subscription to list changes and resource updates, or None when the
        server publishes none (subscriptions turned off)."""
        ...

    def close_listeners(self) -> None:
        """End every open change subscription gracefully (at shutdown)."""
        ...

    def drain(self, grace: float, /) -> None:
        """A graceful stop began: background work (tasks) may finish within `grace`
        seconds before the server's stop fails it; a later call may only shorten that."""
        ...

    @property
    def legacy_options(self) -> LegacyOptions:
        """The limits of this server's 2025-11-25 sessions."""
        ...

    def note_serving(self) -> None:
        """A transport began serving requests (at its first request on an event loop,
        never per request): the server is serving even when no lifespan runs."""
        ...

    def lifespan_context(self, app: Any = None, /) -> AbstractAsyncContextManager[Any]:
        """The server's start-up/shut-down: a transport that owns the process (stdio,
        the ASGI `lifespan` scope) enters it around serving. Entries nest (the lifespan
        runs once); raises `nimblemcp.errors.StartupError` when start-up fails."""
        ...
