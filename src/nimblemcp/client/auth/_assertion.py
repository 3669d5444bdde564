"""JWT assertions the client presents: its own, and ones it is handed.

- `client_assertion` signs the `private_key_jwt` client authentication JWT (RFC 7523
  §2.2 / §3): `iss` = `sub` = the client id, `aud` = the authorization server's issuer
  identifier, a short `exp`, a unique `jti`.
- A `TokenSource` supplies a token the application obtains elsewhere: the workload
  identity JWT for the JWT-bearer grant (RFC 7523 §2.1), or the user's ID token for
  enterprise-managed authorization. It is any callable returning the token (sync or
  async); `token_from_file`, `token_from_env` and `token_from_url` build the usual
  ones (a projected service-account token file, a CI variable, a cloud metadata
  endpoint). Each call reads afresh, so rotated tokens are picked up.
"""

from __future__ import annotations

import inspect
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import httpx

from nimblemcp.errors import AuthError

from ._jose import SigningKey

__all__ = [
    "CLIENT_ASSERTION_TYPE",
    "TokenSource",
    "client_assertion",
    "read_token",
    "token_from_env",
    "token_from_file",
    "token_from_url",
]

CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

#: Returns a token (a JWT) each time it is called; sync or async.
TokenSource = Callable[[], Awaitable[str] | str]
"""Where a workload token comes from, fresh at each use: `token_from_file(path)`,
`token_from_env(name)`, `token_from_url(url)`, or any callable returning the token."""


def client_assertion(
    key: SigningKey, client_id: str, audience: str, *, lifetime: int = 60,
) -> str:
    """A signed `private_key_jwt` client assertion, valid for `lifetime` seconds."""
    now = int(time.time())
    return key.sign_jwt({
        "iss": client_id, "sub": client_id, "aud": audience,
        "iat": now, "exp": now + lifetime, "jti": secrets.token_urlsafe(24),
    }, {"typ": "JWT"})


async def read_token(source: TokenSource, what: str) -> str:
    """Call `source` and check it produced a non-empty token."""
    try:
        token = source()
        if inspect.isawaitable(token):
            token = await token
    except AuthError:
        raise
    except Exception as exc:
        raise AuthError(f"could not obtain the {what}: {exc!r}") from exc
    if not isinstance(token, str) or not token.strip():
        raise AuthError(f"the {what} source returned no token")
    return token.strip()


def token_from_file(path: str | os.PathLike[str]) -> TokenSource:
    """Read the token from a file on every use (e.g. a Kubernetes projected token)."""
    target = Path(path)

    def read() -> str:
        return target.read_text(encoding="utf-8")

    return read


def token_from_env(name: str) -> TokenSource:
    """Read the token from an environment variable on every use."""

    def read() -> str:
        value = os.environ.get(name)
        if not value:
            raise AuthError(f"the environment variable {name} holds no token")
        return value

    return read


def token_from_url(
    url: str, *, headers: Mapping[str, str] | None = None, json_field: str | None = None,
    timeout: float = 10.0,
) -> TokenSource:
    """GET the token from a metadata endpoint on every use; the body is the token, or
    with `json_field` the JSON body's member of that name."""

    async def fetch() -> str:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as http:
            response = await http.get(url, headers=dict(headers or {}))
        if response.status_code != 200:
            raise AuthError(f"the token endpoint {url} answered HTTP {response.status_code}")
        if json_field is None:
            return response.text
        try:
            value = response.json().get(json_field)
        except (ValueError, AttributeError) as exc:
            raise AuthError(f"{url} did not answer a JSON object") from exc
        if not isinstance(value, str):
            raise AuthError(f"{url} answered no {json_field!r} string")
        return value

    return fetch
