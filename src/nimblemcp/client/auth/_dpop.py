"""DPoP on the client (RFC 9449): one proof key, a fresh proof per HTTP request.

`DPoP` holds the proof key (generated, or an application's `SigningKey` so tokens
bound to it survive a restart) and the server-provided nonces, one per origin and
role: an authorization server's (§8, proofs without `ath`) and a resource server's
(§9, proofs with `ath`) are kept apart even when both live on one origin. `proof`
builds the `dpop+jwt` for one request, bound to its method and URL (`htu` without
query and fragment), with `ath` (the access token's SHA-256) on resource requests and
the origin's latest nonce; `observe` records a `DPoP-Nonce` from any response. The
OAuth provider uses it at the token endpoint and on every MCP request; on its own a
program can sign requests with it directly:

    dpop = DPoP()
    headers = {"DPoP": dpop.proof("POST", url, access_token=token),
               "Authorization": f"DPoP {token}"}
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from nimblemcp.types._urls import origin

from ._jose import SigningKey, b64url

__all__ = ["DPoP", "access_token_hash", "htu"]


def htu(url: str) -> str:
    """The `htu` of a request URL: the target URI without query and fragment."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", "", ""))


def access_token_hash(token: str) -> str:
    """`ath`: base64url SHA-256 of the ASCII access token (RFC 9449 §4.2)."""
    return b64url(hashlib.sha256(token.encode("ascii")).digest())


class DPoP:
    """A DPoP proof key and the nonces servers handed out. Safe to share between
    concurrent requests of one event loop (proofs are independent; a nonce update is
    one dict assignment)."""

    def __init__(self, key: SigningKey | None = None, *, alg: str = "ES256") -> None:
        self.key = key if key is not None else SigningKey.generate(alg)
        self._jwk = self.key.public_jwk
        self._nonces: dict[tuple[tuple[str, str, int | None], bool], str] = {}

    @property
    def alg(self) -> str:
        return self.key.alg

    def thumbprint(self) -> str:
        """`jkt`: what a DPoP-bound token's `cnf` names, and `dpop_jkt` (§10)."""
        return self.key.thumbprint()

    def nonce(self, url: str, *, resource: bool = False) -> str | None:
        """The last nonce `url`'s origin sent, as a resource server or as an AS."""
        return self._nonces.get((origin(url), resource))

    def observe(self, url: str, headers: Mapping[str, str], *, resource: bool = False) -> bool:
        """Remember the `DPoP-Nonce` a response from `url` carries (`resource`: the
        response to a resource request); True when it is new."""
        nonce = headers.get("dpop-nonce")
        if nonce is None:  # a plain dict rather than case-insensitive httpx.Headers
            nonce = next((v for k, v in headers.items() if k.lower() == "dpop-nonce"), None)
        if not nonce:
            return False
        key = (origin(url), resource)
        changed = self._nonces.get(key) != nonce
        self._nonces[key] = nonce
        return changed

    def proof(
        self, method: str, url: str, *, access_token: str | None = None,
        nonce: str | None = None,
    ) -> str:
        """A fresh proof for one request (new `jti`, `iat` now). `nonce` defaults to the
        last one `url`'s origin sent for this kind of request (with `access_token`: a
        resource request)."""
        claims: dict[str, object] = {
            "jti": secrets.token_urlsafe(24), "htm": method.upper(), "htu": htu(url),
            "iat": int(time.time()),
        }
        nonce = nonce if nonce is not None else self.nonce(url, resource=access_token is not None)
        if nonce is not None:
            claims["nonce"] = nonce
        if access_token is not None:
            claims["ath"] = access_token_hash(access_token)
        return self.key.sign_jwt(claims, {"typ": "dpop+jwt", "jwk": self._jwk})
