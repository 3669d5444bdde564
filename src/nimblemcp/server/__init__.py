"""Server side: the registry, the request path and the per-request Context.

Never imports a transport; transports import this.
"""

from nimblemcp.server._context import Context
from nimblemcp.server._prompts import assistant, message, user
from nimblemcp.server._server import Server
from nimblemcp.server._tools import ToolAnnotations, ToolResult

__all__ = ["Context", "Server", "ToolAnnotations", "ToolResult", "assistant", "message", "user"]
