"""`nimblemcp login URL` and `nimblemcp logout URL`: OAuth for the client commands.

`login` runs the client's OAuth 2.1 flow (`nimblemcp.client.auth.OAuth.login`:
discovery, registration, the authorization-code grant with PKCE) through the user's
browser and a loopback redirect: a one-request HTTP listener on 127.0.0.1 receives the
authorization response (RFC 8252). The browser is the one `webbrowser` picks, so the
`BROWSER` environment variable chooses it (the tests set it to a program that drives
the provider's login page); `--no-browser` only prints the URL. The tokens go to the
token cache (`_tokens`), where `nimblemcp tools URL` and the other client commands find
them and refresh them when they expire. A later login uses the same loopback port when
it is free, so the registration made the first time still matches; otherwise it
registers again. `logout` deletes the cache of that server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from nimblemcp._extras import needs_extra
from nimblemcp.cli._tokens import TokenCache, normalize

__all__ = ["login", "logout"]

_PAGE = (b"<!doctype html><meta charset=utf-8><title>nimblemcp</title>"
         b"<p>%s</p><p>You can close this window and go back to the terminal.</p>")


class Loopback:
    """The redirect target: answers the first `GET /callback?...` and keeps its URL."""

    def __init__(self) -> None:
        self.landed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self, port: int) -> None:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            if method == "GET" and target.startswith("/callback") and not self.landed.done():
                self.landed.set_result(f"http://127.0.0.1:{self.port}{target}")
                status, text = "200 OK", b"Logged in."
                if b"error=" in target.encode("latin-1"):
                    text = b"The authorization server refused the login."
            else:
                status, text = "404 Not Found", b"Nothing here."
            body = _PAGE % text
            writer.write(f"HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\n"
                         f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            writer.close()


def _parser(command: str) -> argparse.ArgumentParser:
    if command == "logout":
        parser = argparse.ArgumentParser(prog="nimblemcp logout",
                                         description="Forget the tokens `nimblemcp login` kept for a server.")
        parser.add_argument("url", help="the MCP server's http(s):// URL")
        return parser
    parser = argparse.ArgumentParser(
        prog="nimblemcp login",
        description="Log in to an MCP server that uses OAuth: authorize in the browser, keep the "
        "tokens for the client commands (tools, call, ...), which refresh them as needed.")
    parser.add_argument("url", help="the MCP server's http(s):// URL")
    parser.add_argument("--scope", action="append", default=[], metavar="SCOPE",
                        help="a scope to ask for (repeatable, or space-separated; default: what "
                        "the server asks for)")
    parser.add_argument("--port", type=int, default=None,
                        help="the loopback port of the redirect (default: the last login's, else any)")
    parser.add_argument("--no-browser", action="store_true",
                        help="print the authorization URL instead of opening a browser")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds to wait for the browser to come back (default 300)")
    return parser


def _url(parser: argparse.ArgumentParser, url: str) -> str:
    if not url.startswith(("http://", "https://")) or not urlsplit(url).hostname:
        parser.error(f"{url!r} is not an http(s):// URL")
    return normalize(url)


def _say(text: str) -> None:
    print(f"nimblemcp: {text}", file=sys.stderr, flush=True)


async def _login(args: argparse.Namespace, url: str) -> int:
    with needs_extra("http", "nimblemcp login"):
        from nimblemcp.client.auth import OAuth
    from nimblemcp.errors import AuthError

    cache = TokenCache(url)
    loopback = Loopback()
    last = urlsplit(cache.redirect_uri or "").port
    try:
        await loopback.start(args.port if args.port is not None else last or 0)
    except OSError:
        if args.port is not None:
            _say(f"cannot listen on 127.0.0.1:{args.port} for the redirect; choose another --port")
            return 1
        await loopback.start(0)
    if cache.exists() and loopback.redirect_uri != cache.redirect_uri:
        cache.forget_clients()  # registered for another redirect URI: register again
    opened: list[asyncio.Future[bool]] = []

    async def on_authorize(authorization_url: str) -> str:
        host = urlsplit(authorization_url).netloc
        if args.no_browser:
            _say(f"to log in, open this URL in a browser (at {host}):\n  {authorization_url}")
        else:
            _say(f"opening the browser to log in at {host}; if it does not open, visit:\n"
                 f"  {authorization_url}")
            import webbrowser

            opened.append(asyncio.get_running_loop().run_in_executor(None, webbrowser.open, authorization_url))
        try:
            return await asyncio.wait_for(asyncio.shield(loopback.landed), args.timeout)
        except TimeoutError:
            raise AuthError(f"no answer from the browser within {args.timeout:g} s") from None

    scopes = [s for given in args.scope for s in given.split()]
    oauth = OAuth(on_authorize=on_authorize, redirect_uri=loopback.redirect_uri, store=cache,
                  client_name="nimblemcp CLI", application_type="native")
    try:
        tokens = await oauth.login(url, scopes)
    except AuthError as exc:
        _say(f"login to {url} failed: {exc}")
        return 1
    finally:
        await loopback.close()
        for opening in opened:
            opening.cancel()  # a browser command still running is not waited for
    cache.set_redirect_uri(loopback.redirect_uri)
    granted = tokens.scope or " ".join(tokens.requested_scopes) or "no particular scope"
    lasts = (f"; the access token lasts {max(0, round(tokens.expires_at - time.time()))} s"
             f"{', then it is refreshed' if tokens.refresh_token else ''}"
             if tokens.expires_at is not None else "")
    _say(f"logged in to {url} ({granted}){lasts}. Tokens kept in {cache.path}")
    return 0


def login(argv: Sequence[str]) -> int:
    parser = _parser("login")
    args = parser.parse_args(list(argv))
    url = _url(parser, args.url)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_login(args, url))
    return 130


def logout(argv: Sequence[str]) -> int:
    parser = _parser("logout")
    args = parser.parse_args(list(argv))
    cache = TokenCache(_url(parser, args.url))
    if cache.delete():
        _say(f"logged out of {cache.server} (deleted {cache.path})")
    else:
        _say(f"not logged in to {cache.server}; nothing to forget")
    return 0
