"""Finding the authorization server: challenges, RFC 9728 and RFC 8414 / OIDC metadata.

- `parse_challenges` reads `WWW-Authenticate` (AUTH-C-01): the Bearer (or DPoP)
  challenge's `resource_metadata`, `scope` and `error`.
- `discover_resource` fetches the Protected Resource Metadata: the challenge's
  `resource_metadata` URL if any, else the path-inserted well-known URI, then the root
  one; its `resource` must name the MCP server (same origin, a path prefix), else the
  flow stops before any authorization request.
- `discover_issuer` fetches the authorization server metadata in the spec's order
  (AUTH-C-03) and keeps only a document whose `issuer` is identical to the issuer the
  URL was built from (AUTH-C-04).
The failures are `AuthError`s (a `ClientError`): nothing here is the server's answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from nimblemcp.errors import AuthError
from nimblemcp.types._urls import origin, origin_and_path

__all__ = [
    "AuthError",
    "Challenge",
    "ResourceInfo",
    "bearer_challenge",
    "discover_issuer",
    "discover_resource",
    "metadata_urls",
    "parse_challenges",
    "resource_matches",
]

_TOKEN = r"[A-Za-z0-9!#$%&'*+.^_`|~-]+"
_SCHEME = re.compile(rf"[\s,]*({_TOKEN})(?=\s|$|,)")
_PARAM = re.compile(rf'\s*({_TOKEN})\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*)\s*,?')
_ESCAPE = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True)
class Challenge:
    """The Bearer challenge of a 401/403 response."""

    error: str | None = None
    scope: str | None = None
    resource_metadata: str | None = None

    @property
    def scopes(self) -> tuple[str, ...]:
        return tuple(self.scope.split()) if self.scope else ()


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """A validated Protected Resource Metadata document."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None
    document: dict[str, Any]


def parse_challenges(header: str) -> dict[str, dict[str, str]]:
    """`WWW-Authenticate` as {lowercased scheme: {lowercased param: value}}; the first
    challenge of a scheme wins. Quoted values are unescaped."""
    out: dict[str, dict[str, str]] = {}
    pos = 0
    while pos < len(header):
        scheme = _SCHEME.match(header, pos)
        if scheme is None:
            break
        pos = scheme.end()
        params: dict[str, str] = {}
        while (param := _PARAM.match(header, pos)) is not None and param.end() > pos:
            value = param.group(2)
            if value.startswith('"'):
                value = _ESCAPE.sub(r"\1", value[1:-1])
            params.setdefault(param.group(1).lower(), value)
            pos = param.end()
        out.setdefault(scheme.group(1).lower(), params)
    return out


def bearer_challenge(response: httpx.Response) -> Challenge:
    """The response's Bearer challenge, or its DPoP one (RFC 9449 §7.1) when there is
    no Bearer challenge or the DPoP one asks for a nonce."""
    bearer: dict[str, str] = {}
    dpop: dict[str, str] = {}
    for header in response.headers.get_list("www-authenticate"):
        found = parse_challenges(header)
        bearer = bearer or found.get("bearer", {})
        dpop = dpop or found.get("dpop", {})
    params = dpop if dpop and (not bearer or dpop.get("error") == "use_dpop_nonce") else bearer
    return Challenge(params.get("error"), params.get("scope"), params.get("resource_metadata"))


def resource_matches(server_url: str, resource: str) -> bool:
    """True when `resource` names the MCP server at `server_url`: same scheme, host
    and port (case-insensitive), and its path equal to or a parent of the server's."""
    a, b = urlsplit(server_url), urlsplit(resource)
    if b.fragment or origin(server_url) != origin(resource):
        return False
    mine, theirs = a.path.rstrip("/"), b.path.rstrip("/")
    return mine == theirs or mine.startswith(theirs + "/")


async def _get_json(http: httpx.AsyncClient, url: str) -> dict[str, Any] | None:
    try:
        response = await http.get(url, headers={"Accept": "application/json"})
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def discover_resource(
    http: httpx.AsyncClient, server_url: str, challenge: Challenge
) -> ResourceInfo:
    """RFC 9728 discovery and validation for the MCP server at `server_url`."""
    origin, path = origin_and_path(server_url)
    candidates = [f"{origin}/.well-known/oauth-protected-resource{path}"] if path else []
    candidates.append(f"{origin}/.well-known/oauth-protected-resource")
    if challenge.resource_metadata:
        candidates.insert(0, challenge.resource_metadata)
    for url in dict.fromkeys(candidates):
        doc = await _get_json(http, url)
        if doc is None:
            continue
        resource = doc.get("resource")
        servers = doc.get("authorization_servers")
        if not isinstance(resource, str) or not isinstance(servers, list) or not servers \
                or not all(isinstance(s, str) for s in servers):
            raise AuthError(f"the protected resource metadata at {url} is malformed")
        if not resource_matches(server_url, resource):
            raise AuthError(
                f"the protected resource metadata names {resource!r}, not this server"
                f" ({server_url}); refusing to authorize for it")
        scopes = doc.get("scopes_supported")
        return ResourceInfo(
            resource, tuple(servers),
            tuple(s for s in scopes if isinstance(s, str)) if isinstance(scopes, list) else None,
            doc,
        )
    raise AuthError(f"no protected resource metadata for {server_url} (tried {candidates})")


def metadata_urls(issuer: str) -> list[str]:
    """AUTH-C-03: where the metadata of `issuer` may live, in the order to try."""
    origin, path = origin_and_path(issuer)
    if not path:
        return [f"{origin}/.well-known/oauth-authorization-server",
                f"{origin}/.well-known/openid-configuration"]
    return [f"{origin}/.well-known/oauth-authorization-server{path}",
            f"{origin}/.well-known/openid-configuration{path}",
            f"{origin}{path}/.well-known/openid-configuration"]


async def discover_issuer(http: httpx.AsyncClient, issuer: str) -> dict[str, Any]:
    """The metadata of `issuer`, validated (issuer identical, endpoints present)."""
    rejected: list[str] = []
    for url in metadata_urls(issuer):
        doc = await _get_json(http, url)
        if doc is None:
            continue
        if doc.get("issuer") != issuer:  # AUTH-C-04: exact string comparison
            rejected.append(f"{url} claims issuer {doc.get('issuer')!r}")
            continue
        for key in ("authorization_endpoint", "token_endpoint"):
            if not isinstance(doc.get(key), str):
                raise AuthError(f"the metadata of {issuer} has no {key}")
        return doc
    detail = "; ".join(rejected) if rejected else "none of the well-known URLs answered"
    raise AuthError(f"no usable authorization server metadata for {issuer}: {detail}")
