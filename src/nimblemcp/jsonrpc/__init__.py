"""Sans-I/O JSON-RPC 2.0: bytes in, plain dicts out, and back. No asyncio, no httpx.

`error_response` is the one builder of JSON-RPC error responses (from a `ProtocolError`;
`nimblemcp.errors.error_from_wire` gives one for a bare code and message).
Messages stay plain JSON-ready dicts end to end so that a request costs one decode and
one encode (orjson): no model classes are built on the hot path.

Nesting is capped at `MAX_DEPTH` levels when a message is read: orjson reads 1024 levels
but writes at most 254, so a deeper message could be accepted and then never answered.
The check is near-free: only a text with more than `MAX_DEPTH` opening brackets can be
that deep, and only such a text gets its decoded value walked. `decode_request` (the
servers' reader; `decode`, for everything else, has no cap) turns a too-deep message
into a stub that `classify` refuses with -32600 and the request's id; `encode_reply`
answers -32603 for a response that cannot be encoded, so every request gets an answer.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from nimblemcp.errors import InternalError, InvalidRequest, ParseError, ProtocolError

__all__ = [
    "MAX_DEPTH",
    "NOTIFICATION",
    "REQUEST",
    "RESPONSE",
    "classify",
    "decode",
    "decode_request",
    "encode",
    "encode_reply",
    "error_response",
    "notification",
    "request",
    "result_response",
]

REQUEST: Final = "request"
NOTIFICATION: Final = "notification"
RESPONSE: Final = "response"

MAX_DEPTH: Final = 100
"""Deepest nesting of arrays and objects a message may have (the message itself is 1)."""

_dumps = orjson.dumps
_loads = orjson.loads
_TOO_DEEP: Final = "2.0 (nested too deeply)"  # the stub's `jsonrpc` (compared by identity)
_DEPTH_MESSAGE: Final = f"JSON nested deeper than {MAX_DEPTH} levels"
_SHALLOW: Final = 2 * MAX_DEPTH + 1  # no shorter text can be nested deeper


def _deeper(value: Any, limit: int) -> bool:
    """`value` nests arrays/objects more than `limit` levels (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if type(item) is dict else item
        for child in children:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return False


def decode(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse one JSON text; invalid JSON (or UTF-8) raises ParseError (-32700).
    No depth cap: that is a rule for what a server accepts (`decode_request`)."""
    try:
        return _loads(data)
    except orjson.JSONDecodeError:
        raise ParseError() from None


def decode_request(data: bytes) -> Any:
    """`decode` for a server's incoming messages (bytes): a message nested deeper than
    `MAX_DEPTH` comes back as a stub holding only its id, which `classify` refuses
    with -32600, so the error can still name the request. Only a text with more
    opening brackets than `MAX_DEPTH` is walked."""
    try:
        message = _loads(data)
    except orjson.JSONDecodeError:
        raise ParseError() from None
    if len(data) > _SHALLOW:
        opened = data.count(b"{") + data.count(b"[")
        if opened > MAX_DEPTH and type(message) is dict and _deeper(message, MAX_DEPTH):
            rid = request_id_of(message)
            return {"jsonrpc": _TOO_DEEP} if rid is None else {"jsonrpc": _TOO_DEEP, "id": rid}
    return message


def encode(message: Any) -> bytes:
    """Serialize one message as compact UTF-8 JSON without embedded newlines."""
    return _dumps(message)


def encode_reply(response: Any) -> bytes:
    """`encode` for a message that may be a response: a response that cannot be
    written (nested past orjson's limit, a value JSON has no form for) becomes a
    -32603 error for its id; anything else that cannot be written raises TypeError."""
    try:
        return _dumps(response)
    except TypeError:  # orjson.JSONEncodeError
        if type(response) is not dict or "id" not in response:
            raise  # a notification: the caller's error to handle
        return _dumps(error_response(
            request_id_of(response), InternalError("The response could not be encoded as JSON")))


def classify(message: Any) -> str:
    """Tell a request, a notification and a response apart; anything else is -32600."""
    if type(message) is dict:
        # The common request (every key present, plain types) in four reads; anything
        # else, well-formed or not, is told by the full rules below.
        try:
            version = message["jsonrpc"]
            method = message["method"]
            params = message["params"]
            rid = message["id"]
        except KeyError:
            pass
        else:
            if type(method) is str and type(params) is dict and (type(rid) is str or type(rid) is int) \
                    and version == "2.0":
                return REQUEST
    return _classify(message)


def _classify(message: Any) -> str:
    if type(message) is not dict or message.get("jsonrpc") != "2.0":
        if type(message) is dict and message.get("jsonrpc") is _TOO_DEEP:
            raise InvalidRequest(_DEPTH_MESSAGE)
        raise InvalidRequest("not a JSON-RPC 2.0 message")
    method = message.get("method")
    if method is not None:
        if not isinstance(method, str):
            raise InvalidRequest("method must be a string")
        params = message.get("params")
        if params is not None and type(params) is not dict:
            raise InvalidRequest("params must be an object")
        if "id" not in message:
            return NOTIFICATION
        rid = message["id"]
        if type(rid) is not str and type(rid) is not int:
            raise InvalidRequest("id must be a string or an integer")
        return REQUEST
    if "id" in message and ("result" in message or "error" in message):
        return RESPONSE
    raise InvalidRequest("not a JSON-RPC 2.0 message")


def request_id_of(message: Any) -> str | int | None:
    """The id of a message if it is a usable one (for error replies to bad requests)."""
    if type(message) is dict:
        rid = message.get("id")
        if type(rid) is str or type(rid) is int:
            return rid
    return None


def request(rid: str | int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request message: `request(1, "tools/list", {"_meta": meta})`."""
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A notification message (no id, no answer): `notification("notifications/cancelled", {...})`."""
    if params is None:
        return {"jsonrpc": "2.0", "method": method}
    return {"jsonrpc": "2.0", "method": method, "params": params}


def result_response(rid: str | int, result: dict[str, Any]) -> dict[str, Any]:
    """A successful response to request `rid`."""
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def error_response(rid: str | int | None, error: ProtocolError) -> dict[str, Any]:
    """An error response; the id is left out only when it could not be read (BASE-04)."""
    if rid is None:
        return {"jsonrpc": "2.0", "error": error.to_wire()}
    return {"jsonrpc": "2.0", "id": rid, "error": error.to_wire()}
