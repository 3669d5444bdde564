"""Authorization for the client commands, and what to tell a person it refused.

- `GivenToken`: a token the user gave (`--bearer`, `$NIMBLEMCP_BEARER`, an
  `Authorization` `--header`), sent on every request; it keeps the challenge of a
  401/403 (`WWW-Authenticate`) so the message can say what the server wants.
- `logged_in(url)`: the OAuth provider over the token cache of `nimblemcp login URL`
  (`_tokens`), when there is one: the cached token is used while it lasts, then
  refreshed (and written back); a login that cannot be refreshed any more is an
  `AuthError` telling to log in again, never a browser opened by `tools`.
- `explain(exc, url, args)`: CLI words for an authorization failure (which flag or
  command helps, and the scope a 403 names), or None for any other error.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from nimblemcp.cli._tokens import TokenCache
from nimblemcp.client.auth import OAuth, parse_challenges
from nimblemcp.errors import AuthError, AuthorizationRequired, HttpStatusError, McpError

__all__ = ["GivenToken", "explain", "logged_in"]

# Seconds before its end a cached access token counts as expired and is refreshed.
REFRESH_BEFORE = 5.0


class GivenToken(httpx.Auth):
    """Sends `Authorization: <value>`; keeps the parameters of the last refusal's Bearer
    challenge (`error`, `error_description`, `scope`, ...)."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.challenge: dict[str, str] = {}

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        request.headers["Authorization"] = self.value
        response = yield request
        if response.status_code in (401, 403):
            for header in response.headers.get_list("www-authenticate"):
                self.challenge = parse_challenges(header).get("bearer") or self.challenge


def logged_in(url: str) -> OAuth | None:
    """The OAuth provider over `nimblemcp login URL`'s tokens, or None without a login."""
    cache = TokenCache(url)
    if not cache.has_tokens():
        return None

    def log_in_again(authorization_url: str) -> str:
        asked = parse_qs(urlsplit(authorization_url).query).get("scope", [""])[0]
        scope = f" --scope '{asked}'" if asked else ""
        raise AuthError(f"the login for {cache.server} does not cover this any more (it expired, was "
                        f"revoked, or a scope is missing); log in again: nimblemcp login {cache.server}{scope}")

    return OAuth(on_authorize=log_in_again, store=cache, redirect_uri=cache.redirect_uri or "http://127.0.0.1/callback",
                 client_name="nimblemcp CLI", refresh_before=REFRESH_BEFORE)


def explain(exc: McpError, url: Any, args: argparse.Namespace) -> str | None:
    """CLI words for an authorization failure of a command aimed at `url`; None otherwise."""
    if isinstance(exc, AuthError):
        return str(exc)
    if not isinstance(exc, HttpStatusError) or exc.status not in (401, 403):
        return None
    source: str | None = getattr(args, "auth_source", None)
    given: Any = getattr(args, "auth", None)
    challenge = dict(given.challenge) if isinstance(given, GivenToken) else {}
    if isinstance(exc, AuthorizationRequired) and exc.scope:
        challenge["scope"] = exc.scope
    error, description = challenge.get("error"), challenge.get("error_description")
    why = f"HTTP {exc.status}" + (f" {error}" if error else "") + (f": {description}" if description else "")
    if exc.status == 403:
        scope = challenge.get("scope")
        needs = f"a scope it lacks: {scope}" if scope else "more than it grants"
        again = f"nimblemcp login {url}" + (f" --scope '{scope}'" if scope else "")
        return (f"{url} refused the request ({why}): the token from {source or 'the request'} "
                f"needs {needs}. Get a token with it, or log in asking for it: {again}")
    if source is None or source == "login":
        return (f"{url} needs authorization ({why}). Log in with `nimblemcp login {url}`, "
                "or pass a token with --bearer TOKEN (or NIMBLEMCP_BEARER)")
    return (f"{url} refused the token from {source} ({why}). Pass a valid token, or log in "
            f"with `nimblemcp login {url}`")
