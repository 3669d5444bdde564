"""Sans-I/O JSON-RPC 2.0: bytes in, plain dicts out, and back. No asyncio, no httpx.

`error_response` is the one builder of JSON-RPC error responses (from a `ProtocolError`;
`nimblemcp.errors.error_from_wire` gives one for a bare code and message).
Messages stay plain JSON-ready dicts end to end so that a request costs one decode and
one encode (orjson): no model classes are built on the hot path.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from nimblemcp.errors import InvalidRequest, ParseError, ProtocolError

__all__ = [
    "NOTIFICATION",
    "REQUEST",
    "RESPONSE",
    "classify",
    "decode",
    "encode",
    "error_response",
    "notification",
    "request",
    "result_response",
]

REQUEST: Final = "request"
NOTIFICATION: Final = "notification"
RESPONSE: Final = "response"

_dumps = orjson.dumps
_loads = orjson.loads


def decode(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse one JSON text; invalid JSON (or UTF-8) raises ParseError (-32700)."""
    try:
        return _loads(data)
    except orjson.JSONDecodeError:
        raise ParseError() from None


def encode(message: Any) -> bytes:
    """Serialize one message as compact UTF-8 JSON without embedded newlines."""
    return _dumps(message)


def classify(message: Any) -> str:
    """Tell a request, a notification and a response apart; anything else is -32600."""
    if type(message) is not dict or message.get("jsonrpc") != "2.0":
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
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    if params is None:
        return {"jsonrpc": "2.0", "method": method}
    return {"jsonrpc": "2.0", "method": method, "params": params}


def result_response(rid: str | int, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def error_response(rid: str | int | None, error: ProtocolError) -> dict[str, Any]:
    """An error response; the id is left out only when it could not be read (BASE-04)."""
    if rid is None:
        return {"jsonrpc": "2.0", "error": error.to_wire()}
    return {"jsonrpc": "2.0", "id": rid, "error": error.to_wire()}
