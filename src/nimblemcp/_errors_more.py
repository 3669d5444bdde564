"""The exceptions of `nimblemcp.errors` that a stdio server does not need to start:
the client's (`ClientError` and below), the host's `ConfigError`, HTTP auth's
`InvalidDPoPProof`, HTTP serving's `CannotListen`, the backends' `BackendError`, the
rate-limit middleware's `RateLimited` and `SchemaRefused` (hand-written schemas).

Not imported directly: `nimblemcp.errors` loads this module when one of these names is
first asked of it, and this module adds them there. Their `__module__` is
`nimblemcp.errors`, where they are documented (its docstring draws the whole tree).
Imports only `nimblemcp.errors`.
"""

from __future__ import annotations

from typing import Any

from nimblemcp import errors as _home
from nimblemcp.errors import McpError, ProtocolError, StartupError

__all__: list[str] = []  # every name is public as `nimblemcp.errors.<name>`


class RateLimited(ProtocolError):
    """A caller sent more requests than its rate allows (`nimblemcp.middleware.RateLimit`);
    `data` says how long to wait: `{"retryAfterMs": n}`."""

    code = -32000
    default_message = "Rate limit exceeded"


class SchemaRefused(McpError, ValueError):
    """A hand-written JSON Schema the server refuses at registration: its `$schema`
    names a dialect it does not support (SCHEMA-01), or a `$ref` points outside the
    schema, which would mean fetching a URL (SCHEMA-02, never done)."""


class InvalidDPoPProof(McpError):
    """A DPoP proof (RFC 9449) the resource server refuses. `error` is the challenge's
    error code: `invalid_dpop_proof`, or `use_dpop_nonce` when only a fresh nonce is
    missing."""

    def __init__(self, message: str, error: str = "invalid_dpop_proof") -> None:
        super().__init__(message)
        self.error = error


class BackendError(McpError):
    """A shared-state backend (store or bus) failed, e.g. Redis unreachable or timing
    out; the backend library's own exception is chained as `__cause__`."""


class CannotListen(StartupError):
    """An HTTP server could not listen on `host`:`port` (another process holds the port,
    or the address is not this machine's, or needs privileges); the `OSError` is
    chained. Raised before the lifespan starts, so nothing ran."""

    def __init__(self, message: str, *, host: str = "", port: int = 0) -> None:
        super().__init__(message)
        self.host = host
        self.port = port


class ClientError(McpError):
    """A failure on the client's side that the peer never sent (ERR-05)."""


class TransportError(ClientError):
    """The connection, process or response stream broke.

    `retryable`: the Client may re-issue an idempotent request with a new id.
    `session_expired`: the 2025-11-25 session is gone; start a new one (LEGC-02).
    """

    retryable: bool = False
    session_expired: bool = False


class StreamBroken(TransportError):
    """The connection or the response stream broke before the final response;
    `retryable`: the Client may re-issue an idempotent request with a new id."""

    retryable = True


class HttpStatusError(TransportError):
    """An HTTP error status without a JSON-RPC response for the request: `status`, and
    the JSON-RPC `error` object of the body if it carried one (e.g. with `id: null`)."""

    def __init__(self, status: int, message: str, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error


class SessionExpired(HttpStatusError):
    """HTTP 404 for a message that carried `Mcp-Session-Id`: start a new session (LEGC-02)."""

    session_expired = True


class MessageTooLarge(TransportError):
    """The peer sent a message (a JSON body, an SSE event, a stdio line) larger than
    `limit` bytes, the client's `max_message_bytes`; the rest of it was not read. Also
    a paged list longer than `limit` pages or items (`max_list_pages`/`max_list_items`)."""

    def __init__(self, limit: int, message: str) -> None:
        super().__init__(message)
        self.limit = limit


class ServerBusy(HttpStatusError):
    """HTTP 429 or 503: `retry_after` is the delay the server asked for (seconds, from
    `Retry-After`), None when it named none. The Client re-sends idempotent requests
    after that delay when it is within `RetryPolicy.max_retry_after`."""

    retryable = True

    def __init__(self, status: int, message: str, error: dict[str, Any] | None = None,
                 *, retry_after: float | None = None) -> None:
        super().__init__(status, message, error)
        self.retry_after = retry_after


class AuthorizationRequired(HttpStatusError):
    """HTTP 401 and no `auth=` was configured: the challenge's `scheme` (e.g.
    "Bearer"), `resource_metadata` (the protected-resource metadata URL) and `scope`,
    each None when the server did not send it."""

    def __init__(self, status: int, message: str, error: dict[str, Any] | None = None, *,
                 scheme: str | None = None, resource_metadata: str | None = None,
                 scope: str | None = None) -> None:
        super().__init__(status, message, error)
        self.scheme = scheme
        self.resource_metadata = resource_metadata
        self.scope = scope


class RedirectNotFollowed(HttpStatusError):
    """A 3xx the client does not follow (another origin, a method-changing status, too
    many hops): `location` is where it pointed (absolute), None when it named nowhere."""

    def __init__(self, status: int, message: str, *, location: str | None) -> None:
        super().__init__(status, message)
        self.location = location


class RequestTimeout(ClientError):
    """No final response arrived within the request's timeout."""


class InputRequestRefused(ClientError):
    """The server asked for input this client cannot or will not provide."""


class OutputValidationError(ClientError):
    """A tool's `structuredContent` does not match its declared `outputSchema`."""


class TaskCancelled(ClientError):
    """The task ended `cancelled` (by us, by someone else, or by the server)."""

    def __init__(self, task_id: str, message: str | None = None) -> None:
        super().__init__(f"task {task_id} was cancelled" + (f": {message}" if message else ""))
        self.task_id = task_id


class TasksNotDeclared(ClientError):
    """A task method was used on a client that does not declare the tasks extension
    (or on a legacy 2025-11-25 connection, where the extension enables nothing)."""


class ListenNotSupported(ClientError):
    """Kept for compatibility: `listen()` on a 2025-11-25 connection is now served by
    `resources/subscribe` and the session's notifications (LEGC-05), not refused."""


class AuthError(ClientError):
    """The OAuth flow could not produce a token (discovery, registration, the
    authorization response or the token request failed a check)."""


class AuthorizationDenied(AuthError):
    """The authorization server answered the authorization request with an error."""

    def __init__(self, error: str, description: str | None) -> None:
        super().__init__(f"authorization denied: {error}" + (f" ({description})" if description else ""))
        self.error = error
        self.description = description


class ToolCallDenied(ClientError):
    """A host's policy (or its user) refused a tool call; it was never sent (`call` is
    the `nimblemcp.host.ToolCall`, `reason` says who said no)."""

    def __init__(self, call: Any, reason: str) -> None:
        super().__init__(f"tool call {getattr(call, 'name', call)!r} refused: {reason}")
        self.call = call
        self.reason = reason


class UnknownName(ClientError, LookupError):
    """No tool, prompt, resource or server of that name in a host's catalog (or more than
    one server could serve a URI: then name the server)."""


class ServerUnavailable(ClientError):
    """The host's server that owns a name is not connected now (`state` says why)."""

    def __init__(self, server: str, state: Any) -> None:
        error = getattr(state, "error", None)
        status = getattr(state, "status", "unknown")
        super().__init__(f"server {server!r} is {status}" + (f": {error}" if error else ""))
        self.server = server
        self.state = state


class ConfigError(McpError, ValueError):
    """A host configuration (`mcp.json`) cannot be read: bad JSON, a wrong shape, an
    unset `${VARIABLE}`."""


for _cls in (InvalidDPoPProof, BackendError, ClientError, TransportError, StreamBroken, HttpStatusError,
             SessionExpired, MessageTooLarge, ServerBusy, AuthorizationRequired, RedirectNotFollowed,
             RequestTimeout, InputRequestRefused, OutputValidationError, TaskCancelled, TasksNotDeclared,
             ListenNotSupported, AuthError, AuthorizationDenied, ToolCallDenied, UnknownName,
             ServerUnavailable, ConfigError, RateLimited, SchemaRefused, CannotListen):
    _cls.__module__ = "nimblemcp.errors"
    setattr(_home, _cls.__name__, _cls)
del _cls
