"""Token verifiers for `BearerAuth`: signed JWTs checked against a JWKS, and RFC 7662
token introspection (issue 19, auth inside handlers; hardened in issue 37).

Both implement `TokenVerifier` (`async verify(token) -> AccessToken | None`) and return
the token's subject, scopes, audience, expiry and claims, which handlers see as
`ctx.principal` (or inject with `get_principal`).

- `JwtVerifier(jwks_uri=..., issuer=..., audience=...)`: fetches the issuer's JSON Web
  Key Set and keeps it for `cache_ttl` seconds (5 minutes), or for the issuer's
  `Cache-Control: max-age` when shorter (never below `miss_interval`): a key the
  issuer removed stops being trusted within that time. On a token whose `kid` it does
  not know (the issuer rotated its keys) it fetches the set again, at most once per
  `miss_interval` seconds, so forged key ids cannot make it hammer the issuer. A
  download gets `timeout` seconds in total (a slow issuer cannot hold requests longer;
  requests waiting for the same download share its outcome) and at most
  `max_jwks_bytes`. Checks the signature (asymmetric algorithms only unless told
  otherwise; never `none`), the `typ` header (`typ=`, see SECURITY.md for the default),
  `iss`, `aud` (when `audience` is given; `BearerAuth` checks the audience against the
  resource either way), `exp`, `nbf` and `iat` (with `leeway`). An unreachable issuer
  is asked again after `miss_interval`, keeping the keys it had. Built on joserfc
  (the `[auth]` extra).
- `IntrospectionVerifier(endpoint, client_id=..., client_secret=...)`: asks the
  authorization server (RFC 7662) whether the token is active; answers are cached per
  token hash for `cache_ttl` seconds (never past the token's `exp`), in a bounded table.
  Each call gets `timeout` seconds in total and at most `max_response_bytes`.
- `JwtVerifier.from_issuer(url, audience=...)`: the key set's URL from the issuer's
  discovery document (OpenID Connect, else RFC 8414), read on first use (a verifier is
  built at import, before any loop runs), checked to name this very issuer, and read
  again after `cache_ttl` like the keys. `scope_claims` says which claims hold scopes
  (`scope` and `scp` by default; identity-provider presets add `roles`,
  `permissions`...; a dotted name reads a nested claim). Presets per provider are in
  `transports.identity`.
- Key-set, discovery and introspection URLs must be `https://`; plain `http://` only to
  a loopback host, or with `allow_insecure_http=True`.

A verifier returns None for every token it cannot accept (bad signature, expired, wrong
issuer, audience or type, a malformed header, inactive, or the issuer unreachable:
fail closed); BearerAuth turns that into 401. Tokens are never logged. Imports httpx and
joserfc when constructed, not at import; may import `transports.http_auth` (the
protocol and `AccessToken`), `_extras`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import logging
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from nimblemcp._extras import needs_extra
from nimblemcp.transports.auth.bearer import AccessToken

if TYPE_CHECKING:
    import httpx

__all__ = ["TOKEN_TYPES", "IntrospectionVerifier", "JwtVerifier"]

log = logging.getLogger("nimblemcp.auth")

ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
#: `JwtVerifier(typ=...)`'s default: RFC 9068 access tokens (`at+jwt`), and the `JWT` or
#: absent `typ` most issuers still send; any other type (an ID-JAG, a logout token, a
#: DPoP proof...) is refused. `typ="at+jwt"` is RFC 9068's strict check.
TOKEN_TYPES: tuple[str | None, ...] = ("at+jwt", "JWT", None)
MAX_JWKS_BYTES = 512 * 1024  # a key set is a few kB; this leaves room for hundreds of keys
MAX_INTROSPECTION_BYTES = 64 * 1024


class _TooLarge(Exception):
    """An issuer's answer went past its size limit (the download was stopped)."""


def _why(exc: Exception) -> str:
    """What a failed call to the issuer is logged as (never its content)."""
    return f"answer too large ({exc})" if isinstance(exc, _TooLarge) else type(exc).__name__


def _as_tuple(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _media_type(typ: str | None) -> str | None:
    """A `typ` header value as a comparable media type (RFC 7515 §4.1.9: `application/`
    may be left out; media types compare without regard to case)."""
    if typ is None:
        return None
    typ = typ.lower()
    return typ if "/" in typ else "application/" + typ


def _loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_url(url: str, what: str, allow_insecure_http: bool) -> None:
    """`https://`, or `http://` to a loopback host (or when explicitly allowed): a key
    set or an introspection answer fetched in the clear could be swapped on the way."""
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and (allow_insecure_http or _loopback(parts.hostname))):
        return
    raise ValueError(f"{what} {url!r} must be https:// (plain http:// only to a loopback host, "
                     "or with allow_insecure_http=True)")


def _max_age(cache_control: str | None) -> float | None:
    """Seconds `Cache-Control` lets a response be reused (0 for no-store/no-cache), or None."""
    if not cache_control:
        return None
    age = None
    for part in cache_control.lower().split(","):
        name, _, value = part.strip().partition("=")
        if name in ("no-store", "no-cache"):
            return 0.0
        if name == "max-age":
            try:
                age = max(0.0, float(int(value.strip().strip('"'))))
            except ValueError:
                return None
    return age


async def _bounded(
    http: httpx.AsyncClient, method: str, url: str, *, limit: int, deadline: float, **options: Any,
) -> tuple[bytes, httpx.Headers]:
    """One request with a total deadline and a cap on the (decoded) body: a slow or
    endless issuer costs at most `deadline` seconds and `limit` bytes."""
    async with asyncio.timeout(deadline), http.stream(method, url, **options) as response:
        response.raise_for_status()
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _TooLarge(f"{declared} bytes")
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise _TooLarge(f"over {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks), response.headers


def _audience(value: Any) -> tuple[str, ...] | None:
    """`aud` as a tuple (RFC 7519: a string or an array of strings); None when malformed."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


SCOPE_CLAIMS: tuple[str, ...] = ("scope", "scp")


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    """A claim by name; `realm_access.roles` reads a nested one."""
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _scopes(claims: Mapping[str, Any], names: Sequence[str] = SCOPE_CLAIMS) -> frozenset[str]:
    """The scopes of every claim in `names`: a space-separated string (`scope`, RFC
    8693/9068) or a list of strings (`scp`, `roles`, `permissions`, as issuers send)."""
    found: set[str] = set()
    for name in names:
        value = _claim(claims, name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    return frozenset(found)


def _access(claims: Mapping[str, Any], scope_claims: Sequence[str] = SCOPE_CLAIMS) -> AccessToken | None:
    subject = claims.get("sub") or claims.get("client_id")
    audience = _audience(claims.get("aud"))
    if not isinstance(subject, str) or not subject or audience is None:
        return None
    exp = claims.get("exp")
    return AccessToken(
        subject=subject,
        scopes=_scopes(claims, scope_claims),
        audience=audience,
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
        discover: bool = False,
        scope_claims: Sequence[str] = SCOPE_CLAIMS,
        algorithms: Collection[str] = ASYMMETRIC,
        typ: str | Collection[str | None] = TOKEN_TYPES,
        leeway: float = 30.0,
        cache_ttl: float = 300.0,
        miss_interval: float = 30.0,
        required_claims: Collection[str] = ("exp",),
        http: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
        max_jwks_bytes: int = MAX_JWKS_BYTES,
        allow_insecure_http: bool = False,
    ) -> None:
        if (jwks_uri is not None) + (jwks is not None) + discover != 1:
            raise TypeError("JwtVerifier needs exactly one of jwks_uri= (fetched), jwks= (a fixed key "
                            "set) or discover=True (from the issuer's discovery document)")
        if "none" in algorithms:
            raise ValueError("JwtVerifier never accepts unsigned tokens (alg 'none')")
        if jwks_uri is not None:
            _check_url(jwks_uri, "jwks_uri", allow_insecure_http)
        if discover:
            _check_url(issuer, "issuer", allow_insecure_http)
        with needs_extra("auth", "JWT verification"):
            from joserfc import jwk, jwt
        self._jwk = jwk
        self._jwt = jwt
        self.issuer = issuer
        self.audience = _as_tuple(audience)
        self.jwks_uri = jwks_uri
        self.discover = discover
        self.allow_insecure_http = allow_insecure_http
        self.scope_claims = tuple(scope_claims)
        self.algorithms = list(algorithms)
        self.types = frozenset(_media_type(t) for t in ((typ,) if isinstance(typ, str) else typ))
        self.leeway = leeway
        self.cache_ttl = cache_ttl
        self.miss_interval = miss_interval
        self.required_claims = tuple(required_claims)
        self.timeout = timeout
        self.max_jwks_bytes = max_jwks_bytes
        self._http = _http_client(http, timeout, "JWKS fetching") if jwks_uri or discover else None
        self._own_http = http is None
        self._keys: dict[str | None, Any] = {}
        self._fresh_until = float("-inf")  # monotonic: fetch again from then on
        self._tried_at = float("-inf")  # monotonic: when the last download ended, well or not
        self._miss_at = float("-inf")  # monotonic: the last download for an unknown kid, or that failed
        self._lock = asyncio.Lock()
        if jwks is not None:
            self._keys = self._import(jwks)
            self._fresh_until = float("inf")

    @classmethod
    def from_issuer(cls, issuer: str, *, audience: str | Sequence[str] | None, **options: Any) -> JwtVerifier:
        """A verifier for the tokens of `issuer`, whose key set is found by discovery:
        `JwtVerifier.from_issuer("https://login.example.com", audience="api://notes")`.
        The other options are `JwtVerifier`'s."""
        return cls(issuer=issuer, audience=audience, discover=True, **options)

    async def _discovered_jwks_uri(self) -> str:
        """The `jwks_uri` of the issuer's discovery document (OpenID Connect's, then
        RFC 8414's), which must name this issuer exactly (no mix-up with another)."""
        assert self._http is not None
        base = self.issuer.rstrip("/")
        parts = urlsplit(base)
        documents = [f"{base}/.well-known/openid-configuration",
                     f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{parts.path}"]
        last: Exception | None = None
        for url in documents:
            try:
                body, _ = await _bounded(self._http, "GET", url, limit=self.max_jwks_bytes,
                                         deadline=self.timeout, headers={"Accept": "application/json"})
                document = orjson.loads(body)
            except Exception as exc:
                last = exc
                continue
            if not isinstance(document, dict):
                last = ValueError("a discovery document that is not a JSON object")
                continue
            if document.get("issuer") != self.issuer:
                raise ValueError(f"the discovery document at {url} names another issuer")
            jwks_uri = document.get("jwks_uri")
            if not isinstance(jwks_uri, str):
                raise ValueError(f"the discovery document at {url} has no jwks_uri")
            _check_url(jwks_uri, "jwks_uri", self.allow_insecure_http)
            return jwks_uri
        raise last or ValueError("no discovery document")

    def _import(self, jwks: Mapping[str, Any]) -> dict[str | None, Any]:
        keys: dict[str | None, Any] = {}
        entries = jwks.get("keys", ()) if isinstance(jwks, Mapping) else ()
        for data in entries if isinstance(entries, list) else ():
            if not isinstance(data, dict) or data.get("use", "sig") != "sig":
                continue
            kid = data.get("kid")
            if kid is not None and not isinstance(kid, str):
                continue
            try:
                key = self._jwk.import_key(data)
            except Exception:  # one malformed entry must not hide the others
                log.warning("ignoring a JWKS entry that does not import (kid=%r)", kid)
                continue
            keys[kid] = key
        return keys

    def _keep_for(self, max_age: float | None) -> float:
        """How long a fetched key set is used: `cache_ttl`, or the issuer's `max-age`
        when shorter, but never below `miss_interval`."""
        if max_age is None:
            return self.cache_ttl
        return min(self.cache_ttl, max(max_age, self.miss_interval))

    async def _fetch(self, *, miss: bool) -> None:
        """Fetch the key set; keeps the previous keys when the issuer fails. Requests
        that waited for a download that ended after they asked use its outcome."""
        asked = time.monotonic()
        async with self._lock:
            if self._tried_at >= asked:
                return
            if miss:
                if asked - self._miss_at < self.miss_interval:
                    return
                self._miss_at = asked
            assert self._http is not None
            try:
                if self.discover:  # again each time the keys are: the issuer may move them
                    self.jwks_uri = await self._discovered_jwks_uri()
                assert self.jwks_uri is not None
                body, headers = await _bounded(self._http, "GET", self.jwks_uri, limit=self.max_jwks_bytes,
                                               deadline=self.timeout, headers={"Accept": "application/json"})
                document = orjson.loads(body)
                if not isinstance(document, dict):
                    raise ValueError("not a JSON object")
                keys = self._import(document)
            except Exception as exc:  # fail closed, keep the old keys
                log.warning("JWKS fetch from %s failed: %s", self.jwks_uri or self.issuer, _why(exc))
                # Try again after miss_interval, not on every request (nor for every
                # unknown kid) while the issuer is down.
                self._fresh_until = time.monotonic() + self.miss_interval
                self._miss_at = asked
                return
            finally:
                self._tried_at = time.monotonic()
            self._keys = keys
            self._fresh_until = time.monotonic() + self._keep_for(_max_age(headers.get("cache-control")))

    def _select(self, kid: str | None) -> Any:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    async def verify(self, token: str) -> AccessToken | None:
        header = _unverified_header(token)
        if header is None or header.get("alg") not in self.algorithms:
            return None
        kid, typ = header.get("kid"), header.get("typ")
        if not isinstance(kid, str | None) or not isinstance(typ, str | None):
            return None  # a list or an object where a string belongs: malformed
        if _media_type(typ) not in self.types:
            return None
        fetched = self.jwks_uri is not None or self.discover
        if fetched and time.monotonic() >= self._fresh_until:
            await self._fetch(miss=False)
        key = self._select(kid)
        if key is None and fetched:
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
        return _access(decoded.claims, self.scope_claims)

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
        leeway: float = 30.0,
        cache_ttl: float = 60.0,
        max_entries: int = 10_000,
        http: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
        max_response_bytes: int = MAX_INTROSPECTION_BYTES,
        allow_insecure_http: bool = False,
    ) -> None:
        _check_url(endpoint, "introspection endpoint", allow_insecure_http)
        self.endpoint = endpoint
        self.issuer = issuer
        self.audience = _as_tuple(audience)
        self.leeway = leeway
        self.cache_ttl = cache_ttl
        self.max_entries = max_entries
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._auth = (client_id, client_secret or "") if client_id is not None else None
        self._http = _http_client(http, timeout, "token introspection")
        self._own_http = http is None
        # sha256(token) -> (valid until, monotonic; the answer or None for inactive)
        self._cache: OrderedDict[bytes, tuple[float, AccessToken | None]] = OrderedDict()

    async def _introspect(self, token: str) -> dict[str, Any] | None:
        try:
            body, _ = await _bounded(
                self._http, "POST", self.endpoint, limit=self.max_response_bytes, deadline=self.timeout,
                data={"token": token, "token_type_hint": "access_token"},
                headers={"Accept": "application/json"},
                auth=self._auth if self._auth is not None else None,
            )
            answer = orjson.loads(body)
        except Exception as exc:  # fail closed
            log.warning("token introspection at %s failed: %s", self.endpoint, _why(exc))
            return None
        return answer if isinstance(answer, dict) else None

    def _accept(self, answer: Mapping[str, Any]) -> AccessToken | None:
        if answer.get("active") is not True:
            return None
        if self.issuer is not None and answer.get("iss", self.issuer) != self.issuer:
            return None
        audience = _audience(answer.get("aud"))
        if audience is None or (self.audience and not set(self.audience) & set(audience)):
            return None
        now = time.time()
        exp, nbf = answer.get("exp"), answer.get("nbf")
        if isinstance(exp, (int, float)) and exp + self.leeway <= now:
            return None
        if isinstance(nbf, (int, float)) and nbf - self.leeway > now:
            return None
        return _access(answer)

    async def verify(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode()).digest()
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None:
            until, access = cached
            if until > now and (access is None or access.expires_at is None
                                or access.expires_at + self.leeway > time.time()):
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
