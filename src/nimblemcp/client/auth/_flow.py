"""One OAuth 2.1 authorization-code flow against a discovered authorization server.

`OAuthConfig` holds what the application decides (redirect URI, the `on_authorize`
callback, pre-registered credentials, a Client ID Metadata Document URL). The steps:
`obtain_client` (pre-registered → CIMD → DCR, AUTH-C-05..08), `choose_scopes`
(AUTH-C-12/15), `authorize` (PKCE S256 only and only when advertised, `resource`,
`state`, the RFC 9207 `iss` checks before the code is used, AUTH-C-09..11) and the
token endpoint calls `exchange_code` / `refresh` / `client_credentials` with
`client_secret_basic`, `client_secret_post`, `private_key_jwt` (RFC 7523 §2.2) or
`none` (AUTH-C-15). Every token request goes through `token_request`, which adds the
client authentication and, when a `DPoP` key is in use, a proof for the token
endpoint, retried once with the server's nonce on `use_dpop_nonce` (RFC 9449 §5, §8).
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import httpx

from nimblemcp.errors import AuthError, AuthorizationDenied

from ._assertion import CLIENT_ASSERTION_TYPE, client_assertion
from ._store import ClientRegistration, PreRegistered, TokenSet, TokenStore

if TYPE_CHECKING:
    from ._dpop import DPoP

__all__ = [
    "AuthorizationDenied",
    "AuthorizeCallback",
    "OAuthConfig",
    "authorize",
    "choose_scopes",
    "client_credentials",
    "exchange_code",
    "obtain_client",
    "pre_registered_client",
    "refresh",
    "token_request",
]

#: Receives the authorization URL; returns the URL the authorization server redirected
#: the user agent to (carrying `code`, `state` and possibly `iss`).
AuthorizeCallback = Callable[[str], Awaitable[str] | str]
"""`on_authorize(url)`: show the user the authorization URL (open a browser) and return
the redirect URL the provider sent them back to (with `code` and `state`)."""


def no_browser(url: str) -> str:
    raise AuthError(
        "the server requires OAuth authorization, but no on_authorize callback was given;"
        " pass on_authorize=... that opens this URL in a browser and returns the redirect"
        f" URL it lands on: {url}")


@dataclass(slots=True)
class OAuthConfig:
    """What the application decides about its OAuth identity and user interaction."""

    on_authorize: AuthorizeCallback = no_browser
    redirect_uri: str = "http://localhost:8765/callback"
    client_name: str = "nimblemcp client"
    client_metadata_url: str | None = None
    pre_registered: Sequence[PreRegistered] = ()
    application_type: str = "native"
    offline_access: bool = True
    #: "authorization_code" (a user) or "client_credentials" (a machine, no user).
    grant_type: str = "authorization_code"
    extra_registration: dict[str, Any] = field(default_factory=dict[str, Any])


def _secret_methods(metadata: dict[str, Any]) -> list[str]:
    supported = metadata.get("token_endpoint_auth_methods_supported")
    if not isinstance(supported, list):
        supported = ["client_secret_basic"]  # RFC 8414 §2 default
    return [m for m in ("client_secret_basic", "client_secret_post") if m in supported]


def _pick_method(metadata: dict[str, Any], secret: str | None, keyed: bool = False) -> str:
    if keyed:
        return "private_key_jwt"
    if secret is None:
        return "none"
    methods = _secret_methods(metadata)
    return methods[0] if methods else "client_secret_basic"


async def obtain_client(
    http: httpx.AsyncClient, config: OAuthConfig, store: TokenStore,
    issuer: str, metadata: dict[str, Any],
) -> ClientRegistration:
    """AUTH-C-05: pre-registered for this issuer → one registered here before → CIMD
    when the server supports it → Dynamic Client Registration."""
    pre = pre_registered_client(config, issuer, metadata)
    if pre is not None:
        return pre
    stored = await store.get_client(issuer)
    if stored is not None:
        return stored
    if config.client_metadata_url and metadata.get("client_id_metadata_document_supported") is True:
        return ClientRegistration(config.client_metadata_url, None, "none", "cimd")
    endpoint = metadata.get("registration_endpoint")
    if not isinstance(endpoint, str):
        raise AuthError(
            f"{issuer} offers no registration endpoint and no Client ID Metadata Document"
            " support; pass pre-registered credentials for it")
    supported = metadata.get("token_endpoint_auth_methods_supported")
    wanted = "none" if isinstance(supported, list) and "none" in supported \
        else _pick_method(metadata, "")
    grants = ["authorization_code", "refresh_token"]
    body = {
        "client_name": config.client_name, "redirect_uris": [config.redirect_uri],
        "grant_types": grants, "response_types": ["code"],
        "token_endpoint_auth_method": wanted, "application_type": config.application_type,
        **config.extra_registration,
    }
    try:
        response = await http.post(endpoint, json=body)
    except httpx.HTTPError as exc:
        raise AuthError(f"client registration at {endpoint} failed: {exc!r}") from exc
    answer = _json(response)
    if response.status_code not in (200, 201) or not isinstance(answer.get("client_id"), str):
        raise AuthError(f"client registration refused (HTTP {response.status_code}):"
                        f" {answer.get('error')} {answer.get('error_description') or ''}".strip())
    secret = answer.get("client_secret") if isinstance(answer.get("client_secret"), str) else None
    method = answer.get("token_endpoint_auth_method")
    if not isinstance(method, str) or secret is None:
        method = _pick_method(metadata, secret)
    client = ClientRegistration(answer["client_id"], secret, method, "dcr", (config.redirect_uri,))
    await store.set_client(issuer, client)
    return client


def pre_registered_client(
    config: OAuthConfig, issuer: str, metadata: dict[str, Any]
) -> ClientRegistration | None:
    """The application's credentials for `issuer`, if it gave any (AUTH-C-08)."""
    for pre in config.pre_registered:
        if pre.issuer is None or pre.issuer == issuer:
            method = pre.auth_method or _pick_method(
                metadata, pre.client_secret, pre.signing_key is not None)
            return ClientRegistration(pre.client_id, pre.client_secret, method,
                                      "pre-registered", signing_key=pre.signing_key)
    return None


def choose_scopes(
    challenged: Sequence[str], resource_scopes: Sequence[str] | None,
    metadata: dict[str, Any], *, previous: Sequence[str] = (), offline_access: bool = True,
) -> tuple[str, ...]:
    """AUTH-C-12/13/15: the challenge's scopes (plus what was asked before, for a
    step-up), else every scope the resource supports, else none; `offline_access` is
    added only when the authorization server lists it."""
    base = list(challenged) if challenged else list(resource_scopes or ())
    scopes = list(dict.fromkeys([*previous, *base])) if challenged else base
    advertised = metadata.get("scopes_supported")
    if scopes and offline_access and isinstance(advertised, list) \
            and "offline_access" in advertised and "offline_access" not in scopes:
        scopes.append("offline_access")
    return tuple(scopes)


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(64)  # 86 characters of the unreserved set
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class Grant:
    """A validated authorization response: the code and the PKCE verifier for it."""

    code: str
    verifier: str


async def authorize(
    config: OAuthConfig, issuer: str, metadata: dict[str, Any], client: ClientRegistration,
    resource: str, scopes: Sequence[str], dpop: DPoP | None = None,
) -> Grant:
    """Send the user to the authorization endpoint and validate where they came back."""
    methods = metadata.get("code_challenge_methods_supported")
    if not isinstance(methods, list):  # AUTH-C-09 / TRAP-38
        raise AuthError(f"{issuer} does not advertise code_challenge_methods_supported;"
                        " refusing to authorize without PKCE")
    if "S256" not in methods:
        raise AuthError(f"{issuer} does not support the S256 PKCE method")
    verifier, challenge = _pkce()
    state = secrets.token_urlsafe(32)
    query = {
        "response_type": "code", "client_id": client.client_id,
        "redirect_uri": config.redirect_uri, "code_challenge": challenge,
        "code_challenge_method": "S256", "state": state, "resource": resource,
    }
    if scopes:
        query["scope"] = " ".join(scopes)
    if dpop is not None:
        query["dpop_jkt"] = dpop.thumbprint()  # RFC 9449 §10: bind the code to the key
    endpoint = metadata["authorization_endpoint"]
    url = endpoint + ("&" if urlsplit(endpoint).query else "?") + urlencode(query)
    landed = config.on_authorize(url)
    if inspect.isawaitable(landed):
        landed = await landed
    params = {k: v[0] for k, v in parse_qs(urlsplit(str(landed)).query).items()}
    # AUTH-C-11: the iss check comes first; on a mismatch nothing else is acted upon.
    iss = params.get("iss")
    if iss is not None and iss != issuer:
        raise AuthError(f"the authorization response's iss {iss!r} is not {issuer!r}")
    if iss is None and metadata.get("authorization_response_iss_parameter_supported") is True:
        raise AuthError(f"{issuer} promised an iss parameter, but the response has none")
    if params.get("state") != state:
        raise AuthError("the authorization response's state does not match the request")
    if "error" in params:
        raise AuthorizationDenied(params["error"], params.get("error_description"))
    code = params.get("code")
    if not code:
        raise AuthError("the authorization response carries no code")
    return Grant(code, verifier)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _authenticate(
    client: ClientRegistration | None, audience: str, form: dict[str, str],
    headers: dict[str, str],
) -> None:
    """Add the client authentication of `client` to a token request."""
    if client is None:
        return  # a grant that authenticates by its assertion alone (RFC 7523 §3.1)
    if client.auth_method == "client_secret_basic" and client.client_secret is not None:
        pair = f"{quote(client.client_id, safe='')}:{quote(client.client_secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return
    form["client_id"] = client.client_id
    if client.auth_method == "private_key_jwt":
        if client.signing_key is None:
            raise AuthError(f"client {client.client_id!r} uses private_key_jwt but has no signing key")
        form["client_assertion_type"] = CLIENT_ASSERTION_TYPE
        form["client_assertion"] = client_assertion(client.signing_key, client.client_id, audience)
    elif client.auth_method == "client_secret_post" and client.client_secret is not None:
        form["client_secret"] = client.client_secret


async def token_request(
    http: httpx.AsyncClient, endpoint: str, client: ClientRegistration | None,
    form: dict[str, str], *, audience: str, dpop: DPoP | None = None,
) -> dict[str, Any]:
    """POST one token request (RFC 6749 §3.2) and return the JSON answer of a 200.

    `audience` is what a `private_key_jwt` assertion is addressed to (the issuer);
    with `dpop`, the request carries a proof and a `use_dpop_nonce` refusal is retried
    once with the nonce the server sent (RFC 9449 §8). Any refusal is an `AuthError`."""
    headers = {"Accept": "application/json"}
    form = dict(form)
    _authenticate(client, audience, form, headers)
    for attempt in range(2):
        if dpop is not None:
            headers["DPoP"] = dpop.proof("POST", endpoint)
        try:
            response = await http.post(endpoint, data=form, headers=headers)
        except httpx.HTTPError as exc:
            raise AuthError(f"the token request to {endpoint} failed: {exc!r}") from exc
        body = _json(response)
        fresh = dpop is not None and dpop.observe(endpoint, response.headers)
        if response.status_code == 200:
            return body
        if attempt == 0 and fresh and body.get("error") == "use_dpop_nonce":
            if client is not None and client.auth_method == "private_key_jwt":
                _authenticate(client, audience, form, headers)  # a new assertion (new jti)
            continue
        break
    raise AuthError(f"the token endpoint refused (HTTP {response.status_code}):"
                    f" {body.get('error')} {body.get('error_description') or ''}".strip())


async def _token_request(
    http: httpx.AsyncClient, metadata: dict[str, Any], client: ClientRegistration | None,
    form: dict[str, str], dpop: DPoP | None = None,
) -> dict[str, Any]:
    return await token_request(http, metadata["token_endpoint"], client, form,
                               audience=str(metadata.get("issuer", "")), dpop=dpop)


def tokens_from(
    body: dict[str, Any], scopes: Sequence[str], previous: TokenSet | None = None,
    dpop: DPoP | None = None,
) -> TokenSet:
    try:
        return TokenSet.from_response(body, tuple(scopes), previous, dpop=dpop is not None)
    except ValueError as exc:
        raise AuthError(str(exc)) from exc


async def exchange_code(
    http: httpx.AsyncClient, config: OAuthConfig, metadata: dict[str, Any],
    client: ClientRegistration, grant: Grant, resource: str, scopes: Sequence[str],
    dpop: DPoP | None = None,
) -> TokenSet:
    body = await _token_request(http, metadata, client, {
        "grant_type": "authorization_code", "code": grant.code,
        "redirect_uri": config.redirect_uri, "code_verifier": grant.verifier,
        "resource": resource,
    }, dpop)
    return tokens_from(body, scopes, dpop=dpop)


async def refresh(
    http: httpx.AsyncClient, metadata: dict[str, Any], client: ClientRegistration | None,
    tokens: TokenSet, resource: str, dpop: DPoP | None = None,
) -> TokenSet:
    """RFC 6749 §6 with `resource`; keeps the old refresh token if none is returned.
    A refresh token issued with DPoP is bound to the key: the proof goes along."""
    assert tokens.refresh_token is not None
    body = await _token_request(http, metadata, client, {
        "grant_type": "refresh_token", "refresh_token": tokens.refresh_token,
        "resource": resource,
    }, dpop)
    return tokens_from(body, tokens.requested_scopes, tokens, dpop)


async def client_credentials(
    http: httpx.AsyncClient, metadata: dict[str, Any], client: ClientRegistration,
    resource: str, scopes: Sequence[str], dpop: DPoP | None = None,
) -> TokenSet:
    """The machine-to-machine grant (RFC 6749 §4.4): no user, no redirect."""
    form = {"grant_type": "client_credentials", "resource": resource}
    if scopes:
        form["scope"] = " ".join(scopes)
    body = await _token_request(http, metadata, client, form, dpop)
    return tokens_from(body, scopes, dpop=dpop)
