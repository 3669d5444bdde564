"""Calling an operation over HTTP, and turning its answer into a tool result or the
contents of a resource.

Arguments are serialised the way OpenAPI's default styles say: path and header values
`simple` (arrays comma-joined), query values `form` (an exploded array repeats its key;
`explode: false` joins with commas, `spaceDelimited`/`pipeDelimited` with spaces or
bars; `deepObject` writes `name[key]=value`), cookies `name=value`. A JSON body is sent
as JSON, a form body as a form, anything else as the text given.

An HTTP error (4xx, 5xx) is a tool error (`isError`) naming the status and holding the
start of the body (at most `MAX_ERROR_TEXT` characters), so the model can read why. A
success with a JSON object, for an operation that declares an `outputSchema`, is its
`structuredContent`; when it does not match that schema the call is an error saying
so (MCP promises a client structured content that fits).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from nimblemcp.content import blob_resource, embedded, image, text, text_resource
from nimblemcp.errors import InternalError, ResourceNotFound, ToolError
from nimblemcp.openapi._operations import Argument, Operation
from nimblemcp.server._tools import ToolResult

if TYPE_CHECKING:
    from nimblemcp.server._context import Context

__all__ = ["MAX_ERROR_TEXT", "HeaderSource", "Upstream"]

MAX_ERROR_TEXT = 2000
DEFAULT_TIMEOUT = 30.0
HeaderSource = Callable[["Context"], Mapping[str, str]]


class Upstream:
    """The HTTP API behind the tools: an `httpx.AsyncClient` (the caller's, or one made
    on first use and closed with the server's lifespan), the base URL, and the incoming
    headers to pass on."""

    def __init__(self, http: httpx.AsyncClient | None, base_url: str | None,
                 forward: tuple[str, ...] | HeaderSource,
                 make: Callable[[], httpx.AsyncClient] | None = None) -> None:
        self.given = http
        self.client = http
        self.make = make or (lambda: httpx.AsyncClient(timeout=DEFAULT_TIMEOUT))
        self.base_url = base_url.rstrip("/") if base_url else None
        self.forward = forward

    def http(self) -> httpx.AsyncClient:
        if self.client is None:
            self.client = self.make()
        return self.client

    async def close(self) -> None:
        """Close the client this object made (never the caller's)."""
        client, self.client = self.client, self.given
        if client is not None and client is not self.given:
            await client.aclose()

    def passed_on(self, ctx: Context | None) -> dict[str, str]:
        if ctx is None:
            return {}
        if callable(self.forward):
            return dict(self.forward(ctx))
        incoming = ctx.headers
        return {name: incoming[name] for name in self.forward if name in incoming}

    async def send(self, op: Operation, arguments: Mapping[str, Any], ctx: Context | None) -> httpx.Response:
        path = op.route.path
        query: list[tuple[str, str | int | float | bool | None]] = []
        headers: dict[str, str] = self.passed_on(ctx)
        cookies: list[str] = []
        body: Any = None
        has_body = False
        for arg in op.arguments:
            if arg.name not in arguments or arguments[arg.name] is None:
                continue
            value = arguments[arg.name]
            if arg.where == "path":
                segment = _simple(value, arg.explode)
                if segment in (".", ".."):  # would climb out of the operation's path
                    raise ToolError(f"{arg.name}: {segment!r} is not a value for a path parameter")
                path = path.replace("{" + str(arg.key) + "}", quote(segment, safe=""))
            elif arg.where == "query":
                query.extend(_query(arg, value))
            elif arg.where == "header":
                headers[str(arg.key)] = _simple(value, arg.explode)
            elif arg.where == "cookie":
                cookies.append(f"{arg.key}={quote(_simple(value, False), safe='')}")
            elif arg.key is None:
                body, has_body = value, True
            else:
                body = body if isinstance(body, dict) else {}
                body[arg.key] = value
                has_body = True
        if cookies:
            headers["cookie"] = "; ".join(cookies)
        url = (self.base_url + path) if self.base_url else path.lstrip("/")
        content: dict[str, Any] = {}
        if has_body and op.body_media is not None:
            content = _body(op.body_media, body, headers)
        try:
            return await self.http().request(op.route.method, url, params=query, headers=headers, **content)
        except httpx.HTTPError as exc:
            raise ToolError(f"{op.route.method} {op.route.path} could not be sent: "
                            f"{type(exc).__name__}: {exc}") from exc


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _simple(value: Any, explode: bool | None) -> str:
    if isinstance(value, list):
        return ",".join(_scalar(v) for v in value)
    if isinstance(value, dict):
        pairs = [(str(k), _scalar(v)) for k, v in value.items()]
        return ",".join(f"{k}={v}" if explode else f"{k},{v}" for k, v in pairs)
    return _scalar(value)


def _query(arg: Argument, value: Any) -> list[tuple[str, str]]:
    key = str(arg.key)
    style = arg.style or "form"
    explode = arg.explode if arg.explode is not None else style == "form"
    if isinstance(value, list):
        if explode:
            return [(key, _scalar(v)) for v in value]
        joiner = {"spaceDelimited": " ", "pipeDelimited": "|"}.get(style, ",")
        return [(key, joiner.join(_scalar(v) for v in value))]
    if isinstance(value, dict):
        if style == "deepObject":
            return [(f"{key}[{k}]", _scalar(v)) for k, v in value.items()]
        if explode:
            return [(str(k), _scalar(v)) for k, v in value.items()]
        return [(key, ",".join(f"{k},{_scalar(v)}" for k, v in value.items()))]
    return [(key, _scalar(value))]


def _body(media: str, body: Any, headers: dict[str, str]) -> dict[str, Any]:
    if media == "application/x-www-form-urlencoded" and isinstance(body, dict):
        return {"data": {k: _scalar(v) for k, v in body.items()}}
    if media == "multipart/form-data" and isinstance(body, dict):
        return {"files": {k: (None, _scalar(v)) for k, v in body.items()}}
    headers["content-type"] = media
    if "json" in media or not isinstance(body, str):
        return {"content": json.dumps(body).encode()}
    return {"content": body.encode()}


def _bounded(response: httpx.Response) -> str:
    body = response.text
    if len(body) <= MAX_ERROR_TEXT:
        return body
    return f"{body[:MAX_ERROR_TEXT]}... ({len(body) - MAX_ERROR_TEXT} more characters)"


def _sent_to(response: httpx.Response) -> str:
    """The request's method and path as sent (percent-encoded), without its query."""
    request = response.request
    return f"{request.method} {request.url.raw_path.decode('ascii').split('?', 1)[0]}"


def _failed(response: httpx.Response) -> str:
    said = _bounded(response).strip()
    return f"HTTP {response.status_code} {response.reason_phrase} from {_sent_to(response)}" + (
        f": {said}" if said else "")


def _media(response: httpx.Response) -> str:
    media: str = response.headers.get("content-type", "")
    return media.split(";", 1)[0].strip().lower()


def _json_body(response: httpx.Response) -> tuple[bool, Any]:
    media = _media(response)
    if not (media == "application/json" or media.endswith("+json")) or not response.content:
        return False, None
    try:
        return True, response.json()
    except ValueError:
        return False, None


OutputCheck = Callable[[Any], "str | None"]


def tool_result(op: Operation, response: httpx.Response, check: OutputCheck | None) -> ToolResult:
    """What the model sees of one HTTP answer (see the module docstring)."""
    if response.status_code >= 400:
        return ToolResult(_failed(response), is_error=True)
    is_json, data = _json_body(response)
    if op.output_schema is not None:
        why = "no JSON object" if not (is_json and isinstance(data, dict)) else (check(data) if check else None)
        if why is not None:
            return ToolResult(f"{_sent_to(response)} answered HTTP {response.status_code} with a "
                              f"body that does not match its documented schema ({why}): {_bounded(response)}",
                              is_error=True)
        return ToolResult([text(response.text)], structured=data)
    if is_json or _media(response).startswith("text/") or not response.content:
        return ToolResult([text(response.text or f"HTTP {response.status_code} {response.reason_phrase}")])
    media = _media(response) or "application/octet-stream"
    if media.startswith("image/"):
        return ToolResult([image(response.content, media)])
    return ToolResult([embedded(str(response.request.url), response.content, media)])


def contents(uri: str, op: Operation, response: httpx.Response) -> list[dict[str, Any]]:
    """A resource read's contents; an HTTP error is a protocol error (404: not found)."""
    if response.status_code == 404:
        raise ResourceNotFound(uri, f"Resource not found: {_failed(response)}")
    if response.status_code >= 400:
        raise InternalError(_failed(response))
    media = _media(response) or "application/octet-stream"
    if _json_body(response)[0] or media.startswith("text/") or media.endswith(("+xml", "/xml")):
        return [text_resource(uri, response.text, media)]
    return [blob_resource(uri, response.content, media)]
