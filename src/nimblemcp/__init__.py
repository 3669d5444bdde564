"""nimblemcp: a fast, conformant Model Context Protocol library (2026-07-28, dual-era).

The names a quickstart needs. Heavy parts (pydantic, HTTP, the client) are imported
only when used, so a stdio server starts fast.
"""

from typing import TYPE_CHECKING

from nimblemcp.content import (
    ContentBlock,
    audio,
    blob_resource,
    embedded,
    image,
    resource_link,
    text,
    text_resource,
)
from nimblemcp.errors import (
    ClientError,
    InvalidParams,
    McpError,
    MissingClientCapability,
    ProtocolError,
    RequestTimeout,
    ResourceNotFound,
    StartupError,
    ToolError,
    TransportError,
)
from nimblemcp.server import (
    Backends,
    Context,
    Depends,
    Headers,
    ListenOptions,
    Server,
    ServerSettings,
    StateOptions,
    ToolAnnotations,
    ToolResult,
    assistant,
    get_headers,
    get_lifespan,
    get_principal,
    message,
    user,
)
from nimblemcp.types import LATEST_VERSION, SUPPORTED_VERSIONS

if TYPE_CHECKING:
    from nimblemcp.client import Callbacks, Client, RetryPolicy
    from nimblemcp.server._mrtr import ElicitResult
    from nimblemcp.server._sealing import new_key as new_state_key
    from nimblemcp.transports.http_security import HttpSecurity

__version__ = "0.1.0"

# Imported on first use so that a stdio server never pays for the client (or for the
# sealing module: `new_state_key()` makes a key for NIMBLEMCP_STATE_KEYS / `state_keys=`).
_LAZY = {
    "Client": ("nimblemcp.client", "Client"),
    "ElicitResult": ("nimblemcp.server._mrtr", "ElicitResult"),
    "new_state_key": ("nimblemcp.server._sealing", "new_key"),
    "Callbacks": ("nimblemcp.client", "Callbacks"),
    "RetryPolicy": ("nimblemcp.client", "RetryPolicy"),
    "HttpSecurity": ("nimblemcp.transports.http_security", "HttpSecurity"),
}


def __getattr__(name: str) -> object:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'nimblemcp' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


__all__ = [
    "LATEST_VERSION",
    "SUPPORTED_VERSIONS",
    "Backends",
    "Callbacks",
    "Client",
    "ClientError",
    "ContentBlock",
    "Context",
    "Depends",
    "ElicitResult",
    "Headers",
    "HttpSecurity",
    "InvalidParams",
    "ListenOptions",
    "McpError",
    "MissingClientCapability",
    "ProtocolError",
    "RequestTimeout",
    "ResourceNotFound",
    "RetryPolicy",
    "Server",
    "ServerSettings",
    "StartupError",
    "StateOptions",
    "ToolAnnotations",
    "ToolError",
    "ToolResult",
    "TransportError",
    "__version__",
    "assistant",
    "audio",
    "blob_resource",
    "embedded",
    "get_headers",
    "get_lifespan",
    "get_principal",
    "image",
    "message",
    "new_state_key",
    "resource_link",
    "text",
    "text_resource",
    "user",
]
