"""nimblemcp: a fast, conformant Model Context Protocol library (2026-07-28, dual-era).

The names a quickstart needs. Heavy parts (pydantic, HTTP, the client) are imported
only when used, so a stdio server starts fast.

Where a `tools/call` goes, from the socket to your function and back:
`serving` starts a transport for a `Server`; the transport (`transports/http.py` or
`transports/stdio.py`) decodes the bytes once (`jsonrpc`) and hands the message to the
core through the port (`_port.Core.prepare`: envelope, `_meta`, version and method
checks; on HTTP the headers are then compared with the body by `_http_headers`), then
`Core.execute` with a per-request `RequestIO`. The server's `_dispatch` picks the
handler, `_tools` validates the arguments and runs your function by the policy of
`_invoke` (async on the loop, sync on a `_workers` thread), with one `_context.Context`;
`_mrtr` turns questions into `input_required`. The result is shaped once and encoded
once on the way back. A 2025-11-25 peer goes through `transports/_legacy.py` first
(its session), then the same core. Layers are checked by `.importlinter`.
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
    LegacyOptions,
    ListenOptions,
    Server,
    ServerSettings,
    StateOptions,
    TaskOptions,
    ToolAnnotations,
    ToolOptions,
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
    from nimblemcp.host import ClientGroup
    from nimblemcp.server._mrtr import ElicitResult, SampleResult
    from nimblemcp.server._sealing import new_key as new_state_key
    from nimblemcp.transports.http_security import HttpSecurity

__version__ = "0.1.0"

# Imported on first use so that a stdio server never pays for the client (or for the
# sealing module: `new_state_key()` makes a key for NIMBLEMCP_STATE_KEYS / `state_keys=`).
_LAZY = {
    "Client": ("nimblemcp.client", "Client"),
    "ElicitResult": ("nimblemcp.server._mrtr", "ElicitResult"),
    "SampleResult": ("nimblemcp.server._mrtr", "SampleResult"),
    "new_state_key": ("nimblemcp.server._sealing", "new_key"),
    "Callbacks": ("nimblemcp.client", "Callbacks"),
    "ClientGroup": ("nimblemcp.host", "ClientGroup"),
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
    "ClientGroup",
    "ContentBlock",
    "Context",
    "Depends",
    "ElicitResult",
    "Headers",
    "HttpSecurity",
    "InvalidParams",
    "LegacyOptions",
    "ListenOptions",
    "McpError",
    "MissingClientCapability",
    "ProtocolError",
    "RequestTimeout",
    "ResourceNotFound",
    "RetryPolicy",
    "SampleResult",
    "Server",
    "ServerSettings",
    "StartupError",
    "StateOptions",
    "TaskOptions",
    "ToolAnnotations",
    "ToolError",
    "ToolOptions",
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
