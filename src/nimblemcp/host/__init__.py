"""Acting as a host: many servers from one `mcp.json`, one catalog, the host's hooks.

    from nimblemcp.host import ClientGroup, anthropic_tools

    async with ClientGroup.from_config("mcp.json", confirm=ask_user) as group:
        tools = anthropic_tools(group.catalog.tools)     # or openai_tools(...)
        result = await group.call_tool("docs__read_doc", {"name": "brief.md"})

- `load_config` / `ServerConfig`: the `mcpServers` (Claude Desktop, Claude Code,
  Cursor) and VS Code `servers` shapes, or servers built in code;
- `ClientGroup`: one supervised `Client` per server (status, error, reconnection with
  backoff as `Supervision` says, add/remove while running), routing by catalog name,
  merged `events()`;
- `Catalog` / `NameScheme`: collision-free qualified names;
- `AnnotationPolicy`, `ToolCall`, `ToolCallDenied`: the consent hook before tool calls;
- `Pinning`, `CatalogChange`, `review_risky`: pinned catalogs (a lockfile beside the
  `mcp.json`); a changed catalog is reviewed before its changed tools are offered;
- `openai_tools`, `anthropic_tools`, `parse_tool_call`, `openai_tool_output`,
  `anthropic_tool_result`: the model APIs' function-calling shapes, as plain data.

Built on the public `nimblemcp.client.Client` only; must not import the server.
"""

from nimblemcp.errors import ConfigError, ServerUnavailable, ToolCallDenied, UnknownName
from nimblemcp.host._adapters import (
    ModelToolCall,
    anthropic_tool_result,
    anthropic_tools,
    openai_tool_output,
    openai_tools,
    parse_tool_call,
)
from nimblemcp.host._catalog import Catalog, CatalogItem, NameScheme, ServerLists, match_template
from nimblemcp.host._config import ServerConfig, load_config, parse_config
from nimblemcp.host._events import EventStream, HostEvent, ServerState
from nimblemcp.host._group import ClientGroup
from nimblemcp.host._pins import CatalogChange, PinDecision, Pinning, review_risky
from nimblemcp.host._policy import AnnotationPolicy, Decision, ToolCall, allow_all, is_risky
from nimblemcp.host._supervisor import Supervision

__all__ = [
    "AnnotationPolicy",
    "Catalog",
    "CatalogChange",
    "CatalogItem",
    "ClientGroup",
    "ConfigError",
    "Decision",
    "EventStream",
    "HostEvent",
    "ModelToolCall",
    "NameScheme",
    "PinDecision",
    "Pinning",
    "ServerConfig",
    "ServerLists",
    "ServerState",
    "ServerUnavailable",
    "Supervision",
    "ToolCall",
    "ToolCallDenied",
    "UnknownName",
    "allow_all",
    "anthropic_tool_result",
    "anthropic_tools",
    "is_risky",
    "load_config",
    "match_template",
    "openai_tool_output",
    "openai_tools",
    "parse_config",
    "parse_tool_call",
    "review_risky",
]
