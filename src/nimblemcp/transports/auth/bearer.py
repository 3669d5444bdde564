"""The MCP server as an OAuth 2.1 resource server: Bearer tokens, PRM, challenges.

`BearerAuth` is ASGI middleware around the MCP app (CHECKLIST 23.1):
- it serves Protected Resource Metadata (RFC 9728) at the root and the path-inserted
  well-known URIs (AUTH-RS-01/02); challenges name the URI RFC 9728 §3.1 derives from
  the `resource` (behind a path prefix: `/.well-known/oauth-protected-resource/<prefix>/mcp`);
- every request must carry `Authorization: Bearer <token>`, on the MCP endpoint and on
  every other path of the app (`@server.route` pages) except `public_paths` (health
  probes), the metadata and CORS preflights; the token is checked by a user-supplied
  `TokenVerifier` on every request (AUTH-RS-04). A verifier that raises refuses the
  token (401), never a 500;
- the token must name this server in its audience (RFC 8707; AUTH-RS-05): `resource`
  or one of `audience`; a token with no audience at all is refused unless
  `allow_missing_audience=True` (an opt-out for issuers that never send one);
- its `expires_at` is checked again, with the verifier's `leeway` (clock skew);
- missing or invalid tokens get 401 and insufficient scope 403, each with a
  `WWW-Authenticate: Bearer` challenge naming the metadata URL and the scopes
  (AUTH-RS-03/06/08). Per-target scopes (`scopes_for`, `Server.require_scopes`) are
  read from `Mcp-Method`/`Mcp-Name` on 2026-07-28 requests and from the JSON-RPC body
  on requests without them (2025-11-25 sessions), so both eras get 403 with an
  `insufficient_scope` challenge they can step up from;
- the authenticated subject becomes `scope["nimblemcp.subject"]` (`_asgi.SUBJECT`; never
  `scope["user"]`, which Starlette's AuthenticationMiddleware owns), and the verified
  `AccessToken` `scope["nimblemcp.access"]`; the MCP app binds requestState, state
  handles, tasks and legacy sessions to the subject.
- with `dpop=DPoPVerifier(...)` it also accepts DPoP-bound tokens (RFC 9449):
  `Authorization: DPoP <token>` with a `DPoP` proof checked by `_dpop` (signature,
  `htm`/`htu`, `iat` window, `ath`, `jti` replay, nonce when required) whose key must
  be the one the token's `cnf.jkt` names (`AccessToken.jkt`); a bound token sent as
  Bearer is refused (§7.2); challenges name both schemes (§7.1) and a nonce error
  carries `DPoP-Nonce` (§9).
Tokens are never logged. Must not import the server or the dispatcher.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import orjson

from nimblemcp.errors import HeaderMismatch, InvalidDPoPProof
from nimblemcp.transports.auth._dpop import DPoPVerifier
from nimblemcp.transports.http._asgi import ACCESS, SUBJECT, endpoint_path, respond
from nimblemcp.types._http import HEADER_NAME
from nimblemcp.types._tool_headers import decode_header_value

if TYPE_CHECKING:
    from nimblemcp.transports.http._asgi import Message, Receive, Scope, Send

App = Callable[[Any, Any, Any], Awaitable[None]]

__all__ = ["AccessToken", "BearerAuth", "DPoPVerifier", "StaticTokens", "TokenVerifier"]

log = logging.getLogger("nimblemcp.auth")

_WELL_KNOWN = "/.well-known/oauth-protected-resource"
_TARGETED = frozenset({b"tools/call", b"prompts/get", b"resources/read"})
_TARGETED_NAMES = frozenset(t.decode() for t in _TARGETED)
_NONE: frozenset[str] = frozenset()


@dataclass(frozen=True)
class AccessToken:
    """What a verified token says: who, for which resource, with which scopes, until when."""

    subject: str
    scopes: frozenset[str] = frozenset()
    audience: tuple[str, ...] = ()
    expires_at: float | None = None  # epoch seconds
    claims: dict[str, Any] = field(default_factory=dict)
    #: The DPoP key thumbprint the token is bound to (`cnf.jkt`, RFC 9449 §6);
    #: when None, read from `claims["cnf"]["jkt"]` if present.
    jkt: str | None = None

    @property
    def bound_to(self) -> str | None:
        """The thumbprint of the key this token is bound to, None for a bearer token."""
        if self.jkt is not None:
            return self.jkt
        cnf = self.claims.get("cnf")
        jkt = cnf.get("jkt") if isinstance(cnf, dict) else None
        return jkt if isinstance(jkt, str) else None


class TokenVerifier(Protocol):
    """Checks a bearer token (signature, issuer, expiry); None when it is not valid.

    Called on every request; cache inside the verifier if introspection is costly. A
    verifier may declare `leeway` (seconds of clock skew it allows): `BearerAuth`'s own
    check of `expires_at` then allows the same."""

    async def verify(self, token: str) -> AccessToken | None: ...


class StaticTokens:
    """A fixed token table: for tests, demos and service-to-service setups."""

    def __init__(self, tokens: dict[str, AccessToken]) -> None:
        self._tokens = dict(tokens)

    async def verify(self, token: str) -> AccessToken | None:
        return self._tokens.get(token)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class BearerAuth:
    """ASGI middleware: PRM documents plus Bearer-token checks for one MCP app."""

    def __init__(
        self,
        app: App,
        *,
        verifier: TokenVerifier,
        resource: str,
        authorization_servers: Iterable[str],
        path: str = "/mcp",
        scopes_supported: Iterable[str] = (),
        required_scopes: Iterable[str] = (),
        resource_name: str | None = None,
        scopes_for: Callable[[str, str | None], frozenset[str]] | None = None,
        dpop: DPoPVerifier | None = None,
        audience: str | Iterable[str] = (),
        allow_missing_audience: bool = False,
        leeway: float | None = None,
        public_paths: Iterable[str] = (),
    ) -> None:
        self.app = app
        # Per-target scopes (`Server.scopes_needed`), read from Mcp-Method / Mcp-Name:
        # the app refuses a request whose headers disagree with its body.
        self.scopes_for = scopes_for
        self.dpop = dpop
        self.verifier = verifier
        self.resource = resource  # the canonical URI tokens must name (RFC 8707)
        # What a token's `aud` must contain one of: this resource, and any other name
        # the issuer gives it (`audience`).
        self.audiences = frozenset({resource, *([audience] if isinstance(audience, str) else audience)})
        self.allow_missing_audience = allow_missing_audience
        self.leeway = float(leeway if leeway is not None else getattr(verifier, "leeway", 0) or 0)
        self.path = path
        # Paths of the app served without a token (health probes): every other one needs one.
        self.public_paths = frozenset(public_paths)
        self.required = frozenset(required_scopes)
        servers = list(authorization_servers)
        if not servers:
            raise ValueError("name at least one authorization server (AUTH-RS-01)")
        document: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": servers,
            "bearer_methods_supported": ["header"],
        }
        scopes = [s for s in scopes_supported if s != "offline_access"]  # AUTH-RS-07
        if scopes:
            document["scopes_supported"] = scopes
        if resource_name:
            document["resource_name"] = resource_name
        if dpop is not None:  # RFC 9728 §2
            document["dpop_signing_alg_values_supported"] = list(dpop.algorithms)
        self.metadata = orjson.dumps(document)
        # RFC 9728 §3.1: the well-known suffix goes between the host and the resource's
        # own path (and query), so a resource behind a prefix names its prefix.
        parts = urlsplit(resource)
        suffix = parts.path if parts.path not in ("", "/") else ""
        query = f"?{parts.query}" if parts.query else ""
        self.metadata_url = f"{parts.scheme}://{parts.netloc}{_WELL_KNOWN}{suffix}{query}"
        # Served at the root, after the app's own endpoint path, and after the
        # resource's path (a proxy that routes the root well-known URI here as it is).
        self.metadata_paths = {_WELL_KNOWN, _WELL_KNOWN + (path if path != "/" else ""), _WELL_KNOWN + suffix}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_path = endpoint_path(scope)
        if request_path in self.metadata_paths and scope["method"] in ("GET", "HEAD"):
            await respond(send, 200, self.metadata, content_type=b"application/json")
            return
        if scope["method"] == "OPTIONS" or request_path in self.public_paths:
            await self.app(scope, receive, send)
            return
        scheme, token, proofs = self._credentials(scope)
        if token is None or (scheme == "dpop" and self.dpop is None):
            await self._challenge(send, 401, None)
            return
        try:
            access = await self.verifier.verify(token)
        except Exception as exc:  # a token the verifier chokes on is not a valid one
            log.warning("the token verifier raised %s: token refused", type(exc).__name__)
            access = None
        bad = "DPoP" if scheme == "dpop" else None
        if access is None or (access.expires_at is not None and access.expires_at + self.leeway <= time.time()):
            await self._challenge(send, 401, "invalid_token", "The access token is invalid or expired", scheme=bad)
            return
        if not access.audience:
            if not self.allow_missing_audience:
                await self._challenge(send, 401, "invalid_token", "The access token names no audience", scheme=bad)
                return
        elif self.audiences.isdisjoint(access.audience):
            await self._challenge(send, 401, "invalid_token", "The access token is for another resource", scheme=bad)
            return
        if not self.required <= access.scopes:
            await self._challenge(send, 403, "insufficient_scope", "More scope is needed")
            return
        bound = access.bound_to
        if scheme == "bearer" and bound is not None:  # RFC 9449 §7.2
            await self._challenge(send, 401, "invalid_token", "A DPoP-bound token needs the DPoP scheme",
                                  scheme="DPoP")
            return
        if scheme == "dpop":
            assert self.dpop is not None
            stale = await self._check_proof(scope, send, token, bound, proofs)
            if stale is None:
                return
            if stale:
                send = _with_nonce(send, self.dpop.current_nonce())
        if self.scopes_for is not None and request_path == self.path:
            targeted = await self._target_scopes(scope, receive)
            if targeted is None:
                return  # the client left while sending its body
            needed, receive = targeted
            if needed and not needed <= access.scopes:
                await self._challenge(send, 403, "insufficient_scope", "More scope is needed", needed)
                return
        await self.app({**scope, SUBJECT: access.subject, ACCESS: access}, receive, send)

    async def _check_proof(
        self, scope: Scope, send: Send, token: str, bound: str | None, proofs: list[str],
    ) -> bool | None:
        """None when refused (the answer is sent); else whether the proof's nonce
        is no longer the current one (the response then carries a fresh one)."""
        dpop = self.dpop
        assert dpop is not None
        if len(proofs) != 1:
            await self._challenge(send, 401, "invalid_dpop_proof", "Exactly one DPoP proof is needed",
                                  scheme="DPoP")
            return None
        try:
            jkt, nonce = await dpop.verify(proofs[0], method=scope["method"], urls=_urls(self.resource, scope),
                                           access_token=token)
        except InvalidDPoPProof as exc:
            headers = [(b"dpop-nonce", dpop.current_nonce().encode())] if exc.error == "use_dpop_nonce" else []
            await self._challenge(send, 401, exc.error, str(exc), scheme="DPoP", headers=headers)
            return None
        if bound is None or bound != jkt:
            await self._challenge(send, 401, "invalid_token", "The token is not bound to the proof's key",
                                  scheme="DPoP")
            return None
        return dpop.require_nonce and not dpop.nonce_is_current(nonce)

    async def _target_scopes(self, scope: Scope, receive: Receive) -> tuple[frozenset[str], Receive] | None:
        """The scopes the request's target needs, and the `receive` to hand on; None
        when the client disconnected. A 2026-07-28 request names its target in
        `Mcp-Method`/`Mcp-Name`; one without `Mcp-Method` (a 2025-11-25 session) is
        read from its body, which is then handed on unchanged."""
        assert self.scopes_for is not None
        method = name = None
        for key, value in scope["headers"]:
            if key == b"mcp-method":
                method = value
            elif key == b"mcp-name":
                name = value
        if method is None:
            if scope["method"] != "POST":
                return _NONE, receive
            return await self._body_scopes(receive)
        if method not in _TARGETED or name is None:
            return _NONE, receive
        try:
            target = decode_header_value(name, HEADER_NAME)
        except HeaderMismatch:
            return _NONE, receive  # the app answers the malformed header with 400
        return self.scopes_for(method.decode("latin-1"), target), receive

    async def _body_scopes(self, receive: Receive) -> tuple[frozenset[str], Receive] | None:
        """Read the body (the security guard outside bounds its size), find the target of
        each request in it, and replay the body to the app."""
        assert self.scopes_for is not None
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        needed: frozenset[str] = _NONE
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None  # the app answers -32700
        for request in decoded if isinstance(decoded, list) else [decoded]:
            if not isinstance(request, dict) or request.get("method") not in _TARGETED_NAMES:
                continue
            params = request.get("params")
            if isinstance(params, dict):
                target = params.get("uri" if request["method"] == "resources/read" else "name")
                if isinstance(target, str):
                    needed = needed | self.scopes_for(request["method"], target)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return needed, replay

    @staticmethod
    def _credentials(scope: Scope) -> tuple[str, str | None, list[str]]:
        """The authorization scheme (lower case), its token and the DPoP proofs."""
        scheme, token, proofs = "", None, []
        for key, value in scope["headers"]:
            if key == b"authorization" and token is None and not scheme:
                name, _, rest = value.decode("latin-1").partition(" ")
                scheme = name.lower()
                if scheme in ("bearer", "dpop") and rest.strip():
                    token = rest.strip()
            elif key == b"dpop":
                proofs.append(value.decode("latin-1"))
        return scheme, token, proofs

    async def _challenge(
        self, send: Send, status: int, error: str | None, description: str | None = None,
        scopes: frozenset[str] | None = None, *, scheme: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        """401/403 with `WWW-Authenticate`: the error goes on `scheme`'s challenge (or on
        Bearer's); with DPoP on, both schemes are offered (RFC 9449 §7.1). `scopes`: the
        target's own scopes, named beside the server-wide ones."""
        common = [f"resource_metadata={_quote(self.metadata_url)}"]
        wanted = self.required | scopes if scopes else self.required
        if wanted:
            common.append(f"scope={_quote(' '.join(sorted(wanted)))}")
        detail = []
        if error:
            detail.append(f"error={_quote(error)}")
        if description:
            detail.append(f"error_description={_quote(description)}")
        schemes = ["Bearer", "DPoP"] if self.dpop is not None else ["Bearer"]
        target = scheme or "Bearer"
        out = list(headers or [])
        for name in schemes:
            parts = list(common)
            if name == "DPoP" and self.dpop is not None:
                parts.insert(0, f"algs={_quote(' '.join(self.dpop.algorithms))}")
            if name == target:
                parts += detail
            out.append((b"www-authenticate", (name + " " + ", ".join(parts)).encode()))
        body = orjson.dumps({"error": error or "unauthorized", "error_description": description or
                             "Authorization required"})
        await respond(send, status, body, out, content_type=b"application/json")


def _urls(resource: str, scope: Scope) -> list[str]:
    """The URLs a proof's `htu` may name: the canonical resource, and the URL this
    request was sent to (as the Host header says)."""
    host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
    urls = [resource]
    if host:
        urls.append(f"{scope.get('scheme', 'http')}://{host}{scope.get('root_path', '')}{scope['path']}")
    return urls


def _with_nonce(send: Send, nonce: str) -> Send:
    """`send` that adds a fresh `DPoP-Nonce` to the response (RFC 9449 §9)."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"dpop-nonce", nonce.encode())]}
        await send(message)

    return wrapped
