"""nimblemcp: a fast, conformant Model Context Protocol library (2026-07-28, dual-era).

The names a quickstart needs, each imported on first use: a program pays only for the
side it uses (a Client never loads the server, a stdio server never loads the client
or the HTTP stack), so both start fast. Type checkers see them all (TYPE_CHECKING).

Where a `tools/call` goes, from the socket to your function and back:
`serving` starts a transport for a `Server`; the transport (`transports/http/app.py` or
`transports/stdio/server.py`) decodes the bytes once (`jsonrpc`) and hands the message to the
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

if TYPE_CHECKING:
    from nimblemcp.client import Client, RetryPolicy
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
    from nimblemcp.host import ClientGroup
    from nimblemcp.server import (
        Backends,
        Context,
        Depends,
        Headers,
        LegacyOptions,
        ListenOptions,
        ListOptions,
        Server,
        ServerInfo,
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
    from nimblemcp.server._mrtr import ElicitResult, SampleResult
    from nimblemcp.server._sealing import new_key as new_state_key
    from nimblemcp.transports.http.security import HttpSecurity
    from nimblemcp.types._versions import LATEST_VERSION, SUPPORTED_VERSIONS

__version__ = "0.1.0"

# Every public name is imported on first use (PEP 562), so each program pays only for
# the side it uses: `from nimblemcp import Client` never imports the server, a stdio
# server never imports the client, and the sealing module loads only when a key is made
# (`new_state_key()` makes one for NIMBLEMCP_STATE_KEYS / `StateOptions(keys=...)`).
# name -> (module, attribute in it).
_ERRORS = ("ClientError", "InvalidParams", "McpError", "MissingClientCapability", "ProtocolError",
           "RequestTimeout", "ResourceNotFound", "StartupError", "ToolError", "TransportError")
_CONTENT = ("ContentBlock", "audio", "blob_resource", "embedded", "image", "resource_link", "text",
            "text_resource")
_SERVER = ("Backends", "Context", "Depends", "Headers", "LegacyOptions", "ListOptions", "ListenOptions", "Server",
           "ServerInfo", "ServerSettings", "StateOptions", "TaskOptions", "ToolAnnotations", "ToolOptions", "ToolResult",
           "assistant", "get_headers", "get_lifespan", "get_principal", "message", "user")
_LAZY: dict[str, tuple[str, str]] = {
    **{name: ("nimblemcp.errors", name) for name in _ERRORS},
    **{name: ("nimblemcp.content", name) for name in _CONTENT},
    **{name: ("nimblemcp.server", name) for name in _SERVER},
    "LATEST_VERSION": ("nimblemcp.types._versions", "LATEST_VERSION"),
    "SUPPORTED_VERSIONS": ("nimblemcp.types._versions", "SUPPORTED_VERSIONS"),
    "Client": ("nimblemcp.client", "Client"),
    "RetryPolicy": ("nimblemcp.client", "RetryPolicy"),
    "ElicitResult": ("nimblemcp.server._mrtr", "ElicitResult"),
    "SampleResult": ("nimblemcp.server._mrtr", "SampleResult"),
    "new_state_key": ("nimblemcp.server._sealing", "new_key"),
    "ClientGroup": ("nimblemcp.host", "ClientGroup"),
    "HttpSecurity": ("nimblemcp.transports.http.security", "HttpSecurity"),
}


def __getattr__(name: str) -> object:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'nimblemcp' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "LATEST_VERSION",
    "SUPPORTED_VERSIONS",
    "Backends",
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
    "ListOptions",
    "ListenOptions",
    "McpError",
    "MissingClientCapability",
    "ProtocolError",
    "RequestTimeout",
    "ResourceNotFound",
    "RetryPolicy",
    "SampleResult",
    "Server",
    "ServerInfo",
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
