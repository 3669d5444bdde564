"""OAuth 2.1 for the MCP client (CHECKLIST 23.2, AUTH-C-01..16).

    from nimblemcp.client import Client
    from nimblemcp.client.auth import OAuth

    async def open_browser(url: str) -> str:
        ...  # show `url`, return the redirect URL the browser landed on

    async with Client("https://mcp.example.com/mcp", auth=OAuth(on_authorize=open_browser)) as c:
        await c.list_tools()

`OAuth` is an `httpx.Auth`: the HTTP transport sends every request through it, and it
answers 401/403 challenges with discovery (RFC 9728, RFC 8414 / OIDC), registration
(pre-registered, Client ID Metadata Document or RFC 7591), an authorization-code flow
with PKCE, RFC 8707 `resource` and RFC 9207 `iss` checks, refresh and scope step-up.
Tokens and registrations live in a `TokenStore`, keyed by authorization server issuer.
"""

from nimblemcp.client.auth._discovery import (
    AuthError,
    Challenge,
    ResourceInfo,
    discover_issuer,
    discover_resource,
    metadata_urls,
    parse_challenges,
    resource_matches,
)
from nimblemcp.client.auth._flow import AuthorizationDenied, AuthorizeCallback, choose_scopes
from nimblemcp.client.auth._provider import OAuth
from nimblemcp.client.auth._store import (
    ClientRegistration,
    MemoryTokenStore,
    PreRegistered,
    TokenSet,
    TokenStore,
)

__all__ = [
    "AuthError",
    "AuthorizationDenied",
    "AuthorizeCallback",
    "Challenge",
    "ClientRegistration",
    "MemoryTokenStore",
    "OAuth",
    "PreRegistered",
    "ResourceInfo",
    "TokenSet",
    "TokenStore",
    "choose_scopes",
    "discover_issuer",
    "discover_resource",
    "metadata_urls",
    "parse_challenges",
    "resource_matches",
]
