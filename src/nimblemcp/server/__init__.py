"""Server side: the registry, the request path and the per-request Context.

Implements the port (`nimblemcp._port.Core`) that the transports talk to; never
imports a transport, and transports never import this. `nimblemcp.serving` joins them.
"""

from nimblemcp.server._context import Context
from nimblemcp.server._depends import Depends, Headers, get_headers, get_lifespan, get_principal
from nimblemcp.server._options import (
    Backends,
    LegacyOptions,
    ListenOptions,
    ListOptions,
    ServerInfo,
    ServerSettings,
    StateOptions,
    TaskOptions,
    ToolOptions,
)
from nimblemcp.server._prompts import assistant, message, user
from nimblemcp.server._server import Server
from nimblemcp.server._tools import ToolAnnotations, ToolResult
from nimblemcp.server._transform import ArgChange

__all__ = [
    "ArgChange", "Backends", "Context", "Depends", "Headers", "LegacyOptions", "ListOptions", "ListenOptions", "Server",
    "ServerInfo", "ServerSettings", "StateOptions", "TaskOptions", "ToolAnnotations", "ToolOptions", "ToolResult", "assistant",
    "get_headers", "get_lifespan", "get_principal", "message", "user",
]
