"""The one interface between the Client and the wire: the `Transport` Protocol, and the
optional capabilities a transport may declare on top of it.

A transport moves one JSON-RPC request out and streams back what the peer sent for
it: request-scoped notifications first, then the final response. Closing the stream
early (leaving the `async for`, a timeout, task cancellation) *is* cancellation: the
transport does what its wire needs (close the HTTP response, or send
`notifications/cancelled` on stdio).

Everything else the Client may use is an optional capability, a small
`runtime_checkable` Protocol the transport satisfies by having its members. The Client
checks them with `isinstance` when it opens, probes or recovers (never per request);
a transport without one gets the documented default:

- `RemotePeer` (`wire`): a real peer that may be a 2025-11-25 server, so `mode="auto"`
  probes it. Default: an in-process or custom peer, modern without a probe.
- `StrayNotifications` (`on_notification`): notifications outside any request reach the
  Client (cache eviction, legacy listens). Default: there are none.
- `PeerRequests` (`on_request`): server-to-client requests are answered by the Client
  (2025-11-25 sessions, LEGC-03). Default: the transport refuses them.
- `QuietAbandon` (`quiet_ids`): abandoning these request ids sends nothing (the era probe
  on stdio, LEGC-01). Default: abandoning always cancels as the wire does.
- `LegacySessions` (`reset_session`, `begin_session`): the transport carries a 2025-11-25
  session (HTTP: `Mcp-Session-Id`, the GET stream). Default: nothing to carry.

Must not import `nimblemcp.client` or `server`; of the transports only the pure limit
constants at import time (the transports themselves lazily, in `transport_for`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from nimblemcp.transports._limits import MAX_CONNECTIONS, MAX_MESSAGE_BYTES, MAX_REDIRECTS

__all__ = [
    "LegacySessions",
    "ParamValue",
    "PeerRequests",
    "QuietAbandon",
    "RemotePeer",
    "StrayNotifications",
    "Transport",
    "transport_for",
]

ParamValue = str | int | bool
#: Answers one server-to-client request with the full JSON-RPC response message.
PeerRequestHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
NotificationHandler = Callable[[dict[str, Any]], None]


@runtime_checkable
class Transport(Protocol):
    """What the Client needs from a wire. Implementations are safe to use from many
    concurrent tasks on one event loop; `close()` ends every open stream."""

    #: True when the wire carries per-parameter routing headers (`Mcp-Param-*`).
    carries_param_headers: bool
    #: A string naming the peer (origin URL or command line), used as a cache partition.
    peer: str

    async def open(self) -> None:
        """Acquire resources (spawn the process, create the HTTP pool). Idempotent."""
        ...

    def send(
        self, request: dict[str, Any], *, param_headers: Mapping[str, ParamValue] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Send one request; yield its notifications, then its response, then stop."""
        ...

    async def notify(self, message: dict[str, Any]) -> None:
        """Send one notification, or a response to a peer's request (no answer)."""
        ...

    async def close(self) -> None:
        """Release everything; later sends raise TransportError."""
        ...


@runtime_checkable
class RemotePeer(Protocol):
    """The transport reaches a separate program that may speak either era."""

    #: "stdio" or "http": on stdio a silent probe means a 2025-11-25 server.
    wire: str


@runtime_checkable
class StrayNotifications(Protocol):
    """Notifications that belong to no open request go to `on_notification`; the Client
    sets it when it opens, unless the application already did."""

    on_notification: NotificationHandler | None


@runtime_checkable
class PeerRequests(Protocol):
    """Server-to-client requests go to `on_request`; the transport sends its answer back.
    The Client sets it when it opens, unless the application already did."""

    on_request: PeerRequestHandler | None


@runtime_checkable
class QuietAbandon(Protocol):
    """Request ids in `quiet_ids` are abandoned without `notifications/cancelled`; the
    transport removes an id when its stream ends."""

    quiet_ids: set[Any]


@runtime_checkable
class LegacySessions(Protocol):
    """The transport keeps 2025-11-25 session state for the Client."""

    def reset_session(self) -> None:
        """Forget the session (before a new `initialize`)."""
        ...

    async def begin_session(self, version: str) -> None:
        """`initialize` succeeded with `version`: carry the session from now on."""
        ...


def transport_for(
    target: Any, auth: Any = None, *, max_message_bytes: int = MAX_MESSAGE_BYTES,
    max_redirects: int = MAX_REDIRECTS, max_connections: int = MAX_CONNECTIONS, verify: Any = True,
    cert: Any = None,
) -> Transport:
    """A URL, a command list, a Transport or an in-process Server, as a Transport. The
    limits apply to the transports built here; `auth`, `verify` and `cert` to HTTP."""
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        from nimblemcp._extras import needs_extra

        with needs_extra("http", "An HTTP client connection"):
            from nimblemcp.transports.client.http import HttpTransport

        return HttpTransport(target, auth=auth, max_message_bytes=max_message_bytes,
                             max_redirects=max_redirects, max_connections=max_connections,
                             verify=verify, cert=cert)
    if auth is not None or verify is not True or cert is not None:  # another transport takes its own
        raise TypeError("auth=, verify= and cert= need an http(s):// URL target")
    if isinstance(target, list | tuple) and target and all(isinstance(a, str) for a in target):
        from nimblemcp.transports.stdio.client import StdioTransport

        return StdioTransport(target[0], target[1:], max_message_bytes=max_message_bytes)
    if hasattr(target, "send") and hasattr(target, "close"):
        return target  # type: ignore[no-any-return]
    if hasattr(target, "handle"):  # an in-process server
        from nimblemcp.transports.client.memory import MemoryTransport

        return MemoryTransport(target)
    raise TypeError(f"cannot make a transport from {target!r}")
