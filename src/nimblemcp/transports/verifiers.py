"""Token verifiers for `BearerAuth`: signed JWTs checked against a JWKS, and RFC 7662
token introspection (issue 19, auth inside handlers).

Both implement `TokenVerifier` (`async verify(token) -> AccessToken | None`) and return
the token's subject, scopes, audience, expiry and claims, which handlers see as
`ctx.principal` (or inject with `get_principal`).

- `JwtVerifier(jwks_uri=..., issuer=..., audience=...)`: fetches the issuer's JSON Web
  Key Set over HTTPS, keeps it for `cache_ttl` seconds, and on a token whose `kid` it does
  not know (the issuer rotated its keys) fetches the set again, at most once per
  `miss_interval` seconds, so forged key ids cannot make it hammer the issuer. Checks
  the signature (asymmetric algorithms only unless told otherwise; never `none`), `iss`,
  `aud`, `exp` and `nbf` (with `leeway`). An unreachable issuer is asked again after
  `miss_interval`, keeping the keys it had. Built on joserfc (the `[auth]` extra).
- `IntrospectionVerifier(endpoint, client_id=..., client_secret=...)`: asks the
  authorization server (RFC 7662) whether the token is active; answers are cached per
  token hash for `cache_ttl` seconds (never past the token's `exp`), in a bounded table.

A verifier returns None for every token it cannot accept (bad signature, expired, wrong
issuer or audience, inactive, or the issuer unreachable: fail closed); BearerAuth turns
that into 401. Tokens are never logged. Imports httpx and joserfc when constructed, not at
import; may import `transports.http_auth` (the protocol and `AccessToken`), `_extras`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from nimblemcp._extras import needs_extra
from nimblemcp.transports.http_auth import AccessToken

if TYPE_CHECKING:
    import httpx

__all__ = ["IntrospectionVerifier", "JwtVerifier"]

log = logging.getLogger("nimblemcp.auth")

ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


def _as_tuple(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """`scope` (RFC 8693/9068: space-separated) or `scp` (a list, as some issuers send)."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return frozenset(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, str):
        return frozenset(scp.split())
    if isinstance(scp, list):
        return frozenset(s for s in scp if isinstance(s, str))
    return frozenset()


def _access(claims: Mapping[str, Any]) -> AccessToken | None:
    subject = claims.get("sub") or claims.get("client_id")
    if not isinstance(subject, str) or not subject:
        return None
    exp = claims.get("exp")
    return AccessToken(
        subject=subject,
        scopes=_scopes(claims),
        audience=_as_tuple(claims.get("aud")),
        expires_at=float(exp) if isinstance(exp, (int, float)) else None,
        claims=dict(claims),
    )


def _unverified_header(token: str) -> dict[str, Any] | None:
    head, _, rest = token.partition(".")
    if not head or rest.count(".") != 1:
        return None
    try:
        header = orjson.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    return header if isinstance(header, dict) else None


def _http_client(http: httpx.AsyncClient | None, timeout: float, purpose: str) -> httpx.AsyncClient:
    if http is not None:
        return http
    with needs_extra("http", purpose):
        import httpx
    return httpx.AsyncClient(timeout=timeout)


class JwtVerifier:
    """Verifies JWT access tokens against the issuer's JWKS (fetched and cached)."""

    def __init__(
        self,
        *,
        issuer: str,
        audience: str | Sequence[str] | None,
        jwks_uri: str | None = None,
        jwks: Mapping[str, Any] | None = None,
        algorithms: Collection[str] = ASYMMETRIC,
        leeway: float = 30.0,
        cache_ttl: float = 3600.0,
        miss_interval: float = 30.0,
        required_claims: Collection[str] = ("exp",),
        http: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
    ) -> None:
        if (jwks_uri is None) == (jwks is None):
            raise TypeError("JwtVerifier needs exactly one of jwks_uri= (fetched) or jwks= (a fixed key set)")
        if "none" in algorithms:
            raise ValueError("JwtVerifier never accepts unsigned tokens (alg 'none')")
        with needs_extra("auth", "JWT verification"):
            from joserfc import jwk, jwt
        self._jwk = jwk
        self._jwt = jwt
        self.issuer = issuer
        self.audience = _as_tuple(audience)
        self.jwks_uri = jwks_uri
        self.algorithms = list(algorithms)
        self.leeway = leeway
        self.cache_ttl = cache_ttl
        self.miss_interval = miss_interval
        self.required_claims = tuple(required_claims)
        self._http = _http_client(http, timeout, "JWKS fetching") if jwks_uri else None
        self._own_http = http is None
        self._keys: dict[str | None, Any] = {}
        self._fetched_at = float("-inf")
        self._miss_fetched_at = float("-inf")
        self._lock = asyncio.Lock()
        if jwks is not None:
            self._keys = self._import(jwks)
            self._fetched_at = float("inf")

    def _import(self, jwks: Mapping[str, Any]) -> dict[str | None, Any]:
        keys: dict[str | None, Any] = {}
        for data in jwks.get("keys", ()):
            if not isinstance(data, dict) or data.get("use", "sig") != "sig":
                continue
            try:
                key = self._jwk.import_key(data)
            except Exception:  # one malformed entry must not hide the others
                log.warning("ignoring a JWKS entry that does not import (kid=%r)", data.get("kid"))
                continue
            keys[data.get("kid")] = key
        return keys

    async def _fetch(self, *, miss: bool) -> None:
        """Fetch the key set; keeps the previous keys when the issuer is unreachable."""
        started = time.monotonic()
        async with self._lock:
            # Someone else fetched while we waited: use theirs.
            if self._fetched_at >= started:
                return
            if miss:
                if started - self._miss_fetched_at < self.miss_interval:
                    return
                self._miss_fetched_at = started
            assert self._http is not None and self.jwks_uri is not None
            try:
                response = await self._http.get(self.jwks_uri, headers={"Accept": "application/json"})
                response.raise_for_status()
                keys = self._import(orjson.loads(response.content))
            except Exception as exc:  # fail closed, keep the old keys
                log.warning("JWKS fetch from %s failed: %s", self.jwks_uri, type(exc).__name__)
                # Try again after miss_interval, not on every request while the issuer is down.
                self._fetched_at = time.monotonic() - self.cache_ttl + self.miss_interval
                return
            self._keys = keys
            self._fetched_at = time.monotonic()

    def _select(self, kid: Any) -> Any:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    async def verify(self, token: str) -> AccessToken | None:
        header = _unverified_header(token)
        if header is None or header.get("alg") not in self.algorithms:
            return None
        kid = header.get("kid")
        if self.jwks_uri is not None and time.monotonic() - self._fetched_at > self.cache_ttl:
            await self._fetch(miss=False)
        key = self._select(kid)
        if key is None and self.jwks_uri is not None:
            await self._fetch(miss=True)  # the issuer may have rotated its keys
            key = self._select(kid)
        if key is None:
            return None
        from joserfc.errors import JoseError

        options: dict[str, Any] = {name: {"essential": True} for name in self.required_claims}
        options["iss"] = {"essential": True, "value": self.issuer}
        if self.audience:
            options["aud"] = {"essential": True, "values": list(self.audience)}
        try:
            decoded = self._jwt.decode(token, key, algorithms=self.algorithms)
            self._jwt.JWTClaimsRegistry(leeway=int(self.leeway), **options).validate(decoded.claims)
        except (JoseError, ValueError, TypeError):
            return None
        return _access(decoded.claims)

    async def aclose(self) -> None:
        if self._http is not None and self._own_http:
            await self._http.aclose()


class IntrospectionVerifier:
    """Verifies opaque tokens by RFC 7662 introspection, with a bounded cache."""

    def __init__(
        self,
        endpoint: str,
        *,
        client_id: str | None = None,
        client_secret: str | None = None,
        issuer: str | None = None,
        audience: str | Sequence[str] | None = None,
        cache_ttl: float = 60.0,
        max_entries: int = 10_000,
        http: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.endpoint = endpoint
        self.issuer = issuer
        self.audience = _as_tuple(audience)
        self.cache_ttl = cache_ttl
        self.max_entries = max_entries
        self._auth = (client_id, client_secret or "") if client_id is not None else None
        self._http = _http_client(http, timeout, "token introspection")
        self._own_http = http is None
        # sha256(token) -> (valid until, monotonic; the answer or None for inactive)
        self._cache: OrderedDict[bytes, tuple[float, AccessToken | None]] = OrderedDict()

    async def _introspect(self, token: str) -> dict[str, Any] | None:
        try:
            response = await self._http.post(
                self.endpoint,
                data={"token": token, "token_type_hint": "access_token"},
                headers={"Accept": "application/json"},
                auth=self._auth if self._auth is not None else None,  # type: ignore[arg-type]
            )
            response.raise_for_status()
            answer = orjson.loads(response.content)
        except Exception as exc:  # fail closed
            log.warning("token introspection at %s failed: %s", self.endpoint, type(exc).__name__)
            return None
        return answer if isinstance(answer, dict) else None

    def _accept(self, answer: Mapping[str, Any]) -> AccessToken | None:
        if answer.get("active") is not True:
            return None
        if self.issuer is not None and answer.get("iss", self.issuer) != self.issuer:
            return None
        if self.audience and not set(self.audience) & set(_as_tuple(answer.get("aud"))):
            return None
        now = time.time()
        exp, nbf = answer.get("exp"), answer.get("nbf")
        if isinstance(exp, (int, float)) and exp <= now:
            return None
        if isinstance(nbf, (int, float)) and nbf > now:
            return None
        return _access(answer)

    async def verify(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode()).digest()
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None:
            until, access = cached
            if until > now and (access is None or access.expires_at is None or access.expires_at > time.time()):
                return access
            del self._cache[digest]
        answer = await self._introspect(token)
        if answer is None:
            return None  # unreachable or malformed: not cached, the next request asks again
        access = self._accept(answer)
        self._cache[digest] = (now + self.cache_ttl, access)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return access

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()
