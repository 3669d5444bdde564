"""Plain HTTP routes beside the MCP endpoint: custom ones and health probes.

`function_route(fn, methods)` turns a small function into an ASGI app: `fn()` or
`fn(scope)`, sync (runs inline: keep it quick) or async, returning a dict or list
(JSON), a str (text), bytes, or `(status, body)`. `health_routes(ready)` gives
`/healthz` (liveness: the process answers) and `/readyz` (readiness: 200 once
`ready()` is true, else 503). The MCP app serves these only for paths that are not its
endpoint, so the endpoint's path costs nothing more. Must not import the server.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from nimblemcp.transports.http._asgi import Receive, Scope, Send, respond, respond_json

__all__ = ["HEALTH_PATHS", "App", "function_route", "health_routes"]

HEALTH_PATHS = ("/healthz", "/readyz")

App = Callable[[Scope, Receive, Send], Awaitable[None]]


async def _answer(send: Send, value: Any) -> None:
    status = 200
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int):  # type: ignore[arg-type]
        status, value = value  # type: ignore[misc]
    if isinstance(value, bytes | bytearray):
        await respond(send, status, bytes(value), content_type=b"application/octet-stream")
    elif isinstance(value, str):
        await respond(send, status, value.encode())
    elif value is None:
        await respond(send, status if status != 200 else 204)
    else:
        await respond_json(send, status, value)


def function_route(fn: Callable[..., Any], methods: Iterable[str] = ("GET",)) -> App:
    """`fn` as an ASGI app answering `methods` (HEAD with GET); others get 405."""
    allowed = frozenset(m.upper() for m in methods)
    if "GET" in allowed:
        allowed |= {"HEAD"}
    allow_header = ", ".join(sorted(allowed)).encode()
    takes_scope = bool(inspect.signature(fn).parameters)
    is_async = inspect.iscoroutinefunction(fn)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in allowed:
            await respond(send, 405, b"Method Not Allowed", [(b"allow", allow_header)])
            return
        value = fn(scope) if takes_scope else fn()
        if is_async:
            value = await value
        await _answer(send, value)

    return app


def health_routes(ready: Callable[[], bool]) -> dict[str, App]:
    """`/healthz` (liveness) and `/readyz` (readiness from `ready()`)."""

    def live() -> Any:
        return {"status": "ok"}

    def readiness() -> Any:
        return {"status": "ready"} if ready() else (503, {"status": "starting"})

    return dict(zip(HEALTH_PATHS, (function_route(live), function_route(readiness)), strict=True))
