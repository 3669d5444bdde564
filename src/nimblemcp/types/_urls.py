"""What the client and the server each need to know of a URL's origin, said once.

`origin` is the RFC 6454 triple (scheme, host, port with the scheme's default filled
in): two URLs are same-origin when their triples are equal (redirects, the HTTP+SSE
endpoint event, DPoP nonces). `origin_and_path` splits a URL into the `scheme://host`
part and the path a well-known URL is built around (RFC 8414, RFC 9728).
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["DEFAULT_PORTS", "origin", "origin_and_path"]

DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of `url`, lower-cased, the default port filled in. Never
    raises: a URL from a peer with a port that is not one (`h:99999`, `h:x`) keeps its
    whole host-and-port text as the host, so it is the same origin as no valid URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        return scheme, parts.netloc.lower(), None
    return scheme, (parts.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme)


def origin_and_path(url: str) -> tuple[str, str]:
    """`https://as.example/tenant/` -> (`https://as.example`, `/tenant`)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
