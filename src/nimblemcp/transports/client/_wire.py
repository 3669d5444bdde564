"""The one interface between the HTTP client transport and the bytes on the network,
and its two implementations.

`HttpTransport` sends every exchange through `Wire.stream(method, url, headers,
content)`: an async context manager that yields a `WireResponse` (status, headers, the
body as it arrives, content coding already undone) and ends the exchange on exit.
Neither wire follows redirects or re-sends a request that may have left: both are the
transport's and the Client's decisions (`RetryPolicy`, idempotent methods, tools with
`idempotentHint`). Each wire maps its own errors into the tree at this edge:

- `StreamBroken`: nothing final arrived (no connection, a connection closed, reset or
  half-closed mid-exchange, bytes that are not HTTP/1.1, a response head over 100 KiB).
  The request may have reached the server unless the wire knows it did not.
- `TransportError`: anything else below HTTP, among them a body that cannot be decoded
  (the message names its `Content-Encoding`).

nimblemcp's own HTTP/1.1 client, `h1.client.H1Pool` built with `route` below, is the
default wire (its errors are in the tree already: `H1Error` is a `StreamBroken`,
`H1DecodingError` a `TransportError`); `HttpxWire` puts an `httpx.AsyncClient` behind the
same interface (proxies, `httpx.Auth` flows, a client handed in). Neither httpx nor
httptools is imported here.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from nimblemcp.errors import ClientError, StreamBroken, TransportError

if TYPE_CHECKING:
    import httpx

    from nimblemcp.transports.h1.client import Route

__all__ = ["HttpxWire", "Wire", "WireResponse", "route"]


class HeaderLookup(Protocol):
    def get(self, key: str, default: str | None = None) -> str | None: ...


class WireResponse(Protocol):
    """One response as both wires give it."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> HeaderLookup: ...

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...


class Wire(Protocol):
    """Exchanges with HTTP servers, one at a time per call, many concurrently."""

    def stream(self, method: str, url: str, headers: Mapping[str, str],
               content: bytes | None = None) -> AbstractAsyncContextManager[WireResponse]:
        """One exchange (see the module docstring for what it raises)."""
        ...

    async def aclose(self) -> None:
        """End every connection."""
        ...


@functools.lru_cache(maxsize=64)
def route(url: str) -> Route:
    """Where `url`'s requests go and their request line after the method: the h1 wire's
    router (the URL is ASCII: the transport made it so)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ClientError(f"cannot reach {url!r}: not an http(s) URL with a host")
    port = parts.port or (443 if scheme == "https" else 80)
    netloc = parts.netloc.rpartition("@")[2]
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if not (target + netloc).isascii() or not (target + netloc).isprintable() or " " in target:
        raise ClientError(f"cannot send {url!r}: the URL is not in its ASCII form")
    return (scheme, parts.hostname, port), f" {target} HTTP/1.1\r\nHost: {netloc}\r\n"


class HttpxWire:
    """An `httpx.AsyncClient` as a wire (`auth` runs every request), httpx's errors
    mapped into the tree."""

    def __init__(self, client: httpx.AsyncClient, auth: httpx.Auth | None = None, *, owned: bool = True) -> None:
        import httpx

        self.client = client
        self._auth: dict[str, Any] = {"auth": auth} if auth is not None else {}
        self._owned = owned
        self._decoding, self._broken, self._other = httpx.DecodingError, httpx.TransportError, httpx.HTTPError

    @contextlib.asynccontextmanager
    async def stream(self, method: str, url: str, headers: Mapping[str, str],
                     content: bytes | None = None) -> AsyncIterator[WireResponse]:
        coding: str | None = None
        try:
            async with self.client.stream(method, url, content=content, headers=headers,
                                          follow_redirects=False, **self._auth) as response:
                coding = response.headers.get("content-encoding")
                yield response
        except self._decoding as exc:
            raise TransportError(
                f"the response body could not be decoded (Content-Encoding: {coding}): {exc}") from exc
        except self._broken as exc:  # connect, read, write, protocol: nothing final arrived
            raise StreamBroken(f"HTTP transport failed: {exc!r}") from exc
        except self._other as exc:
            raise TransportError(f"HTTP transport failed: {exc}") from exc

    async def aclose(self) -> None:
        if self._owned:
            await self.client.aclose()
