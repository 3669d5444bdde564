"""Token verifiers for the identity providers people use, each from what you registered
there: a client id, a tenant, a domain.

    from nimblemcp.transports.auth import identity

    verifier = identity.entra_id(tenant="contoso.onmicrosoft.com", client_id="6f1c...")
    app = server.asgi_app(auth={"verifier": verifier, "resource": "https://notes.example/mcp",
                                "authorization_servers": [verifier.issuer]})

Providers whose access tokens are JWTs get a `JwtVerifier` set up with the provider's
issuer (its key set found by discovery, or at the provider's documented URL), audience
and the claims that carry permissions, which become `ctx.principal.scopes`:

- `entra_id(tenant, client_id)`: issuer `https://login.microsoftonline.com/<tenant>/v2.0`,
  audience the app's id and `api://<client id>`; scopes from `scp` and app `roles`.
- `auth0(domain, audience)`: issuer `https://<domain>/`; scopes from `scope` and the
  RBAC `permissions`.
- `okta(domain, audience="api://default", server="default")`: issuer
  `https://<domain>/oauth2/<server>`; scopes from `scp`.
- `keycloak(url, realm, audience)`: issuer `<url>/realms/<realm>`; scopes from `scope`
  and the realm's roles (`realm_access.roles`).
- `workos(domain, audience=None)`: an AuthKit domain, issuer `https://<domain>`; scopes
  from `scope` and `permissions`.

Google and GitHub access tokens are opaque: a verifier asks the provider about each
token it has not seen (Google's `tokeninfo`, which must say the token was issued to
your client id; GitHub's user API, whose `X-OAuth-Scopes` header lists the scopes) and
keeps the answer, per token hash, for `cache_ttl` seconds (never past the token's
expiry), in a bounded table; concurrent requests with one new token share one question.
A refused token is remembered for `miss_ttl` seconds, an unreachable provider not at
all (fail closed, ask again). Tokens are never logged. GitHub tokens name no audience:
serve them with `allow_missing_audience=True` in the `auth` settings.

Every preset takes `JwtVerifier`'s (or the opaque verifier's) other options as keywords:
`http=`, `timeout=`, `leeway=`...
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from nimblemcp.transports.auth.bearer import AccessToken
from nimblemcp.transports.auth.verifiers import JwtVerifier, _check_url, _http_client, _why

if TYPE_CHECKING:
    import httpx

__all__ = [
    "OpaqueTokenVerifier",
    "auth0",
    "entra_id",
    "github",
    "google",
    "keycloak",
    "okta",
    "workos",
]

log = logging.getLogger("nimblemcp.auth")

MAX_ANSWER_BYTES = 256 * 1024


def entra_id(tenant: str, client_id: str, *, audience: str | Sequence[str] | None = None,
             **options: Any) -> JwtVerifier:
    """Microsoft Entra ID (v2.0 tokens): `entra_id("contoso.onmicrosoft.com", "6f1c...")`.
    `tenant` is the directory's id or domain."""
    issuer = f"https://login.microsoftonline.com/{_segment(tenant, 'tenant')}/v2.0"
    options.setdefault("scope_claims", ("scp", "roles"))
    return JwtVerifier.from_issuer(
        issuer, audience=audience if audience is not None else (client_id, f"api://{client_id}"), **options)


def auth0(domain: str, audience: str | Sequence[str], **options: Any) -> JwtVerifier:
    """Auth0: `auth0("notes.eu.auth0.com", "https://notes.example/mcp")` (the API's
    identifier is the audience)."""
    options.setdefault("scope_claims", ("scope", "permissions"))
    return JwtVerifier(issuer=f"https://{_host(domain)}/", audience=audience,
                       jwks_uri=f"https://{_host(domain)}/.well-known/jwks.json", **options)


def okta(domain: str, audience: str | Sequence[str] = "api://default", *, server: str = "default",
         **options: Any) -> JwtVerifier:
    """Okta with a custom authorization server: `okta("acme.okta.com")`."""
    options.setdefault("scope_claims", ("scp",))
    issuer = f"https://{_host(domain)}/oauth2/{_segment(server, 'server')}"
    return JwtVerifier(issuer=issuer, audience=audience, jwks_uri=f"{issuer}/v1/keys", **options)


def keycloak(url: str, realm: str, audience: str | Sequence[str], **options: Any) -> JwtVerifier:
    """Keycloak: `keycloak("https://sso.example.com", "staff", "notes-mcp")`."""
    options.setdefault("scope_claims", ("scope", "realm_access.roles"))
    issuer = f"{url.rstrip('/')}/realms/{_segment(realm, 'realm')}"
    return JwtVerifier(issuer=issuer, audience=audience,
                       jwks_uri=f"{issuer}/protocol/openid-connect/certs", **options)


def workos(domain: str, audience: str | Sequence[str] | None = None, **options: Any) -> JwtVerifier:
    """WorkOS AuthKit: `workos("notes.authkit.app")`."""
    options.setdefault("scope_claims", ("scope", "permissions"))
    return JwtVerifier.from_issuer(f"https://{_host(domain)}", audience=audience, **options)


def google(client_id: str, **options: Any) -> OpaqueTokenVerifier:
    """Google OAuth access tokens (opaque), asked about at Google's `tokeninfo`, which
    must say they were issued to `client_id`: `google("1234.apps.googleusercontent.com")`."""
    base = options.pop("api_url", "https://oauth2.googleapis.com").rstrip("/")

    def accept(answer: Mapping[str, Any], headers: Mapping[str, str]) -> AccessToken | None:
        if client_id not in (answer.get("aud"), answer.get("azp")):
            return None
        subject = answer.get("sub")
        if not isinstance(subject, str) or not subject:
            return None
        scope = answer.get("scope")
        return AccessToken(subject=subject, scopes=frozenset(scope.split() if isinstance(scope, str) else ()),
                           expires_at=_number(answer.get("exp")), claims=dict(answer))

    return OpaqueTokenVerifier(lambda token: f"{base}/tokeninfo?access_token={quote(token, safe='')}",
                               accept, bearer=False, **options)


def github(**options: Any) -> OpaqueTokenVerifier:
    """GitHub OAuth and app user tokens (opaque), asked about at GitHub's user API:
    `github()`, or `github(api_url="https://github.example.com/api/v3")` for GitHub
    Enterprise Server. The subject is the user's numeric id; `claims` hold `login`,
    `name` and `email`; scopes are the token's OAuth scopes."""
    base = options.pop("api_url", "https://api.github.com").rstrip("/")

    def accept(answer: Mapping[str, Any], headers: Mapping[str, str]) -> AccessToken | None:
        user_id = answer.get("id")
        if not isinstance(user_id, int) or isinstance(user_id, bool):
            return None
        scopes = frozenset(s.strip() for s in headers.get("x-oauth-scopes", "").split(",") if s.strip())
        claims = {k: answer.get(k) for k in ("login", "name", "email", "id") if k in answer}
        return AccessToken(subject=str(user_id), scopes=scopes, claims=claims)

    options.setdefault("headers", {"Accept": "application/vnd.github+json",
                                   "X-GitHub-Api-Version": "2022-11-28"})
    return OpaqueTokenVerifier(lambda token: f"{base}/user", accept, **options)


Accept = Callable[[Mapping[str, Any], Mapping[str, str]], "AccessToken | None"]


class OpaqueTokenVerifier:
    """A token checked by asking its provider (see the module docstring): `url(token)`
    is asked (with the token as a Bearer credential unless `bearer=False`), and
    `accept(answer, headers)` turns a 200 answer into the principal (None: refused)."""

    def __init__(
        self,
        url: Callable[[str], str],
        accept: Accept,
        *,
        bearer: bool = True,
        headers: Mapping[str, str] | None = None,
        cache_ttl: float = 300.0,
        miss_ttl: float = 30.0,
        max_entries: int = 10_000,
        leeway: float = 30.0,
        http: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
        max_response_bytes: int = MAX_ANSWER_BYTES,
        allow_insecure_http: bool = False,
    ) -> None:
        _check_url(url("probe"), "token endpoint", allow_insecure_http)
        self._url = url
        self._accept = accept
        self._bearer = bearer
        self._headers = dict(headers or {})
        self.cache_ttl = cache_ttl
        self.miss_ttl = miss_ttl
        self.max_entries = max_entries
        self.leeway = leeway
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.asked = 0  # questions sent to the provider (for operators and tests)
        self._http = _http_client(http, timeout, "token checks")
        self._own_http = http is None
        # sha256(token) -> (valid until, monotonic; the principal, or None when refused)
        self._cache: OrderedDict[bytes, tuple[float, AccessToken | None]] = OrderedDict()
        self._asking: dict[bytes, asyncio.Future[tuple[bool, AccessToken | None]]] = {}

    async def verify(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode()).digest()
        cached = self._cache.get(digest)
        if cached is not None:
            until, access = cached
            if until > time.monotonic() and not self._expired(access):
                self._cache.move_to_end(digest)
                return access
            del self._cache[digest]
        pending = self._asking.get(digest)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._asking[digest] = pending
            try:
                pending.set_result(await self._ask(token))
            except asyncio.CancelledError:
                pending.cancel()
                raise
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: the waiters re-raise it
                raise
            finally:
                del self._asking[digest]
        answered, access = await asyncio.shield(pending)
        if answered:
            keep = self.cache_ttl if access is not None else self.miss_ttl
            self._cache[digest] = (time.monotonic() + keep, access)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return access

    def _expired(self, access: AccessToken | None) -> bool:
        return (access is not None and access.expires_at is not None
                and access.expires_at + self.leeway <= time.time())

    async def _ask(self, token: str) -> tuple[bool, AccessToken | None]:
        """(whether the provider answered, the principal); an unreachable provider or a
        malformed answer is not an answer (not cached: asked again next time)."""
        headers = dict(self._headers)
        if self._bearer:
            headers["Authorization"] = f"Bearer {token}"
        self.asked += 1
        url = self._url(token)
        try:
            async with asyncio.timeout(self.timeout), self._http.stream("GET", url, headers=headers) as response:
                if response.status_code in (400, 401, 403, 404):
                    return True, None  # the provider says no
                if response.status_code != 200:
                    raise ValueError(f"HTTP {response.status_code}")
                answer_headers = {k.lower(): v for k, v in response.headers.items()}
                chunks, size = [], 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self.max_response_bytes:
                        raise ValueError(f"an answer over {self.max_response_bytes} bytes")
                    chunks.append(chunk)
            answer = orjson.loads(b"".join(chunks))
        except Exception as exc:  # fail closed
            log.warning("token check at %s failed: %s", url.split("?", 1)[0], _why(exc))
            return False, None
        if not isinstance(answer, dict):
            return False, None
        access = self._accept(answer, answer_headers)
        return True, None if self._expired(access) else access

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.isdigit():
        return float(value)
    return None


def _host(domain: str) -> str:
    """A bare host name (`https://` and a trailing `/` tolerated), nothing after it."""
    host = domain.removeprefix("https://").rstrip("/")
    if not host or any(c in host for c in "/?#@ "):
        raise ValueError(f"{domain!r} is not a domain (e.g. 'notes.eu.auth0.com')")
    return host


def _segment(value: str, what: str) -> str:
    if not value or any(c in value for c in "/?#@ "):
        raise ValueError(f"{value!r} is not a {what} (one path segment)")
    return value
