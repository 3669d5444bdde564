"""`urlsplit` for the plain http(s) URLs a client is given, without `urllib.parse`.

Importing `urllib.parse` loads `ipaddress` too: ~9M instructions, an eighth of what an
HTTP client's first call costs beyond `import asyncio` (issue 18). A URL of the plain
form `http[s]://host[:port][/path][?query][#fragment]` (ASCII, printable, no space or
backslash, a host of letters, digits, `.`, `-`, `_`, a port of at most five digits up
to 65535) is split here into the parts `urllib.parse.urlsplit` gives for it; any other
URL is handed to `urlsplit` itself (userinfo, IPv6 brackets, percent signs, upper-case
schemes, controls: all its rules stay its own). A test holds the two equal.
Imports only the standard library (`urllib.parse` when a URL is not plain).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from urllib.parse import SplitResult

__all__ = ["PlainSplit", "split_url"]

_HOST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


class PlainSplit:
    """What `urlsplit` answers for a plain URL (the attributes the clients read)."""

    __slots__ = ("fragment", "hostname", "netloc", "path", "port", "query", "scheme")

    def __init__(self, scheme: str, netloc: str, path: str, query: str, fragment: str, hostname: str,
                 port: int | None) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.path = path
        self.query = query
        self.fragment = fragment
        self.hostname = hostname
        self.port = port


def split_url(url: str) -> PlainSplit | SplitResult:
    """`urllib.parse.urlsplit(url)`'s parts; a plain URL without importing it."""
    if url.startswith("http://"):
        scheme, rest = "http", url[7:]
    elif url.startswith("https://"):
        scheme, rest = "https", url[8:]
    else:
        return _urlsplit(url)
    if not (url.isascii() and url.isprintable()) or " " in url or "\\" in url:
        return _urlsplit(url)
    end = len(rest)
    for mark in "/?#":
        at = rest.find(mark, 0, end)
        if at != -1:
            end = at
    netloc, tail = rest[:end], rest[end:]
    host, _, digits = netloc.partition(":")
    if not host or not _HOST.issuperset(host):
        return _urlsplit(url)
    port: int | None = None
    if digits:
        if not digits.isdigit() or len(digits) > 5 or int(digits) > 65535:
            return _urlsplit(url)
        port = int(digits)
    tail, _, fragment = tail.partition("#")
    path, _, query = tail.partition("?")
    return PlainSplit(scheme, netloc, path, query, fragment, host.lower(), port)


def _urlsplit(url: str) -> SplitResult:
    from urllib.parse import urlsplit

    return urlsplit(url)
