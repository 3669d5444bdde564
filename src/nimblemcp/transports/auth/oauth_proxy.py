"""An OAuth proxy: the MCP authorization endpoints in front of a provider without
Dynamic Client Registration (GitHub, Google, Entra ID, most company IdPs).

MCP clients expect to register themselves (RFC 7591) at the server's authorization
server. Most identity providers only know clients registered by hand. `OAuthProxy` is
the authorization server MCP clients see: it serves RFC 8414 metadata, registers any
client, and runs each authorization upstream with the ONE client registered at the
provider by hand, then hands the provider's tokens to the MCP client:

    client ── /authorize ──> proxy ── consent page ── /authorize ──> provider (login)
    client <── ?code=ours ── proxy <── /callback?code=theirs ──────── provider
    client ── /token (PKCE) ──> proxy ── code + secret + PKCE ──────> provider

- The proxy's own steps are checked as an authorization server must: exact redirect
  URIs (any port on a loopback host, RFC 8252 §7.3), PKCE S256 from every client,
  single-use codes bound to the client, its redirect URI and its challenge, refresh
  tokens bound to the client that received them.
- One upstream client for every MCP client is a confused deputy waiting to happen: a
  user who consented once at the provider would not be asked again for a second,
  malicious client. So the proxy shows its own consent page first, naming the client
  and where it sends the user back, with a form bound to the browser (a SameSite
  cookie), as the MCP security guidance asks of proxies.
- The provider's access tokens pass through unchanged: the resource server checks them
  against the provider (`JwtVerifier` on the provider's key set, with the MCP server's
  URL as audience when the provider honours resource indicators).
- Every record (clients, transactions, codes, refresh bindings) lives in a
  `KeyValueStore` with a lifetime: the memory store in one process, Redis for several
  instances behind round-robin (a flow may start on one instance and end on another).

`proxy.wrap(app)` puts the endpoints in front of an ASGI app (the MCP endpoint with
`auth=proxy.resource_server(verifier)`); everything else passes through.
Imports httpx (the upstream calls) and the store protocol; never the server.
"""

from __future__ import annotations

import base64
import hashlib
import html
import ipaddress
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote_plus, unquote, urlencode, urlsplit

from nimblemcp.backends.memory import MemoryStore
from nimblemcp.errors import McpError
from nimblemcp.transports.http._asgi import respond, respond_json
from nimblemcp.types._urls import origin_and_path

if TYPE_CHECKING:
    import httpx

    from nimblemcp.backends import KeyValueStore
    from nimblemcp.transports.http._asgi import Receive, Scope, Send

__all__ = ["OAuthProxy", "Upstream"]

App = Callable[[Any, Any, Any], Awaitable[None]]
_PREFIX = "oauth-proxy:"
_MAX_BODY = 16 * 1024
_MAX_REDIRECTS = 10
_COOKIE = "nimblemcp_oauth_consent"


@dataclass(frozen=True)
class Upstream:
    """The provider and the one client registered there by hand.

    Give the endpoints, or only `issuer` to read them from the provider's metadata
    (`/.well-known/openid-configuration` or RFC 8414's document) on first use.
    `auth_method` is how the proxy authenticates at the token endpoint:
    `client_secret_basic` (the default), `client_secret_post`, or `none`.
    `scopes` are asked for when a client asks for none."""

    client_id: str
    client_secret: str | None = None
    issuer: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    scopes: tuple[str, ...] = ()
    auth_method: str = "client_secret_basic"
    extra_authorize_params: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.issuer is None and not (self.authorization_endpoint and self.token_endpoint):
            raise ValueError("give the provider's issuer, or both of its endpoints")
        if self.auth_method not in ("client_secret_basic", "client_secret_post", "none"):
            raise ValueError(f"unknown token endpoint auth method {self.auth_method!r}")
        if self.auth_method != "none" and not self.client_secret:
            raise ValueError(f"{self.auth_method} needs the client_secret")


class _Refused(McpError):
    """An OAuth error answer: `error` and a description, for the client (never leaves
    the proxy: each endpoint turns it into its JSON answer)."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


class OAuthProxy:
    """The authorization server MCP clients see, in front of `upstream` (see the module
    docstring). `base_url` is where the proxy's endpoints are reached from outside (its
    issuer, e.g. `https://mcp.example.com`); `resource`, the MCP endpoint's URL, is
    sent upstream as the RFC 8707 resource indicator when `send_resource` is true."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        base_url: str,
        resource: str | None = None,
        store: KeyValueStore | None = None,
        http: httpx.AsyncClient | None = None,
        consent: bool = True,
        send_resource: bool = True,
        client_ttl: float = 30 * 24 * 3600,
        code_ttl: float = 300,
        flow_ttl: float = 600,
        refresh_ttl: float = 30 * 24 * 3600,
        server_name: str = "this MCP server",
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError(f"base_url must be an http(s) URL without query or fragment: {base_url!r}")
        if parts.scheme == "http" and not _loopback(parts.hostname or ""):
            raise ValueError("base_url must be https:// (plain http only on a loopback host)")
        self.upstream = upstream
        self.issuer = base_url.rstrip("/")
        self.resource = resource
        self.store: KeyValueStore = store if store is not None else MemoryStore()
        self._http = http
        self._own_http = False
        self.consent = consent
        self.send_resource = send_resource
        self.client_ttl, self.code_ttl, self.flow_ttl, self.refresh_ttl = client_ttl, code_ttl, flow_ttl, refresh_ttl
        self.server_name = server_name
        self.secure_cookie = parts.scheme == "https"
        base = parts.path.rstrip("/")
        self.paths = {f"{base}/{name}": name for name in ("register", "authorize", "consent", "callback", "token")}
        self.paths[f"/.well-known/oauth-authorization-server{base}"] = "metadata"
        self.callback_url = f"{self.issuer}/callback"
        self._upstream_metadata: dict[str, Any] | None = None

    # -- what a server needs from it ----------------------------------------------------

    @property
    def metadata(self) -> dict[str, Any]:
        """The RFC 8414 document of this authorization server."""
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "registration_endpoint": f"{self.issuer}/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
            "scopes_supported": list(self.upstream.scopes),
            "authorization_response_iss_parameter_supported": True,
        }

    def resource_server(self, verifier: Any, **options: Any) -> dict[str, Any]:
        """The `auth=` settings of the MCP endpoint this proxy fronts: its tokens are
        checked by `verifier`, and its metadata names this proxy as the authorization
        server (`server.asgi_app(auth=proxy.resource_server(verifier))`)."""
        if self.resource is None:
            raise ValueError("give OAuthProxy(resource=...) (the MCP endpoint's URL) first")
        return {"verifier": verifier, "resource": self.resource, "authorization_servers": [self.issuer],
                **options}

    def wrap(self, app: App) -> App:
        """`app` with the proxy's endpoints in front of it."""

        async def proxied(scope: Scope, receive: Receive, send: Send) -> None:
            name = self.paths.get(scope.get("path", "")) if scope["type"] == "http" else None
            if name is None:
                await app(scope, receive, send)
            else:
                await self.handle(name, scope, receive, send)

        return proxied

    async def aclose(self) -> None:
        """Close the HTTP client the proxy made for its upstream calls (not one you gave)."""
        if self._http is not None and self._own_http:
            await self._http.aclose()
            self._http = None

    # -- the endpoints --------------------------------------------------------------------

    async def handle(self, name: str, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method", "GET")
        expected = {"metadata": "GET", "authorize": "GET", "callback": "GET"}.get(name, "POST")
        if method != expected:
            await respond(send, 405, b"method not allowed", [(b"allow", expected.encode())])
            return
        try:
            if name == "metadata":
                await respond_json(send, 200, self.metadata, [(b"cache-control", b"max-age=3600")])
            elif name == "register":
                await respond_json(send, 201, await self._register(await _json_body(receive, scope)),
                                   [(b"cache-control", b"no-store")])
            elif name == "authorize":
                await self._authorize(_query(scope), scope, send)
            elif name == "consent":
                await self._consented(await _form_body(receive, scope), _cookies(scope), send)
            elif name == "callback":
                await self._callback(_query(scope), send)
            else:
                answer = await self._token(await _form_body(receive, scope), _headers(scope))
                await respond_json(send, 200, answer, [(b"cache-control", b"no-store"), (b"pragma", b"no-cache")])
        except _Refused as refused:
            await respond_json(send, refused.status, {"error": refused.error, "error_description": refused.description},
                               [(b"cache-control", b"no-store")])

    async def _register(self, body: Any) -> dict[str, Any]:
        """RFC 7591: any client may register; what it says is checked, not trusted."""
        if not isinstance(body, dict):
            raise _Refused("invalid_client_metadata", "the body must be a JSON object")
        uris = body.get("redirect_uris")
        if not isinstance(uris, list) or not uris or len(uris) > _MAX_REDIRECTS:
            raise _Refused("invalid_redirect_uri", f"redirect_uris: 1 to {_MAX_REDIRECTS} URIs")
        for uri in uris:
            if not isinstance(uri, str) or not _acceptable_redirect(uri):
                raise _Refused("invalid_redirect_uri", f"not an acceptable redirect URI: {str(uri)[:200]!r}")
        method = body.get("token_endpoint_auth_method", "none")
        if method not in ("none", "client_secret_post", "client_secret_basic"):
            raise _Refused("invalid_client_metadata", f"token_endpoint_auth_method {str(method)[:50]!r}")
        name = body.get("client_name")
        client: dict[str, Any] = {
            "client_id": "mcp-" + secrets.token_urlsafe(18),
            "client_id_issued_at": int(time.time()),
            "redirect_uris": uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method,
        }
        if isinstance(name, str) and name.strip():
            client["client_name"] = name.strip()[:200]
        record = dict(client)
        if method != "none":
            secret = secrets.token_urlsafe(32)
            client["client_secret"] = secret
            client["client_secret_expires_at"] = 0
            record["secret_hash"] = _digest(secret)
        await self.store.set(_PREFIX + "client:" + client["client_id"], _dump(record), self.client_ttl)
        return client

    async def _client(self, client_id: Any) -> dict[str, Any] | None:
        if not isinstance(client_id, str) or not client_id.startswith("mcp-") or len(client_id) > 100:
            return None
        raw = await self.store.get(_PREFIX + "client:" + client_id)
        return _load(raw) if raw is not None else None

    async def _authorize(self, params: dict[str, str], scope: Scope, send: Send) -> None:
        client = await self._client(params.get("client_id"))
        redirect = params.get("redirect_uri")
        if client is None:
            raise _Refused("invalid_request", "unknown client_id: register first (RFC 7591)")
        if redirect is None and len(client["redirect_uris"]) == 1:
            redirect = client["redirect_uris"][0]
        if redirect is None or not _redirect_matches(redirect, client["redirect_uris"]):
            raise _Refused("invalid_request", "redirect_uri is not one the client registered")
        # From here on errors go back to the client, as RFC 6749 §4.1.2.1 says.
        state = params.get("state")

        async def back(error: str, description: str) -> None:
            await _redirect(send, _with_query(redirect, {"error": error, "error_description": description,
                                                         "state": state, "iss": self.issuer}))

        if params.get("response_type") != "code":
            await back("unsupported_response_type", "only response_type=code")
            return
        challenge = params.get("code_challenge")
        if not challenge or params.get("code_challenge_method") != "S256" or not 43 <= len(challenge) <= 128:
            await back("invalid_request", "PKCE is required: code_challenge with code_challenge_method=S256")
            return
        flow = {
            "client_id": client["client_id"], "redirect_uri": redirect, "state": state,
            "challenge": challenge, "scope": params.get("scope"), "verifier": secrets.token_urlsafe(48),
            "csrf": secrets.token_urlsafe(24),
        }
        flow_id = secrets.token_urlsafe(24)
        await self.store.set(_PREFIX + "flow:" + flow_id, _dump(flow), self.flow_ttl)
        if not self.consent:
            await self._to_upstream(flow_id, flow, send)
            return
        await self._consent_page(flow_id, flow, client, send)

    async def _consent_page(self, flow_id: str, flow: dict[str, Any], client: dict[str, Any], send: Send) -> None:
        who = html.escape(client.get("client_name") or client["client_id"])
        back_to = html.escape(urlsplit(flow["redirect_uri"]).netloc or flow["redirect_uri"])
        scope = html.escape(flow.get("scope") or " ".join(self.upstream.scopes) or "(none named)")
        page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Allow access?</title>
<meta name="viewport" content="width=device-width"></head><body>
<h1>Allow {who} to use {html.escape(self.server_name)}?</h1>
<p>An application calling itself <strong>{who}</strong> asks to act for you on
{html.escape(self.server_name)}. You will sign in at your identity provider next, and be sent back
to <strong>{back_to}</strong>. Scopes: <code>{scope}</code>.</p>
<p>Allow it only if you started this from that application.</p>
<form action="consent" method="post">
<input type="hidden" name="flow" value="{flow_id}">
<input type="hidden" name="csrf" value="{flow['csrf']}">
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form></body></html>""".encode()
        cookie = f"{_COOKIE}={flow['csrf']}; Path={urlsplit(self.issuer).path or '/'}; HttpOnly; SameSite=Strict; Max-Age={int(self.flow_ttl)}"
        if self.secure_cookie:
            cookie += "; Secure"
        await respond(send, 200, page, [(b"set-cookie", cookie.encode()), (b"cache-control", b"no-store"),
                                         (b"x-frame-options", b"DENY"),
                                         (b"content-security-policy", b"default-src 'none'; form-action 'self'; frame-ancestors 'none'")],
                      content_type=b"text/html; charset=utf-8")

    async def _consented(self, form: dict[str, str], cookies: dict[str, str], send: Send) -> None:
        flow_id = form.get("flow", "")
        raw = await self.store.get(_PREFIX + "flow:" + flow_id) if flow_id else None
        flow = _load(raw) if raw is not None else None
        if flow is None:
            raise _Refused("invalid_request", "this sign-in expired or is unknown: start again from the application")
        csrf = flow.get("csrf", "")
        if not (secrets.compare_digest(form.get("csrf", ""), csrf) and secrets.compare_digest(cookies.get(_COOKIE, ""), csrf)):
            raise _Refused("invalid_request", "the consent form did not come from this browser", 403)
        if form.get("decision") != "allow":
            await self.store.delete(_PREFIX + "flow:" + flow_id)
            await _redirect(send, _with_query(flow["redirect_uri"], {
                "error": "access_denied", "error_description": "the user denied access",
                "state": flow.get("state"), "iss": self.issuer}))
            return
        await self._to_upstream(flow_id, flow, send)

    async def _to_upstream(self, flow_id: str, flow: dict[str, Any], send: Send) -> None:
        endpoints = await self._endpoints()
        query = {
            **self.upstream.extra_authorize_params,
            "response_type": "code",
            "client_id": self.upstream.client_id,
            "redirect_uri": self.callback_url,
            "state": flow_id,
            "code_challenge": _challenge(flow["verifier"]),
            "code_challenge_method": "S256",
        }
        scope = flow.get("scope") or " ".join(self.upstream.scopes)
        if scope:
            query["scope"] = scope
        if self.send_resource and self.resource:
            query["resource"] = self.resource
        await _redirect(send, _with_query(endpoints["authorization_endpoint"], query))

    async def _callback(self, params: dict[str, str], send: Send) -> None:
        flow_id = params.get("state", "")
        raw = await self.store.get(_PREFIX + "flow:" + flow_id) if flow_id else None
        if raw is None or not await self.store.delete(_PREFIX + "flow:" + flow_id):
            raise _Refused("invalid_request", "this sign-in expired, is unknown, or was already completed")
        flow = _load(raw)
        back = {"state": flow.get("state"), "iss": self.issuer}
        if "error" in params or "code" not in params:
            error = params.get("error", "server_error")
            await _redirect(send, _with_query(flow["redirect_uri"], {
                **back, "error": error if error in _UPSTREAM_ERRORS else "server_error",
                "error_description": "the identity provider refused: " + params.get("error_description", error)[:300]}))
            return
        try:
            tokens = await self._upstream_token({
                "grant_type": "authorization_code", "code": params["code"],
                "redirect_uri": self.callback_url, "code_verifier": flow["verifier"],
            })
        except _Refused as refused:
            await _redirect(send, _with_query(flow["redirect_uri"], {
                **back, "error": "server_error", "error_description": refused.description[:300]}))
            return
        code = secrets.token_urlsafe(32)
        record = {"client_id": flow["client_id"], "redirect_uri": flow["redirect_uri"],
                  "challenge": flow["challenge"], "tokens": tokens}
        await self.store.set(_PREFIX + "code:" + _digest(code), _dump(record), self.code_ttl)
        await _redirect(send, _with_query(flow["redirect_uri"], {**back, "code": code}))

    async def _token(self, form: dict[str, str], headers: dict[str, str]) -> dict[str, Any]:
        client = await self._authenticate(form, headers)
        grant = form.get("grant_type")
        if grant == "authorization_code":
            key = _PREFIX + "code:" + _digest(form.get("code", ""))
            raw = await self.store.get(key)
            if raw is None or not await self.store.delete(key):  # single use, also across instances
                raise _Refused("invalid_grant", "the code is unknown, expired or already used")
            record = _load(raw)
            if record["client_id"] != client["client_id"]:
                raise _Refused("invalid_grant", "the code was issued to another client")
            if form.get("redirect_uri", record["redirect_uri"]) != record["redirect_uri"]:
                raise _Refused("invalid_grant", "redirect_uri differs from the authorization request's")
            verifier = form.get("code_verifier", "")
            if not 43 <= len(verifier) <= 128 or not secrets.compare_digest(_challenge(verifier), record["challenge"]):
                raise _Refused("invalid_grant", "code_verifier does not match the code_challenge (PKCE)")
            tokens = record["tokens"]
        elif grant == "refresh_token":
            refresh = form.get("refresh_token", "")
            bound = await self.store.get(_PREFIX + "refresh:" + _digest(refresh)) if refresh else None
            if bound is None or bound.decode() != client["client_id"]:
                raise _Refused("invalid_grant", "unknown refresh token, or one issued to another client")
            asked: dict[str, str] = {"grant_type": "refresh_token", "refresh_token": refresh}
            if form.get("scope"):
                asked["scope"] = form["scope"]
            tokens = await self._upstream_token(asked)
            if tokens.get("refresh_token") and tokens["refresh_token"] != refresh:
                await self.store.delete(_PREFIX + "refresh:" + _digest(refresh))  # rotated
        else:
            raise _Refused("unsupported_grant_type", "authorization_code or refresh_token")
        if isinstance(tokens.get("refresh_token"), str):
            await self.store.set(_PREFIX + "refresh:" + _digest(tokens["refresh_token"]),
                                 client["client_id"].encode(), self.refresh_ttl)
        return {k: tokens[k] for k in ("access_token", "token_type", "expires_in", "refresh_token", "scope")
                if k in tokens}

    async def _authenticate(self, form: dict[str, str], headers: dict[str, str]) -> dict[str, Any]:
        """The client of a token request: public clients name themselves, confidential
        ones prove it with their secret (in the form or HTTP Basic)."""
        client_id, secret = form.get("client_id"), form.get("client_secret")
        basic = headers.get("authorization", "")
        if basic[:6].lower() == "basic ":
            try:
                user, _, password = base64.b64decode(basic[6:], validate=True).decode().partition(":")
            except ValueError:
                raise _Refused("invalid_client", "malformed Basic credentials", 401) from None
            client_id, secret = unquote(user.replace("+", " ")), unquote(password.replace("+", " "))
        client = await self._client(client_id)
        if client is None:
            raise _Refused("invalid_client", "unknown client", 401)
        confidential = client["token_endpoint_auth_method"] != "none"
        if confidential and not (secret and secrets.compare_digest(_digest(secret), client.get("secret_hash", ""))):
            raise _Refused("invalid_client", "wrong or missing client secret", 401)
        return client

    # -- upstream ---------------------------------------------------------------------------

    def _client_http(self) -> httpx.AsyncClient:
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(timeout=httpx.Timeout(15.0), follow_redirects=False)
            self._own_http = True
        return self._http

    async def _endpoints(self) -> dict[str, Any]:
        up = self.upstream
        if up.authorization_endpoint and up.token_endpoint:
            return {"authorization_endpoint": up.authorization_endpoint, "token_endpoint": up.token_endpoint}
        if self._upstream_metadata is None:
            assert up.issuer is not None
            issuer = up.issuer.rstrip("/")
            origin, path = origin_and_path(issuer)
            tried = []
            for url in (f"{issuer}/.well-known/openid-configuration",
                        f"{origin}/.well-known/oauth-authorization-server{path}"):
                try:
                    response = await self._client_http().get(url, headers={"accept": "application/json"})
                    doc = response.json() if response.status_code == 200 else None
                except Exception as exc:  # unreachable, not JSON: try the next form
                    tried.append(f"{url}: {type(exc).__name__}")
                    continue
                if isinstance(doc, dict) and doc.get("issuer", "").rstrip("/") == issuer and \
                        isinstance(doc.get("authorization_endpoint"), str) and isinstance(doc.get("token_endpoint"), str):
                    self._upstream_metadata = doc
                    break
                tried.append(f"{url}: no usable metadata")
            else:
                raise _Refused("server_error", "the identity provider's metadata: " + "; ".join(tried), 502)
        return self._upstream_metadata

    async def _upstream_token(self, form: dict[str, str]) -> dict[str, Any]:
        up = self.upstream
        endpoint = (await self._endpoints())["token_endpoint"]
        body = dict(form)
        headers = {"accept": "application/json"}
        if up.auth_method == "client_secret_basic":  # RFC 6749 §2.3.1: each part form-encoded
            pair = f"{_form_encode(up.client_id)}:{_form_encode(up.client_secret or '')}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            body["client_id"] = up.client_id
            if up.auth_method == "client_secret_post":
                body["client_secret"] = up.client_secret or ""
        if self.send_resource and self.resource:
            body["resource"] = self.resource
        try:
            response = await self._client_http().post(endpoint, data=body, headers=headers)
            answer = response.json()
        except Exception as exc:
            raise _Refused("server_error", f"the identity provider's token endpoint failed: {type(exc).__name__}", 502) from None
        if response.status_code != 200 or not isinstance(answer, dict) or not isinstance(answer.get("access_token"), str):
            error = answer.get("error") if isinstance(answer, dict) else None
            if error == "invalid_grant":  # an expired or revoked refresh token: the client's to handle
                raise _Refused("invalid_grant", "the identity provider refused the grant")
            raise _Refused("server_error", f"the identity provider answered {response.status_code}"
                           + (f" ({error})" if isinstance(error, str) else ""), 502)
        return answer


_UPSTREAM_ERRORS = frozenset({"access_denied", "invalid_scope", "temporarily_unavailable", "server_error",
                              "login_required", "consent_required", "interaction_required"})


# -- small helpers ------------------------------------------------------------------------


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _acceptable_redirect(uri: str) -> bool:
    """https anywhere, http only on a loopback host, or a private-use scheme of a native
    app (RFC 8252 §7.1: a reverse domain name such as `com.example.app:/cb`); never a
    fragment, never `javascript:` or `data:`."""
    parts = urlsplit(uri)
    if parts.fragment or len(uri) > 2000:
        return False
    if parts.scheme == "https":
        return bool(parts.netloc)
    if parts.scheme == "http":
        return _loopback(parts.hostname or "")
    return "." in parts.scheme and parts.scheme not in ("javascript", "data")


def _redirect_matches(uri: str, registered: Iterable[str]) -> bool:
    """Exact match, except that a loopback redirect may use any port (RFC 8252 §7.3)."""
    for known in registered:
        if uri == known:
            return True
        a, b = urlsplit(uri), urlsplit(known)
        if a.scheme == b.scheme == "http" and _loopback(a.hostname or "") and a.hostname == b.hostname \
                and (a.path, a.query) == (b.path, b.query):
            return True
    return False


def _form_encode(value: str) -> str:
    return quote_plus(value, safe="")


def _challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def _digest(secret: str) -> str:
    """Codes, secrets and refresh tokens are stored under their hash, never as they are."""
    return hashlib.sha256(secret.encode()).hexdigest()


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _load(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw)
    assert isinstance(value, dict)
    return value


def _with_query(url: str, params: Mapping[str, Any]) -> str:
    extra = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{url}{'&' if urlsplit(url).query else '?'}{extra}"


async def _redirect(send: Send, location: str) -> None:
    await respond(send, 302, b"", [(b"location", location.encode()), (b"cache-control", b"no-store")])


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _query(scope: Scope) -> dict[str, str]:
    return dict(parse_qsl(scope.get("query_string", b"").decode("utf-8", "replace"), keep_blank_values=True))


def _cookies(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in _headers(scope).get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            found[name] = value
    return found


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Refused("invalid_request", "the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY:
            raise _Refused("invalid_request", f"the body is larger than {_MAX_BODY} bytes", 413)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _json_body(receive: Receive, scope: Scope) -> Any:
    if not _headers(scope).get("content-type", "").lower().startswith("application/json"):
        raise _Refused("invalid_client_metadata", "send the client metadata as application/json")
    try:
        return json.loads(await _body(receive))
    except ValueError:
        raise _Refused("invalid_client_metadata", "the body is not JSON") from None


async def _form_body(receive: Receive, scope: Scope) -> dict[str, str]:
    if not _headers(scope).get("content-type", "").lower().startswith("application/x-www-form-urlencoded"):
        raise _Refused("invalid_request", "send the parameters as application/x-www-form-urlencoded")
    pairs = parse_qsl((await _body(receive)).decode("utf-8", "replace"), keep_blank_values=True)
    form: dict[str, str] = {}
    for key, value in pairs:
        if key in form:  # RFC 6749 §3.1: parameters must not be repeated
            raise _Refused("invalid_request", f"the parameter {key!r} is repeated")
        form[key] = value
    return form
