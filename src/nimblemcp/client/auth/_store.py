"""What the OAuth client keeps between flows: tokens and client registrations.

Both are keyed by the authorization server's validated `issuer` (AUTH-C-02/08): a
client_id or refresh token obtained from one authorization server is never offered to
another, so when the protected resource moves to a new authorization server the
client registers again. Tokens are further keyed by the resource (RFC 8707) they were
issued for. `TokenStore` is the small Protocol an application implements to persist
them securely (AUTH-C-16); `MemoryTokenStore` is the in-process default.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._jose import SigningKey

__all__ = [
    "ClientRegistration",
    "MemoryTokenStore",
    "PreRegistered",
    "TokenSet",
    "TokenStore",
]


@dataclass(frozen=True, slots=True)
class ClientRegistration:
    """A client identity at one authorization server.

    `auth_method` is the token endpoint authentication method (`client_secret_basic`,
    `client_secret_post`, `private_key_jwt` with `signing_key`, or `none`); `source`
    says where it came from (`pre-registered`, `cimd` or `dcr`).
    """

    client_id: str
    client_secret: str | None = None
    auth_method: str = "none"
    source: str = "dcr"
    redirect_uris: tuple[str, ...] = ()
    signing_key: SigningKey | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class PreRegistered:
    """Credentials issued out of band. With `issuer` set they are only used with that
    authorization server (AUTH-C-08); `auth_method` None means "pick from the
    authorization server's advertised methods". A `signing_key` (the client's
    registered private key) authenticates with `private_key_jwt` (RFC 7523 §2.2)
    instead of a secret."""

    client_id: str
    client_secret: str | None = None
    issuer: str | None = None
    auth_method: str | None = None
    signing_key: SigningKey | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class TokenSet:
    """A token response (RFC 6749 §5.1) plus the scopes that were asked for."""

    access_token: str
    token_type: str = "Bearer"
    refresh_token: str | None = None
    expires_at: float | None = None
    scope: str | None = None
    requested_scopes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict[str, Any], compare=False)

    @classmethod
    def from_response(
        cls, body: dict[str, Any], requested: tuple[str, ...],
        previous: TokenSet | None = None, *, dpop: bool = False,
    ) -> TokenSet:
        """Build from a token endpoint JSON body; a refresh response that carries no
        new refresh token keeps the previous one (RFC 6749 §6). A `DPoP` token type
        is accepted only when the request carried a DPoP proof (`dpop`, RFC 9449 §5);
        a Bearer answer to a DPoP request is an unbound token, used as Bearer."""
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise ValueError("the token response has no access_token")
        kind = body.get("token_type")
        allowed = {"bearer": "Bearer", "dpop": "DPoP"} if dpop else {"bearer": "Bearer"}
        if not isinstance(kind, str) or kind.lower() not in allowed:
            raise ValueError(f"unsupported token_type {kind!r} (expected {' or '.join(allowed.values())})")
        expires = body.get("expires_in")
        refresh = body.get("refresh_token")
        if not isinstance(refresh, str):
            refresh = previous.refresh_token if previous is not None else None
        scope = body.get("scope")
        known = {"access_token", "token_type", "refresh_token", "expires_in", "scope"}
        return cls(
            access_token=token,
            token_type=allowed[kind.lower()],
            refresh_token=refresh,
            expires_at=time.time() + float(expires)
            if isinstance(expires, int | float) and not isinstance(expires, bool) else None,
            scope=scope if isinstance(scope, str) else None,
            requested_scopes=requested,
            extra={k: v for k, v in body.items() if k not in known},
        )

    @property
    def dpop_bound(self) -> bool:
        """True for a DPoP-bound token: sent as `Authorization: DPoP` with a proof."""
        return self.token_type.lower() == "dpop"

    def expired(self, leeway: float = 30.0) -> bool:
        return self.expires_at is not None and time.time() + leeway >= self.expires_at

    def without_access(self) -> TokenSet:
        """The same set with the access token marked unusable (kept for its refresh)."""
        return replace(self, expires_at=0.0)


@runtime_checkable
class TokenStore(Protocol):
    """Where tokens and client registrations live. Implementations must keep them
    confidential (AUTH-C-15/16): encrypt at rest, never log them."""

    async def get_tokens(self, issuer: str, resource: str) -> TokenSet | None: ...

    async def set_tokens(self, issuer: str, resource: str, tokens: TokenSet | None) -> None: ...

    async def get_client(self, issuer: str) -> ClientRegistration | None: ...

    async def set_client(self, issuer: str, client: ClientRegistration | None) -> None: ...


class MemoryTokenStore:
    """The default store: a dict per kind, gone when the process ends."""

    def __init__(self) -> None:
        self.tokens: dict[tuple[str, str], TokenSet] = {}
        self.clients: dict[str, ClientRegistration] = {}

    async def get_tokens(self, issuer: str, resource: str) -> TokenSet | None:
        return self.tokens.get((issuer, resource))

    async def set_tokens(self, issuer: str, resource: str, tokens: TokenSet | None) -> None:
        if tokens is None:
            self.tokens.pop((issuer, resource), None)
        else:
            self.tokens[(issuer, resource)] = tokens

    async def get_client(self, issuer: str) -> ClientRegistration | None:
        return self.clients.get(issuer)

    async def set_client(self, issuer: str, client: ClientRegistration | None) -> None:
        if client is None:
            self.clients.pop(issuer, None)
        else:
            self.clients[issuer] = client
