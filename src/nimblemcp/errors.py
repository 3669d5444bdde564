"""The one exception tree of nimblemcp.

    McpError                      root of everything this library raises on purpose
    ├── ProtocolError             a JSON-RPC error; carries `code` and optional `data`
    │   ├── ParseError                     -32700  the bytes were not JSON
    │   ├── InvalidRequest                 -32600  JSON, but not a JSON-RPC request
    │   ├── MethodNotFound                 -32601  unknown or not-advertised method
    │   ├── InvalidParams                  -32602  bad params, `_meta`, cursor, name
    │   │   └── ResourceNotFound           -32602  with data {"uri": ...}
    │   ├── InternalError                  -32603  a server fault
    │   ├── HeaderMismatch                 -32020  HTTP headers disagree with the body
    │   ├── MissingClientCapability        -32021  data {"requiredCapabilities": {...}}
    │   └── UnsupportedProtocolVersion     -32022  data {"supported": [...], "requested": ...}
    ├── ToolError                 raised inside a tool: becomes an `isError: true` result
    └── ClientError               failures on our side of a client (never from the peer)
        ├── TransportError        the connection or stream broke
        └── RequestTimeout        no final response in time

Must not import anything from nimblemcp: every layer imports this module.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ClientError",
    "HeaderMismatch",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "McpError",
    "MethodNotFound",
    "MissingClientCapability",
    "ParseError",
    "ProtocolError",
    "RequestTimeout",
    "ResourceNotFound",
    "ToolError",
    "TransportError",
    "UnsupportedProtocolVersion",
    "error_from_wire",
]


class McpError(Exception):
    """Root of every exception nimblemcp raises on purpose."""


class ProtocolError(McpError):
    """An error that travels as a JSON-RPC error object."""

    code: int = -32603
    default_message: str = "Internal error"

    def __init__(self, message: str | None = None, data: Any = None) -> None:
        self.message = message or self.default_message
        self.data = data
        super().__init__(self.message)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC `error` member for this exception."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ParseError(ProtocolError):
    code = -32700
    default_message = "Parse error"


class InvalidRequest(ProtocolError):
    code = -32600
    default_message = "Invalid request"


class MethodNotFound(ProtocolError):
    code = -32601
    default_message = "Method not found"


class InvalidParams(ProtocolError):
    code = -32602
    default_message = "Invalid params"


class ResourceNotFound(InvalidParams):
    default_message = "Resource not found"

    def __init__(self, uri: str, message: str | None = None) -> None:
        super().__init__(message, {"uri": uri})
        self.uri = uri


class InternalError(ProtocolError):
    code = -32603
    default_message = "Internal error"


class HeaderMismatch(ProtocolError):
    code = -32020
    default_message = "HTTP headers do not match the request body"


class MissingClientCapability(ProtocolError):
    code = -32021
    default_message = "The request needs a client capability it did not declare"

    def __init__(self, required: dict[str, Any], message: str | None = None) -> None:
        super().__init__(message, {"requiredCapabilities": required})
        self.required = required


class UnsupportedProtocolVersion(ProtocolError):
    code = -32022
    default_message = "Unsupported protocol version"

    def __init__(
        self, requested: Any, supported: list[str], message: str | None = None
    ) -> None:
        super().__init__(message, {"supported": list(supported), "requested": requested})
        self.requested = requested
        self.supported = list(supported)


class ToolError(McpError):
    """Raise inside a tool to report a failure the model can act on (`isError: true`)."""


class ClientError(McpError):
    """A failure on the client's side that the peer never sent (ERR-05)."""


class TransportError(ClientError):
    """The connection, process or response stream broke."""


class RequestTimeout(ClientError):
    """No final response arrived within the request's timeout."""


_BY_CODE: dict[int, type[ProtocolError]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        HeaderMismatch,
    )
}


def error_from_wire(error: dict[str, Any]) -> ProtocolError:
    """Rebuild the matching exception from a received JSON-RPC `error` object."""
    code = error.get("code")
    message = error.get("message")
    data = error.get("data")
    msg = message if isinstance(message, str) else None
    if code == -32021 and isinstance(data, dict) and "requiredCapabilities" in data:
        return MissingClientCapability(data["requiredCapabilities"], msg)  # type: ignore[arg-type]
    if code == -32022 and isinstance(data, dict):
        supported = data.get("supported")  # type: ignore[union-attr]
        return UnsupportedProtocolVersion(
            data.get("requested"),  # type: ignore[union-attr]
            [v for v in supported if isinstance(v, str)] if isinstance(supported, list) else [],  # type: ignore[misc]
            msg,
        )
    cls = _BY_CODE.get(code) if isinstance(code, int) else None
    if cls is None:
        exc = ProtocolError(msg, data)
        exc.code = code if isinstance(code, int) else -32603
        return exc
    return cls(msg, data)
