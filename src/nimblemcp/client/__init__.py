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

from __future__ import annotations

from typing import TYPE_CHECKING

from nimblemcp._lazy import lazy_names

if TYPE_CHECKING:
    from nimblemcp.client._cache import CacheStore, MemoryCacheStore, ResultCache
    from nimblemcp.client._client import Client, ProgressCallback
    from nimblemcp.client._era import ListenNotSupported
    from nimblemcp.client._headers import InvalidToolHeaders, header_rules, param_headers
    from nimblemcp.client._listen import Listener, ListenEvent
    from nimblemcp.client._mrtr import InputRequestRefused, fill_defaults
    from nimblemcp.client._options import CachePolicy, Limits, RetryPolicy, TaskPolicy
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

# Every name loads on first use (PEP 562): `Client` needs neither `subscriptions/listen`
# (`_listen`) nor what a caller may name for a type check (issue 18).
_WHERE = {
    "AuthorizationRequired": "nimblemcp.errors",
    "CachePolicy": "nimblemcp.client._options",
    "CacheStore": "nimblemcp.client._cache",
    "Client": "nimblemcp.client._client",
    "ClientError": "nimblemcp.errors",
    "InputRequestRefused": "nimblemcp.client._mrtr",
    "InvalidToolHeaders": "nimblemcp.client._headers",
    "LegacySessions": "nimblemcp.client._transport",
    "Limits": "nimblemcp.client._options",
    "ListenEvent": "nimblemcp.client._listen",
    "ListenNotSupported": "nimblemcp.client._era",
    "Listener": "nimblemcp.client._listen",
    "MemoryCacheStore": "nimblemcp.client._cache",
    "MessageTooLarge": "nimblemcp.errors",
    "OutputValidationError": "nimblemcp.client._tools",
    "PeerRequests": "nimblemcp.client._transport",
    "ProgressCallback": "nimblemcp.client._client",
    "ProtocolError": "nimblemcp.errors",
    "QuietAbandon": "nimblemcp.client._transport",
    "RedirectNotFollowed": "nimblemcp.errors",
    "RemotePeer": "nimblemcp.client._transport",
    "RequestTimeout": "nimblemcp.errors",
    "ResultCache": "nimblemcp.client._cache",
    "RetryPolicy": "nimblemcp.client._options",
    "ServerBusy": "nimblemcp.errors",
    "StrayNotifications": "nimblemcp.client._transport",
    "TASKS_EXTENSION": "nimblemcp.client._tasks",
    "TaskCancelled": "nimblemcp.client._tasks",
    "TaskPolicy": "nimblemcp.client._options",
    "TasksNotDeclared": "nimblemcp.client._tasks",
    "Transport": "nimblemcp.client._transport",
    "TransportError": "nimblemcp.errors",
    "fill_defaults": "nimblemcp.client._mrtr",
    "header_rules": "nimblemcp.client._headers",
    "param_headers": "nimblemcp.client._headers",
}

__all__ = [
    "TASKS_EXTENSION",
    "AuthorizationRequired",
    "CachePolicy",
    "CacheStore",
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


__getattr__, __dir__ = lazy_names(__name__, globals(), _WHERE)
