"""The public surface is frozen, and `import nimblemcp` stays light."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

import nimblemcp

# Every public module's `__all__`, sorted (Python's order). Changing the public API is a
# decision: edit the one list of the module you change.
PUBLIC_API: dict[str, list[str]] = {
    "nimblemcp": [
        "Backends",
        "Client",
        "ClientError",
        "ClientGroup",
        "ContentBlock",
        "Context",
        "Depends",
        "ElicitResult",
        "Headers",
        "HttpSecurity",
        "InvalidParams",
        "LATEST_VERSION",
        "LegacyOptions",
        "ListOptions",
        "ListenOptions",
        "McpError",
        "MissingClientCapability",
        "ProtocolError",
        "RequestTimeout",
        "ResourceNotFound",
        "RetryPolicy",
        "SUPPORTED_VERSIONS",
        "SampleResult",
        "Server",
        "ServerInfo",
        "ServerSettings",
        "StartupError",
        "StateOptions",
        "TaskOptions",
        "ToolAnnotations",
        "ToolError",
        "ToolOptions",
        "ToolResult",
        "TransportError",
        "__version__",
        "assistant",
        "audio",
        "blob_resource",
        "embedded",
        "get_headers",
        "get_lifespan",
        "get_principal",
        "image",
        "message",
        "new_state_key",
        "resource_link",
        "text",
        "text_resource",
        "user",
    ],
    "nimblemcp.backends": [
        "KeyValueStore",
        "MemoryStore",
        "from_env",
        "from_url",
    ],
    "nimblemcp.backends.bus": [
        "Event",
        "GAP",
        "InProcessBus",
        "Match",
        "NotificationBus",
        "SlowListener",
        "Subscription",
    ],
    "nimblemcp.backends.memory": [
        "MemoryStore",
    ],
    "nimblemcp.backends.redis": [
        "RedisBus",
        "RedisStore",
    ],
    "nimblemcp.cli": [
        "endpoint_url",
        "load_server",
        "main",
    ],
    "nimblemcp.cli.run": [
        "RunSettings",
        "add_arguments",
        "main",
    ],
    "nimblemcp.client": [
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
        "TASKS_EXTENSION",
        "TaskCancelled",
        "TaskPolicy",
        "TasksNotDeclared",
        "Transport",
        "TransportError",
        "fill_defaults",
        "header_rules",
        "param_headers",
    ],
    "nimblemcp.client.auth": [
        "AuthError",
        "AuthorizationDenied",
        "AuthorizeCallback",
        "Challenge",
        "ClientRegistration",
        "DPoP",
        "EnterpriseManaged",
        "Grant",
        "JwtBearer",
        "MemoryTokenStore",
        "OAuth",
        "PreRegistered",
        "ResourceInfo",
        "SigningKey",
        "TokenEndpoint",
        "TokenSet",
        "TokenSource",
        "TokenStore",
        "choose_scopes",
        "client_assertion",
        "discover_issuer",
        "discover_resource",
        "metadata_urls",
        "parse_challenges",
        "request_id_jag",
        "resource_matches",
        "token_from_env",
        "token_from_file",
        "token_from_url",
    ],
    "nimblemcp.content": [
        "Annotations",
        "AudioContent",
        "ContentBlock",
        "EmbeddedResource",
        "ImageContent",
        "ResourceLink",
        "TextContent",
        "audio",
        "blob_resource",
        "embedded",
        "image",
        "resource_link",
        "text",
        "text_resource",
    ],
    "nimblemcp.errors": [
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
    ],
    "nimblemcp.catalog": [
        "CallToolResult",
        "CatalogDiff",
        "Change",
        "EXIT_CODES",
        "GetPromptResult",
        "Lockfile",
        "NOT_GIVEN",
        "NotGiven",
        "ReadResourceResult",
        "ServerStub",
        "canonical",
        "diff_catalogs",
        "diff_locks",
        "digest",
        "dumps",
        "expand_template",
        "generate_stubs",
        "load_catalog",
        "lock_path_for",
        "take_snapshot",
    ],
    "nimblemcp.host": [
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
    ],
    "nimblemcp.jsonrpc": [
        "MAX_DEPTH",
        "NOTIFICATION",
        "REQUEST",
        "RESPONSE",
        "classify",
        "decode",
        "decode_request",
        "encode",
        "encode_reply",
        "error_response",
        "notification",
        "request",
        "result_response",
    ],
    "nimblemcp.middleware": [
        "CallNext",
        "MethodStats",
        "Middleware",
        "RateLimit",
        "RequestLogging",
        "Timing",
        "Tracing",
        "caller_of",
    ],
    "nimblemcp.openapi": [
        "GET_AS_RESOURCES",
        "Route",
        "RouteMap",
        "from_fastapi",
        "from_openapi",
    ],
    "nimblemcp.proxy": [
        "proxy",
    ],
    "nimblemcp.sampling": [
        "AnthropicSampler",
        "OpenAISampler",
    ],
    "nimblemcp.serving": [
        "HttpServeOptions",
        "TlsFiles",
        "asgi_app",
        "bare_asgi_app",
        "configure",
        "run",
        "run_http",
        "run_stdio",
    ],
    "nimblemcp.server": [
        "ArgChange",
        "Backends",
        "Context",
        "Depends",
        "Headers",
        "LegacyOptions",
        "ListOptions",
        "ListenOptions",
        "Server",
        "ServerInfo",
        "ServerSettings",
        "StateOptions",
        "TaskOptions",
        "ToolAnnotations",
        "ToolOptions",
        "ToolResult",
        "assistant",
        "get_headers",
        "get_lifespan",
        "get_principal",
        "message",
        "user",
    ],
    "nimblemcp.testing": [
        "Exchange",
        "TestClient",
        "connect",
    ],
    "nimblemcp.transports.http.app": [
        "DEFAULT_BODY_TIMEOUT",
        "LegacyHandler",
        "McpHttpApp",
        "YOUNG_GC_THRESHOLD",
        "asgi_app",
    ],
    "nimblemcp.transports.auth.bearer": [
        "AccessToken",
        "BearerAuth",
        "DPoPVerifier",
        "StaticTokens",
        "TokenVerifier",
    ],
    "nimblemcp.transports.http.legacy_sse": [
        "HttpSseApp",
    ],
    "nimblemcp.transports.h1.client": [
        "DECODERS",
        "Decoder",
        "H1Pool",
        "H1Response",
        "Headers",
        "MAX_HEAD_BYTES",
        "Origin",
        "Route",
    ],
    "nimblemcp.transports.h1.engine": [
        "Connection",
        "EXTENSION",
        "EngineExtension",
        "MAX_PIPELINE",
    ],
    "nimblemcp.transports.h1.engine_server": [
        "Engine",
        "EngineConfig",
        "run",
        "serve",
        "tls_context",
    ],
    "nimblemcp.transports.h1.proxies": [
        "TrustedProxies",
    ],
    "nimblemcp.transports.client.http": [
        "HttpStatusError",
        "HttpTransport",
        "SessionExpired",
        "StreamBroken",
        "encode_header_value",
        "mcp_name",
    ],
    "nimblemcp.transports.http.security": [
        "DEFAULT_MAX_BODY",
        "HttpSecurity",
        "SecurityMiddleware",
        "secure_app",
    ],
    "nimblemcp.transports.client.memory": [
        "MemoryTransport",
    ],
    "nimblemcp.transports.auth.oauth_proxy": [
        "OAuthProxy",
        "Upstream",
    ],
    "nimblemcp.transports.client.sse": [
        "SseTransport",
    ],
    "nimblemcp.transports.stdio.client": [
        "StdioTransport",
    ],
    "nimblemcp.transports.auth.identity": [
        "OpaqueTokenVerifier",
        "auth0",
        "entra_id",
        "github",
        "google",
        "keycloak",
        "okta",
        "workos",
    ],
    "nimblemcp.transports.auth.verifiers": [
        "IntrospectionVerifier",
        "JwtVerifier",
        "TOKEN_TYPES",
    ],
    "nimblemcp.types": [
        "ACCEPT_BOTH",
        "CLIENT_CAPABILITIES",
        "CLIENT_INFO",
        "HEADER_METHOD",
        "HEADER_NAME",
        "HEADER_PROTOCOL_VERSION",
        "HEADER_SESSION_ID",
        "JSON_TYPE",
        "LATEST_VERSION",
        "LEGACY_VERSIONS",
        "LOG_LEVEL",
        "LOG_LEVELS",
        "METHODS",
        "MODERN_VERSIONS",
        "MethodSpec",
        "PARAM_HEADER_PREFIX",
        "PROGRESS_TOKEN",
        "PROTOCOL_VERSION",
        "RequestMeta",
        "SERVER_INFO",
        "SSE_TYPE",
        "SUBSCRIPTION_ID",
        "SUPPORTED_VERSIONS",
        "TASKS_EXTENSION",
        "is_modern",
        "parse_request_meta",
        "version_index",
    ],
    "nimblemcp.types.methods": [
        "METHODS",
        "MethodSpec",
        "NOTIFICATIONS",
        "REMOVED_METHODS",
    ],
}
# Public-looking modules without `__all__`, with the reason.
NO_ALL = {
    "nimblemcp.transports": "a namespace package: its modules carry the names",
    "nimblemcp.transports.h1": "a namespace package: its modules carry the names",
    "nimblemcp.transports.http": "a package by role (the HTTP server side): its modules carry the names",
    "nimblemcp.transports.auth": "a package by role (the OAuth resource server): its modules carry the names",
    "nimblemcp.transports.stdio": "a package by role (both sides of stdio): its modules carry the names",
    "nimblemcp.transports.client": "a package by role (client transports): its modules carry the names",
    "nimblemcp.transports.stdio.server": "the stdio server loop; reached through Server.run() (H1 to add __all__)",
}

FROZEN = PUBLIC_API["nimblemcp"]


def test_all_is_frozen() -> None:
    """Changing the public API is a decision: update this list on purpose."""
    assert sorted(nimblemcp.__all__) == sorted(FROZEN)
    assert len(set(nimblemcp.__all__)) == len(nimblemcp.__all__)
    for name in nimblemcp.__all__:
        assert hasattr(nimblemcp, name), name


def _public_modules() -> list[str]:
    names = ["nimblemcp"] + [i.name for i in pkgutil.walk_packages(nimblemcp.__path__, "nimblemcp.")]
    return [n for n in names if not any(part.startswith("_") for part in n.split("."))]


@pytest.mark.parametrize("name", sorted(PUBLIC_API))
def test_every_public_all_is_frozen(name: str) -> None:
    """Each public module exports exactly its frozen list, and every name resolves."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert sorted(exported) == PUBLIC_API[name], name
    assert PUBLIC_API[name] == sorted(PUBLIC_API[name]), "keep the literal list sorted"
    assert len(set(exported)) == len(exported)
    for attr in exported:
        assert getattr(module, attr) is not None, f"{name}.{attr}"


def test_every_public_module_is_listed() -> None:
    """A new public module gets an `__all__` and an entry above."""
    for name in _public_modules():
        module = importlib.import_module(name)
        if hasattr(module, "__all__"):
            assert name in PUBLIC_API, name
        else:
            assert name in NO_ALL, name


def test_client_users_find_their_exceptions() -> None:
    """Issue 11: what a Client user catches is importable next to Client."""
    import nimblemcp.client as client
    from nimblemcp import errors

    for home in (nimblemcp, client):
        assert home.ClientError is errors.ClientError
        assert home.TransportError is errors.TransportError
        assert home.RequestTimeout is errors.RequestTimeout
        assert home.ProtocolError is errors.ProtocolError


def test_new_state_key_is_public_and_lazy() -> None:
    """README's key recipe uses no private module; the sealing module loads only on use."""
    code = ("import sys, nimblemcp; before = 'nimblemcp.server._sealing' in sys.modules; "
            "key = nimblemcp.new_state_key(); "
            "from nimblemcp.server import Server, StateOptions; Server('k', state=StateOptions(keys=[key])); print(before, len(key))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout
    assert out.split() == ["False", "43"]


def test_error_tree_has_one_root() -> None:
    from nimblemcp import errors

    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type):
            assert issubclass(obj, errors.McpError), name
    codes = {errors.ParseError.code, errors.InvalidRequest.code, errors.MethodNotFound.code,
             errors.InvalidParams.code, errors.InternalError.code, errors.HeaderMismatch.code,
             errors.MissingClientCapability.code, errors.UnsupportedProtocolVersion.code}
    assert codes == {-32700, -32600, -32601, -32602, -32603, -32020, -32021, -32022}
    assert errors.ResourceNotFound("x://y").to_wire() == {
        "code": -32602, "message": "Resource not found", "data": {"uri": "x://y"}}


HEAVY = ["pydantic", "pydantic_core", "httpx", "uvicorn", "anyio", "starlette", "jsonschema",
         "typing_extensions", "concurrent.futures.process", "multiprocessing", "email",
         "http.client", "nimblemcp.transports.stdio.server", "nimblemcp.cli",
         "nimblemcp.server._sealing", "cryptography", "hmac"]


def test_import_is_light() -> None:
    """`import nimblemcp` pulls in no pydantic, HTTP stack or other heavy extras (asyncio
    itself, and the ssl it imports, is the core's one allowed cost)."""
    code = f"import sys, json, nimblemcp; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                         capture_output=True, check=True, text=True).stdout
    assert json.loads(out) == []


def test_simple_server_stays_light() -> None:
    """A server of plain-typed tools registers without importing pydantic."""
    code = (
        "import sys, json, nimblemcp as m\n"
        "s = m.Server('x')\n"
        "@s.tool()\n"
        "def f(a: int, b: list[str] | None = None) -> dict[str, int]:\n"
        "    return {'a': a}\n"
        "print(json.dumps('pydantic' in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout
    assert json.loads(out) is False


def test_client_is_exported_lazily() -> None:
    code = ("import sys, nimblemcp; before = 'nimblemcp.client' in sys.modules; "
            "from nimblemcp import Client; print(before, Client.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout
    assert out.split() == ["False", "nimblemcp.client._client"]


async def test_server_asgi_app_is_the_guarded_endpoint() -> None:
    """HTTP-02/HTTP-14: `Server.asgi_app()` answers MCP and refuses a foreign Origin."""
    import httpx

    server = nimblemcp.Server("asgi")
    server.tool(lambda text: text, name="echo")
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
               "mcp-method": "server/discover"}
    transport = httpx.ASGITransport(app=server.asgi_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        ok = await client.post("/mcp", json=body, headers=headers)
        assert ok.status_code == 200 and ok.json()["result"]["resultType"] == "complete"
        evil = await client.post("/mcp", json=body, headers={**headers, "origin": "http://evil.example"})
        assert evil.status_code == 403
