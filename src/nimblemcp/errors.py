"""The one exception tree of nimblemcp.

    McpError                      root of everything this library raises on purpose
    ├── ProtocolError             a JSON-RPC error; carries `code` and optional `data`
    │   ├── ParseError                     -32700  the bytes were not JSON
    │   ├── InvalidRequest                 -32600  JSON, but not a JSON-RPC request
    │   ├── MethodNotFound                 -32601  unknown or not-advertised method
    │   ├── InvalidParams                  -32602  bad params, `_meta`, cursor, name
    │   │   └── ResourceNotFound           -32602  with data {"uri": ...}
    │   ├── InternalError                  -32603  a server fault
    │   │   ├── StateTooLarge              -32603  a handler's MRTR state is over the seal limit
    │   │   └── InputTimeout               -32603  a 2025-11-25 client left a server request unanswered
    │   ├── HeaderMismatch                 -32020  HTTP headers disagree with the body
    │   ├── MissingClientCapability        -32021  data {"requiredCapabilities": {...}}
    │   ├── RateLimited                    -32000  a caller over its rate; data {"retryAfterMs": n}
    │   ├── InsufficientScope              -32001  the token lacks scopes; data {"requiredScopes": [...]}
    │   └── UnsupportedProtocolVersion     -32022  data {"supported": [...], "requested": ...}
    ├── ToolError                 raised inside a tool: becomes an `isError: true` result
    │   └── HandleLimitExceeded            a state-handle quota or size limit was hit
    ├── InvalidToolHeaders        (also a ValueError) `x-mcp-header` annotations break TOOL-11
    ├── SchemaRefused             (also a ValueError) a schema with an unknown dialect or external `$ref`
    ├── StateError                a `requestState` refused: tampered, expired, replayed, unbound
    ├── InvalidDPoPProof          a resource server refused a DPoP proof; `error` (RFC 9449 §7.1)
    ├── BackendError              a shared-state backend (Redis) failed; the cause is chained
    ├── SlowListener              a bus subscription fell too far behind and was ended
    ├── ConfigError               (also a ValueError) an `mcp.json` host configuration cannot be read
    ├── MissingExtraError         (also an ImportError) an optional dependency is missing; `extra`
    ├── StartupError              a server's lifespan failed at start-up; the cause is chained
    │   └── CannotListen          the HTTP port could not be bound (in use, not ours, privileged); `host`, `port`
    ├── RegistrationNotShared     (also a RuntimeError) a runtime add/remove that other instances would not see
    └── ClientError               failures on our side of a client (never from the peer)
        ├── TransportError        the connection or stream broke; `retryable`, `session_expired`
        │   ├── StreamBroken               broke before the final response (retryable)
        │   ├── MessageTooLarge            a message over `max_message_bytes`, a list over its caps; `limit`
        │   └── HttpStatusError            an HTTP error status; `status`, `error`
        │       ├── SessionExpired         404 for a 2025-11-25 session (session_expired)
        │       ├── ServerBusy             429/503 (retryable); `retry_after` seconds or None
        │       ├── AuthorizationRequired  401 with no `auth=`; `scheme`, `resource_metadata`, `scope`
        │       └── RedirectNotFollowed    a redirect the client will not follow; `location`
        ├── RequestTimeout        no final response in time
        ├── InputRequestRefused   the server asked for input this client will not give
        ├── OutputValidationError `structuredContent` does not match `outputSchema`
        ├── TaskCancelled         the awaited task ended `cancelled`; `task_id`
        ├── TasksNotDeclared      a task method without the tasks extension declared
        ├── ListenNotSupported    kept for compatibility; no longer raised
        ├── AuthError             the OAuth flow could not produce a token
        │   └── AuthorizationDenied        the authorization server said no; `error`, `description`
        ├── ToolCallDenied        a host's policy or its user refused a tool call; `call`, `reason`
        ├── UnknownName           no tool, prompt, resource or server by that name in a host's catalog
        └── ServerUnavailable     a host's server is not connected now; `server`, `state`

Every public exception of the package is a name of this module; modules that raise
them re-export them under their old names. Lower-layer errors (Redis, ...) are
translated at the boundary that meets them and chained as `__cause__`.
Must not import anything from nimblemcp: every layer imports this module.

"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthError",
    "AuthorizationDenied",
    "AuthorizationRequired",
    "BackendError",
    "CannotListen",
    "ClientError",
    "ConfigError",
    "HandleLimitExceeded",
    "HeaderMismatch",
    "HttpStatusError",
    "InputRequestRefused",
    "InputTimeout",
    "InsufficientScope",
    "InternalError",
    "InvalidDPoPProof",
    "InvalidParams",
    "InvalidRequest",
    "InvalidToolHeaders",
    "ListenNotSupported",
    "McpError",
    "MessageTooLarge",
    "MethodNotFound",
    "MissingClientCapability",
    "MissingExtraError",
    "OutputValidationError",
    "ParseError",
    "ProtocolError",
    "RateLimited",
    "RedirectNotFollowed",
    "RegistrationNotShared",
    "RequestTimeout",
    "ResourceNotFound",
    "SchemaRefused",
    "ServerBusy",
    "ServerUnavailable",
    "SessionExpired",
    "SlowListener",
    "StartupError",
    "StateError",
    "StateTooLarge",
    "StreamBroken",
    "TaskCancelled",
    "TasksNotDeclared",
    "ToolCallDenied",
    "ToolError",
    "TransportError",
    "UnknownName",
    "UnsupportedProtocolVersion",
    "error_from_wire",
]


class McpError(Exception):
    """Root of every exception nimblemcp raises on purpose."""


class ProtocolError(McpError):
    """An error that travels as a JSON-RPC error object."""

    code: int = -32603
    default_message: str = "Internal error"

    def __init__(self, message: str | None = None, data: Any = None) -> None:
        self.message = message or self.default_message
        self.data = data
        super().__init__(self.message)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC `error` member for this exception."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ParseError(ProtocolError):
    """-32700: the message is not valid JSON. Raised by the codec; a server answers it
    with a null id."""

    code = -32700
    default_message = "Parse error"


class InvalidRequest(ProtocolError):
    """-32600: valid JSON that is not a JSON-RPC request (a missing `method`, a bad `id`,
    `_meta` without the protocol version...)."""

    code = -32600
    default_message = "Invalid request"


class MethodNotFound(ProtocolError):
    """-32601: the server does not serve this method, e.g. `prompts/list` on a server
    with no prompts. `except MethodNotFound` is how a client tells "not supported"."""

    code = -32601
    default_message = "Method not found"


class InvalidParams(ProtocolError):
    """-32602: the method exists but its params do not fit: an unknown tool, arguments
    that fail the input schema, a template variable that does not convert. Raise it in a
    handler or middleware to refuse a request: `raise InvalidParams("not here")`."""

    code = -32602
    default_message = "Invalid params"


class ResourceNotFound(InvalidParams):
    """-32602 for a resource URI no resource or template serves (`data.uri` names it).
    `raise ResourceNotFound(uri)` from a template function for an id that does not exist."""

    default_message = "Resource not found"

    def __init__(self, uri: str, message: str | None = None) -> None:
        super().__init__(message, {"uri": uri})
        self.uri = uri


class InternalError(ProtocolError):
    """-32603: the server failed in a way the client cannot fix. An unexpected exception
    in a prompt or resource handler answers this with a reference id only (a tool's
    answers `isError` instead); the traceback is in the server's log under that id."""

    code = -32603
    default_message = "Internal error"


class HeaderMismatch(ProtocolError):
    """-32020: on Streamable HTTP, the `Mcp-Method`/`Mcp-Name`/`Mcp-Param-*` headers say
    something else than the JSON body (answered with HTTP 400)."""

    code = -32020
    default_message = "HTTP headers do not match the request body"


class MissingClientCapability(ProtocolError):
    """-32021: a handler asked for something the client did not declare (elicitation,
    sampling, roots); `required` (and `data.requiredCapabilities`) names it."""

    code = -32021
    default_message = "The request needs a client capability it did not declare"

    def __init__(self, required: dict[str, Any], message: str | None = None) -> None:
        super().__init__(message, {"requiredCapabilities": required})
        self.required = required


class InsufficientScope(ProtocolError):
    """The caller's access token lacks scopes a tool, prompt or resource requires
    (`Server.require_scopes`); on HTTP answered 403 with an `insufficient_scope`
    challenge before the request runs. `data`: `{"requiredScopes": [...]}`."""

    code = -32001
    default_message = "Insufficient scope"


class UnsupportedProtocolVersion(ProtocolError):
    """-32022: the request's protocol version is not one this server speaks;
    `data.supported` lists the ones it does, and a client retries with one of them."""

    code = -32022
    default_message = "Unsupported protocol version"

    def __init__(
        self, requested: Any, supported: list[str], message: str | None = None
    ) -> None:
        super().__init__(message, {"supported": list(supported), "requested": requested})
        self.requested = requested
        self.supported = list(supported)


class StateTooLarge(InternalError):
    """A handler's MRTR state (`ctx.state` plus earlier answers) would seal into a
    `requestState` larger than the server accepts back: the round fails at seal time
    (-32603) instead of issuing a token the retry would refuse. Keep `ctx.state`
    small; put bulky data behind a state handle (`ctx.handles`)."""

    default_message = "The handler's requestState is too large"


class InputTimeout(InternalError):
    """A 2025-11-25 client did not answer a server-to-client request (elicitation,
    sampling, roots) within `LegacyOptions.request_timeout`: the request that asked
    fails with this error, and the client is sent `notifications/cancelled`."""

    default_message = "The client did not answer the server's request in time"


class ToolError(McpError):
    """Raise inside a tool to report a failure the model can act on (`isError: true`)."""


class HandleLimitExceeded(ToolError):
    """A state handle would break a limit: too many handles or bytes for this caller,
    or one handle too large. A tool error (`isError: true`), not -32602: the request
    itself is well-formed, and the model can act on it (drop or reuse handles)."""


class InvalidToolHeaders(McpError, ValueError):
    """A tool definition whose `x-mcp-header` annotations break TOOL-11: the server
    refuses to register it, the client drops it from `tools/list` (TOOL-12)."""


class StateError(McpError):
    """A requestState that must be refused; `str(exc)` is the reason for the log."""


class SlowListener(McpError):
    """The listener fell more than its queue size behind and was dropped."""


class StartupError(McpError):
    """A server's lifespan failed at start-up (the serving entry points exit non-zero);
    the lifespan's own exception is chained as `__cause__`."""



class RegistrationNotShared(McpError, RuntimeError):
    """A tool, prompt, resource or template added or removed while the server is
    serving with shared backends (a Redis store or bus): other instances would not
    serve the change, yet every instance's listeners would hear of it. Register at
    import time or in the lifespan's start-up, or declare
    `Server(..., registrations="local")` when every instance makes the change itself
    (or requests are routed to this one). `kind` ("tool", ...) and `name` say what."""

    def __init__(self, message: str, *, kind: str = "", name: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name


_BY_CODE: dict[int, type[ProtocolError]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        HeaderMismatch,
    )
}


def error_from_wire(error: dict[str, Any]) -> ProtocolError:
    """Rebuild the matching exception from a received JSON-RPC `error` object."""
    code = error.get("code")
    message = error.get("message")
    data = error.get("data")
    msg = message if isinstance(message, str) else None
    if code == -32021 and isinstance(data, dict) and "requiredCapabilities" in data:
        return MissingClientCapability(data["requiredCapabilities"], msg)  # type: ignore[arg-type]
    if code == -32022 and isinstance(data, dict):
        supported = data.get("supported")  # type: ignore[union-attr]
        return UnsupportedProtocolVersion(
            data.get("requested"),  # type: ignore[union-attr]
            [v for v in supported if isinstance(v, str)] if isinstance(supported, list) else [],  # type: ignore[misc]
            msg,
        )
    if code == -32001 and isinstance(data, dict) and "requiredScopes" in data:
        return InsufficientScope(msg, data)  # a code of the server range: only with its data
    cls = _BY_CODE.get(code) if isinstance(code, int) else None
    if cls is None:
        exc = ProtocolError(msg, data)
        exc.code = code if isinstance(code, int) else -32603
        return exc
    return cls(msg, data)


class MissingExtraError(McpError, ImportError):
    """An optional dependency is not installed; `extra` names what to install."""

    def __init__(self, extra: str, purpose: str, missing: str | None) -> None:
        self.extra = extra
        self.purpose = purpose
        self.missing = missing
        text = f"{purpose} needs the [{extra}] extra: pip install 'nimblemcp[{extra}]'"
        if missing:
            text += f" (module {missing!r} is missing)"
        super().__init__(text, name=missing)



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
