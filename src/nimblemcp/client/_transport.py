"""The one interface between the Client and the wire: the `Transport` Protocol.

A transport moves one JSON-RPC request out and streams back what the peer sent for
it: request-scoped notifications first, then the final response. Closing the stream
early (leaving the `async for`, a timeout, task cancellation) *is* cancellation: the
transport does what its wire needs (close the HTTP response, or send
`notifications/cancelled` on stdio). Must not import `nimblemcp.client` or `server`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["ParamValue", "Transport"]

ParamValue = str | int | bool


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
        """Send one notification (no response)."""
        ...

    async def close(self) -> None:
        """Release everything; later sends raise TransportError."""
        ...


def transport_for(target: Any, auth: Any = None) -> Transport:
    """A URL, a command list, a Transport or an in-process Server, as a Transport."""
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        from nimblemcp._extras import needs_extra

        with needs_extra("http", "An HTTP client connection"):
            from nimblemcp.transports.http_client import HttpTransport

        return HttpTransport(target, auth=auth)
    if auth is not None:  # another transport takes its auth itself
        raise TypeError("auth= needs an http(s):// URL target")
    if isinstance(target, list | tuple) and target and all(isinstance(a, str) for a in target):
        from nimblemcp.transports.stdio_client import StdioTransport

        return StdioTransport(target[0], target[1:])
    if hasattr(target, "send") and hasattr(target, "close"):
        return target  # type: ignore[no-any-return]
    if hasattr(target, "handle"):  # an in-process server
        from nimblemcp.transports.memory import MemoryTransport

        return MemoryTransport(target)
    raise TypeError(f"cannot make a transport from {target!r}")
