"""The MCP client: `Client` over a `Transport` (memory, stdio subprocess, HTTP).

    async with Client("http://127.0.0.1:8000/mcp", on_elicit=ask_user) as client:
        tools = await client.list_tools()
        result = await client.call_tool("search", {"query": "risks"})

Must not import `nimblemcp.server`.
"""

from nimblemcp.client._cache import CacheStore, MemoryCacheStore, ResultCache
from nimblemcp.client._client import Client, ProgressCallback
from nimblemcp.client._era import ListenNotSupported
from nimblemcp.client._headers import InvalidToolHeaders, header_rules, param_headers
from nimblemcp.client._listen import Listener, ListenEvent
from nimblemcp.client._mrtr import InputRequestRefused, fill_defaults
from nimblemcp.client._options import CachePolicy, Callbacks, RetryPolicy, TaskPolicy
from nimblemcp.client._tasks import TASKS_EXTENSION, TaskCancelled, TasksNotDeclared
from nimblemcp.client._tools import OutputValidationError
from nimblemcp.client._transport import (
    LegacySessions,
    PeerRequests,
    QuietAbandon,
    RemotePeer,
    StrayNotifications,
    Transport,
)

__all__ = [
    "TASKS_EXTENSION",
    "CachePolicy",
    "CacheStore",
    "Callbacks",
    "Client",
    "InputRequestRefused",
    "InvalidToolHeaders",
    "LegacySessions",
    "ListenEvent",
    "ListenNotSupported",
    "Listener",
    "MemoryCacheStore",
    "OutputValidationError",
    "PeerRequests",
    "ProgressCallback",
    "QuietAbandon",
    "RemotePeer",
    "ResultCache",
    "RetryPolicy",
    "StrayNotifications",
    "TaskCancelled",
    "TaskPolicy",
    "TasksNotDeclared",
    "Transport",
    "fill_defaults",
    "header_rules",
    "param_headers",
]
