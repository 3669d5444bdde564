"""Old home of the `x-mcp-header` rules (TOOL-11/12, HTTP-15): re-exports only.

The one implementation, shared with the server, is `nimblemcp.types._tool_headers`.
"""

from __future__ import annotations

from nimblemcp.types._tool_headers import (
    HeaderRule,
    InvalidToolHeaders,
    header_rules,
    param_headers,
)

__all__ = ["HeaderRule", "InvalidToolHeaders", "header_rules", "param_headers"]
