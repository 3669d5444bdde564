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

Without a user (issue 15), each usable on its own:

    # client credentials with private_key_jwt (RFC 7523 §2.2)
    OAuth(grant_type="client_credentials",
          pre_registered=PreRegistered("my-agent", signing_key=SigningKey.from_pem(pem)))
    # workload identity: the JWT-bearer grant with a platform-issued token (RFC 7523 §2.1)
    OAuth(grant=JwtBearer(token_from_file("/var/run/secrets/tokens/mcp")))
    # enterprise-managed: ID token -> ID-JAG at the IdP -> JWT-bearer grant at the MCP AS
    OAuth(grant=EnterpriseManaged(id_token=sso.id_token, idp_client_id="mcp-client",
                                  idp_issuer="https://idp.example.com"),
          pre_registered=PreRegistered("mcp-client", "secret"))
    # DPoP-bound tokens (RFC 9449), with any of the above or the authorization-code flow
    OAuth(on_authorize=open_browser, dpop=True)

`client_assertion`, `DPoP.proof` and `request_id_jag` are the single steps, for
programs that drive HTTP themselves.
"""

from nimblemcp.client.auth._assertion import (
    TokenSource,
    client_assertion,
    token_from_env,
    token_from_file,
    token_from_url,
)
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
from nimblemcp.client.auth._dpop import DPoP
from nimblemcp.client.auth._flow import AuthorizationDenied, AuthorizeCallback, choose_scopes
from nimblemcp.client.auth._grants import (
    EnterpriseManaged,
    Grant,
    JwtBearer,
    TokenEndpoint,
    request_id_jag,
)
from nimblemcp.client.auth._jose import SigningKey
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
]
