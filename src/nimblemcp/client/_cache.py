"""Client-side result cache honoring `ttlMs` and `cacheScope` (CACHE-03..09).

Keys are the method plus the params that change the result (`cursor`, `uri`, `name`),
partitioned by peer; `private` entries are further keyed by the caller's auth context
so they are never shared across identities; `public` entries may live in a store
shared by several clients. Must not import transports or the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol

__all__ = ["CacheStore", "MemoryCacheStore", "ResultCache"]

_KEY_PARAMS = ("cursor", "uri", "name")


class CacheStore(Protocol):
    """A pluggable store of cached results. `get` returns None when absent or expired."""

    def get(self, key: Hashable) -> dict[str, Any] | None: ...
    def set(self, key: Hashable, value: dict[str, Any], ttl_ms: int) -> None: ...
    def delete_where(self, predicate: Callable[[Hashable], bool]) -> None: ...


class MemoryCacheStore:
    """The default store: a dict with monotonic expiry times."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._data: dict[Hashable, tuple[float, dict[str, Any]]] = {}

    def get(self, key: Hashable) -> dict[str, Any] | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self.clock() >= expires:  # CACHE-05: fresh while now < received + ttl
            del self._data[key]
            return None
        return value

    def set(self, key: Hashable, value: dict[str, Any], ttl_ms: int) -> None:
        self._data[key] = (self.clock() + ttl_ms / 1000.0, value)

    def delete_where(self, predicate: Callable[[Hashable], bool]) -> None:
        for key in [k for k in self._data if predicate(k)]:
            del self._data[key]

    def __len__(self) -> int:
        return len(self._data)


def _ttl(result: Mapping[str, Any]) -> int:
    ttl = result.get("ttlMs")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
        return 0  # absent or negative: treat as immediately stale (CACHE-05)
    return int(ttl)


class ResultCache:
    """The cache one Client uses; `public_store` may be shared between clients."""

    def __init__(
        self, peer: str, auth_context: Hashable = None, public_store: CacheStore | None = None
    ) -> None:
        self.peer = peer
        self.auth_context = auth_context
        self.public = public_store if public_store is not None else MemoryCacheStore()
        self.private: CacheStore = MemoryCacheStore()

    def _key(self, method: str, params: Mapping[str, Any], version: str) -> tuple[Any, ...]:
        parts = tuple((k, params.get(k)) for k in _KEY_PARAMS if k in params)
        return (self.peer, version, method, parts)

    def get(self, method: str, params: Mapping[str, Any], version: str) -> dict[str, Any] | None:
        if "inputResponses" in params or "requestState" in params:
            return None  # CACHE-04
        key = self._key(method, params, version)
        hit = self.private.get((self.auth_context, key))
        return hit if hit is not None else self.public.get(key)

    def put(
        self, method: str, params: Mapping[str, Any], version: str, result: dict[str, Any]
    ) -> None:
        if "inputResponses" in params or "requestState" in params:
            return  # CACHE-04: MRTR retries are never cached
        if result.get("resultType", "complete") != "complete":
            return
        ttl = _ttl(result)
        if ttl == 0:
            return
        key = self._key(method, params, version)
        if result.get("cacheScope") == "public":
            self.public.set(key, result, ttl)
        else:  # private, or unknown: the safe reading
            self.private.set((self.auth_context, key), result, ttl)

    def evict(self, *methods: str, uri: str | None = None) -> None:
        """Drop entries for these methods (all pages), or for one resource URI."""
        wanted = set(methods)

        def match(key: Hashable) -> bool:
            inner = key[1] if isinstance(key, tuple) and len(key) == 2 else key
            if not isinstance(inner, tuple) or len(inner) != 4 or inner[0] != self.peer:
                return False
            if uri is not None:
                return inner[2] == "resources/read" and ("uri", uri) in inner[3]
            return inner[2] in wanted

        self.public.delete_where(match)
        self.private.delete_where(match)
