"""The Streamable HTTP vocabulary: MCP header names and media types (HTTP-04..19).

Spelled as the specification writes them; HTTP compares names case-insensitively, so
the server's tables derive their lowercased byte forms from these at import
(`header_key`). Client and server both read them from here. Pure constants.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACCEPT_BOTH",
    "HEADER_METHOD",
    "HEADER_NAME",
    "HEADER_PROTOCOL_VERSION",
    "HEADER_SESSION_ID",
    "JSON_TYPE",
    "PARAM_HEADER_PREFIX",
    "SSE_TYPE",
    "header_key",
]

HEADER_PROTOCOL_VERSION: Final = "MCP-Protocol-Version"
HEADER_METHOD: Final = "Mcp-Method"
HEADER_NAME: Final = "Mcp-Name"
HEADER_SESSION_ID: Final = "Mcp-Session-Id"  # the 2025-11-25 session (LEGC-02)
PARAM_HEADER_PREFIX: Final = "Mcp-Param-"  # + an `x-mcp-header` value (TOOL-11)

JSON_TYPE: Final = "application/json"
SSE_TYPE: Final = "text/event-stream"
ACCEPT_BOTH: Final = f"{JSON_TYPE}, {SSE_TYPE}"  # what a client POST accepts (HTTP-04)


def header_key(name: str) -> bytes:
    """The form an ASGI server hands over: lowercased latin-1 bytes."""
    return name.lower().encode("latin-1")
