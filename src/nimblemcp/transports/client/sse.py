"""The 2024-11-05 HTTP+SSE transport on the client (deprecated wire, for old servers).

`SseTransport(url)` opens GET `url` as an SSE stream and waits for the `endpoint`
event (the URL to POST to, resolved against `url`; only the same origin is accepted,
so a server cannot redirect our messages elsewhere). Every message then goes out as a
POST to that endpoint (202), and everything the server says comes back as `message`
events on the one stream: responses are routed to their request by id,
notifications to the request that owns their progress token, or else to
`on_notification`; server-to-client requests go to `on_request` and the answer is
POSTed back. Leaving a request early sends `notifications/cancelled`. The stream
breaking ends every request in flight with `TransportError`.

It speaks only the `initialize` era: use it with `Client(transport, mode="legacy")`,
or let `HttpTransport` fall back to it (the spec's backwards-compatibility rule: a
POST answered 400/404/405, then a GET whose first event is `endpoint`).
Must not import `nimblemcp.client` or `nimblemcp.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from nimblemcp.errors import TransportError
from nimblemcp.jsonrpc import decode, encode
from nimblemcp.transports._sse import ServerSentEvent, iter_sse
from nimblemcp.transports.client._router import Router, answer
from nimblemcp.types._http import JSON_TYPE, SSE_TYPE
from nimblemcp.types._urls import origin

__all__ = ["SseTransport"]

logger = logging.getLogger("nimblemcp.sse_client")


class SseTransport:
    """One old-style SSE connection: GET for the stream, POST for each message."""

    carries_param_headers = False
    wire = "sse"

    def __init__(
        self, url: str, *, headers: Mapping[str, str] | None = None, http: httpx.AsyncClient | None = None,
        auth: httpx.Auth | None = None, connect_timeout: float = 10.0,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.url = url
        parts = urlsplit(url)
        self.peer = f"{parts.scheme}://{parts.netloc}"
        self.extra_headers = dict(headers or {})
        self._http = http
        self._owns_http = http is None
        self._auth: dict[str, Any] = {"auth": auth} if auth is not None else {}
        self._connect_timeout = connect_timeout
        self._verify = verify  # the TLS context of the HttpTransport that fell back to this one
        self.endpoint: str | None = None
        self.on_notification: Callable[[dict[str, Any]], None] | None = None
        self.on_request: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
        self._router = Router()
        self._reader: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._lost: str | None = None
        self._open_lock = asyncio.Lock()

    async def open(self) -> None:
        async with self._open_lock:
            if self.endpoint is not None:
                return
            if self._http is None:
                self._http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=self._connect_timeout),
                                               verify=self._verify)
                self._owns_http = True
            ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            self._reader = asyncio.create_task(self._read(ready))
            try:
                self.endpoint = await asyncio.wait_for(asyncio.shield(ready), self._connect_timeout)
            except BaseException:
                self._reader.cancel()
                raise

    async def _read(self, ready: asyncio.Future[str]) -> None:
        assert self._http is not None
        headers = {**self.extra_headers, "Accept": SSE_TYPE}
        try:
            async with self._http.stream("GET", self.url, headers=headers, **self._auth) as response:
                ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if response.status_code != 200 or ctype != SSE_TYPE:
                    raise TransportError(f"GET {self.url} is not an SSE stream (HTTP {response.status_code})")
                async for event in iter_sse(response.aiter_lines()):
                    if not ready.done():
                        ready.set_result(self._endpoint_of(event))
                    elif event.event == "message" and event.data.strip():
                        self._route(event.data)
            self._lost = "the server closed the SSE stream"
        except asyncio.CancelledError:
            self._lost = "the transport is closed"
            raise
        except (httpx.HTTPError, TransportError) as exc:
            self._lost = f"the SSE stream broke: {exc}"
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, TransportError) else TransportError(self._lost))
        finally:
            if not ready.done():
                ready.set_exception(TransportError(self._lost or "no endpoint event"))
            self._router.end_all()

    def _endpoint_of(self, event: ServerSentEvent) -> str:
        if event.event != "endpoint" or not event.data.strip():
            raise TransportError("the first SSE event is not `endpoint`: not a 2024-11-05 server")
        endpoint = urljoin(self.url, event.data.strip())
        if origin(endpoint) != origin(self.url):
            raise TransportError(f"the endpoint {endpoint!r} is on another origin")
        return endpoint

    def _route(self, data: str) -> None:
        try:
            message = decode(data)
        except Exception:
            logger.warning("ignoring a non-JSON SSE message: %r", data[:200])
            return
        serve = self._serve if self.on_request is not None else None
        self._router.route(message, serve=serve, on_notification=self.on_notification)

    def _serve(self, message: dict[str, Any]) -> None:
        assert self.on_request is not None
        task = answer(message, self.on_request, self.notify)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, message: dict[str, Any]) -> None:
        await self.open()
        if self._lost is not None:
            raise TransportError(self._lost)
        assert self._http is not None and self.endpoint is not None
        try:
            response = await self._http.post(
                self.endpoint, content=encode(message),
                headers={**self.extra_headers, "Content-Type": JSON_TYPE}, **self._auth)
        except httpx.HTTPError as exc:
            raise TransportError(f"HTTP transport failed: {exc}") from exc
        if response.status_code >= 400:
            raise TransportError(f"the server refused a message: HTTP {response.status_code}")

    async def send(
        self, request: dict[str, Any], *, param_headers: Mapping[str, Any] | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        await self.open()
        rid = request["id"]
        queue = self._router.open(request)
        finished = False
        try:
            await self._post(request)
            while True:
                message = await queue.get()
                if message is None:
                    raise TransportError(self._lost or "connection lost")
                finished = "method" not in message
                yield message
                if finished:
                    return
        finally:
            self._router.close(request)
            if not finished and self._lost is None:
                with contextlib.suppress(TransportError):
                    await asyncio.shield(self._post({
                        "jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": rid, "reason": "the client abandoned the request"}}))

    async def notify(self, message: dict[str, Any]) -> None:
        await self._post(message)

    async def close(self) -> None:
        tasks = list(self._tasks)
        if self._reader is not None:
            tasks.append(self._reader)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._reader = None
        self.endpoint = None
        if self._lost is None:
            self._lost = "the transport is closed"
        if self._http is not None and self._owns_http:
            await self._http.aclose()
        self._http = None
