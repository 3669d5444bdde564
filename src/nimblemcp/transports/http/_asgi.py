"""ASGI plumbing shared by the HTTP server pieces: the callable types, the one way to
send a whole response, and the one `Accept` header parser.

Every response message is a fresh dict: an ASGI server or middleware may keep or
change what it was given. Used by the MCP app, its legacy leg, the security and the
auth middleware. Imports nothing of nimblemcp but the JSON codec.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    import asyncio

from nimblemcp.jsonrpc import encode

__all__ = [
    "ACCEPT_VERDICTS", "ACCESS", "ENGINE", "SUBJECT", "EngineOffer", "Receive", "Scope", "Send", "accepted",
    "accepts_json", "accepts_json_and_sse", "accepts_sse", "endpoint_path", "respond", "respond_json",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# The scope key under which an auth middleware leaves the authenticated subject (a
# str). Namespaced: `scope["user"]` belongs to Starlette's AuthenticationMiddleware.
SUBJECT: Final = "nimblemcp.subject"
ACCESS: Final = "nimblemcp.access"  # the scope key of the verified AccessToken
# The key of `scope["extensions"]` under which nimblemcp's engine offers an
# `EngineOffer` (`transports.h1.engine.EXTENSION`, the same string).
ENGINE: Final = "nimblemcp.engine"


class EngineOffer(Protocol):
    """What nimblemcp's engine offers the app beyond ASGI (`transports.h1.engine.EngineExtension`)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the request runs on (3.11's lookup is ~1.6k instructions, `nimblemcp._loop`)."""

    def answer(self, send: Send, status: int, body: bytes) -> bool:
        """A whole JSON response in one step when `send` is the engine's own (nothing
        wraps it): True; else False, and nothing was sent."""

JSON: Final = (b"content-type", b"application/json")
_TEXT: Final = (b"content-type", b"text/plain; charset=utf-8")


async def respond(
    send: Send, status: int, body: bytes = b"", headers: Iterable[tuple[bytes, bytes]] = (),
    *, content_type: bytes | None = None,
) -> None:
    """A whole response: `headers` (plus a content type and length when there is a
    body) and `body` in one message. A text body without a content type is plain text."""
    out = list(headers)
    if body:
        out.insert(0, (b"content-type", content_type) if content_type is not None else _TEXT)
        out.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


async def respond_json(
    send: Send, status: int, message: Any, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """`message` encoded as a JSON body."""
    await respond(send, status, encode(message), headers, content_type=b"application/json")


def endpoint_path(scope: Scope) -> str:
    """The request path inside the app: ASGI's `path` includes `root_path` (the mount
    point of a host such as Starlette's `Mount`, or uvicorn's `--root-path`)."""
    path: str = scope["path"]
    root = scope.get("root_path")
    if root and path.startswith(root):
        return path[len(root):] or "/"
    return path


_JSON_RANGES: Final = frozenset({b"application/json", b"application/*", b"*/*"})
_SSE_RANGES: Final = frozenset({b"text/event-stream", b"text/*", b"*/*"})
_OURS: Final = frozenset({b"application/json", b"text/event-stream"})
_WILDCARDS: Final = {b"application/json": _JSON_RANGES - _OURS, b"text/event-stream": _SSE_RANGES - _OURS}


def _refused(params: list[bytes]) -> bool:
    """A media range's parameters carry `q=0` (RFC 9110 §12.4.2: not acceptable)."""
    for param in params:
        name, _, value = param.partition(b"=")
        if name.strip().lower() == b"q":
            try:
                return float(value.strip()) <= 0.0
            except ValueError:
                return False
    return False


def accepted(value: bytes | None) -> frozenset[bytes]:
    """The media ranges an `Accept` value lists as acceptable: lowercased, parameters
    dropped, `q=0` ranges left out. A concrete type refused with `q=0` is not let back
    in by a wildcard (the more specific range wins): the wildcard is replaced by the
    types this transport negotiates that it still covers."""
    if value is None:
        return frozenset()
    kinds: set[bytes] = set()
    refused: set[bytes] = set()
    for part in value.split(b","):
        media, *params = part.split(b";")
        media = media.strip().lower()
        (refused if params and _refused(params) else kinds).add(media)
    kinds -= refused  # listed twice, once with q=0: refused
    for kind in refused & _OURS:
        for wildcard in _WILDCARDS[kind] & kinds:
            kinds.discard(wildcard)
            kinds.update(other for other in _OURS - refused if wildcard in _WILDCARDS[other])
    return frozenset(kinds)


def accepts_json(kinds: frozenset[bytes]) -> bool:
    return not kinds.isdisjoint(_JSON_RANGES)


def accepts_sse(kinds: frozenset[bytes]) -> bool:
    return not kinds.isdisjoint(_SSE_RANGES)


# Verdicts of `accepts_json_and_sse` per Accept value: a client sends the same one on
# every request, so the check is one dict lookup (a hot caller may look here first).
# Bounded: the values come from clients.
ACCEPT_VERDICTS: Final[dict[bytes | None, bool]] = {}
_BOTH = ACCEPT_VERDICTS
_BOTH_LIMIT: Final = 256


def accepts_json_and_sse(value: bytes | None) -> bool:
    """Both JSON and SSE are acceptable (wildcards count); what a Streamable HTTP
    POST must say (HTTP-04). Parsed once per distinct value (see `accepted`)."""
    if value is None:
        return False
    verdict = _BOTH.get(value) if type(value) is bytes else None
    if verdict is None:
        kinds = accepted(value)
        verdict = accepts_json(kinds) and accepts_sse(kinds)
        if len(_BOTH) < _BOTH_LIMIT and type(value) is bytes:
            _BOTH[value] = verdict
    return verdict
