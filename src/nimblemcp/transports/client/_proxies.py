"""Which proxy, if any, httpx would send a request for a URL through: the HTTP client
transport takes its own HTTP/1.1 wire only when the answer is none (the proxied
requests go over httpx, which proxies them itself).

The settings are read as httpx reads them: `urllib.request.getproxies()` (the
environment's `*_proxy` variables; on macOS and Windows the system settings too), its
`http`, `https` and `all` entries, and `no` (`NO_PROXY`): `*` turns every proxy off; a
name matches itself and its subdomains (`example.com`), a leading dot only subdomains
(`.example.com`); an IPv4 or IPv6 address or `localhost` matches itself; an entry may
carry a scheme (`http://example.com`) or a port. The most specific pattern wins, as in
httpx's mounts (port first, then the longer host, then the longer scheme). On Linux and
the other platforms whose `getproxies()` reads only the environment, a process without
any `*_proxy` variable is answered without importing `urllib.request`.
"""

from __future__ import annotations

import os
import re
import sys

from nimblemcp.types._urls import DEFAULT_PORTS

__all__ = ["proxy_for"]

#: Whether `getproxies()` reads only the environment here (not macOS's or Windows' settings).
_ENVIRONMENT_ONLY = sys.platform not in ("darwin", "win32")


def proxy_for(url: str) -> str | None:
    """The proxy URL httpx (with `trust_env`) would use for `url`, or None."""
    if _ENVIRONMENT_ONLY and not any(key[-6:].lower() == "_proxy" for key in os.environ):
        return None  # getproxies() would find nothing
    from urllib.parse import urlsplit
    from urllib.request import getproxies

    settings = getproxies()
    mounts: dict[str, str | None] = {}
    for scheme in ("http", "https", "all"):
        proxy = settings.get(scheme)
        if proxy:
            mounts[f"{scheme}://"] = proxy if "://" in proxy else f"http://{proxy}"
    if not mounts:
        return None
    for entry in (host.strip() for host in settings.get("no", "").split(",")):
        if entry == "*":
            return None
        if not entry:
            continue
        if "://" in entry:
            mounts[entry] = None
        elif _is_ip(entry, 4) or entry.lower() == "localhost":
            mounts[f"all://{entry}"] = None
        elif _is_ip(entry, 6):
            mounts[f"all://[{entry}]"] = None
        else:
            mounts[f"all://*{entry}"] = None
    target = urlsplit(url)
    scheme = target.scheme.lower()
    host = (target.hostname or "").lower()
    port = _normal_port(target.port, scheme)
    # httpx's order: a port first, then the longer host, then the longer scheme (stable).
    for pattern, proxy in sorted(((_Pattern(key), proxy) for key, proxy in mounts.items()),
                                 key=lambda mount: mount[0].priority()):
        if pattern.matches(scheme, host, port):
            return proxy
    return None


class _Pattern:
    """One mount key (`scheme://host:port`, `all` for any scheme, `*` wildcards)."""

    __slots__ = ("host", "port", "regex", "scheme")

    def __init__(self, key: str) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(key)
        scheme = parts.scheme.lower()
        self.scheme = "" if scheme == "all" else scheme
        host = parts.netloc.rpartition("@")[2]
        if host.startswith("["):
            host = host[1:host.find("]")] if "]" in host else host
        else:
            host = host.partition(":")[0]
        host = host.lower()
        self.host = "" if host == "*" else host
        try:
            self.port = _normal_port(parts.port, scheme)
        except ValueError:
            self.port = None
        if not self.host:
            self.regex = None
        elif self.host.startswith("*."):
            self.regex = re.compile(rf"^.+\.{re.escape(self.host[2:])}$")
        elif self.host.startswith("*"):
            self.regex = re.compile(rf"^(.+\.)?{re.escape(self.host[1:])}$")
        else:
            self.regex = re.compile(rf"^{re.escape(self.host)}$")

    def matches(self, scheme: str, host: str, port: int | None) -> bool:
        if self.scheme and self.scheme != scheme:
            return False
        if self.regex is not None and not self.regex.match(host):
            return False
        return self.port is None or self.port == port

    def priority(self) -> tuple[int, int, int]:
        return (0 if self.port is not None else 1, -len(self.host), -len(self.scheme))


def _normal_port(port: int | None, scheme: str) -> int | None:
    """None for a scheme's default port, as httpx's URLs say it."""
    return None if port is None or DEFAULT_PORTS.get(scheme) == port else port


def _is_ip(text: str, version: int) -> bool:
    import ipaddress

    try:
        (ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address)(text.split("/")[0])
    except ValueError:
        return False
    return True
