"""The MCP server as an OAuth 2.1 resource server: Bearer tokens, PRM, challenges.

`BearerAuth` is ASGI middleware around the MCP app (CHECKLIST 23.1):
- it serves Protected Resource Metadata (RFC 9728) at the root and the path-inserted
  well-known URIs (AUTH-RS-01/02);
- every request to the protected path must carry `Authorization: Bearer <token>`; the
  token is checked by a user-supplied `TokenVerifier` on every request (AUTH-RS-04),
  including the audience (RFC 8707: tokens for other resources are refused, AUTH-RS-05);
- missing or invalid tokens get 401 and insufficient scope 403, each with a
  `WWW-Authenticate: Bearer` challenge naming the metadata URL and the scopes
  (AUTH-RS-03/06/08);
- the authenticated subject becomes `scope["nimblemcp.subject"]` (`_asgi.SUBJECT`; never
  `scope["user"]`, which Starlette's AuthenticationMiddleware owns), and the verified
  `AccessToken` `scope["nimblemcp.access"]`; the MCP app binds requestState, state
  handles, tasks and legacy sessions to the subject.
Tokens are never logged. Must not import the server or the dispatcher.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import orjson

from nimblemcp.transports._asgi import SUBJECT, respond

if TYPE_CHECKING:
    from nimblemcp.transports._asgi import Receive, Scope, Send

App = Callable[[Any, Any, Any], Awaitable[None]]

__all__ = ["AccessToken", "BearerAuth", "StaticTokens", "TokenVerifier"]

_WELL_KNOWN = "/.well-known/oauth-protected-resource"
ACCESS = "nimblemcp.access"  # the scope key of the verified AccessToken


@dataclass(frozen=True)
class AccessToken:
    """What a verified token says: who, for which resource, with which scopes, until when."""

    subject: str
    scopes: frozenset[str] = frozenset()
    audience: tuple[str, ...] = ()
    expires_at: float | None = None  # epoch seconds
    claims: dict[str, Any] = field(default_factory=dict)


class TokenVerifier(Protocol):
    """Checks a bearer token (signature, issuer, expiry); None when it is not valid.

    Called on every request; cache inside the verifier if introspection is costly."""

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
    """ASGI middleware: PRM documents plus Bearer-token checks for one MCP path."""

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
    ) -> None:
        self.app = app
        self.verifier = verifier
        self.resource = resource  # the canonical URI tokens must name (RFC 8707)
        self.path = path
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
        self.metadata = orjson.dumps(document)
        parts = urlsplit(resource)
        self.metadata_url = f"{parts.scheme}://{parts.netloc}{_WELL_KNOWN}{path if path != '/' else ''}"
        self.metadata_paths = {_WELL_KNOWN, _WELL_KNOWN + path}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_path = scope["path"]
        if request_path in self.metadata_paths and scope["method"] in ("GET", "HEAD"):
            await respond(send, 200, self.metadata, content_type=b"application/json")
            return
        if request_path != self.path or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        token = self._bearer(scope)
        if token is None:
            await self._challenge(send, 401, None)
            return
        access = await self.verifier.verify(token)
        if access is None or (access.expires_at is not None and access.expires_at <= time.time()):
            await self._challenge(send, 401, "invalid_token", "The access token is invalid or expired")
            return
        if access.audience and self.resource not in access.audience:
            await self._challenge(send, 401, "invalid_token", "The access token is for another resource")
            return
        if not self.required <= access.scopes:
            await self._challenge(send, 403, "insufficient_scope", "More scope is needed")
            return
        await self.app({**scope, SUBJECT: access.subject, ACCESS: access}, receive, send)

    @staticmethod
    def _bearer(scope: Scope) -> str | None:
        for key, value in scope["headers"]:
            if key == b"authorization":
                scheme, _, rest = value.decode("latin-1").partition(" ")
                token: str = rest.strip()
                if scheme.lower() == "bearer" and token:
                    return token
                return None
        return None

    async def _challenge(self, send: Send, status: int, error: str | None, description: str | None = None) -> None:
        parts = [f"resource_metadata={_quote(self.metadata_url)}"]
        if self.required:
            parts.append(f"scope={_quote(' '.join(sorted(self.required)))}")
        if error:
            parts.append(f"error={_quote(error)}")
        if description:
            parts.append(f"error_description={_quote(description)}")
        header = ("Bearer " + ", ".join(parts)).encode()
        body = orjson.dumps({"error": error or "unauthorized", "error_description": description or
                             "Authorization required"})
        await respond(send, status, body, [(b"www-authenticate", header)], content_type=b"application/json")
