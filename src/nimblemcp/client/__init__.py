"""The MCP client: `Client` over a `Transport` (memory, stdio subprocess, HTTP).

    async with Client("http://127.0.0.1:8000/mcp", on_elicit=ask_user) as client:
        tools = await client.list_tools()
        result = await client.call_tool("search", {"query": "risks"})

The package, bottom up (each module imports only modules listed above it):
`_transport` (the `Transport` protocol and its optional, declared capabilities),
`_cache`, `_mrtr` (answering input requests), `_tracing`, `_headers` (x-mcp-header
rules), `_options` (the option groups); `_pipeline` (the one request path: ids,
`_meta`, timeout, retry, renegotiation, MRTR loop, cache); `_era` (the probe and the
`ModernEra`/`LegacyEra` strategies); `_calls` (discover, paging), `_listen`,
`_tasks`, `_tools` (collaborators on the pipeline); `_client` (the `Client` facade).
Must not import `nimblemcp.server`.
"""

from nimblemcp.client._cache import CacheStore, MemoryCacheStore, ResultCache
from nimblemcp.client._client import Client, ProgressCallback
from nimblemcp.client._era import ListenNotSupported
from nimblemcp.client._headers import InvalidToolHeaders, header_rules, param_headers
from nimblemcp.client._listen import Listener, ListenEvent
from nimblemcp.client._mrtr import InputRequestRefused, fill_defaults
from nimblemcp.client._options import CachePolicy, Callbacks, Limits, RetryPolicy, TaskPolicy
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
from nimblemcp.errors import (
    AuthorizationRequired,
    ClientError,
    MessageTooLarge,
    ProtocolError,
    RedirectNotFollowed,
    RequestTimeout,
    ServerBusy,
    TransportError,
)

__all__ = [
    "TASKS_EXTENSION",
    "AuthorizationRequired",
    "CachePolicy",
    "CacheStore",
    "Callbacks",
    "Client",
    "ClientError",
    "InputRequestRefused",
    "InvalidToolHeaders",
    "LegacySessions",
    "Limits",
    "ListenEvent",
    "ListenNotSupported",
    "Listener",
    "MemoryCacheStore",
    "MessageTooLarge",
    "OutputValidationError",
    "PeerRequests",
    "ProgressCallback",
    "ProtocolError",
    "QuietAbandon",
    "RedirectNotFollowed",
    "RemotePeer",
    "RequestTimeout",
    "ResultCache",
    "RetryPolicy",
    "ServerBusy",
    "StrayNotifications",
    "TaskCancelled",
    "TaskPolicy",
    "TasksNotDeclared",
    "Transport",
    "TransportError",
    "fill_defaults",
    "header_rules",
    "param_headers",
]
