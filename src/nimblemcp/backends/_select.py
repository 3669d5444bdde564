"""Choose a store and a bus by URL, importing an optional backend only when named.

`from_url("memory://")` gives the in-process pair (one process only);
`redis://`, `rediss://` and `unix://` URLs give `RedisStore` + `RedisBus` on the same
Redis. `from_env()` reads `NIMBLEMCP_REDIS_URL`, so several instances need nothing but
that URL and `NIMBLEMCP_STATE_KEYS` to share state. `shared_event_log(store)` gives the
resumable-SSE log that goes with a shared store (None for an in-process one). Must not
import `redis` unless a Redis URL is given, nor any server, transport or client module.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from nimblemcp.backends.bus import InProcessBus
from nimblemcp.backends.memory import MemoryStore

if TYPE_CHECKING:  # the store Protocol is for annotations only: not built at start-up (issue 18)
    from nimblemcp.backends._redis_events import RedisEventLog
    from nimblemcp.backends._store import KeyValueStore
    from nimblemcp.backends.bus import NotificationBus

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


def shared_event_log(store: KeyValueStore) -> RedisEventLog | None:
    """The SSE event log every instance on `store` shares (a `RedisEventLog` for a
    `RedisStore`), or None when the store is not shared."""
    if type(store).__name__ == "RedisStore" and type(store).__module__ == "nimblemcp.backends.redis":
        from nimblemcp.backends._redis_events import RedisEventLog

        return RedisEventLog(store)
    return None
