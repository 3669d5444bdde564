"""`OAuth`: the httpx auth provider the HTTP transport runs every request through.

Each request gets `Authorization: Bearer <token>` once a token exists (AUTH-C-14; an
expired one is refreshed first when a refresh token is held). A 401 runs discovery
(`_discovery`) and then a refresh or a full authorization-code flow (`_flow`); a 403
`insufficient_scope` re-authorizes with the union of the scopes asked for before and
the challenged ones (AUTH-C-13), but only when that set grows and at most
`max_step_ups` times per resource and MCP method. Either way the request is retried
once (twice when the first retry used a token kept in the store by an earlier process,
which is tried before refreshing it); a further refusal reaches the caller as the
transport's HTTP error. Flows are serialised by a lock, and a request that raced a
completed flow just retries with the new token. Discovery is redone on every 401, so a resource that moved to another
authorization server is followed (and registered with) instead of being sent tokens
or client ids of the old one (AUTH-C-02/08).

`grant=` replaces the authorization-code flow with an assertion grant (`_grants`:
workload identity, enterprise-managed). `dpop=` (True, or a `DPoP` holding the
application's key) asks for DPoP-bound tokens (RFC 9449): proofs at the token
endpoint, then `Authorization: DPoP` plus a fresh proof (with `ath`) on every request;
a resource server's `use_dpop_nonce` 401 is answered by one retry with its nonce, and
a `DPoP-Nonce` on any response is used from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ._discovery import (
    AuthError,
    Challenge,
    ResourceInfo,
    bearer_challenge,
    discover_issuer,
    discover_resource,
)
from ._dpop import DPoP
from ._flow import (
    AuthorizeCallback,
    OAuthConfig,
    authorize,
    choose_scopes,
    client_credentials,
    exchange_code,
    no_browser,
    obtain_client,
    pre_registered_client,
    refresh,
)
from ._grants import Grant, TokenEndpoint
from ._store import ClientRegistration, MemoryTokenStore, PreRegistered, TokenSet, TokenStore

__all__ = ["OAuth"]

logger = logging.getLogger("nimblemcp.client.auth")


@dataclass(slots=True)
class _Binding:
    """What the provider knows about one MCP server URL."""

    resource: ResourceInfo | None = None
    issuer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    tokens: TokenSet | None = None
    step_ups: dict[str, int] = field(default_factory=dict[str, int])


class OAuth(httpx.Auth):
    """OAuth 2.1 for an MCP client: `Client(url, auth=OAuth(on_authorize=...))`.

    `on_authorize(url)` (sync or async) shows the authorization URL to the user, e.g.
    in a browser, and returns the redirect URL the browser landed on; the default
    raises an `AuthError` explaining this. `pre_registered` credentials are preferred,
    then `client_metadata_url` (a Client ID Metadata Document the application hosts)
    where the server supports it, then Dynamic Client Registration. `store` keeps
    tokens and registrations (in memory by default). `grant_type="client_credentials"`
    authenticates the client itself (pre-registered credentials, a secret or a
    `signing_key` for `private_key_jwt`), with no user. `grant` runs an assertion
    grant instead (`JwtBearer`, `EnterpriseManaged`). `dpop=True` (a fresh ES256 key)
    or `dpop=DPoP(key)` requests DPoP-bound tokens and proves possession on each
    request; an authorization server that advertises `dpop_signing_alg_values_supported`
    without the key's algorithm is refused. A token counts as expired (and is refreshed
    first) `refresh_before` seconds before its `expires_in` ends.
    """

    requires_request_body = True

    def __init__(
        self,
        *,
        on_authorize: AuthorizeCallback = no_browser,
        redirect_uri: str = "http://localhost:8765/callback",
        client_name: str = "nimblemcp client",
        client_metadata_url: str | None = None,
        pre_registered: PreRegistered | Sequence[PreRegistered] = (),
        store: TokenStore | None = None,
        offline_access: bool = True,
        application_type: str = "native",
        grant_type: str = "authorization_code",
        grant: Grant | None = None,
        dpop: DPoP | bool = False,
        max_step_ups: int = 2,
        refresh_before: float = 30.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        if isinstance(pre_registered, PreRegistered):
            pre_registered = (pre_registered,)
        self.config = OAuthConfig(
            on_authorize=on_authorize, redirect_uri=redirect_uri, client_name=client_name,
            client_metadata_url=client_metadata_url, pre_registered=tuple(pre_registered),
            application_type=application_type, offline_access=offline_access,
            grant_type=grant_type,
        )
        self.store: TokenStore = store if store is not None else MemoryTokenStore()
        self.grant = grant
        self.dpop: DPoP | None = DPoP() if dpop is True else dpop or None
        self.max_step_ups = max_step_ups
        self.refresh_before = refresh_before
        self._http = http  # discovery and token requests; else one client per flow
        self._session: httpx.AsyncClient | None = None
        self._bindings: dict[str, _Binding] = {}
        self._lock: asyncio.Lock | None = None

    async def login(self, url: str, scopes: Sequence[str] = ()) -> TokenSet:
        """Authorize now for the MCP server at `url`, before any request is refused:
        discovery (its 401 challenge when it sends one, else the well-known metadata),
        registration and the authorization-code flow, asking for `scopes` (default:
        what the challenge or the server's metadata names). The tokens go to the store,
        where later processes find them (`nimblemcp login`)."""
        url = str(httpx.URL(url).copy_with(query=None, fragment=None))
        binding = self._bindings.setdefault(url, _Binding())
        async with self._flow():
            challenge = await self._probe(url)
            wanted = tuple(scopes) or challenge.scopes
            await self._discover(url, binding, challenge)
            await self._authorize(binding, wanted, ())
        assert binding.tokens is not None
        return binding.tokens

    async def _probe(self, url: str) -> Challenge:
        """The server's Bearer challenge to an anonymous `server/discover` (empty when it
        answers without one)."""
        request = {"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {}}
        try:
            response = await self._client().post(url, json=request, headers={
                "Accept": "application/json, text/event-stream", "Mcp-Method": "server/discover"})
        except httpx.HTTPError as exc:
            raise AuthError(f"cannot reach {url}: {exc!r}") from exc
        return bearer_challenge(response) if response.status_code in (401, 403) else Challenge()

    # -- httpx.Auth ------------------------------------------------------------------------

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("nimblemcp.client.auth.OAuth needs an httpx.AsyncClient")

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        url = str(request.url.copy_with(query=None, fragment=None))
        binding = self._bindings.setdefault(url, _Binding())
        sent = await self._current(binding)
        flowed = nonce_retried = False
        while True:
            self._present(request, sent)
            response = yield request
            fresh_nonce = self.dpop is not None and self.dpop.observe(url, response.headers, resource=True)
            if response.status_code not in (401, 403):
                return
            challenge = bearer_challenge(response)
            if challenge.error == "use_dpop_nonce":
                # RFC 9449 §9: not a token problem; retry once with the nonce just sent.
                if sent is None or not sent.dpop_bound or nonce_retried or not fresh_nonce:
                    return
                nonce_retried = True
                continue
            if flowed:
                return  # a second refusal reaches the caller
            flowed = True
            if response.status_code == 401:
                # A stored token only picked up (not yet tried) may still be refused:
                # then one real flow (a refresh, or authorizing) is allowed.
                flowed = not await self._unauthorized(url, binding, challenge, sent)
            else:
                if challenge.error != "insufficient_scope":
                    return
                method = request.headers.get("mcp-method", request.method)
                if not await self._step_up(url, binding, challenge, sent, method):
                    return
            assert binding.tokens is not None
            sent = binding.tokens

    def _present(self, request: httpx.Request, tokens: TokenSet | None) -> None:
        """Put the token on the request: Bearer, or DPoP with a proof for this request."""
        if tokens is None:
            return
        if tokens.dpop_bound and self.dpop is not None:
            request.headers["Authorization"] = f"DPoP {tokens.access_token}"
            request.headers["DPoP"] = self.dpop.proof(
                request.method, str(request.url), access_token=tokens.access_token)
        else:
            request.headers["Authorization"] = f"Bearer {tokens.access_token}"
            request.headers.pop("DPoP", None)

    # -- the flows -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _flow(self) -> AsyncIterator[None]:
        """One flow at a time; an owned HTTP client lives only as long as the flow."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._http is not None:
                yield
                return
            async with httpx.AsyncClient(follow_redirects=False, timeout=30.0) as http:
                self._session = http
                try:
                    yield
                finally:
                    self._session = None

    def _client(self) -> httpx.AsyncClient:
        http = self._http or self._session
        assert http is not None, "only inside a flow"
        return http

    async def _current(self, binding: _Binding) -> TokenSet | None:
        """The token to send, refreshed first when it has expired."""
        tokens = binding.tokens
        if tokens is None or not tokens.expired(self.refresh_before):
            return tokens
        async with self._flow():
            if binding.tokens is not tokens:
                return binding.tokens
            if tokens.refresh_token and await self._refresh(binding):
                return binding.tokens
            return tokens  # the server decides; a 401 starts a new flow

    async def _registration(self, binding: _Binding) -> ClientRegistration | None:
        """Who the client is at the binding's authorization server. An assertion grant
        uses only pre-registered credentials (an ID-JAG names the client the IdP knows;
        a workload needs none), never a registration made on the fly."""
        assert binding.issuer is not None
        if self.grant is not None:
            return pre_registered_client(self.config, binding.issuer, binding.metadata)
        return await obtain_client(self._client(), self.config, self.store,
                                   binding.issuer, binding.metadata)

    def _dpop_for(self, metadata: dict[str, Any]) -> DPoP | None:
        if self.dpop is None:
            return None
        algs = metadata.get("dpop_signing_alg_values_supported")
        if isinstance(algs, list) and self.dpop.alg not in algs:
            raise AuthError(f"the authorization server accepts DPoP proofs signed with {algs},"
                            f" not {self.dpop.alg}")
        return self.dpop

    async def _refresh(self, binding: _Binding) -> bool:
        assert binding.tokens is not None and binding.issuer and binding.resource
        client = await self._registration(binding)
        try:
            tokens = await refresh(self._client(), binding.metadata, client, binding.tokens,
                                   binding.resource.resource, self._dpop_for(binding.metadata))
        except AuthError as exc:
            logger.info("refresh failed, authorizing again: %s", exc)
            return False
        await self._save(binding, tokens)
        return True

    async def _save(self, binding: _Binding, tokens: TokenSet) -> None:
        assert binding.issuer and binding.resource
        binding.tokens = tokens
        await self.store.set_tokens(binding.issuer, binding.resource.resource, tokens)

    async def _discover(self, url: str, binding: _Binding, challenge: Challenge) -> None:
        http = self._client()
        resource = await discover_resource(http, url, challenge)
        issuer = resource.authorization_servers[0]
        metadata = await discover_issuer(http, issuer)
        if issuer != binding.issuer or binding.resource is None \
                or binding.resource.resource != resource.resource:
            binding.tokens = await self.store.get_tokens(issuer, resource.resource)
            binding.step_ups.clear()
        binding.resource, binding.issuer, binding.metadata = resource, issuer, metadata

    async def _unauthorized(
        self, url: str, binding: _Binding, challenge: Challenge, sent: TokenSet | None
    ) -> bool:
        """Get a token to retry with; True when it is a stored one not tried yet (a
        token kept from an earlier process, e.g. `nimblemcp login`'s)."""
        async with self._flow():
            if binding.tokens is not None and binding.tokens is not sent \
                    and not binding.tokens.expired(self.refresh_before):
                return False  # another request finished a flow meanwhile
            await self._discover(url, binding, challenge)
            tokens = binding.tokens
            if tokens is not None and tokens.access_token and not tokens.expired(self.refresh_before) \
                    and (sent is None or tokens.access_token != sent.access_token):
                return True  # a stored token for this issuer and resource: try it first
            if tokens is not None and tokens.refresh_token \
                    and (sent is None or tokens.access_token == sent.access_token) \
                    and await self._refresh(binding):
                return False
            await self._authorize(binding, challenge.scopes, ())
            return False

    async def _step_up(
        self, url: str, binding: _Binding, challenge: Challenge, sent: TokenSet | None,
        method: str,
    ) -> bool:
        async with self._flow():
            if binding.tokens is not None and binding.tokens is not sent:
                return True
            if binding.resource is None:
                await self._discover(url, binding, challenge)
            previous = sent.requested_scopes if sent is not None else ()
            if not challenge.scopes or set(challenge.scopes) <= set(previous):
                return False  # asking again for the same scopes cannot help
            key = f"{binding.resource.resource if binding.resource else url} {method}"
            if binding.step_ups.get(key, 0) >= self.max_step_ups:
                return False
            binding.step_ups[key] = binding.step_ups.get(key, 0) + 1
            await self._authorize(binding, challenge.scopes, previous)
            return True

    async def _authorize(
        self, binding: _Binding, challenged: Sequence[str], previous: Sequence[str]
    ) -> None:
        assert binding.resource is not None and binding.issuer is not None
        if self.dpop is None and binding.resource.document.get("dpop_bound_access_tokens_required") is True:
            raise AuthError(f"{binding.resource.resource} accepts only DPoP-bound tokens"
                            " (RFC 9728 dpop_bound_access_tokens_required); pass dpop=True")
        http = self._client()
        dpop = self._dpop_for(binding.metadata)
        client = await self._registration(binding)
        scopes = choose_scopes(
            challenged, binding.resource.scopes_supported, binding.metadata,
            previous=previous, offline_access=self.config.offline_access)
        resource = binding.resource.resource
        if self.grant is not None:
            if client is None and self.grant.needs_client:
                raise AuthError(f"{type(self.grant).__name__} needs client credentials for"
                                f" {binding.issuer}; pass pre_registered=...")
            await self._save(binding, await self.grant.obtain(TokenEndpoint(
                http, binding.issuer, binding.metadata, client, resource, scopes, dpop)))
            return
        assert client is not None
        if self.config.grant_type == "client_credentials":
            await self._save(binding, await client_credentials(
                http, binding.metadata, client, resource, scopes, dpop))
            return
        grant = await authorize(self.config, binding.issuer, binding.metadata, client,
                                resource, scopes, dpop)
        tokens = await exchange_code(http, self.config, binding.metadata, client, grant,
                                     resource, scopes, dpop)
        await self._save(binding, tokens)
