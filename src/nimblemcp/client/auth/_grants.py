"""Grants that trade an assertion for an access token, without a user at a browser.

`OAuth(grant=...)` runs one of these in place of the authorization-code flow once
discovery has found the authorization server:

- `JwtBearer(assertion)` — workload identity federation: the JWT-bearer grant (RFC
  7523 §2.1) with a token from a `TokenSource` (a file, the environment, a metadata
  endpoint). Client authentication is optional there: pre-registered credentials for
  the issuer are used when given, else none. A refusal is final (no retry, no other
  grant): the token source, not a second attempt, has to change.
- `EnterpriseManaged(id_token, ...)` — enterprise-managed authorization (the Identity
  Assertion Authorization Grant): RFC 8693 token exchange of the user's ID token for
  an ID-JAG at the enterprise IdP (`request_id_jag`), then the JWT-bearer grant with
  that ID-JAG at the MCP server's authorization server.

A grant gets a `TokenEndpoint`: the discovered authorization server, the client
identity to authenticate with, the resource and scopes, and the DPoP key when in use;
its `request`/`tokens` add client authentication and DPoP proofs. `Grant` is the
Protocol; an application may implement its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx

from nimblemcp.errors import AuthError

from ._assertion import TokenSource, read_token
from ._discovery import discover_issuer
from ._flow import token_request, tokens_from
from ._store import ClientRegistration, TokenSet

if TYPE_CHECKING:
    from ._dpop import DPoP

__all__ = [
    "ID_JAG_TOKEN_TYPE",
    "JWT_BEARER_GRANT",
    "EnterpriseManaged",
    "Grant",
    "JwtBearer",
    "TokenEndpoint",
    "request_id_jag",
]

JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id-jag"


@dataclass(frozen=True, slots=True)
class TokenEndpoint:
    """One authorization server's token endpoint, as a grant sees it."""

    http: httpx.AsyncClient
    issuer: str
    metadata: dict[str, Any]
    client: ClientRegistration | None
    resource: str
    scopes: tuple[str, ...]
    dpop: DPoP | None = None

    async def request(self, form: dict[str, str]) -> dict[str, Any]:
        """POST `form` with client authentication (and a DPoP proof); the 200 body."""
        return await token_request(self.http, self.metadata["token_endpoint"], self.client,
                                   form, audience=self.issuer, dpop=self.dpop)

    async def tokens(self, form: dict[str, str]) -> TokenSet:
        """`request`, then the answer as a `TokenSet`; `resource` and `scope` are added."""
        form = {**form, "resource": self.resource}
        if self.scopes:
            form["scope"] = " ".join(self.scopes)
        return tokens_from(await self.request(form), self.scopes, dpop=self.dpop)


@runtime_checkable
class Grant(Protocol):
    """How `OAuth` obtains a token when there is no authorization-code flow."""

    #: False when the grant can go without any client identity (`client` None).
    needs_client: bool

    async def obtain(self, endpoint: TokenEndpoint) -> TokenSet: ...


@dataclass(frozen=True, slots=True)
class JwtBearer:
    """The JWT-bearer grant (RFC 7523 §2.1) with a workload identity token.

        OAuth(grant=JwtBearer(token_from_file("/var/run/secrets/tokens/mcp")))
    """

    assertion: TokenSource
    needs_client: bool = False

    async def obtain(self, endpoint: TokenEndpoint) -> TokenSet:
        token = await read_token(self.assertion, "workload identity token")
        return await endpoint.tokens({"grant_type": JWT_BEARER_GRANT, "assertion": token})


async def request_id_jag(
    http: httpx.AsyncClient, idp_token_endpoint: str, id_token: str, *, audience: str,
    resource: str, client: ClientRegistration | None, scopes: Sequence[str] = (),
    idp_issuer: str | None = None,
) -> str:
    """RFC 8693 token exchange at the enterprise IdP: the user's ID token for an
    Identity Assertion JWT Authorization Grant (ID-JAG) addressed to `audience` (the
    MCP authorization server's issuer) for `resource` (the MCP server)."""
    form = {
        "grant_type": TOKEN_EXCHANGE_GRANT,
        "requested_token_type": ID_JAG_TOKEN_TYPE,
        "subject_token": id_token, "subject_token_type": ID_TOKEN_TYPE,
        "audience": audience, "resource": resource,
    }
    if scopes:
        form["scope"] = " ".join(scopes)
    body = await token_request(http, idp_token_endpoint, client, form,
                               audience=idp_issuer or idp_token_endpoint)
    issued = body.get("issued_token_type")
    token = body.get("access_token")
    if issued != ID_JAG_TOKEN_TYPE or not isinstance(token, str) or not token:
        raise AuthError(f"the IdP's token exchange did not issue an ID-JAG (issued_token_type {issued!r})")
    return token


@dataclass(frozen=True, slots=True)
class EnterpriseManaged:
    """Enterprise-managed authorization: exchange the user's ID token (from
    `id_token`, e.g. the application's SSO session) for an ID-JAG at the enterprise
    IdP, then present it with the JWT-bearer grant at the MCP authorization server.

    The IdP's token endpoint is `idp_token_endpoint`, or discovered from
    `idp_issuer`. At the IdP the client is `idp_client_id` (with `idp_client_secret`,
    sent with HTTP Basic, when it has one). At the MCP authorization server it
    authenticates with the pre-registered credentials given to `OAuth`.
    """

    id_token: TokenSource
    idp_client_id: str
    idp_token_endpoint: str | None = None
    idp_issuer: str | None = None
    idp_client_secret: str | None = None
    needs_client: bool = True

    def __post_init__(self) -> None:
        if self.idp_token_endpoint is None and self.idp_issuer is None:
            raise ValueError("EnterpriseManaged needs idp_token_endpoint or idp_issuer")

    async def obtain(self, endpoint: TokenEndpoint) -> TokenSet:
        token_url = self.idp_token_endpoint
        if token_url is None:
            assert self.idp_issuer is not None
            token_url = str((await discover_issuer(endpoint.http, self.idp_issuer))["token_endpoint"])
        idp_client = ClientRegistration(
            self.idp_client_id, self.idp_client_secret,
            "client_secret_basic" if self.idp_client_secret is not None else "none", "pre-registered")
        id_token = await read_token(self.id_token, "ID token")
        id_jag = await request_id_jag(
            endpoint.http, token_url, id_token, audience=endpoint.issuer,
            resource=endpoint.resource, client=idp_client, scopes=endpoint.scopes,
            idp_issuer=self.idp_issuer)
        return await endpoint.tokens({"grant_type": JWT_BEARER_GRANT, "assertion": id_jag})
