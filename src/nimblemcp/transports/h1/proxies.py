"""Proxy headers for the serving engine: X-Forwarded-For/Proto from trusted peers only.

The semantics are uvicorn's `forwarded_allow_ips`, so that `nimblemcp run` behaves the
same on either engine: a comma-separated list of addresses, networks (`10.0.0.0/8`)
or other literals (a unix socket path), or `*` for any peer. From a trusted peer,
`X-Forwarded-Proto` (http, https, ws, wss) sets the scheme, and the client becomes the
nearest address in `X-Forwarded-For` that is not itself trusted (each proxy appends,
so the list is walked from the right); with `*`, the leftmost.

Trust is decided once per connection (`trusts`); the headers are read per request
only on trusted connections. Stdlib only.
"""

from __future__ import annotations

import ipaddress
import os
from functools import lru_cache

__all__ = ["TrustedProxies"]

_SCHEMES = frozenset({"http", "https", "ws", "wss"})
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _host_port(value: str) -> tuple[str, int]:
    """`1.2.3.4`, `1.2.3.4:80`, `[::1]:80` -> (host, port); anything odd: (value, 0)."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, 0
        host, rest = value[1:end], value[end + 1:]
        if not rest:
            return host, 0
        if not rest.startswith(":") or not rest[1:].isdigit():
            return (host, 0) if rest.startswith(":") else (value, 0)
        return host, int(rest[1:])
    if value.count(":") == 1:
        host, _, port = value.partition(":")
        return (host, int(port)) if port.isdigit() else (value, 0)
    return value, 0


class TrustedProxies:
    """The peers whose X-Forwarded-* headers are believed (see the module docstring)."""

    def __init__(self, allow: str | None) -> None:
        if allow is None:
            allow = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
        items = [item.strip() for item in allow.split(",") if item.strip()]
        self.any = "*" in items
        self.addresses: set[_Address] = set()
        self.networks: list[_Network] = []
        self.literals: set[str] = set()
        for item in items:
            try:
                if "/" in item:
                    self.networks.append(ipaddress.ip_network(item, strict=False))
                else:
                    self.addresses.add(ipaddress.ip_address(item))
            except ValueError:
                self.literals.add(item)
        self._trusted = lru_cache(maxsize=1024)(self._decide)

    def _decide(self, host: str) -> bool:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return host in self.literals
        return ip in self.addresses or any(ip in net for net in self.networks)

    def trusted(self, host: str | None) -> bool:
        if self.any:
            return True
        if not host or len(host) > 253:
            return False
        return bool(self._trusted(host))

    def trusts(self, client: tuple[str, int] | None) -> bool:
        return self.trusted(client[0] if client else None)

    def apply(self, headers: list[tuple[bytes, bytes]], scheme: str,
              client: tuple[str, int] | None) -> tuple[str, tuple[str, int] | None]:
        """The scheme and client a trusted peer's forwarding headers say."""
        proto: bytes | None = None
        forwarded: list[bytes] = []
        for name, value in headers:
            if name == b"x-forwarded-proto":
                proto = value
            elif name == b"x-forwarded-for":
                forwarded.append(value)
        if proto is not None:
            said = proto.decode("latin-1").strip()
            if said in _SCHEMES:
                scheme = said
        if forwarded:
            hops = [hop.strip() for hop in b", ".join(forwarded).decode("latin-1").split(",")]
            chosen = _host_port(hops[0])
            if not self.any:
                for hop in reversed(hops):
                    host, port = _host_port(hop)
                    if not self.trusted(host):
                        chosen = (host, port)
                        break
            if chosen[0]:
                client = chosen
        return scheme, client
