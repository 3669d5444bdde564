"""Streamable HTTP client transport on httpx (HTTP-03..08, HTTP-12..15).

One POST per request; the answer is `application/json` (one response) or
`text/event-stream` (notifications, then the response). Routing headers
(`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) are derived from the
body here, so the Client never sees HTTP. Closing a response stream early is the
cancellation (CANC-01). Must not import `nimblemcp.client` or `nimblemcp.server`.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from nimblemcp.errors import TransportError
from nimblemcp.jsonrpc import decode, encode
from nimblemcp.types._meta import PROTOCOL_VERSION
from nimblemcp.types.methods import METHODS

from ._sse_reader import iter_sse

__all__ = ["HttpTransport", "StreamBroken", "encode_header_value", "mcp_name"]

logger = logging.getLogger("nimblemcp.http_client")

_SENTINEL_START = "=?base64?"
_SENTINEL_END = "?="
_TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel", "tasks/result"})


class StreamBroken(TransportError):
    """The connection failed or the response stream broke before the final response.

    `retryable` tells the Client an idempotent request may be re-issued with a new id.
    """

    retryable = True


def encode_header_value(value: str | int | bool) -> str:
    """HTTP-13: booleans as true/false, integers in decimal, strings as-is when they are
    plain printable ASCII without edge whitespace, else `=?base64?<utf-8 b64>?=`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    plain = (
        all(0x20 <= ord(ch) <= 0x7E for ch in value)
        and value == value.strip(" ")
        and not (value.startswith(_SENTINEL_START) and value.endswith(_SENTINEL_END))
    )
    if plain:
        return value
    return _SENTINEL_START + base64.b64encode(value.encode("utf-8")).decode("ascii") + _SENTINEL_END


def mcp_name(method: str, params: Mapping[str, Any]) -> str | None:
    """The value mirrored in `Mcp-Name` for this request, if the method has one."""
    spec = METHODS.get(method)
    key = spec.name_param if spec is not None else ("taskId" if method in _TASK_METHODS else None)
    if key is None:
        return None
    value = params.get(key)
    return value if isinstance(value, str) else None


class HttpTransport:
    """POSTs each request to one MCP endpoint URL."""

    carries_param_headers = True

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        http: httpx.AsyncClient | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.url = url
        parts = urlsplit(url)
        self.peer = f"{parts.scheme}://{parts.netloc}"
        self.extra_headers = dict(headers or {})
        self._http = http
        self._owns_http = http is None
        self._connect_timeout = connect_timeout

    async def open(self) -> None:
        if self._http is None:
            # Read timeouts are per request and enforced by the Client, not here.
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=self._connect_timeout)
            )
            self._owns_http = True

    def build_headers(
        self, request: Mapping[str, Any], param_headers: Mapping[str, Any] | None
    ) -> dict[str, str]:
        """All headers for one POST (HTTP-04, HTTP-09..11, HTTP-15)."""
        headers = {
            **self.extra_headers,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        params = request.get("params") or {}
        meta = params.get("_meta") or {}
        version = meta.get(PROTOCOL_VERSION)
        if isinstance(version, str):
            headers["MCP-Protocol-Version"] = version
        method = request.get("method")
        if isinstance(method, str):
            headers["Mcp-Method"] = method
            name = mcp_name(method, params)
            if name is not None:
                headers["Mcp-Name"] = encode_header_value(name)
        for key, value in (param_headers or {}).items():
            headers[f"Mcp-Param-{key}"] = encode_header_value(value)
        return headers

    async def send(
        self, request: dict[str, Any], *, param_headers: Mapping[str, Any] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        if self._http is None:
            await self.open()
        assert self._http is not None
        headers = self.build_headers(request, param_headers)
        rid = request.get("id")
        try:
            async with self._http.stream(
                "POST", self.url, content=encode(request), headers=headers
            ) as response:
                ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if ctype == "text/event-stream":
                    async for event in iter_sse(response.aiter_lines()):
                        if event.event != "message" or not event.data.strip():
                            continue
                        message = _decode(event.data)
                        yield message
                        if "method" not in message and message.get("id") == rid:
                            return
                    raise StreamBroken("the SSE stream ended before the response")
                body = await response.aread()
                if ctype == "application/json" and body:
                    message = _decode(body)
                    if isinstance(message, dict) and ("result" in message or "error" in message):
                        yield message
                        return
                raise TransportError(
                    f"HTTP {response.status_code} without a JSON-RPC response"
                    f" ({ctype or 'no content type'}): {body[:200]!r}"
                )
        except httpx.TransportError as exc:  # connect, read, protocol: nothing final arrived
            raise StreamBroken(f"HTTP transport failed: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"HTTP transport failed: {exc}") from exc

    async def notify(self, message: dict[str, Any]) -> None:
        if self._http is None:
            await self.open()
        assert self._http is not None
        try:
            response = await self._http.post(
                self.url, content=encode(message), headers=self.build_headers(message, None)
            )
        except httpx.HTTPError as exc:
            raise TransportError(f"HTTP transport failed: {exc}") from exc
        if response.status_code >= 400:
            logger.warning("notification %s refused: HTTP %s", message.get("method"),
                           response.status_code)

    async def close(self) -> None:
        if self._http is not None and self._owns_http:
            await self._http.aclose()
        self._http = None


def _decode(data: str | bytes) -> dict[str, Any]:
    try:
        message = decode(data)
    except Exception as exc:
        raise TransportError(f"the server sent invalid JSON: {data[:200]!r}") from exc
    if not isinstance(message, dict):
        raise TransportError("the server sent a JSON value that is not a message")
    return message
