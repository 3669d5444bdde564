"""Choose a store and a bus by URL, importing an optional backend only when named.

`from_url("memory://")` gives the in-process pair (one process only);
`redis://`, `rediss://` and `unix://` URLs give `RedisStore` + `RedisBus` on the same
Redis. `from_env()` reads `NIMBLEMCP_REDIS_URL`, so several instances need nothing but
that URL and `NIMBLEMCP_STATE_KEYS` to share state. Must not import `redis` unless
a Redis URL is given, nor any server, transport or client module.
"""

from __future__ import annotations

import os

from nimblemcp.backends._store import KeyValueStore
from nimblemcp.backends.bus import InProcessBus, NotificationBus
from nimblemcp.backends.memory import MemoryStore

ENV_URL = "NIMBLEMCP_REDIS_URL"
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def from_url(url: str, *, prefix: str = "nimblemcp:") -> tuple[KeyValueStore, NotificationBus]:
    """(store, bus) for `url`; `prefix` namespaces Redis keys and the bus channel."""
    if url.startswith("memory:"):
        return MemoryStore(), InProcessBus()
    if url.startswith(_REDIS_SCHEMES):
        from nimblemcp.backends.redis import RedisBus, RedisStore

        return RedisStore(url, prefix=prefix), RedisBus(url, channel=prefix + "events")
    raise ValueError(f"unknown backend URL {url!r} (use memory:// or redis://host:port/db)")


def from_env() -> tuple[KeyValueStore, NotificationBus] | None:
    """The backends named by `NIMBLEMCP_REDIS_URL`, or None when it is unset or empty."""
    url = os.environ.get(ENV_URL, "").strip()
    return from_url(url) if url else None
