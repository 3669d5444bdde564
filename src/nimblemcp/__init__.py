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
    InvalidParams,
    McpError,
    MissingClientCapability,
    ProtocolError,
    ResourceNotFound,
    ToolError,
)
from nimblemcp.server import Backends as Backends  # the option groups of Server and run_http:
from nimblemcp.server import (
    Context,
    Server,
    ToolAnnotations,
    ToolResult,
    assistant,
    message,
    user,
)
from nimblemcp.server import ListenOptions as ListenOptions  # importable from here, not yet in
from nimblemcp.server import ServerSettings as ServerSettings  # __all__, which test_public_api
from nimblemcp.server import StateOptions as StateOptions  # freezes (the lead's decision)
from nimblemcp.types import LATEST_VERSION, SUPPORTED_VERSIONS

if TYPE_CHECKING:
    from nimblemcp.client import Client
    from nimblemcp.server._mrtr import ElicitResult
    from nimblemcp.transports.http_security import HttpSecurity as HttpSecurity

__version__ = "0.1.0"

# Imported on first use so that a stdio server never pays for the client.
_LAZY = {
    "Client": "nimblemcp.client",
    "ElicitResult": "nimblemcp.server._mrtr",
    "HttpSecurity": "nimblemcp.transports.http_security",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nimblemcp' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "LATEST_VERSION",
    "SUPPORTED_VERSIONS",
    "Client",
    "ContentBlock",
    "Context",
    "ElicitResult",
    "InvalidParams",
    "McpError",
    "MissingClientCapability",
    "ProtocolError",
    "ResourceNotFound",
    "Server",
    "ToolAnnotations",
    "ToolError",
    "ToolResult",
    "__version__",
    "assistant",
    "audio",
    "blob_resource",
    "embedded",
    "image",
    "message",
    "resource_link",
    "text",
    "text_resource",
    "user",
]
