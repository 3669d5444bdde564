"""The connection-level limits `run_http` gives uvicorn, in one place.

uvicorn times out an idle keep-alive connection (`timeout_keep_alive`) but not one
that never finishes its request head: a client trickling header bytes (slowloris), or
connecting and sending nothing, holds a connection for ever, and the httptools parser
buffers whatever head it is sent. `guarded_httptools` is uvicorn's httptools protocol
with a deadline and a size cap on each request head: past either, the connection is
closed (no response: the request was never read, and the peer may not be HTTP at all).
The deadline runs from the connection's start and from the first byte of each later
request; between requests uvicorn's keep-alive timeout applies.
With h11 (uvicorn without httptools) uvicorn's own `h11_max_incomplete_event_size`
caps the head; there is no head deadline then.

Imported only when serving under uvicorn (by `nimblemcp.serving`). Must not import
the server.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nimblemcp.transports.http_security import HttpSecurity

__all__ = ["head_limit", "uvicorn_limits"]

# Head bytes allowed beyond the header budget of `HttpSecurity` (request line, CRLFs).
_HEAD_SLACK = 8 * 1024


def guarded_httptools(head_timeout: float, max_head: int) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a deadline and a size cap on each request head."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeadGuardedProtocol(HttpToolsProtocol):
        head_timer: asyncio.TimerHandle | None = None
        head_bytes = 0
        in_head = True  # reading a request head (or connected, nothing sent yet)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            self.in_head = True
            self.head_bytes = 0
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.loop.call_later(head_timeout, self._expire)

        def _expire(self) -> None:
            self.head_timer = None
            if self.in_head and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self.in_head:
                self.head_bytes += len(data)
                if self.head_bytes > max_head:
                    # One read may hold the head and the start of the body: parse it
                    # first, and close only if the head is still not complete.
                    super().data_received(data)
                    if self.in_head and not self.transport.is_closing():
                        self.transport.close()
                    return
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self.in_head = False
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None
            super().on_headers_complete()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if not self.in_head:  # the first byte of the next request on this connection
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None
            super().connection_lost(exc)

    return HeadGuardedProtocol


def head_limit(security: HttpSecurity) -> int:
    """The most bytes a request head may take (on either engine)."""
    return security.max_header_bytes + _HEAD_SLACK


def uvicorn_limits(security: HttpSecurity) -> dict[str, Any]:
    """The `uvicorn.Config` keyword arguments that carry `security`'s connection limits."""
    max_head = head_limit(security)
    options: dict[str, Any] = {
        "timeout_keep_alive": max(1, round(security.idle_timeout)),
        "h11_max_incomplete_event_size": max_head,
    }
    try:
        import httptools  # noqa: F401  (what http="auto" would pick)
    except ImportError:
        options["http"] = "h11"
    else:
        options["http"] = guarded_httptools(security.head_timeout, max_head)
    return options
