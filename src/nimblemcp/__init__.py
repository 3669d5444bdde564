"""nimblemcp: a fast, conformant Model Context Protocol library (2026-07-28, dual-era).

The names a quickstart needs. Heavy parts (pydantic, HTTP, the client) are imported
only when used, so a stdio server starts fast.
"""

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
from nimblemcp.server import (
    Context,
    Server,
    ToolAnnotations,
    ToolResult,
    assistant,
    message,
    user,
)
from nimblemcp.types import LATEST_VERSION, SUPPORTED_VERSIONS

__version__ = "0.1.0"

__all__ = [
    "LATEST_VERSION",
    "SUPPORTED_VERSIONS",
    "ContentBlock",
    "Context",
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
